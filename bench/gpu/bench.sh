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
#   gather-SHUFFLE-on|off  device gather (issue 12) on and off, side by
#              side, alternating, 3 runs each: raw uint8[3,224,224] images
#              in 1 MiB blocks, batch 64, shuffle window and full (whole
#              blocks: range-read batches are assembled on the CPU), all
#              blocks cached after the first epoch: CPU s/GB and samples/s
#              (the bytes: test_gpu_gather in the test-gpu step)
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

# Device gather against CPU assembly, on and off alternating.
GREC=${GATHER_RECORDS:-2048}          # of 147 KiB: 308 MB
if [ "$(cat "$data/gather.records" 2>/dev/null)" != "$GREC" ]; then
	rm -rf "$data/gather"
	"$shard" convert --from synth --out "$data/gather" --records "$GREC" \
		--seed 2 --field image:uint8:3x224x224:0.5 --field label:int64 \
		--compression none --block-size 1048576 --quiet || exit 1
	echo "$GREC" >"$data/gather.records"
fi
gather="--device $DEVICE --batch-size 64 --window 8 --decode-threads $cpus --prefetch 8 --direct off --range-reads off --cache-bytes $((GREC * 200 * 1024)) --epochs 3 --json"
i=1
while [ "$i" -le 3 ]; do
	for sh in window full; do
		for g in on off; do
			echo "sluice bench $data/gather --shuffle $sh --device-gather $g $gather"
			"$sluice" bench "$data/gather" --shuffle "$sh" \
				--device-gather "$g" $gather \
				>"$logs/gather-$sh-$g-$i.json" \
				2>"$logs/gather-$sh-$g-$i.err" ||
				{ cat "$logs/gather-$sh-$g-$i.err"; exit 1; }
		done
	done
	i=$((i + 1))
done
