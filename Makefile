# sluice - build, test, install.  `make V=1` shows the full commands.
#
#   make                 libsluice.a, libsluice.so, dlpack-shard, sluice
#   make test            every test; last line "N passed, N failed, N skipped"
#   make test SAN=address,undefined   (or SAN=thread) sanitizer builds
#   make test-engines    Spark, Ray and parquet tests (installs pyspark, ray
#                        and pyarrow into build/engines-venv first, ~1 GB)
#   make demo            install deps, build, convert a sample, bench it
#   make CUDA=0          build without the CUDA toolkit
#   make WERROR=1        warnings are errors (CI); make CC=clang works too
#   make install PREFIX=/usr/local DESTDIR=

PREFIX ?= /usr/local
DESTDIR ?=
CC ?= cc
NVCC ?= nvcc
CFLAGS ?= -O2 -g
LDFLAGS ?=
CUDA_HOME ?= /usr/local/cuda

# CUDA: on when nvcc is on PATH or the toolkit sits at CUDA_HOME.
ifeq ($(origin CUDA),undefined)
CUDA := $(if $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/include/cuda_runtime.h)),1,0)
endif
ifeq ($(CUDA),1)
NVCC := $(if $(shell command -v $(NVCC) 2>/dev/null),$(NVCC),$(CUDA_HOME)/bin/nvcc)
endif

WARN := -Wall -Wextra -Wshadow -Wcast-qual -Wstrict-prototypes \
	-Wmissing-prototypes -Wpointer-arith -Wvla -Wformat=2 -Wundef \
	-Wwrite-strings
# -Werror only when asked (CI: WERROR=1), so a newer compiler's new
# warning never breaks a user's build.
ifeq ($(WERROR),1)
WARN += -Werror
endif
override CFLAGS += -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden \
	-pthread -Iinclude $(WARN) -MMD -MP
LIBS := -luring -lzstd -lxxhash -lpthread -lm

ifeq ($(CUDA),1)
override CFLAGS += -DSLUICE_HAVE_CUDA=1 -I$(CUDA_HOME)/include
LIBS += $(CUDA_HOME)/lib64/libcudart_static.a -ldl -lrt -lstdc++
NVCCFLAGS ?= -O2 -Xcompiler -fPIC -Iinclude -arch=sm_90 \
	-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
endif

comma := ,
ifneq ($(SAN),)
override CFLAGS += -fsanitize=$(SAN) -fno-sanitize-recover=all -fno-omit-frame-pointer
override LDFLAGS += -fsanitize=$(SAN)
BUILD ?= build/san-$(subst $(comma),-,$(SAN))
else
BUILD ?= build
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

