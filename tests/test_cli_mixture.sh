#!/bin/sh
# Mixtures through `sluice stream A:W B@N ...`: each dataset gives its share
# of every epoch (exact counts, each batch in proportion), the hashes are
# the datasets' own records (checked against `dlpack-shard cat --hash`), a
# saved state resumes bit-exactly, and bad specs or schemas are refused.
BUILD=${BUILD:-build}
SLUICE="$BUILD/sluice"
SHARD="$BUILD/dlpack-shard"
for b in "$SLUICE" "$SHARD"; do
	[ -x "$b" ] || { echo "missing $b (run make)"; exit 1; }
done

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-mix.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

mk() { # DIR RECORDS SEED
	"$SHARD" convert --from synth --out "$1" --records "$2" --seed "$3" \
		--field x:int32:4 --field v:uint8:-1:0.5 --block-size 2K \
		--compression zstd:1 --quiet || { echo "convert failed"; exit 1; }
}
mk "$T/a" 600 1
mk "$T/b" 150 2
"$SHARD" convert --from synth --out "$T/other" --records 10 --seed 3 \
	--field y:int64 --quiet || exit 1
# a's records are indices 0..599, b's 600..749; cat numbers each from 0
"$SHARD" cat "$T/a" --hash > "$T/a.cat" || exit 1
"$SHARD" cat "$T/b" --hash | awk '{ $1 = $1 + 600; print }' > "$T/b.cat" || exit 1

for mode in none block window full; do
	# a: weight 1 of its 600 (all of them); b: 300 samples (twice each)
	set -- "$T/a:1" "$T/b@300" --shuffle $mode --seed 9 --batch-size 30 \
		--device host
	"$SLUICE" stream "$@" --hash > "$T/full" || { fail "$mode: stream"; continue; }
	# 3 fields... 2 fields per record: 900 records, 1800 lines
	[ "$(wc -l < "$T/full")" -eq 1800 ] || fail "$mode: $(wc -l < "$T/full") lines, want 1800"
	# every delivered hash is the dataset's own record
	cut -d' ' -f2- "$T/full" | sort -u > "$T/got"
	sort -u "$T/a.cat" "$T/b.cat" > "$T/want"
	cmp -s "$T/got" "$T/want" && ok "$mode: every record of a and b, with their bytes" ||
		fail "$mode: delivered records differ from the datasets'"
	# b's records twice each, a's once; every batch of 30 holds 20 a + 10 b
	awk '$3 == "x" { n++; b = $2 >= 600; cnt[b]++; per[$2]++
		if (n % 30 == 0) { if (cnt[0] < 19 || cnt[0] > 21) bad = 1; cnt[0] = cnt[1] = 0 } }
		END { for (i in per) if (per[i] != (i + 0 >= 600 ? 2 : 1)) bad = 1; exit bad }' "$T/full" &&
		ok "$mode: a once, b twice, every batch 2:1" ||
		fail "$mode: proportions or repeats wrong"
	# stop after 11 batches, resume from the state: the same sequence
	"$SLUICE" stream "$@" --hash --stop-after-batches 11 \
		--state-out "$T/state" > "$T/head" || { fail "$mode: --state-out"; continue; }
	grep -q ' mix=[1-9]' "$T/state" || fail "$mode: state names no mixture: $(cat "$T/state")"
	"$SLUICE" stream "$@" --hash --state-in "$T/state" > "$T/tail" ||
		{ fail "$mode: --state-in"; continue; }
	cat "$T/head" "$T/tail" | cmp -s - "$T/full" &&
		ok "$mode: stop after 11 + resume == uninterrupted" ||
		fail "$mode: resume differs"
	# another mixture refuses the state
	if "$SLUICE" stream "$T/a:1" "$T/b@301" --shuffle $mode --seed 9 \
		--batch-size 30 --device host --state-in "$T/state" > /dev/null 2> "$T/err"; then
		fail "$mode: another mixture accepted the state"
	fi
done

"$SLUICE" stream "$T/a:-1" "$T/b" > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok "negative weight: usage error" || fail "negative weight: exit $rc"
"$SLUICE" stream "$T/a" "$T/b@x" > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok "bad sample count: usage error" || fail "bad sample count: exit $rc"
"$SLUICE" stream "$T/a" "$T/other" > /dev/null 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'stream 1' "$T/err" && ok "other fields refused: $(head -c 100 "$T/err")" ||
	fail "other schema: exit $rc: $(cat "$T/err")"

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
