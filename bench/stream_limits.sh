#!/bin/sh
# The loader against its two limits, side by side on the same files:
#   raw data:  sluice bench (shuffle none)  vs  fio (io_uring, O_DIRECT,
#              the dataset's block size, the same queue depth)
#   zstd data: sluice bench (shuffle none)  vs  decode_threads x the
#              single-core decompression speed `zstd -b3` reports for the
#              same bytes cut in blocks of the dataset's block size
#   CPU s/GB by stage for each, with and without verification, also on
#   the raw data written in VIEW_BLOCK blocks, which hold several batches
#   so that batches view their block instead of copying it (issue 12)
# RUNS alternating runs each, page cache dropped before every reader when
# permitted; medians and ratios go to stdout and bench/results/.
# sluice's rates are the records' bytes delivered per second (samples/s
# times the dataset's raw bytes per record), CPU s/GB per GB delivered:
# the decode stage's bytes count a block again each time it is decoded
# again.
#
# Usage: sh bench/stream_limits.sh   (env: BUILD RUNS RAW_RECORDS
#        TOKEN_WINDOWS THREADS QD BLOCK BENCH_DATA: the data goes to
#        $BENCH_DATA/limits, default bench/data)
set -eu
BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
RAW_RECORDS=${RAW_RECORDS:-7000}         # x 150528 bytes = 1.05 GB
TOKEN_WINDOWS=${TOKEN_WINDOWS:-60000}    # x 8 KiB = 0.49 GB
THREADS=${THREADS:-2}
QD=${QD:-16}
BLOCK=${BLOCK:-4M}
VIEW_BLOCK=${VIEW_BLOCK:-64M}
DATA=${BENCH_DATA:-bench/data}/limits
SHARD="$BUILD/dlpack-shard"
SLUICE="$BUILD/sluice"
out=bench/results/$(date -u +%Y-%m-%d)-stream-limits.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for tool in fio zstd python3; do
	command -v $tool >/dev/null || { echo "stream_limits: $tool not installed" >&2; exit 1; }
done
mkdir -p "$DATA"
if [ ! -f "$DATA/raw/dataset.json" ]; then
	"$SHARD" convert --from synth --records "$RAW_RECORDS" \
		--field image:uint8:3x224x224 --field label:int64 --seed 1 \
		--compression none --block-size "$BLOCK" --out "$DATA/raw" --quiet
fi
if [ ! -f "$DATA/raw_big/dataset.json" ]; then
	"$SHARD" convert --from synth --records "$RAW_RECORDS" \
		--field image:uint8:3x224x224 --field label:int64 --seed 1 \
		--compression none --block-size "$VIEW_BLOCK" --out "$DATA/raw_big" --quiet
fi
if [ ! -f "$DATA/tokens/dataset.json" ]; then
	BENCH_DATA="$DATA/mk" TOKEN_WINDOWS=$TOKEN_WINDOWS IMAGES=20 SYNTH_RECORDS=20 \
		sh bench/make_data.sh >/dev/null 2>&1 || true
	[ -f "$DATA/mk/tokens_src/tokens.npy" ] ||
		{ echo "stream_limits: could not build tokens.npy" >&2; exit 1; }
	mv "$DATA/mk/tokens_src/tokens.npy" "$DATA/tokens.npy"
	rm -rf "$DATA/mk"
	"$SHARD" convert "$DATA/tokens.npy" --from npy --compression zstd:3 \
		--block-size "$BLOCK" --out "$DATA/tokens" --quiet
fi

drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo yes || echo no; }
cold=$(drop)

