#!/bin/sh
# The Python package's CUDA tests (python/tests, names containing "cuda"):
# torch.from_dlpack on kDLCUDA batches, the stream argument honoured, slot
# reuse ordered after the consumer stream's work, both forced fallbacks.  Built and run by
# tests/test_python.sh.  Any of them skipped (no torch, no GPU) makes this
# a SKIP (77) with pytest's reason, never a PASS; with
# SLUICE_REQUIRE_GPU=1 (make test-gpu) it is a failure.
log=$(mktemp)
SLUICE_PYTEST_K=cuda sh tests/test_python.sh >"$log" 2>&1
rc=$?
cat "$log"
summary=$(grep -E '(passed|skipped|failed|error).* in [0-9.]+s' "$log" | tail -n 1)
# A test of the no-GPU fallback skips where a GPU is present, by design:
# only the other skips mean a CUDA test did not run.
reason=$(grep -E '^SKIPPED' "$log" | grep -v 'a CUDA GPU is present' |
	head -n 1)
gpu_only_skips=0
[ -z "$reason" ] && grep -q '^SKIPPED' "$log" && gpu_only_skips=1
[ -n "$reason" ] || reason=$(tail -n 1 "$log")
rm -f "$log"
skip() {
	if [ "$SLUICE_REQUIRE_GPU" = 1 ]; then
		echo "SLUICE_REQUIRE_GPU=1 but the CUDA tests skipped: $*"
		exit 1
	fi
	echo "skip: $*"
	exit 77
}
[ $rc -eq 77 ] && skip "$reason"
[ $rc -eq 0 ] || exit 1
case $summary in
*passed*skipped*) [ $gpu_only_skips = 1 ] && exit 0; skip "$reason" ;;
*skipped*) skip "$reason" ;;
*passed*) exit 0 ;;
*) echo "no CUDA test ran: $summary"; exit 1 ;;
esac
