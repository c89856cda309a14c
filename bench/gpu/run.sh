#!/bin/bash
# bench/gpu/run.sh OUTDIR - the one command for a bare GPU machine (see
# DESIGN.md's GPU stream semantics and issue 9): unpack the carried build
# dependencies (.gpu-deps/, from tools/fetch_gpu_deps.sh) into a private
# prefix, build sluice from this tree with CUDA for sm_90, run every GPU
# test (make test-gpu: device and loader tests, both forced fallbacks,
# compute-sanitizer memcheck and racecheck, the Python CUDA tests), the
# GPU benchmarks (bench/gpu/bench.sh: also device gather on vs off,
# issue 12; its byte check is test_gpu_gather in test-gpu), the streaming
# rows of issue 22 (bench/gpu/streaming.py: a dataset larger than the
# budget, beside KvikIO, the read limit and the PCIe probe on the same
# files) and PyTorch's data-loading tutorial against sluice
# (bench/gpu/tutorial.py); then write OUTDIR/results.md,
# OUTDIR/results.json and OUTDIR/logs.tar.gz and print a short table.
#
# Each step has a time budget and a timeout, and the whole run stays under
# RUN_BUDGET seconds (default 540: the device tool allows 600 a command).
# The first GPU step stops the run, with the reason, when this process has
# no usable GPU (e.g. CUDA_VISIBLE_DEVICES= as a rehearsal).
#
# Knobs (environment): RUN_BUDGET, DEPS (.gpu-deps), DATA (.gpu-data),
# JOBS (nproc), TUTORIAL_SAMPLES (16384), TUTORIAL_EPOCHS (2),
# BENCH_RECORDS (2048 records of 1 MiB), STREAM_GB (8.6), STREAM_ROWS
# (all: base,staging,knobs,zstd,variable,cold), STREAM_RUNS (2,
# round-robin over the rows), STREAM_EPOCHS (3), STREAM_BUDGET (300 s),
# SKIP (space-separated step names to leave out), REHEARSE=1 (no GPU: go
# on past the gpu-check stop, the benchmarks on the host device, to try
# every step of this script).
#
# On the GPU machine, from the repository root, with .gpu-deps carried
# (and .whl, the KvikIO wheels, for the streaming step):
#   run(command="bench/gpu/run.sh $OUT", carry=[".gpu-deps", ".whl"],
#       timeout_s=600)
set -u
out=${1:?usage: bench/gpu/run.sh OUTDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
mkdir -p "$out"
out=$(cd "$out" && pwd)
RUN_BUDGET=${RUN_BUDGET:-540}
DEPS=${DEPS:-$root/.gpu-deps}
DATA=${DATA:-$root/.gpu-data}
JOBS=${JOBS:-$(nproc)}
SKIP=${SKIP:-}
export BUILD=build/gpu
export PY=${PYTHON:-python3}
logs=$(mktemp -d /tmp/sluice-gpu-run.XXXXXX)
prefix=$logs/prefix
t_start=$(date +%s)
: >"$logs/steps.tsv"

elapsed() { echo $(( $(date +%s) - t_start )); }

# step NAME BUDGET FUNCTION: run FUNCTION under a timeout of BUDGET
# seconds (less when the run's budget is nearly spent), log to
# $logs/NAME.log, record "NAME status seconds" in steps.tsv.
step() {
	local name=$1 budget=$2 fn=$3 left rc t0 secs status
	case " $SKIP " in *" $name "*)
		printf '%s\tskipped (SKIP)\t0\n' "$name" >>"$logs/steps.tsv"; return 0 ;;
	esac
	left=$(( RUN_BUDGET - 25 - $(elapsed) ))
	[ "$left" -lt "$budget" ] && budget=$left
	if [ "$budget" -le 5 ]; then
		printf '%s\tnot run (out of time)\t0\n' "$name" >>"$logs/steps.tsv"
		echo "== $name: not run, the run's time budget is spent"
		return 1
	fi
	echo "== $name (budget ${budget}s, at $(elapsed)s)"
	t0=$(date +%s)
	timeout -k 5 "$budget" bash -c "$fn" >"$logs/$name.log" 2>&1
	rc=$?
	secs=$(( $(date +%s) - t0 ))
	case $rc in
	0) status=ok ;;
	77) status="STOP (no usable GPU)" ;;
	124|137) status="TIMEOUT after ${budget}s" ;;
	*) status="FAIL (exit $rc)" ;;
	esac
	printf '%s\t%s\t%s\n' "$name" "$status" "$secs" >>"$logs/steps.tsv"
	tail -n 4 "$logs/$name.log" | sed 's/^/   /'
	echo "   -> $status (${secs}s)"
	return $rc
}

