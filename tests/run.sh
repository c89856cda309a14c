#!/bin/sh
# The one test runner: every tests/test_* binary and tests/test_*.sh script,
# each under a timeout; one line each; the last line is the summary.
# Usage: BUILD=build tests/run.sh [NAME-SUBSTRING...]
# Exit codes of a test: 0 pass, 77 skip (its last output line says why),
# anything else fail.
BUILD=${BUILD:-build}
TIMEOUT=${TEST_TIMEOUT:-300}
export BUILD
export SLUICE_BIN="$BUILD"
export ASAN_OPTIONS="${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}"
logdir="$BUILD/test-logs"
mkdir -p "$logdir"
pass=0 fail=0 skip=0

selected() {
	[ $# -eq 0 ] && return 0
	for pat in $FILTER; do
		case "$1" in *"$pat"*) return 0 ;; esac
	done
	return 1
}
FILTER="$*"

run_one() { # name command...
	name=$1; shift
	log="$logdir/$name.log"
	start=$(date +%s)
	timeout -k 10 "$TIMEOUT" "$@" >"$log" 2>&1
	rc=$?
	secs=$(( $(date +%s) - start ))
	case $rc in
	0) pass=$((pass + 1)); echo "PASS  $name (${secs}s)" ;;
	77) skip=$((skip + 1))
	    echo "SKIP  $name: $(grep -v '^$' "$log" | tail -n 1)" ;;
	*) fail=$((fail + 1))
	   [ $rc -eq 124 ] && why="timed out after ${TIMEOUT}s" || why="exit $rc"
	   echo "FAIL  $name ($why)"; sed 's/^/      /' "$log" | tail -n 30 ;;
	esac
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	n=$(basename "$t")
	if [ -n "$FILTER" ]; then selected "$n" $FILTER || continue; fi
	run_one "$n" "$t"
done
for t in "$BUILD"/tests/fuzz_*_replay; do
	[ -x "$t" ] || continue
	n=$(basename "$t")
	if [ -n "$FILTER" ]; then selected "$n" $FILTER || continue; fi
	corpus="tests/fuzz/corpus/${n%_replay}"
	run_one "$n" "$t" "$corpus"
done
# The engine tests (Spark, Ray, parquet: ~1 GB of Python packages) run only
# under `make test-engines`, which installs what they need.
scripts=tests/test_*.sh
[ "${SLUICE_ENGINES:-0}" = 1 ] && scripts=tests/engines/test_*.sh
for t in $scripts; do
	[ -f "$t" ] || continue
	n=$(basename "$t" .sh)
	if [ -n "$FILTER" ]; then selected "$n" $FILTER || continue; fi
	run_one "$n" sh "$t"
done

echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
