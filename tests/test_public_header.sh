#!/bin/sh
# The public API has only what users call (issue 25):
# - include/sluice.h names no test or benchmark instrument (forced
#   fallbacks, forced ON modes, the PCIe and compute probes); they are in
#   include/sluice_tools.h, which `make install` does not install;
# - libsluice.so does not export the probes;
# - a program built against the installed headers alone, with the stats
#   struct's size field, compiles, links and runs.
BUILD=${BUILD:-build}
CC=${CC:-cc}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
skip() { echo "$*"; exit 77; }

H=include/sluice.h
# Each instrument: its text in sluice.h (none allowed), and in sluice_tools.h.
for pair in plain_reads:SLUICE_FORCE_PLAIN_READS \
	pageable_copies:SLUICE_FORCE_PAGEABLE_COPIES \
	measure_h2d:sluice_loader_measure_h2d \
	loader_compute:sluice_loader_compute \
	RANGE_READS_ON:SLUICE_RANGE_READS_ON \
	DEVICE_GATHER_ON:SLUICE_DEVICE_GATHER_ON; do
	word=${pair%%:*} tool=${pair#*:}
	grep -in "$word" "$H" >/dev/null &&
		fail "$H names the instrument $word: $(grep -in "$word" "$H" | head -n 1)"
	grep -q "$tool" include/sluice_tools.h ||
		fail "include/sluice_tools.h does not have $tool"
done
grep -q "reserved\[" "$H" || fail "$H: the config has no reserved space"
grep -q "^	uint32_t size; " "$H" || fail "$H: no leading size field"

case ${SAN:-} in ?*) skip "SAN=$SAN: the header checks passed; the install and link checks need the plain build" ;; esac
[ -f "$BUILD/libsluice.so" ] || { echo "missing $BUILD/libsluice.so (run make)"; exit 1; }
if command -v nm >/dev/null 2>&1; then
	nm -D --defined-only "$BUILD/libsluice.so" >"${TMPDIR:-/tmp}/sluice-syms.$$" ||
		fail "nm -D $BUILD/libsluice.so"
	for sym in sluice_loader_measure_h2d sluice_loader_compute; do
		grep -q " $sym\$" "${TMPDIR:-/tmp}/sluice-syms.$$" &&
			fail "libsluice.so exports the instrument $sym"
	done
	grep -q " sluice_loader_stats\$" "${TMPDIR:-/tmp}/sluice-syms.$$" ||
		fail "libsluice.so does not export sluice_loader_stats"
	rm -f "${TMPDIR:-/tmp}/sluice-syms.$$"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-pubhdr.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
make --no-print-directory -s install PREFIX=/usr DESTDIR="$T/root" \
	BUILD="$BUILD" >"$T/install.log" 2>&1 ||
	{ tail -n 20 "$T/install.log"; fail "make install"; exit 1; }
ls "$T/root/usr/include" >"$T/headers"
grep -qx sluice.h "$T/headers" || fail "sluice.h is not installed"
grep -q sluice_tools "$T/headers" && fail "sluice_tools.h is installed"

cat >"$T/user.c" <<'C'
#include <stdio.h>
#include <sluice.h>

int main(int argc, char **argv)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	int r;

	(void)argc;
	if (sluice_dataset_open(argv[1], &ds) < 0)
		return 2;
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.direct_io = SLUICE_DIRECT_IO_OFF;
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	cfg.device_gather = SLUICE_DEVICE_GATHER_AUTO;
	if (sluice_loader_open(ds, &cfg, &ld) < 0)
		return 3;
	while ((r = sluice_loader_next(ld, &b)) == 0)
		sluice_batch_release(b);
	if (r != SLUICE_EOF || sluice_loader_stats(ld, &st) < 0)
		return 4;
	printf("%llu %u\n", (unsigned long long)st.records,
	       st.size == sizeof(st));
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	return 0;
}
C
"$BUILD/dlpack-shard" convert --from synth --out "$T/ds" --records 100 \
	--field x:uint8:16 --quiet || fail "convert"
$CC -std=c11 -Wall -Wextra -Werror -I"$T/root/usr/include" "$T/user.c" \
	-L"$T/root/usr/lib" -lsluice -o "$T/user" 2>"$T/cc.log" ||
	fail "a program on the installed headers: $(cat "$T/cc.log")"
if [ -x "$T/user" ]; then
	out=$(LD_LIBRARY_PATH="$T/root/usr/lib" "$T/user" "$T/ds") || fail "user program: exit $?"
	[ "$out" = "100 1" ] || fail "user program printed '$out', want '100 1'"
fi

[ $failures -eq 0 ] || exit 1
echo "sluice.h: no instruments; sluice_tools.h not installed; a user program builds and runs"