# ---------------------------------------------------------------- steps

device_info() {
	nvidia-smi || echo "nvidia-smi: not available"
	nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm --format=csv 2>&1
	nvcc --version 2>&1 | tail -n 2 || echo "nvcc: not on PATH"
	"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
	echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
	nproc; free -g | head -2; uname -r
	lscpu 2>/dev/null | grep -E 'Model name|Socket|NUMA node\(|L2|L3' || true
	echo "io_uring_disabled: $(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo n/a)"
	ulimit -l
	df -hT "$root" /tmp | cat
}

# The carried .deb files into a private prefix.
unpack_deps() {
	set -e
	ls "$DEPS"/*.deb
	mkdir -p "$prefix"
	for f in "$DEPS"/*.deb; do
		if command -v dpkg-deb >/dev/null; then
			dpkg-deb -x "$f" "$prefix"
		else    # a .deb is an ar archive holding data.tar.xz
			ar p "$f" data.tar.xz | tar -xJf - -C "$prefix"
		fi
	done
	ls -l "$prefix"/usr/lib/x86_64-linux-gnu/
	# The interpreter's own headers when it has them; else the carried
	# ones (the extension is limited-API: abi3, any later CPython).
	inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
	if [ -f "$inc/Python.h" ]; then
		echo "python headers: $inc"
	else
		pyinc=$(ls -d "$prefix"/usr/include/python3.* | head -n 1)
		echo "python headers: $inc has no Python.h; using $pyinc"
		echo "$pyinc" >"$prefix/python-include"
	fi
}

build() {
	set -e
	# Everything against the carried shared libraries, found at run time
	# through an rpath (LDFLAGS, set below): Debian's libxxhash.a lacks
	# the XXH3_*_dispatch entry points that include/sluice_xxh3.h maps
	# onto (its shared library has them), and its libzstd.a is not -fPIC.
	make -j"$JOBS" CUDA=1 all $(ls tests/test_*.c | sed "s|^tests/\(.*\)\.c$|$BUILD/tests/\1|")
	# Proof that the carried libraries were used, not a system copy.
	for bin in "$BUILD/sluice" "$BUILD/libsluice.so"; do
		ldd "$bin" | grep -E 'liburing|libzstd|libxxhash'
		if ldd "$bin" | grep -E 'liburing|libzstd|libxxhash' |
			grep -vq "$prefix"; then
			echo "$bin resolves a system copy"
			exit 1
		fi
	done
	grep -ho "[^ ]*/liburing.h\|[^ ]*/zstd.h\|[^ ]*/xxhash.h" \
		$(find "$BUILD/obj" -name '*.d') | sort -u
	# The Python extension against this build, for the tutorial.
	ln -sf libsluice.so "$BUILD/libsluice.so.1"
	(cd python && SLUICE_BUILD="$root/$BUILD" "$PY" setup.py -q build \
		--build-base "$root/$BUILD/pyext/tmp" \
		--build-lib "$root/$BUILD/pyext/lib")
	ls "$BUILD/pyext/lib/sluice/"
}

# The first GPU step: a clear stop when this process has no usable GPU.
gpu_check() {
	"$BUILD/tests/test_gpu"
	rc=$?
	if [ $rc -eq 77 ]; then
		echo "STOP: no usable CUDA device for this process (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}); the GPU steps cannot run"
	fi
	return $rc
}

test_gpu() {
	# Under the step's own budget, so a slow test is reported by the
	# runner and the summary line is still printed.
	TEST_TIMEOUT=150 make --no-print-directory CUDA=1 test-gpu
	rc=$?
	# each test's own output (rates, seeds) comes back in logs.tar.gz
	cp -r "$BUILD/test-logs" "$logs/test-logs" 2>/dev/null
	return $rc
}

benchmarks() {
	sh bench/gpu/bench.sh "$DATA/bench" "$logs/bench"
}

