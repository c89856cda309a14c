#!/bin/sh
# The GPU tests (device layer and loader, its quick cases) under
# compute-sanitizer's memcheck and racecheck; the device gather test (its
# quick part: the kernel, raw data, window shuffle) under memcheck (its
# kernel uses no shared memory, racecheck's domain).  Skips where the GPU tests themselves skip (no
# GPU, CUDA=0) or the sanitizer is not installed; with
# SLUICE_REQUIRE_GPU=1 (make test-gpu) a missing sanitizer is a failure.
BUILD=${BUILD:-build}
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in "$BUILD/tests/test_gpu" "$BUILD/tests/test_gpu_loader" \
	 "$BUILD/tests/test_gpu_gather"; do
	[ -x "$t" ] || { echo "skip: $t not built"; exit 77; }
	"$t" >/dev/null 2>&1
	rc=$?
	if [ $rc -eq 77 ]; then "$t" | tail -n 1; exit 77; fi
	[ $rc -eq 0 ] || { echo "$t fails without the sanitizer"; exit 1; }
done
if [ ! -x "$cs" ]; then
	[ "$SLUICE_REQUIRE_GPU" = 1 ] && { echo "compute-sanitizer not found"; exit 1; }
	echo "skip: compute-sanitizer not installed"; exit 77
fi
# test_gpu_loader's quick cases: each kind of device work once
for t in "$BUILD/tests/test_gpu" "$BUILD/tests/test_gpu_loader"; do
	for tool in memcheck racecheck; do
		echo "== $tool $t ($(date +%T))"
		SLUICE_GPU_LOADER_QUICK=1 \
			"$cs" --tool "$tool" --error-exitcode 3 "$t" ||
			{ echo "$tool found errors in $t"; exit 1; }
	done
done
echo "== memcheck $BUILD/tests/test_gpu_gather, quick ($(date +%T))"
SLUICE_GATHER_QUICK=1 "$cs" --tool memcheck --error-exitcode 3 \
	"$BUILD/tests/test_gpu_gather" ||
	{ echo "memcheck found errors in test_gpu_gather"; exit 1; }
