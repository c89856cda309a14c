#!/bin/sh
# Full shuffle of zstd data (format v4: frames a record is decoded from
# alone) against the window shuffle on the same files, with the default
# budget capped below the data (LOCAL_WORLD_SIZE ranks share it), so the
# block cache cannot hold the dataset:
#   z16    20000 x uint8[16384] (half compressible) + int64, 1 MiB blocks
#   img    2000 x uint8[3,224,224] (0.3) + int64, 1 MiB blocks
#   var    20000 x uint8[-1, 16384] (0.5: 0, 16 or 32 KiB, 16 on
#          average) + int64
# With BASE_BUILD (another build's folder, e.g. an older commit's), its
# dlpack-shard writes its own copy of each dataset and its sluice reads
# it, alternating with this build's: the format change before and after.
# RUNS alternating runs, medians of GB/s delivered (the records' bytes),
# bytes read per byte delivered and CPU s/GB delivered, to stdout and
# bench/results/.  The page cache holds the files (tmpfs by default):
# this measures the loader's CPU path, not a disk.
#
# Usage: sh bench/full_shuffle_zstd.sh   (env: BUILD BASE_BUILD RUNS LWS
#        SETS, default "z16 img var"; BENCH_DATA, default
#        /dev/shm/sluice-bench)
set -eu
BUILD=${BUILD:-build}
RUNS=${RUNS:-3}
LWS=${LWS:-16}
SETS=${SETS:-z16 img var}
DATA=${BENCH_DATA:-/dev/shm/sluice-bench}/zstd-frames
out=bench/results/$(date -u +%Y-%m-%d)-full-shuffle-zstd$([ "$SETS" = "z16 img var" ] || echo "-$SETS" | tr ' ' -).md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

builds="new:$BUILD"
[ -n "${BASE_BUILD:-}" ] && builds="base:$BASE_BUILD $builds"
mkdir -p "$DATA"
# make_ds WHICH DIR NAME RECORDS FIELD...: a zstd synth dataset, once
make_ds() {
	which=$1; bdir=$2; name=$3; records=$4; shift 4
	[ -f "$DATA/$which-$name/dataset.json" ] && return 0
	"$bdir/dlpack-shard" convert --from synth --records "$records" \
		--seed 1 "$@" --out "$DATA/$which-$name" --quiet
}
for b in $builds; do
	which=${b%%:*}; bdir=${b#*:}
	make_ds "$which" "$bdir" z16 20000 --field data:uint8:16384:0.5 \
		--field label:int64
	make_ds "$which" "$bdir" img 2000 --field image:uint8:3x224x224:0.3 \
		--field label:int64
	make_ds "$which" "$bdir" var 20000 --field v:uint8:-1x16384:0.5 \
		--field label:int64
done

i=0
while [ $i -lt "$RUNS" ]; do
	for ds in $SETS; do
		for b in $builds; do
			which=${b%%:*}; bdir=${b#*:}
			for mode in full window; do
				LOCAL_WORLD_SIZE=$LWS "$bdir/sluice" bench \
					"$DATA/$which-$ds" --shuffle $mode \
					--batch-size 256 --epochs 2 --device host \
					--json > "$tmp/$which.$ds.$mode.$i.json"
			done
		done
	done
	i=$((i + 1))
done

python3 - "$tmp" "$RUNS" "$out" "$LWS" "$DATA" "$SETS" $builds <<'EOF'
import json, os, statistics, subprocess, sys
tmp, runs, out, lws, data, sets = sys.argv[1:7]
builds = [b.split(":", 1) for b in sys.argv[7:]]
runs = int(runs)
med = statistics.median

def row(path):
    r = json.load(open(path))["result"]
    per = r["decoded_bytes"] / max(r["assembled_bytes"], 1)
    return {"gbps": r["assembled_gbps"],
            "read_x": r["read_gbps"] / max(r["assembled_gbps"], 1e-12),
            "cpu": r["cpu_s_per_gb"] * per}

def stored(which, ds):
    d = json.load(open(os.path.join(data, f"{which}-{ds}", "dataset.json")))
    return d.get("stored_bytes", 0), d.get("raw_bytes", 0)

lines = []
p = lines.append
host = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
p("# Full shuffle of zstd data: `sh bench/full_shuffle_zstd.sh`")
p("")
p(f"RUNS={runs} alternating runs, medians; LOCAL_WORLD_SIZE={lws} (the "
  f"default budget's cap, shared, below each dataset), batch 256, 2 "
  f"epochs, host device, page cache warm, kernel {host}, "
  f"{os.cpu_count()} CPUs.")
p("")
p("| data | build | stored/raw | shuffle | GB/s delivered | read / delivered | CPU s/GB delivered | full/window |")
p("|---|---|---:|---|---:|---:|---:|---:|")
for ds in sets.split():
    for which, _ in builds:
        rows = {m: [row(f"{tmp}/{which}.{ds}.{m}.{i}.json") for i in range(runs)]
                for m in ("full", "window")}
        ratio = med([a["gbps"] / b["gbps"]
                     for a, b in zip(rows["full"], rows["window"])])
        s, r = stored(which, ds)
        for m in ("full", "window"):
            x = {f: med([v[f] for v in rows[m]]) for f in rows[m][0]}
            p(f"| {ds} | {which} | {s / max(r, 1):.3f} | {m} | {x['gbps']:.3f} | "
              f"{x['read_x']:.2f} | {x['cpu']:.3f} | "
              f"{'%.2f' % ratio if m == 'full' else ''} |")
text = "\n".join(lines) + "\n"
print(text)
open(out, "w").write(text)
print(f"wrote {out}")
EOF