tutorial() {
	PYTHONPATH="$root/$BUILD/pyext/lib${PYTHONPATH:+:$PYTHONPATH}" \
		PYTHONUNBUFFERED=1 "$PY" bench/gpu/tutorial.py \
		--data "$DATA/tutorial" ${BENCH_DEVICE:+--no-global-drop} \
		--samples "${TUTORIAL_SAMPLES:-16384}" \
		--epochs "${TUTORIAL_EPOCHS:-2}" --json "$logs/tutorial.json"
}

# Issue 22: streaming a dataset larger than the budget beside the read
# limit, KvikIO (carried as wheels in .whl/) and the PCIe probe, all on
# the same files in tmpfs; then cold O_DIRECT reads from the disk.
streaming() {
	if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
		"$PY" -m pip install -q --no-index --no-deps --no-compile \
			--no-cache-dir --upgrade --target /tmp/sluice-site \
			"$root"/.whl/*.whl &&
			export PYTHONPATH=/tmp/sluice-site${PYTHONPATH:+:$PYTHONPATH}
	fi
	mkdir -p /dev/shm/sluice-stream
	# the extension built with this build, for the python-defaults row
	PYTHONPATH="$root/$BUILD/pyext/lib${PYTHONPATH:+:$PYTHONPATH}" \
		PYTHONUNBUFFERED=1 "$PY" bench/gpu/streaming.py --build "$BUILD" \
		--data /dev/shm/sluice-stream --disk "$DATA/stream" \
		--device "${BENCH_DEVICE:-cuda}" --gb "${STREAM_GB:-8.6}" \
		--rows "${STREAM_ROWS:-all}" --runs "${STREAM_RUNS:-2}" \
		--epochs "${STREAM_EPOCHS:-3}" \
		--json "$logs/streaming.json"
	rc=$?
	rm -rf /dev/shm/sluice-stream
	return $rc
}

export -f device_info unpack_deps build gpu_check test_gpu benchmarks tutorial streaming
export root logs prefix DEPS DATA JOBS

# ---------------------------------------------------------------- run

stopped=""
step device 30 device_info
if step deps 30 unpack_deps; then
	# Only the unpacked files: headers first, then the archives.
	export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
	[ -f "$prefix/python-include" ] && CPATH="$(cat "$prefix/python-include"):$CPATH"
	# -L and the rpath for every link; LIBRARY_PATH also for the links
	# that the Python extension and the tests' scripts make.
	shared="$prefix/usr/lib/x86_64-linux-gnu"
	export LDFLAGS="-L$shared -Wl,-rpath,$shared"
	export LIBRARY_PATH="$shared${LIBRARY_PATH:+:$LIBRARY_PATH}"
	export LD_LIBRARY_PATH="$shared${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export NVCCFLAGS="-O2 -Xcompiler -fPIC -Iinclude -gencode arch=compute_90,code=sm_90"
	step build 150 build || stopped="the build failed"
else
	stopped="the carried dependencies are missing (run tools/fetch_gpu_deps.sh here and carry .gpu-deps)"
fi
if [ -z "$stopped" ]; then
	# No GPU stops the run; a failing device test does not: the later
	# steps' logs are worth the minutes on the machine.
	step gpu-check 60 gpu_check ||
		stopped=$(grep -h '^STOP' "$logs/gpu-check.log" | head -n 1)
	if [ -n "$stopped" ] && [ "${REHEARSE:-0}" = 1 ]; then
		echo "REHEARSE=1: going on without a GPU ($stopped)"
		stopped=""
		export BENCH_DEVICE=host
	fi
fi
if [ -z "$stopped" ]; then
	step test-gpu 200 test_gpu
	step streaming "${STREAM_BUDGET:-300}" streaming
	step bench 160 benchmarks
	step tutorial 200 tutorial
fi
[ -n "$stopped" ] && echo "STOPPED: $stopped"

# ---------------------------------------------------------------- results

"$PY" bench/gpu/summarize.py "$logs" "$out" "$stopped" "$(elapsed)"
rc=$?
tar -C "$logs" --exclude=prefix -czf "$out/logs.tar.gz" . 2>/dev/null
rm -rf "$logs"
[ -z "$stopped" ] && [ $rc -eq 0 ]
