#!/bin/sh
# A window shuffle under a memory_bytes that holds a few windows, or not
# even one: block reads per block and GB/s, with BASE_BUILD (another
# build's folder, e.g. an older commit's) beside this build, alternating.
#   data: 30000 x uint8[4096] + int64 in 5 MB blocks (25 blocks, 123 MB),
#   window 3, batch 64, one epoch, host device, page cache warm (tmpfs).
# MEMS: the memory_bytes values (default "5800K 12M 40M"); RUNS alternating
# runs, medians, to stdout and bench/results/.
#
# Usage: sh bench/window_memory.sh   (env: BUILD BASE_BUILD RUNS MEMS
#        BENCH_DATA, default /dev/shm/sluice-bench)
set -eu
BUILD=${BUILD:-build}
RUNS=${RUNS:-3}
MEMS=${MEMS:-5800K 12M 40M}
DATA=${BENCH_DATA:-/dev/shm/sluice-bench}/window-memory
out=bench/results/$(date -u +%Y-%m-%d)-window-memory.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

builds="new:$BUILD"
[ -n "${BASE_BUILD:-}" ] && builds="base:$BASE_BUILD $builds"
mkdir -p "$(dirname "$DATA")"
[ -f "$DATA/dataset.json" ] ||
	"$BUILD/dlpack-shard" convert --from synth --records 30000 --seed 1 \
		--field data:uint8:4096 --field label:int64 \
		--block-size 5000000 --out "$DATA" --quiet

i=0
while [ $i -lt "$RUNS" ]; do
	for m in $MEMS; do
		for b in $builds; do
			which=${b%%:*}; bdir=${b#*:}
			"$bdir/sluice" bench "$DATA" --shuffle window --window 3 \
				--memory "$m" --batch-size 64 --device host \
				--json > "$tmp/$which.$m.$i.json"
		done
	done
	i=$((i + 1))
done

python3 - "$tmp" "$RUNS" "$out" "$MEMS" $builds <<'EOF'
import json, os, statistics, sys
tmp, runs, out, mems = sys.argv[1:5]
builds = [b.split(":", 1) for b in sys.argv[5:]]
med = statistics.median
lines = ["# Window shuffle under a small memory_bytes: `sh bench/window_memory.sh`",
         "",
         f"RUNS={runs} alternating runs, medians; 25 blocks of 5 MB (123 MB), "
         f"window 3, batch 64, one epoch, host device, tmpfs, {os.cpu_count()} CPUs.",
         "",
         "| memory_bytes | build | GB/s | blocks read | window | fallbacks |",
         "|---|---|---:|---:|---|---|"]
for m in mems.split():
    for which, _ in builds:
        js = [json.load(open(f"{tmp}/{which}.{m}.{i}.json")) for i in range(int(runs))]
        gbps = med(j["result"]["delivered_gbps"] for j in js)
        reads = sorted(j["result"]["blocks_read"] for j in js)
        why = js[0]["fallbacks"]["reasons"]
        win = "chunks" if "chunk of blocks" in why else ""
        if "shuffle window of" in why:
            win = (why.split("shuffle window of ")[1].split(" ")[0] + " blocks "
                   + win).strip()
        lines.append(f"| {m} | {which} | {gbps:.2f} | {'/'.join(map(str, reads))} | "
                     f"{win or '3 blocks'} | {why[:90]} |")
text = "\n".join(lines) + "\n"
print(text)
open(out, "w").write(text)
print(f"wrote {out}")
EOF
