#!/bin/sh
# What opening a dataset of many small shards costs, per shard, in memory
# and time: BASE (the build folder of another commit) against NEW, the two
# alternating, RUNS times each after one warm-up run of each (so that both
# find the shards' inodes and headers in the page cache).
#   sluice stream ... --stop-after-batches 4: max RSS and wall time of the
#     whole command (open, 4 batches, close), from /usr/bin/time;
#   epoch_scale PATH none: sluice_dataset_open and sluice_loader_open
#     times, and the peak RSS (VmHWM) of open, a few batches and an
#     epoch boundary;
# then once per build, open_memory (bench/scale, built here against each
# build's libsluice.a): RSS, peak and malloc's heap in use after each
# stage of open and close.
# The data (made when missing): 100,000 shards of 4 records each, a
# variable uint8 field and an int64, stored raw.
# Usage: BASE=/path/to/old/build sh bench/many_shards.sh [RUNS]
#        (env: NEW, default build; DATA, default bench/data/many100k;
#        both builds need `make all bench-scale`)
set -eu
RUNS=${1:-3}
BASE=${BASE:?set BASE to the build folder of the other commit}
NEW=${NEW:-build}
DATA=${DATA:-bench/data/many100k}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
if [ ! -f "$DATA/dataset.json" ]; then
	"$NEW/dlpack-shard" convert --from synth --records 400000 --seed 7 \
		--field x:uint8:-1:0.5 --field label:int64 \
		--records-per-shard 4 --compression none --quiet --out "$DATA"
fi
run() { # BUILD TAG
	/usr/bin/time -f "%M %e" -o "$OUT/time" "$1/sluice" stream "$DATA" \
		--device host --state-out "$OUT/state" \
		--stop-after-batches 4 >/dev/null
	"$1/epoch_scale" "$DATA" none 256 >"$OUT/scale"
	echo "$2 $(cat "$OUT/time") $(tr ' ' '\n' <"$OUT/scale" |
		grep -E '^(dataset_open_ms|loader_open_ms|peak_rss_mib)=' |
		cut -d= -f2 | tr '\n' ' ')"
}
run "$BASE" warm >/dev/null
run "$NEW" warm >/dev/null
for i in $(seq 1 "$RUNS"); do
	run "$BASE" base
	run "$NEW" new
done >"$OUT/runs"
python3 - "$OUT/runs" "$DATA" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
cols = ("stream max RSS MiB", "stream wall s", "dataset_open ms",
        "loader_open ms", "epoch_scale peak RSS MiB")
def values(tag, k):
    v = [float(r[k + 1]) for r in rows if r[0] == tag]
    return [x / 1024 for x in v] if k == 0 else v
print("data: %s" % sys.argv[2])
print("| measure | base (runs) | base median | new (runs) | new median | new / base |")
print("|---|---|---:|---|---:|---:|")
for k, name in enumerate(cols):
    b, n = values("base", k), values("new", k)
    mb, mn = statistics.median(b), statistics.median(n)
    print("| %s | %s | %.1f | %s | %.1f | %.2f |" % (
        name, " ".join("%.1f" % x for x in b), mb,
        " ".join("%.1f" % x for x in n), mn, mn / mb))
PY
LIBS=$(make -s print-libs)
for which in base new; do
	[ $which = base ] && B=$BASE || B=$NEW
	# shellcheck disable=SC2086 # LIBS is a list of flags
	cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/scale/open_memory.c \
		"$B/libsluice.a" $LIBS -o "$OUT/open_memory"
	echo "open_memory, $which:"
	"$OUT/open_memory" "$DATA" | sed 's/^/  /'
done
