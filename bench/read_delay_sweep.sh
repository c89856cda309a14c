#!/bin/sh
# bench/read_delay_sweep.sh OLD NEW DATA RUNS [ARGS...] - two sluice builds
# on a slow device: every read starts D us late (sluice bench
# --read-delay-us), D from 0 to 100 ms, the builds alternating RUNS times
# at each D.  Prints the median GB/s delivered, the read-ahead the new
# build ended with, the bytes it kept in flight (GB/s x delay) and the
# blocks each read (the host proxy for storage latency, issue 22).
set -u
old=${1:?usage: read_delay_sweep.sh OLD NEW DATA RUNS [ARGS...]}
new=$2 data=$3 runs=$4
shift 4
out=$(mktemp)
for d in ${DELAYS:-0 1000 10000 50000 100000}; do
	i=1
	while [ "$i" -le "$runs" ]; do
		for which in old new; do
			eval bin=\$$which
			"$bin" bench "$data" --json --read-delay-us "$d" "$@" \
				2>/dev/null | python3 -c "
import json, sys
r = json.load(sys.stdin)['result']
print($d, '$which', r['delivered_gbps'], r['blocks_read'],
      r.get('read_ahead_blocks', 0))" >>"$out" ||
				echo "$which failed at $d us" >&2
		done
		i=$((i + 1))
	done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
rate, last = collections.defaultdict(list), {}
for line in open(sys.argv[1]):
    d, w, g, blocks, ahead = line.split()
    rate[int(d), w].append(float(g))
    last[int(d), w] = (int(blocks), int(ahead))
print("delay ms  old GB/s  new GB/s  new/old  read-ahead  in flight  blocks read old/new")
for d in sorted({k[0] for k in rate}):
    o = statistics.median(rate[d, "old"]) if rate[d, "old"] else 0
    n = statistics.median(rate[d, "new"]) if rate[d, "new"] else 0
    print("%8.0f  %8.2f  %8.2f  %7.2f  %10d  %6.2f GB  %d / %d" % (
        d / 1000, o, n, n / o if o else 0, last.get((d, "new"), (0, 0))[1],
        n * d / 1e6, last.get((d, "old"), (0, 0))[0],
        last.get((d, "new"), (0, 0))[0]))
PY
rm -f "$out"
