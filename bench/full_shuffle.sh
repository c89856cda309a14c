#!/bin/sh
# Full shuffle of raw records (issue 12), side by side on the same files:
#   full, range reads   sluice bench --shuffle full (records' byte ranges)
#   full, block reads   the same with --range-reads off (whole blocks; only
#                       BLOCK_BATCHES batches: it reads ~a block per record)
#   window              sluice bench --shuffle window (each block once)
#   fio randread        io_uring, O_DIRECT, the records' request size, the
#                       same queue depth, over the same shard files
# on raw datasets of 16 KiB, 64 KiB and uint8[3,224,224] + int64 records,
# BLOCK-sized blocks.  Every reader uses O_DIRECT (the page cache is not
# dropped: the machine is shared), RUNS alternating runs, medians of
# records/s, MB/s read, MB/s delivered and CPU s/GB (CPU over the GB
# delivered: sluice's thread clocks; fio's usr+sys) to stdout and
# bench/results/.
#
# Usage: sh bench/full_shuffle.sh   (env: BUILD RUNS QD THREADS BLOCK
#        BLOCK_BATCHES BENCH_DATA)
set -eu
BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
QD=${QD:-32}
THREADS=${THREADS:-2}
BLOCK=${BLOCK:-4M}
BLOCK_BATCHES=${BLOCK_BATCHES:-8}
DATA=${BENCH_DATA:-bench/data}/ranges
SHARD="$BUILD/dlpack-shard"
SLUICE="$BUILD/sluice"
out=bench/results/$(date -u +%Y-%m-%d)-full-shuffle.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for tool in fio python3; do
	command -v $tool >/dev/null || { echo "full_shuffle: $tool not installed" >&2; exit 1; }
done
mkdir -p "$DATA"
# make_ds NAME RECORDS FIELD...: a raw synth dataset, once
make_ds() {
	[ -f "$DATA/$1/dataset.json" ] && return 0
	name=$1; records=$2; shift 2
	"$SHARD" convert --from synth --records "$records" --seed 1 "$@" \
		--compression none --block-size "$BLOCK" --out "$DATA/$name" --quiet
}
make_ds r16k 32000 --field x:uint8:16384
make_ds r64k 16000 --field x:uint8:65536
make_ds img 7000 --field image:uint8:3x224x224 --field label:int64

