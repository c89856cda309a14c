#!/bin/sh
# bench/direct_io_auto.sh DATASET [RUNS]: --direct on|off|auto side by side,
# on a cold page cache (each shard's pages dropped with
# posix_fadvise(DONTNEED) through `dd iflag=nocache`, no root needed) and
# on a warm one (every shard read through the cache first).  Prints each
# run's records/s and the median per case.  Host batches, so no GPU needed.
set -eu
BUILD=${BUILD:-build}
DS=${1:?usage: bench/direct_io_auto.sh DATASET [RUNS]}
RUNS=${2:-5}
SLUICE="$BUILD/sluice"
shards=$(ls "$DS"/*.dls)

cold() { for f in $shards; do dd if="$f" iflag=nocache count=0 status=none; done; }
warm() { cat $shards >/dev/null; }
rate() { "$SLUICE" stream "$DS" --device host --direct "$1" |
	sed -n 's/.*records\/s \([0-9]*\).*/\1/p'; }
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

for cache in cold warm; do
	for mode in on off auto; do eval "r_${cache}_$mode=''"; done
done
for run in $(seq "$RUNS"); do
	for cache in cold warm; do
		for mode in on off auto; do
			$cache
			r=$(rate $mode)
			eval "r_${cache}_$mode=\"\$r_${cache}_$mode $r\""
		done
	done
done
printf '%-5s %-5s %9s  %s\n' cache direct median "runs (records/s)"
for cache in cold warm; do
	for mode in on off auto; do
		eval "v=\$r_${cache}_$mode"
		printf '%-5s %-5s %9s  %s\n' $cache $mode "$(echo $v | median)" "$v"
	done
done
