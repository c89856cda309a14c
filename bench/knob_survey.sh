#!/bin/sh
# bench/knob_survey.sh DATA [RUNS] - is any setting faster than the
# defaults (issue 22's goal 3)?  The defaults and a few knobs in turn,
# RUNS times (3), on one dataset; medians of GB/s delivered and CPU s/GB.
# SLUICE: the sluice binary (build/sluice); SHUFFLE (none) and EPOCHS (1)
# for every row, so that multi-epoch jobs of the default window shuffle
# are surveyed too.
set -u
B=${SLUICE:-build/sluice}
SHUFFLE=${SHUFFLE:-none}
EPOCHS=${EPOCHS:-1}
D=${1:?usage: knob_survey.sh DATA [RUNS]}
R=${2:-3}
out=$(mktemp)
i=1
while [ "$i" -le "$R" ]; do
for k in "defaults:" "decode-threads-1:--decode-threads 1" "queue-depth-256:--queue-depth 256" "prefetch-8:--prefetch 8" "memory-4G:--memory 4G" "memory-1G:--memory 1G" "shuffle-window:--shuffle window" "range-reads-on:--range-reads on" "range-reads-off:--range-reads off"; do
  name=${k%%:*}; args=${k#*:}
  # shellcheck disable=SC2086
  "$B" bench "$D" --shuffle "$SHUFFLE" --epochs "$EPOCHS" --batch-size 64 \
	$args --json 2>/dev/null |
	python3 -c "
import json,sys; r=json.load(sys.stdin)['result']; print('$name', r['delivered_gbps'], r['cpu_s_per_gb_delivered'])" >>"$out"
done
i=$((i + 1))
done
python3 - "$out" <<'PY'
import collections, statistics, sys
g, c = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, a, b = line.split()
    g[n].append(float(a))
    c[n].append(float(b))
base = statistics.median(g["defaults"]) if g["defaults"] else 0
for n in g:
    m = statistics.median(g[n])
    print("%-20s %6.2f GB/s  %4.2fx the defaults  CPU %.3f s/GB" % (
        n, m, m / base if base else 0, statistics.median(c[n])))
PY
rm -f "$out"