i=0
while [ $i -lt "$RUNS" ]; do
	drop >/dev/null
	fio --name=disk --rw=read --bs="$BLOCK" --iodepth="$QD" --direct=1 \
		--ioengine=io_uring --readonly --output-format=json \
		$(for f in "$DATA"/raw/*.dls; do printf -- '--filename=%s ' "$f"; done) \
		> "$tmp/fio.$i.json"
	drop >/dev/null
	"$SLUICE" bench "$DATA/raw" --shuffle none --batch-size 64 \
		--decode-threads "$THREADS" --queue-depth "$QD" --json > "$tmp/raw.$i.json"
	drop >/dev/null
	"$SLUICE" bench "$DATA/tokens" --shuffle none --batch-size 64 \
		--decode-threads "$THREADS" --queue-depth "$QD" --json > "$tmp/tok.$i.json"
	for v in verify no-verify; do
		flag=; [ $v = verify ] || flag=--no-verify
		drop >/dev/null
		"$SLUICE" bench "$DATA/raw_big" --shuffle none --batch-size 64 $flag \
			--decode-threads "$THREADS" --queue-depth "$QD" --json > "$tmp/big-$v.$i.json"
		drop >/dev/null
		"$SLUICE" bench "$DATA/tokens" --shuffle none --batch-size 64 $flag \
			--decode-threads "$THREADS" --queue-depth "$QD" --json > "$tmp/tok-$v.$i.json"
	done
	zstd -b3 -e3 -B"$BLOCK" -i2 "$DATA/tokens.npy" > "$tmp/zstd.$i.txt" 2>&1
	i=$((i + 1))
done

python3 - "$tmp" "$RUNS" "$THREADS" "$QD" "$BLOCK" "$cold" "$out" "$VIEW_BLOCK" <<'EOF'
import json, os, platform, re, statistics, subprocess, sys
tmp, runs, threads, qd, block, cold, out, view_block = sys.argv[1:]
runs, threads = int(runs), int(threads)
med = statistics.median
def js(p):
    j = json.load(open(os.path.join(tmp, p)))
    if "result" not in j:
        return j                              # fio's
    # per GB delivered: the records' raw bytes, each record once
    r, ds = j["result"], j["dataset"]
    per_rec = ds["raw_bytes"] / ds["records"]
    delivered = r["records"] * per_rec
    r["delivered_gbps"] = r["samples_per_s"] * per_rec / 1e9
    r["cpu_s_per_gb"] = r["cpu_seconds"] / (delivered / 1e9)
    r["cpu_s_per_gb_by_stage"] = {k: v * r["decoded_bytes"] / delivered
                                  for k, v in r["cpu_s_per_gb_by_stage"].items()}
    return j
fio = [js("fio.%d.json" % i)["jobs"][0]["read"]["bw_bytes"] / 1e9 for i in range(runs)]
raw = [js("raw.%d.json" % i)["result"] for i in range(runs)]
tok = [js("tok.%d.json" % i)["result"] for i in range(runs)]
zs = []
for i in range(runs):
    t = open(os.path.join(tmp, "zstd.%d.txt" % i)).read()
    m = re.findall(r"([0-9.]+) MB/s\s*,\s*([0-9.]+) MB/s", t)
    zs.append(float(m[-1][1]) / 1e3)          # decompression GB/s, 1 thread
raw_gbps = [r["read_gbps"] for r in raw]
raw_cpu = [r["cpu_s_per_gb"] for r in raw]
tok_dec = [r["delivered_gbps"] for r in tok]
tok_cpu = [r["cpu_s_per_gb"] for r in tok]
tok_disk = [r["read_gbps"] for r in tok]
def stage_row(name, verify, key):
    rs = [js("%s.%d.json" % (key, i))["result"] for i in range(runs)]
    st = lambda k: med([r["cpu_s_per_gb_by_stage"][k] for r in rs])
    return "| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %d of %d |" % (
        name, verify, med([r["delivered_gbps"] for r in rs]), st("read"), st("verify"),
        st("decompress"), st("assemble"), st("other"), med([r["cpu_s_per_gb"] for r in rs]),
        rs[0]["batches_viewed"], rs[0]["batches"])
lim = min(threads * med(zs), med(fio) * (med(tok_dec) / med(tok_disk)))
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"],
                     capture_output=True, text=True).stdout.strip()
lines = [
  "# sluice stream vs its limits (%s)" % subprocess.run(["date", "-u", "+%Y-%m-%dT%H:%MZ"], capture_output=True, text=True).stdout.strip(),
  "",
  "Machine: %s, %d CPUs, kernel %s. Page cache dropped before each reader: %s." % (cpu, os.cpu_count(), platform.release(), cold),
  "Command: `sh bench/stream_limits.sh` (RUNS=%d, block %s, queue depth %s, decode threads %d); medians of %d alternating runs." % (runs, block, qd, threads, runs),
  "",
  "| comparison | sluice | limit | ratio | sluice CPU s/GB |",
  "|---|---:|---:|---:|---:|",
  "| raw, shuffle none vs fio io_uring O_DIRECT bs=%s QD%s | %.3f GB/s | %.3f GB/s | %.2f | %.3f |" % (block, qd, med(raw_gbps), med(fio), med(raw_gbps) / med(fio), med(raw_cpu)),
  "| zstd:3 tokens, delivered (raw bytes) vs min(%d x zstd -b3 %.3f GB/s, disk) | %.3f GB/s | %.3f GB/s | %.2f | %.3f |" % (threads, med(zs), med(tok_dec), lim, med(tok_dec) / lim, med(tok_cpu)),
  "",
  "CPU seconds per GB delivered, by stage (medians; `other`: the consumer and the rest of the process; viewed: batches that viewed their block, no copy):",
  "",
  "| data | verify | GB/s | read | verify | decompress | assemble | other | total | viewed |",
  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
] + [stage_row(*a) for a in (
  ("raw, %s blocks" % block, "on", "raw"),
  ("raw, %s blocks" % view_block, "on", "big-verify"),
  ("raw, %s blocks" % view_block, "off", "big-no-verify"),
  ("zstd:3 tokens, %s blocks" % block, "on", "tok"),
  ("zstd:3 tokens, %s blocks" % block, "off", "tok-no-verify"))] + [
  "",
  "Per run (GB/s): fio %s; sluice raw %s; zstd -b3 1-thread decompression %s; sluice zstd delivered %s." % (
      " ".join("%.3f" % x for x in fio), " ".join("%.3f" % x for x in raw_gbps),
      " ".join("%.3f" % x for x in zs), " ".join("%.3f" % x for x in tok_dec)),
  "",
]
text = "\n".join(lines)
print(text)
with open(out, "a") as f:
    f.write(text + "\n")
EOF
echo "stream_limits: appended to $out"
