#!/bin/sh
# bench/gpu/bench.sh DATADIR LOGDIR - the GPU benchmarks of issue 9, each
# `sluice bench --device cuda --json` run written to LOGDIR/NAME-I.json
# (bench/gpu/summarize.py turns them into the results table):
#   h2d        16 MiB batches (16 records of 1 MiB) served from the block
#              cache after the first epoch, buffered reads: the copy stage
#              against the PCIe probe the same run measures (3 runs)
#   overlap    the same with a 20 ms kernel per batch on the consumer's
#              stream: consumer wait and GPU idle fraction (3 runs)
#   pageable   h2d with the pageable-copy fallback forced (1 run)
#   plain      h2d with the plain-read fallback forced (1 run)
#   cold       O_DIRECT reads after dropping the page cache, no block
#              cache: what the disk allows (1 run)
# All of them use every CPU for decoding (--decode-threads $(nproc)).
set -u
data=${1:?usage: bench.sh DATADIR LOGDIR}
logs=${2:?usage: bench.sh DATADIR LOGDIR}
BUILD=${BUILD:-build}
RECORDS=${BENCH_RECORDS:-2048}        # of 1 MiB: the dataset's size
DEVICE=${BENCH_DEVICE:-cuda}          # host: a rehearsal without a GPU
sluice=$BUILD/sluice
shard=$BUILD/dlpack-shard
cpus=$(nproc)
mkdir -p "$logs"

if [ "$(cat "$data/h2d.records" 2>/dev/null)" != "$RECORDS" ]; then
	rm -rf "$data/h2d"
	mkdir -p "$data"
	"$shard" convert --from synth --out "$data/h2d" --records "$RECORDS" \
		--seed 1 --field data:uint8:1024x1024:0.5 --field label:int64 \
		--compression none --block-size 16777216 --quiet || exit 1
	echo "$RECORDS" >"$data/h2d.records"
fi
"$shard" info "$data/h2d" | head -n 5

common="--device $DEVICE --batch-size 16 --shuffle block --decode-threads $cpus --prefetch 8 --json"
# Room for every block: epochs after the first come from the cache.
cached="$common --direct off --cache-bytes $((RECORDS * 3 / 2 * 1048576))"

run() { # NAME RUNS ARGS...
	name=$1 runs=$2
	shift 2
	i=1
	while [ "$i" -le "$runs" ]; do
		echo "sluice bench $data/h2d $*"
		"$sluice" bench "$data/h2d" "$@" >"$logs/$name-$i.json" 2>"$logs/$name-$i.err" ||
			{ cat "$logs/$name-$i.err"; exit 1; }
		i=$((i + 1))
	done
}

run h2d 3 $cached --epochs 4
run overlap 3 $cached --epochs 2 --compute-ms 20
run pageable 1 $cached --epochs 2 --pageable
run plain 1 $cached --epochs 2 --plain-reads
# Dropping the page cache is machine-wide: not in a rehearsal on a
# machine shared with others.
[ "$DEVICE" = host ] || run cold 1 $common --direct on --drop-cache --epochs 1
