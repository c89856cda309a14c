#!/bin/sh
# bench/host_ab.sh OLD NEW DATA RUNS [ARGS...] - two sluice builds side by
# side on one dataset, alternating, RUNS times each: delivered GB/s, CPU
# s/GB and peak RSS (GNU time) per run, then the medians.  The host proxy
# for the GPU host's streaming rows (issue 22): run it on data in tmpfs.
set -u
old=${1:?usage: host_ab.sh OLD NEW DATA RUNS [ARGS...]}
new=$2 data=$3 runs=$4
shift 4
out=$(mktemp -d)
i=1
while [ "$i" -le "$runs" ]; do
	for which in old new; do
		eval bin=\$$which
		/usr/bin/time -f '%M' -o "$out/rss" "$bin" bench "$data" \
			--json "$@" >"$out/json" 2>"$out/err" ||
			{ echo "$which: $(tail -n 1 "$out/err")"; continue; }
		python3 - "$out/json" "$(cat "$out/rss")" "$which" \
			>>"$out/rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
print(sys.argv[3], r["delivered_gbps"], r["cpu_s_per_gb_delivered"],
      int(sys.argv[2]) / 1024, r["memory_bytes"] / 2**20)
PY
	done
	i=$((i + 1))
done
[ -s "$out/rows" ] && python3 - "$out/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for w in ("old", "new"):
    v = [list(map(float, r[1:])) for r in rows if r[0] == w]
    if not v:
        continue
    m = [statistics.median(c) for c in zip(*v)]
    print("%s: %d runs, median %.2f GB/s delivered, %.3f CPU s/GB, "
          "peak RSS %.0f MiB, memory_bytes %.0f MiB" % (w, len(v), *m))
PY
rm -rf "$out"
