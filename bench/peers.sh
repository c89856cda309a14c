#!/bin/sh
# bench/peers.sh [image|tokens|synth]: sluice and its peers on the same
# dataset and machine, one after another:
#   sluice bench --json       the loader (O_DIRECT, window shuffle)
#   fio                       raw reads of the shard files, same 1 MiB block
#                             size and queue depth 32 (if fio is installed)
#   PyTorch DataLoader        bench/peer_dataloader.py over the ORIGINAL
#                             source files, naive and tuned (if torch is
#                             installed), each in a process of its own
#   sluice Python loader      the same script, sluice.Loader over the
#                             converted dataset, torch.from_dlpack per field
#                             (when `make python` built the module)
# Prints one table (samples/s, GB/s, CPU s/GB, ratio to sluice) and writes
# it, with the machine described, to bench/results/<date>-<hostname>.md.
# Peak memory of each loader (its process and workers; summed PSS, which
# counts pages the workers share with their parent once) comes from
# bench/peak_memory.py.
# Env: BUILD=build BENCH_DATA=bench/data EPOCHS=1 BATCH=256
#      PYTHON=python3 (one with torch, for the DataLoader)
set -eu
KIND=${1:-image}
BUILD=${BUILD:-build}
DATA=${BENCH_DATA:-bench/data}
EPOCHS=${EPOCHS:-1}
BATCH=${BATCH:-256}
PYTHON=${PYTHON:-python3}
DS="$DATA/$KIND"
[ -d "$DS" ] || { echo "peers: $DS is missing (make bench-data)" >&2; exit 1; }
[ -x "$BUILD/sluice" ] || { echo "peers: $BUILD/sluice is missing (make)" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-peers.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
rows="$T/rows.jsonl"
: > "$rows"
# Cold cache for every reader when allowed (root, not a read-only /proc):
# sluice and fio use O_DIRECT, the PyTorch readers go through the cache.
cold=no
drop() { sync; (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null && cold=yes || cold=no; }

# 1. sluice
echo "peers: sluice bench $DS" >&2
drop
"$BUILD/sluice" bench "$DS" --json --epochs "$EPOCHS" --batch-size "$BATCH" > "$T/sluice.json"
# Its memory from the same loader run by `sluice stream`: bench also
# measures the disk and copy limits afterwards, with buffers of their own.
drop
python3 bench/peak_memory.py "$T/sluice.mem.json" -- \
	"$BUILD/sluice" stream "$DS" --epochs "$EPOCHS" --batch-size "$BATCH" > /dev/null
python3 - "$T/sluice.json" "$T/sluice.mem.json" >> "$rows" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1])); r = b["result"]
mem = json.load(open(sys.argv[2]))
print(json.dumps({**mem, "name": "sluice (%s, %s)" % (b["config"]["shuffle"], b["limits"]["disk"]["status"]),
                  "samples_per_s": r["samples_per_s"], "gbps": r["decoded_gbps"],
                  "cpu_s_per_gb": r["cpu_s_per_gb"], "note": "binding %s, %.0f%% of it"
                  % (b["limits"]["binding"], 100 * b["limits"]["achieved_fraction"])}))
EOF