# dataset, fio request size (the image's pages; its label is a 2nd read)
set -- r16k:16k r64k:64k img:148k
common="--device host --direct on --decode-threads $THREADS --queue-depth $QD --json"
i=0
while [ $i -lt "$RUNS" ]; do
	for spec in "$@"; do
		ds=${spec%%:*}; bs=${spec#*:}
		files=$(ls "$DATA/$ds"/*.dls | tr '\n' ':' | sed 's/:$//')
		"$SLUICE" bench "$DATA/$ds" --shuffle full $common > "$tmp/$ds.range.$i.json"
		# 2G: the default budget gives whole-block full shuffle of the
		# images too little batch memory (it sizes io for 256 blocks)
		"$SLUICE" bench "$DATA/$ds" --shuffle full --range-reads off \
			--memory 2G --stop-after-batches "$BLOCK_BATCHES" $common \
			> "$tmp/$ds.block.$i.json"
		"$SLUICE" bench "$DATA/$ds" --shuffle window $common > "$tmp/$ds.window.$i.json"
		fio --name=randread --rw=randread --bs="$bs" --iodepth="$QD" \
			--direct=1 --ioengine=io_uring --readonly --runtime=3 \
			--time_based --output-format=json --filename="$files" \
			> "$tmp/$ds.fio.$i.json"
	done
	i=$((i + 1))
done

python3 - "$tmp" "$RUNS" "$out" "$QD" "$THREADS" "$BLOCK" "$BLOCK_BATCHES" "$@" <<'EOF'
import json, statistics, sys, subprocess
tmp, runs, out, qd, threads, block, block_batches = sys.argv[1:8]
specs = sys.argv[8:]
runs = int(runs)
med = statistics.median

def sluice(path):
    r = json.load(open(path))["result"]
    rec_bytes = r["assembled_bytes"] / max(r["records"], 1)
    # sluice bench divides CPU by the GB decoded (whole blocks for block
    # reads): per GB delivered instead, for every reader alike
    per = r["decoded_bytes"] / max(r["assembled_bytes"], 1)
    stage = r["cpu_s_per_gb_by_stage"]
    return {"rec_s": r["samples_per_s"],
            "read_mb_s": r["read_gbps"] * 1e3,
            "out_mb_s": r["assembled_gbps"] * 1e3,
            "cpu_s_gb": r["cpu_s_per_gb"] * per,
            "verify": stage["verify"] * per,
            "assemble": stage["assemble"] * per,
            "read_cpu": stage["read"] * per,
            "rec_bytes": rec_bytes}

def fio(path, rec_bytes):
    j = json.load(open(path))["jobs"][0]
    rd = j["read"]
    secs = j["job_runtime"] / 1e3
    bw = rd["io_bytes"] / secs
    cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100 * secs
    return {"rec_s": bw / rec_bytes, "read_mb_s": bw / 1e6,
            "out_mb_s": bw / 1e6, "iops": rd["iops"],
            "cpu_s_gb": cpu / (rd["io_bytes"] / 1e9)}

lines = []
p = lines.append
host = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
p(f"# Full shuffle by record ranges: `sh bench/full_shuffle.sh`")
p("")
p(f"RUNS={runs} alternating runs, medians; QD {qd}, {threads} decode threads, "
  f"{block} blocks, O_DIRECT everywhere (page cache not dropped), "
  f"host device, kernel {host}. Block reads: {block_batches} batches only.")
p("")
p("| data | reader | records/s | MB/s read | MB/s delivered | CPU s/GB delivered | verify | assemble | read |")
p("|---|---|---:|---:|---:|---:|---:|---:|---:|")
summary = []
for spec in specs:
    ds, bs = spec.split(":")
    rows = {}
    for kind in ("range", "block", "window"):
        rows[kind] = [sluice(f"{tmp}/{ds}.{kind}.{i}.json") for i in range(runs)]
    rb = rows["range"][0]["rec_bytes"]
    rows["fio"] = [fio(f"{tmp}/{ds}.fio.{i}.json", rb) for i in range(runs)]
    m = {k: {f: med([x[f] for x in v]) for f in v[0]} for k, v in rows.items()}
    names = {"range": "full, range reads", "block": "full, block reads",
             "window": "window", "fio": f"fio randread bs={bs}"}
    for k in ("range", "block", "window", "fio"):
        x = m[k]
        st = ("| %.3f | %.3f | %.3f" % (x["verify"], x["assemble"], x["read_cpu"])
              if k != "fio" else "| | |")
        p(f"| {ds} | {names[k]} | {x['rec_s']:.0f} | {x['read_mb_s']:.0f} | "
          f"{x['out_mb_s']:.0f} | {x['cpu_s_gb']:.3f} {st} |")
    ratios = {
        "full/window": [a["rec_s"] / b["rec_s"] for a, b in zip(rows["range"], rows["window"])],
        "full MB/s read / fio": [a["read_mb_s"] / b["read_mb_s"] for a, b in zip(rows["range"], rows["fio"])],
        "range / block reads": [a["rec_s"] / b["rec_s"] for a, b in zip(rows["range"], rows["block"])],
    }
    summary.append((ds, {k: (med(v), min(v), max(v)) for k, v in ratios.items()}))
p("")
p("| data | full/window records/s | full read MB/s / fio | range/block records/s |")
p("|---|---:|---:|---:|")
for ds, r in summary:
    cell = lambda t: "%.2f (%.2f-%.2f)" % t
    p(f"| {ds} | {cell(r['full/window'])} | {cell(r['full MB/s read / fio'])} | "
      f"{cell(r['range / block reads'])} |")
p("")
p("Ratios are per run (side by side), median (min-max).")
text = "\n".join(lines) + "\n"
sys.stdout.write(text)
open(out, "w").write(text)
EOF
echo "written: $out"
