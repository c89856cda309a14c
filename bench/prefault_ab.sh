#!/bin/sh
# bench/prefault_ab.sh BEFORE AFTER DATASET [RUNS] - first-touch page
# faults in the steady state, two sluice binaries side by side: `sluice
# bench` (--json, per-stage CPU) and `perf stat -e page-faults` on
# `sluice stream`, alternating BEFORE and AFTER, RUNS times (5).  Run as
# root it drops to nobody without capabilities, as an ordinary user runs
# (mlock and io_uring buffer registration refused by RLIMIT_MEMLOCK), which
# is where the arena is not already faulted in by mlock.  Prints medians.
set -eu
BEFORE=$1 AFTER=$2 DATA=$3 RUNS=${4:-5}
ARGS=${ARGS:---device host --epochs 2}
drop=""
[ "$(id -u)" = 0 ] && drop="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
while [ $i -lt "$RUNS" ]; do
	for which in before after; do
		bin=$BEFORE
		[ $which = after ] && bin=$AFTER
		# shellcheck disable=SC2086
		$drop "$bin" bench "$DATA" $ARGS --json 2>/dev/null > "$tmp/$which.$i.json"
		# shellcheck disable=SC2086
		perf stat -x, -e page-faults $drop "$bin" stream "$DATA" $ARGS \
			2>&1 >/dev/null | grep page-faults | cut -d, -f1 >> "$tmp/$which.faults"
	done
	i=$((i + 1))
done
python3 - "$tmp" "$RUNS" <<'PY'
import json, statistics as S, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
for which in ("before", "after"):
    rs = [json.load(open(f"{tmp}/{which}.{i}.json"))["result"] for i in range(runs)]
    st = lambda k: S.median(r["cpu_s_per_gb_by_stage"][k] for r in rs)
    faults = [int(x) for x in open(f"{tmp}/{which}.faults").read().split()]
    print(f"{which:6}  open {S.median(r['open_seconds'] for r in rs):.3f} s"
          f" (resident {S.median(r.get('arena_resident_seconds', 0) for r in rs):.3f} s)"
          f"  CPU s/GB {S.median(r['cpu_s_per_gb'] for r in rs):.3f}:"
          f" read {st('read'):.3f} verify {st('verify'):.3f}"
          f" assemble {st('assemble'):.3f} other {st('other'):.3f}"
          f"  run {S.median(r['seconds'] for r in rs):.3f} s"
          f"  stream page-faults {int(S.median(faults))}")
PY