# 2. fio over the same shard files
if command -v fio >/dev/null 2>&1; then
	files=$(ls "$DS"/*.dls | tr '\n' ':' | sed 's/:$//')
	echo "peers: fio $files" >&2
	direct=1
	fio --name=probe --filename="$(ls "$DS"/*.dls | head -n 1)" --rw=read \
		--bs=1M --size=1M --direct=1 --ioengine=psync > /dev/null 2>&1 || direct=0
	drop
	fio --name=shards --filename="$files" --rw=read --bs=1M --iodepth=32 \
		--ioengine=io_uring --direct=$direct --readonly --numjobs=1 \
		--output-format=json > "$T/fio.json" 2> "$T/fio.err" ||
		{ echo "peers: fio failed: $(cat "$T/fio.err")" >&2; }
	[ -s "$T/fio.json" ] && python3 - "$T/fio.json" "$T/sluice.json" "$direct" >> "$rows" <<'EOF'
import json, sys
f = json.load(open(sys.argv[1]))["jobs"][0]
b = json.load(open(sys.argv[2]))
rd = f["read"]; secs = rd["runtime"] / 1000.0
d = b["dataset"]
per_record = d["file_bytes"] / d["records"]
cpu = (f["usr_cpu"] + f["sys_cpu"]) / 100.0 * secs
print(json.dumps({"name": "fio io_uring 1M QD32 %s" % ("O_DIRECT" if sys.argv[3] == "1" else "buffered"),
                  "samples_per_s": rd["bw_bytes"] / per_record, "gbps": rd["bw_bytes"] / 1e9,
                  "cpu_s_per_gb": cpu / (rd["io_bytes"] / 1e9) if rd["io_bytes"] else 0,
                  "note": "raw reads only, stored bytes"}))
EOF
else
	echo "peers: fio is not installed: skipped" >&2
	echo '{"name": "fio", "skipped": "fio is not installed"}' >> "$rows"
fi

# 3. PyTorch DataLoader over the original files
if [ "$KIND" = synth ]; then
	echo '{"name": "pytorch DataLoader", "skipped": "synth has no original source files"}' >> "$rows"
else
	echo "peers: PyTorch DataLoader over the source files of $KIND" >&2
	for config in naive tuned sluice; do
		if [ $config = sluice ] && [ -z "$(ls python/sluice/_sluice*.so 2>/dev/null)" ]; then
			echo '{"name": "sluice Python loader", "skipped": "the module is not built (make python)"}' >> "$rows"
			continue
		fi
		rc=0
		drop
		"$PYTHON" bench/peer_dataloader.py "$KIND" $config --data "$DATA" \
			--epochs "$EPOCHS" --batch-size "$BATCH" --sluice "$DS" \
			> "$T/torch.jsonl" 2> "$T/torch.err" || rc=$?
		if [ $rc -eq 0 ]; then
			cat "$T/torch.jsonl" >> "$rows"
		else
			why=$(grep -v Warning "$T/torch.err" | tail -n 1)
			echo "peers: $config skipped: $why" >&2
			python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[2], "skipped": sys.argv[1]}))' "$why" "$config" >> "$rows"
		fi
	done
fi

# The table and the machine.
mkdir -p bench/results
out="bench/results/$(date +%Y-%m-%d)-$(hostname).md"
{
	echo "# sluice vs peers: $KIND ($DS), $(date -u +%Y-%m-%dT%H:%MZ)"
	echo
	echo "Machine: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1),"
	echo "$(nproc) online CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) memory,"
	echo "kernel $(uname -r), data on $(df -hT "$DS" | awk 'NR == 2 {print $1 " (" $2 ")"}')"
	src=$(df "$DS" | awk 'NR == 2 {print $1}')
	model=$(lsblk -ndo MODEL "$src" 2>/dev/null | head -n 1 || true)
	[ -n "$model" ] && echo "disk model: $model"
	echo
	echo "Page cache dropped before each reader: $cold."
	echo "Epochs $EPOCHS, batch $BATCH. GB = 1e9 bytes (decoded bytes for loaders, stored for fio)."
	echo
	python3 - "$rows" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = rows[0]["samples_per_s"]
print("| reader | samples/s | GB/s | CPU s/GB | ratio to sluice | peak PSS MB (before the run) | note |")
print("|---|---:|---:|---:|---:|---:|---|")
for r in rows:
    if "skipped" in r:
        print("| %s | - | - | - | - | - | skipped: %s |" % (r["name"], r["skipped"]))
        continue
    mem = ("%.0f (%.0f)" % (r["peak_pss_mb"], r["start_pss_mb"])
           if "peak_pss_mb" in r else "-")
    print("| %s | %.0f | %.3f | %.3f | %.2f | %s | %s |" % (r["name"], r["samples_per_s"], r["gbps"],
          r["cpu_s_per_gb"], r["samples_per_s"] / base if base else 0, mem, r.get("note", "")))
EOF
} > "$T/table.md"
cat "$T/table.md"
{ echo; cat "$T/table.md"; } >> "$out"
echo "peers: written to $out" >&2
