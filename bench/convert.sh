#!/bin/sh
# Conversion speed: dlpack-shard convert --compression zstd:3 --threads N
# against `zstd -3 -T N` on the same bytes.
#
# Usage: bench/convert.sh [THREADS] [MIB]     (defaults: 2 threads, 1024 MiB)
# Env: BUILD (build dir, default build), BENCH_DIR (scratch, default
#      $TMPDIR or /tmp; needs about 2.5x MIB of free space), RUNS (3).
#
# The input is one .npy file of uint8 rows of 4096 bytes whose every
# 256-byte chunk is 128 bytes of a fixed pattern and 128 random bytes
# (compressibility 0.5, like `--field x:uint8:4096:0.5` in synth).  Both
# tools read it from the page cache and write their output next to it;
# dlpack-shard also fsyncs each shard, zstd does not.  Speeds are input
# MB (1e6 bytes) per wall-clock second, medians of RUNS runs.
set -eu
THREADS=${1:-2}
MIB=${2:-1024}
RUNS=${RUNS:-3}
BUILD=${BUILD:-build}
DS="$BUILD/dlpack-shard"
[ -x "$DS" ] || { echo "convert.sh: build $DS first (make)" >&2; exit 1; }
command -v zstd >/dev/null || { echo "convert.sh: zstd not found" >&2; exit 1; }
command -v python3 >/dev/null || { echo "convert.sh: python3 not found" >&2; exit 1; }
DIR=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/bench_convert.XXXXXX")
trap 'rm -rf "$DIR"' EXIT INT TERM
SRC="$DIR/x.npy"

python3 - "$SRC" "$MIB" <<'EOF'
import os, random, struct, sys
path, mib = sys.argv[1], int(sys.argv[2])
row = 4096
rows = mib * (1 << 20) // row
d = "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, row)
h = (d + " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n").encode()
pattern = random.Random(1).randbytes(128)
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h)
    chunk = bytearray(1 << 20)
    mv = memoryview(chunk)
    for _ in range(mib):
        rnd = os.urandom(1 << 19)
        for i in range(0, 1 << 20, 256):
            mv[i:i + 128] = pattern
            j = i >> 1
            mv[i + 128:i + 256] = rnd[j:j + 128]
        f.write(chunk)
EOF
BYTES=$(stat -c %s "$SRC")

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

: >"$DIR/t_ds"
: >"$DIR/t_zstd"
i=0
while [ $i -lt "$RUNS" ]; do
	rm -rf "$DIR/out"
	t0=$(now)
	"$DS" convert "$SRC" --out "$DIR/out" --compression zstd:3 \
		--threads "$THREADS" --quiet
	t1=$(now)
	echo "$t1 - $t0" | bc -l >>"$DIR/t_ds"
	DS_OUT=$(du -sb "$DIR/out" | cut -f1)

	rm -f "$DIR/x.npy.zst"
	t0=$(now)
	zstd -q -3 -T"$THREADS" -f "$SRC" -o "$DIR/x.npy.zst"
	t1=$(now)
	echo "$t1 - $t0" | bc -l >>"$DIR/t_zstd"
	ZSTD_OUT=$(stat -c %s "$DIR/x.npy.zst")
	i=$((i + 1))
done

t_ds=$(median <"$DIR/t_ds")
t_zstd=$(median <"$DIR/t_zstd")
echo "input: $BYTES bytes (compressibility 0.5), threads $THREADS, median of $RUNS runs"
printf '%-28s %8.1f MB/s  %6.2f s  ratio %.3f\n' \
	"dlpack-shard zstd:3 -T$THREADS" "$(echo "$BYTES / $t_ds / 1000000" | bc -l)" \
	"$t_ds" "$(echo "$BYTES / $DS_OUT" | bc -l)"
printf '%-28s %8.1f MB/s  %6.2f s  ratio %.3f\n' \
	"zstd -3 -T$THREADS" "$(echo "$BYTES / $t_zstd / 1000000" | bc -l)" \
	"$t_zstd" "$(echo "$BYTES / $ZSTD_OUT" | bc -l)"
printf 'dlpack-shard / zstd speed: %.2f\n' "$(echo "$t_zstd / $t_ds" | bc -l)"
