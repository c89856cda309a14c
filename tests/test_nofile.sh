#!/bin/sh
# Many shards under a low RLIMIT_NOFILE (issue 10 item 7, issue 13 "many
# shards"): a 5,000-shard dataset under the usual soft limit of 1024
# raises the soft limit toward the hard one and streams every record with
# every shard open; under a hard limit of 1024 it streams every record
# with shards opened on demand in the registered file table, and bench's
# disk probe reads them all; when not even a few shards fit, the error
# names the limit before any shard is opened.
set -u
BUILD=${BUILD:-build}
DS="$BUILD/dlpack-shard"
SL="$BUILD/sluice"
[ -x "$DS" ] && [ -x "$SL" ] || { echo "skip: $DS or $SL is not built"; exit 77; }
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 6000 ]; then
	echo "skip: RLIMIT_NOFILE hard limit $hard is below 6000"
	exit 77
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/test_nofile.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; exit 1; }
N=5000

echo "== converting $N one-record shards"
"$DS" convert --from synth --records $N --seed 7 --field x:uint8:-1:0.5 \
	--records-per-shard 1 --compression none --quiet --out "$T/ds" ||
	fail "convert"
[ "$(ls "$T/ds" | grep -c '\.dls$')" -eq $N ] || fail "expected $N shards"

echo "== soft limit 1024, hard limit 6000: raised, every record streams"
sh -c "ulimit -Sn 1024 && ulimit -Hn 6000 && exec '$SL' stream '$T/ds' \
	--batch-size 64 --shuffle full --hash" >"$T/hash" 2>"$T/err" ||
	{ cat "$T/err"; fail "stream under soft limit 1024"; }
# 'EPOCH INDEX FIELD XXH64': each record exactly once, hashes as cat's.
cut -d' ' -f2 "$T/hash" | sort -n | uniq >"$T/idx"
[ "$(wc -l <"$T/idx")" -eq $N ] || fail "$(wc -l <"$T/idx") distinct records"
[ "$(wc -l <"$T/hash")" -eq $N ] || fail "$(wc -l <"$T/hash") lines"
"$DS" cat "$T/ds" --hash | sort >"$T/want"
cut -d' ' -f2- "$T/hash" | sort >"$T/got"
cmp -s "$T/want" "$T/got" || fail "streamed hashes differ from cat --hash"

sh -c "ulimit -Sn 1024 && ulimit -Hn 6000 && exec '$SL' bench '$T/ds' \
	--batch-size 64" >"$T/bench" 2>&1 || { cat "$T/bench"; fail "bench"; }
grep -q "RLIMIT_NOFILE soft limit raised from 1024" "$T/bench" ||
	{ cat "$T/bench"; fail "the raise is not reported"; }
grep -q "files yes" "$T/bench" ||
	{ cat "$T/bench"; fail "registered file table not used"; }

echo "== hard limit 1024: shards opened on demand, every record streams"
sh -c "ulimit -n 1024 && exec '$SL' stream '$T/ds' --batch-size 64 \
	--shuffle full --seed 3 --hash" >"$T/hash2" 2>"$T/err" ||
	{ cat "$T/err"; fail "stream under hard limit 1024"; }
cut -d' ' -f2- "$T/hash2" | sort >"$T/got2"
cmp -s "$T/want" "$T/got2" || fail "hard 1024: hashes differ from cat --hash"
[ "$(wc -l <"$T/hash2")" -eq $N ] || fail "hard 1024: $(wc -l <"$T/hash2") lines"
sh -c "ulimit -n 1024 && exec '$SL' bench '$T/ds' --batch-size 64 \
	--shuffle full" >"$T/bench" 2>&1 || { cat "$T/bench"; fail "bench 1024"; }
grep -q "hard limit 1024: at most [0-9]* of $N shards open at once" \
	"$T/bench" || { cat "$T/bench"; fail "on-demand opening not reported"; }
grep -q "files yes" "$T/bench" ||
	{ cat "$T/bench"; fail "registered file table not used (1024)"; }
# The disk limit reads every shard too, opening them in turn.
grep -Eq '^ +disk +[0-9.]+ GB/s' "$T/bench" ||
	{ cat "$T/bench"; fail "no disk limit under hard limit 1024"; }

echo "== hard limit 70: a clear error naming the limit"
sh -c "ulimit -n 70 && exec '$SL' stream '$T/ds'" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 1 ] || { cat "$T/err"; fail "exit $rc under hard limit 70"; }
grep -q "$N shards to read.*RLIMIT_NOFILE's hard limit 70" "$T/err" ||
	{ cat "$T/err"; fail "message does not name the limit"; }
cat "$T/err"
echo "ok"
