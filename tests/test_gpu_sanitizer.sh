#!/bin/sh
# The GPU loader test under compute-sanitizer's memcheck and racecheck.
# Skips where the GPU test itself skips (no GPU, CUDA=0) or the sanitizer
# is not installed.
BUILD=${BUILD:-build}
t="$BUILD/tests/test_gpu_loader"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$t" ] || { echo "skip: $t not built"; exit 77; }
"$t" >/dev/null 2>&1
rc=$?
if [ $rc -eq 77 ]; then "$t" | tail -n 1; exit 77; fi
[ $rc -eq 0 ] || { echo "test_gpu_loader fails without the sanitizer"; exit 1; }
[ -x "$cs" ] || { echo "skip: compute-sanitizer not installed"; exit 77; }
for tool in memcheck racecheck; do
	"$cs" --tool "$tool" --error-exitcode 3 "$t" || { echo "$tool found errors"; exit 1; }
done
