#!/bin/sh
# Elastic resume through the `sluice` command: 4 ranks take 3 batches of 16
# each and save their state (the same file on every rank), 3 ranks resume
# from rank 0's file with batches of 10 and stop after 4, 2 ranks finish
# the epoch with batches of 7: together they deliver every record exactly
# once (checked against `dlpack-shard cat --hash`), for every shuffle mode.
BUILD=${BUILD:-build}
SLUICE="$BUILD/sluice"
SHARD="$BUILD/dlpack-shard"
for b in "$SLUICE" "$SHARD"; do
	[ -x "$b" ] || { echo "missing $b (run make)"; exit 1; }
done

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-elastic.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

"$SHARD" convert --from synth --out "$T/d" --records 500 --seed 4 \
	--field x:int32:4 --field v:uint8:-1:0.5 --records-per-shard 130 \
	--block-size 4K --compression zstd:1 --quiet || { echo "convert failed"; exit 1; }
"$SHARD" cat "$T/d" --hash | sort > "$T/want" || { echo "cat --hash failed"; exit 1; }

# job MODE WORLD BATCH STOP STATE_IN NAME: every rank of one job; hashes
# without the epoch column appended to $T/got, states in $T/NAME.RANK.
job() {
	mode=$1 world=$2 batch=$3 stop=$4 in=$5 name=$6
	r=0
	while [ $r -lt "$world" ]; do
		set -- --shuffle "$mode" --window 2 --seed 3 --rank $r \
			--world-size "$world" --batch-size "$batch" --device host
		[ -n "$in" ] && set -- "$@" --state-in "$in"
		[ "$stop" != end ] && set -- "$@" --stop-after-batches "$stop" \
			--state-out "$T/$name.$r"
		"$SLUICE" stream "$T/d" --hash "$@" > "$T/out" 2> "$T/err" ||
			{ fail "$mode: $name rank $r: $(cat "$T/err")"; return 1; }
		cut -d' ' -f2- "$T/out" >> "$T/got"
		if [ "$stop" != end ] && [ $r -gt 0 ] &&
		   ! cmp -s "$T/$name.0" "$T/$name.$r"; then
			fail "$mode: $name: rank $r's state differs from rank 0's"
		fi
		r=$((r + 1))
	done
}

for mode in none block window full; do
	: > "$T/got"
	job $mode 4 16 3 "" s1 &&
	job $mode 3 10 4 "$T/s1.0" s2 &&
	job $mode 2 7 end "$T/s2.0" s3 || continue
	grep -q 'world=3 batch=10 drop=0 batches=4 earlier=4/48/0$' "$T/s2.0" ||
		fail "$mode: state after two jobs: $(cat "$T/s2.0")"
	if sort "$T/got" | cmp -s - "$T/want"; then
		ok "$mode: 4 -> 3 -> 2 ranks delivered every record exactly once"
	else
		fail "$mode: 4 -> 3 -> 2 ranks: $(sort "$T/got" | uniq -d | wc -l) repeated, $(sort "$T/got" | comm -13 - "$T/want" | wc -l) missing lines"
	fi
done

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
