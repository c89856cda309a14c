#!/bin/sh
# An explicit memory_bytes, once taken, is taken at every larger value
# (issue 22, goal 4).  The dataset is the one budget sweep 242 found: a
# WebDataset of 558 samples, .bin mostly 0-64 bytes with runs of 36, 3
# and 21 values of 1-2 MiB, a .txt of up to 16 bytes and a .cls, raw, in
# blocks of 2.17 MB.  Under a full shuffle, batch 1, 4.2 and 4.5 MB read
# whole blocks and streamed, 4.75 MB read ranges and was refused (a short
# split kept io memory for the ranges' odds-based want, 2.78 MB, above
# the one batch at the largest values, 2.09, and left batch memory short
# of the 2.08 MB value), 5 MB streamed.
BUILD=${BUILD:-build}
SLUICE="$BUILD/sluice"
SHARD="$BUILD/dlpack-shard"
for b in "$SLUICE" "$SHARD"; do
	[ -x "$b" ] || { echo "missing $b (run make)"; exit 1; }
done
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-monotone.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

python3 - "$T/samples.tar" <<'PY' || exit 1
import io, random, sys, tarfile
rng = random.Random(1)
MiB = 1 << 20
big_left = 0
with tarfile.open(sys.argv[1], "w") as t:
    for i in range(558):
        if big_left == 0 and rng.random() < 0.005:
            big_left = rng.randint(2, 40)
        if big_left:
            big_left -= 1
            b = rng.randint(MiB, 2 * MiB)
        elif rng.random() < 0.1:
            b = 0
        else:
            b = rng.randint(1, 64)
        txt = rng.randint(0, 16)
        for ext, data in (("bin", (b"0123456789abcdef" * (b // 16 + 1))[:b]),
                          ("txt", b"x" * txt),
                          ("cls", str(i % 10).encode())):
            ti = tarfile.TarInfo("s%07d.%s" % (i, ext))
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
PY
"$SHARD" convert "$T/samples.tar" --from tar --drop-key --block-size 2170225 \
	--compression none --out "$T/ds" --quiet || exit 1

taken=""
failures=0
for m in 3500000 4000000 4250000 4500000 4750000 5000000 5500000 6000000; do
	if "$SLUICE" stream "$T/ds" --shuffle full --batch-size 1 --memory $m \
		--device host > /dev/null 2> "$T/err"; then
		[ -n "$taken" ] || taken=$m
	elif [ -n "$taken" ]; then
		echo "FAIL: memory_bytes $m refused after $taken was taken: $(cat "$T/err")"
		failures=$((failures + 1))
	else
		grep -q "raise memory_bytes" "$T/err" ||
			{ echo "FAIL: $m refused without the number to raise: $(cat "$T/err")"; failures=$((failures + 1)); }
	fi
done
[ -n "$taken" ] || { echo "FAIL: no memory_bytes up to 6000000 taken"; failures=$((failures + 1)); }
[ $failures -eq 0 ] || exit 1
echo "ok: every memory_bytes from $taken up taken"
