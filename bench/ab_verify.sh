#!/bin/sh
# A/B of verify CPU: OLD (a sluice built from an older commit) vs
# build/sluice, raw data, shuffle none, verify on and off, alternating.
# Usage: OLD=/path/to/old/sluice sh bench/ab_verify.sh DATASET [RUNS]
# (JSON per run in /tmp/ab/; page cache not dropped: CPU, not speed)
set -eu
mkdir -p /tmp/ab
DS=$1; RUNS=${2:-5}
for i in $(seq 1 $RUNS); do
  for b in old new; do
    [ $b = old ] && S=${OLD:?set OLD} || S=build/sluice
    for v in verify no-verify; do
      flag=; [ $v = verify ] || flag=--no-verify
      $S bench $DS --shuffle none --batch-size 64 --decode-threads 2 --queue-depth 16 --device host $flag --json > /tmp/ab/$b.$v.$i.json
    done
  done
done
python3 - <<'PY'
import glob, json, statistics
med = statistics.median
print("| build | verify | CPU s/GB (runs) | median | verify stage | probe XXH3 GB/s |")
print("|---|---|---|---:|---:|---:|")
for b in ("old", "new"):
    for v in ("verify", "no-verify"):
        runs = [json.load(open(f)) for f in sorted(glob.glob("/tmp/ab/%s.%s.*.json" % (b, v)))]
        cpu = [r["result"]["cpu_s_per_gb"] for r in runs]
        ver = [r["result"]["cpu_s_per_gb_by_stage"]["verify"] for r in runs]
        probe = [r["limits"]["cpu_probe"]["verify_gbps"] for r in runs]
        print("| %s | %s | %s | %.3f | %.3f | %.2f |" % (b, v, " ".join("%.3f" % x for x in cpu), med(cpu), med(ver), med(probe)))
PY