# Sources, by folder.  The library is datasets/ io/ pipeline/ gpu/; each
# program is its folder under programs/ (see ARCHITECTURE.md).
LIB_SRCS := $(wildcard datasets/*.c io/*.c pipeline/*.c) \
	gpu/device.c gpu/host_device.c gpu/sim_device.c \
	gpu/sim_stream.c
ifeq ($(CUDA),1)
LIB_SRCS += gpu/cuda_device.c gpu/cuda_gather.c
CU_SRCS := gpu/compute.cu gpu/gather.cu gpu/checksum.cu
endif
IMPORT_SRCS := $(wildcard programs/dlpack-shard/import/*.c)
SHARD_CLI_SRCS := programs/cli_util.c $(wildcard programs/dlpack-shard/*.c) \
	$(IMPORT_SRCS)
SLUICE_CLI_SRCS := programs/cli_util.c $(wildcard programs/sluice/*.c)
TEST_SRCS := $(wildcard tests/test_*.c)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(CU_SRCS:%.cu=$(BUILD)/obj/%.o)
TLIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/tobj/%.o) $(CU_SRCS:%.cu=$(BUILD)/obj/%.o)
STATIC := $(BUILD)/libsluice.a
TSTATIC := $(BUILD)/libsluice-test.a
SHARED := $(BUILD)/libsluice.so
DLPACK_SHARD := $(BUILD)/dlpack-shard
SLUICE := $(BUILD)/sluice
TESTS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
FUZZ_REPLAYS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/tests/%_replay)
# The fuzz build mode (datasets/fuzzing.h): the library and the importers
# the fuzz targets reach, built to accept any checksum.
FLIB_OBJS := $(patsubst %.c,$(BUILD)/fobj/%.o,$(LIB_SRCS) $(IMPORT_SRCS))
FSTATIC := $(BUILD)/libsluice-fuzz.a
FUZZ_CFLAGS := -DSLUICE_TESTING=1 -DSLUICE_FUZZING=1 -Idatasets \
	-Iprograms/dlpack-shard/import

.PHONY: all test test-engines test-gpu demo deps install clean fuzz python print-libs bench-data bench-scale
all: $(STATIC) $(SHARED) $(DLPACK_SHARD) $(SLUICE)

# The programs see the public API, include/sluice_tools.h and their own
# headers; never the library's folders.
$(BUILD)/obj/programs/%.o: INC := -Iprograms
$(BUILD)/fobj/programs/%.o: INC := -Iprograms

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(INC) -c $< -o $@

$(BUILD)/tobj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $< (test)")
	$(Q)$(CC) $(CFLAGS) -DSLUICE_TESTING=1 -c $< -o $@

$(BUILD)/fobj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $< (fuzz mode)")
	$(Q)$(CC) $(CFLAGS) $(INC) $(FUZZ_CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(STATIC): $(LIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(TSTATIC): $(TLIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(FSTATIC): $(FLIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(SHARED): $(LIB_OBJS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-z,defs -Wl,-soname,libsluice.so.1 \
		$(LDFLAGS) $^ $(LIBS) -o $@

$(DLPACK_SHARD): $(SHARD_CLI_SRCS:%.c=$(BUILD)/obj/%.o) $(STATIC)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LIBS) -o $@

$(SLUICE): $(SLUICE_CLI_SRCS:%.c=$(BUILD)/obj/%.o) $(STATIC)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(TSTATIC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) -DSLUICE_TESTING=1 -Idatasets -Iio -Ipipeline -Igpu \
		-Iprograms/dlpack-shard/import -I$(BUILD)/tests $(LDFLAGS) \
		$< $(filter %.o,$^) $(TSTATIC) $(LIBS) -o $@

# The usage example at the top of include/sluice.h, verbatim: the lines
# after "Typical use" and its blank line, up to the comment's end.
$(BUILD)/tests/header_example.inc: include/sluice.h
	@mkdir -p $(@D)
	$(Q)sed -n '/^ \* Typical use/,/^ \*\//p' $< | sed -e '1,/^ \*$$/d' \
		-e '$$d' -e 's/^ \*\t\{0,1\}//' > $@
$(BUILD)/tests/test_header_example: $(BUILD)/tests/header_example.inc

# Tests of program code link that code too.
$(BUILD)/tests/test_import_parse: $(IMPORT_SRCS:%.c=$(BUILD)/obj/%.o)

# Fuzz targets, replayed over their corpus by a plain driver in `make test`
# (in the fuzz build mode, as the fuzzers found them).
$(BUILD)/tests/%_replay: tests/fuzz/%.c tests/fuzz/replay.c $(FSTATIC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(FUZZ_CFLAGS) $(LDFLAGS) \
		tests/fuzz/$*.c tests/fuzz/replay.c $(FSTATIC) $(LIBS) -o $@

# libFuzzer builds (clang): `make fuzz FUZZ_TIME=S` runs each target for S
# seconds over its corpus; `make fuzz-replay` only replays the corpora.
FUZZ_TIME ?= 60
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=build/fuzz/tests/%)
FUZZ_SAN := fuzzer,address,undefined
.PHONY: fuzz-targets fuzz-replay
fuzz-targets:
	$(MAKE) BUILD=build/fuzz CC=clang CUDA=0 SAN=$(FUZZ_SAN) $(FUZZ_BINS)

build/fuzz/tests/fuzz_%: tests/fuzz/fuzz_%.c $(FSTATIC)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@ (libFuzzer)")
	$(Q)$(CC) $(CFLAGS) $(FUZZ_CFLAGS) $(LDFLAGS) $< $(FSTATIC) \
		$(LIBS) -o $@

fuzz: fuzz-targets
	@for n in $(notdir $(FUZZ_BINS)); do mkdir -p tests/fuzz/corpus/$$n; \
	  build/fuzz/tests/$$n -max_total_time=$(FUZZ_TIME) -max_len=65536 \
	    tests/fuzz/corpus/$$n || exit 1; done

fuzz-replay: fuzz-targets
	@for n in $(notdir $(FUZZ_BINS)); do \
	  build/fuzz/tests/$$n -runs=0 tests/fuzz/corpus/$$n || exit 1; done

test: all $(TESTS) $(FUZZ_REPLAYS)
	@BUILD=$(BUILD) SAN=$(SAN) CUDA=$(CUDA) WERROR=$(WERROR) sh tests/run.sh $(T)

# tests/engines/: Spark, Ray and parquet; not part of `make test` (they need
# ~1 GB of packages, installed here into build/engines-venv).
test-engines: all
	@sh tools/engines_env.sh >/dev/null
	@BUILD=$(BUILD) SAN=$(SAN) SLUICE_ENGINES=1 sh tests/run.sh

test-gpu: all $(TESTS)
	@BUILD=$(BUILD) SAN=$(SAN) CUDA=$(CUDA) SLUICE_REQUIRE_GPU=1 sh tests/run.sh gpu

deps:
	@sh tools/deps.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@sh tools/demo.sh $(BUILD)

# The extension links libsluice.a in (no libsluice.so at run time): `make
# python`, then PYTHONPATH=python python3 -c 'import sluice'.
python: $(STATIC) $(DLPACK_SHARD) $(SLUICE)
	cd python && SLUICE_BUILD=$(abspath $(BUILD)) python3 setup.py -q build_ext --inplace

# The link line libsluice.a needs, for python/setup.py.
print-libs:
	@echo $(LIBS)

bench-data: all
	@sh bench/make_data.sh

# What the record count costs: open, first batch, epoch boundary, RSS;
# and where the memory of an open dataset goes.
bench-scale: $(BUILD)/epoch_scale $(BUILD)/open_memory
$(BUILD)/epoch_scale $(BUILD)/open_memory: $(BUILD)/%: bench/scale/%.c $(STATIC)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< $(STATIC) $(LIBS) -o $@

# One loader run for bench/budget_sweep.py (defaults, every epoch checked).
$(BUILD)/budget_probe: bench/budget_probe.c bench/probe_util.h $(STATIC)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< $(STATIC) $(LIBS) -o $@

# Loader runs for bench/state_sweep.py (resume, ranks, epochs, mixtures).
$(BUILD)/state_probe: bench/state_probe.c bench/probe_util.h $(STATIC)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< $(STATIC) $(LIBS) -o $@

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
		$(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/libsluice.so.1
	ln -sf libsluice.so.1 $(DESTDIR)$(PREFIX)/lib/libsluice.so
	install -m 644 include/sluice.h include/sluice_dlpack.h \
		include/dlpack_shard.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(DLPACK_SHARD) $(SLUICE) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|0.2.0|' \
		-e 's|@LIBS@|$(filter-out $(CUDA_HOME)/%,$(LIBS))|' \
		tools/sluice.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/sluice.pc

clean:
	rm -rf build python/build python/*.so python/sluice/*.so

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
