#!/bin/sh
# A/B: BASE (a sluice built from an older commit, e.g. 6fb0cb8: CPU by
# stage only) vs this build, same data, alternating,
# page cache dropped before each run, with 2 x `zstd -b3` beside them.
# Usage: BASE=/path/to/old/sluice sh bench/ab_builds.sh RUNS
set -eu
RUNS=${1:-3}
BASE=${BASE:?set BASE to the sluice of the other build}
D=bench/data/limits
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
for i in $(seq 1 "$RUNS"); do
  for which in base new; do
    [ $which = base ] && S=$BASE || S=build/sluice
    for cfg in "tokens 64" "tokens 1024" "raw_big 64"; do
      set -- $cfg
      drop
      $S bench $D/$1 --shuffle none --batch-size $2 --decode-threads 2 --queue-depth 16 --device host --json > /tmp/sluice_ab.$which.$1.$2.$i.json
    done
  done
  zstd -b3 -e3 -B4M -i2 $D/tokens.npy 2>&1 | tr '\r' '\n' | grep -o '[0-9.]* MB/s' | tail -1 > /tmp/sluice_ab.zstd.$i.txt
done
python3 - "$RUNS" <<'PY'
import json, statistics, sys
runs = int(sys.argv[1]); med = statistics.median
z = [float(open("/tmp/sluice_ab.zstd.%d.txt" % i).read().split()[0]) / 1e3 for i in range(1, runs + 1)]
print("zstd -b3 1-thread decompression GB/s per run: %s (median %.3f; 2 x = %.3f)" % (" ".join("%.3f" % v for v in z), med(z), 2 * med(z)))
print("| data | batch | build | decoded GB/s (runs) | median | ratio to 2 x zstd -b3 | CPU s/GB | decompress | assemble | viewed | direct blocks |")
print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
for ds, b in (("tokens", 64), ("tokens", 1024), ("raw_big", 64)):
    for which in ("base", "new"):
        rs = [json.load(open("/tmp/sluice_ab.%s.%s.%d.%d.json" % (which, ds, b, i)))["result"] for i in range(1, runs + 1)]
        g = [r["decoded_gbps"] for r in rs]
        st = lambda k: med([r["cpu_s_per_gb_by_stage"][k] for r in rs])
        print("| %s | %d | %s | %s | %.3f | %s | %.3f | %.3f | %.3f | %s | %s |" % (
            ds, b, which, " ".join("%.3f" % v for v in g), med(g),
            "%.2f" % (med(g) / (2 * med(z))) if ds == "tokens" else "-",
            med([r["cpu_s_per_gb"] for r in rs]), st("decompress"), st("assemble"),
            rs[0].get("batches_viewed", "-"), rs[0].get("blocks_direct", "-")))
PY
