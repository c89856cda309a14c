#!/bin/sh
# A/B: BASE (a sluice built from an older commit, e.g. main in a separate
# BUILD dir) vs this build, same data, alternating, page cache dropped
# before each run when permitted (the reads are O_DIRECT either way), with
# 2 x `zstd -b3` beside them.
# Throughput is the records' bytes delivered per second (samples/s times
# the dataset's raw bytes per record), not the decode stage's bytes, which
# count a block once more each time it is decoded again; CPU s/GB likewise
# per GB delivered.
# Usage: BASE=/path/to/old/sluice sh bench/ab_builds.sh RUNS
#        (env: BENCH_DATA, default bench/data: stream_limits.sh's data in
#        $BENCH_DATA/limits; NEW, default build/sluice)
set -eu
RUNS=${1:-3}
BASE=${BASE:?set BASE to the sluice of the other build}
NEW=${NEW:-build/sluice}
D=${BENCH_DATA:-bench/data}/limits
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
for i in $(seq 1 "$RUNS"); do
  for which in base new; do
    [ $which = base ] && S=$BASE || S=$NEW
    for cfg in "tokens 64" "tokens 1024" "raw 64" "raw_big 64"; do
      set -- $cfg
      drop
      $S bench $D/$1 --shuffle none --batch-size $2 --decode-threads 2 --queue-depth 16 --device host --json > $OUT/$which.$1.$2.$i.json
    done
  done
  zstd -b3 -e3 -B4M -i2 $D/tokens.npy 2>&1 | tr '\r' '\n' | grep -o '[0-9.]* MB/s' | tail -1 > $OUT/zstd.$i.txt
done
python3 - "$RUNS" "$OUT" <<'PY'
import json, os, statistics, sys
runs, out = int(sys.argv[1]), sys.argv[2]; med = statistics.median
z = [float(open(os.path.join(out, "zstd.%d.txt" % i)).read().split()[0]) / 1e3 for i in range(1, runs + 1)]
print("zstd -b3 1-thread decompression GB/s per run: %s (median %.3f; 2 x = %.3f)" % (" ".join("%.3f" % v for v in z), med(z), 2 * med(z)))
print("| data | batch | build | delivered GB/s (runs) | median | ratio to 2 x zstd -b3 | CPU s/GB delivered | decompress | assemble | blocks read | viewed | direct blocks |")
print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for ds, b in (("tokens", 64), ("tokens", 1024), ("raw", 64), ("raw_big", 64)):
    for which in ("base", "new"):
        js = [json.load(open(os.path.join(out, "%s.%s.%d.%d.json" % (which, ds, b, i)))) for i in range(1, runs + 1)]
        rs = [j["result"] for j in js]
        per_rec = js[0]["dataset"]["raw_bytes"] / js[0]["dataset"]["records"]
        g = [r["samples_per_s"] * per_rec / 1e9 for r in rs]
        cpu = [r["cpu_seconds"] / (r["records"] * per_rec / 1e9) for r in rs]
        # by stage, per GB delivered (the stages' figures are per GB decoded)
        st = lambda k: med([r["cpu_s_per_gb_by_stage"][k] * r["decoded_bytes"] / (r["records"] * per_rec) for r in rs])
        print("| %s | %d | %s | %s | %.3f | %s | %.3f | %.3f | %.3f | %d | %s | %s |" % (
            ds, b, which, " ".join("%.3f" % v for v in g), med(g),
            "%.2f" % (med(g) / (2 * med(z))) if ds == "tokens" else "-",
            med(cpu), st("decompress"), st("assemble"), med([r["blocks_read"] for r in rs]),
            rs[0].get("batches_viewed", "-"), rs[0].get("blocks_direct", "-")))
PY
