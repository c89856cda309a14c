#!/bin/sh
# The dlpack-shard command line: usage and exit codes (0 ok, 1 error,
# 2 usage), the "dlpack-shard: " error prefix, size suffixes, --json
# outputs, info/cat/verify/merge on small synthetic data, and the progress
# line (only on a TTY, never with --quiet).
set -u
BUILD=${BUILD:-build}
DS="$BUILD/dlpack-shard"
[ -x "$DS" ] || { echo "skip: $DS is not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/test_dlpack_shard_cli.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; }

# expect RC CMD...: exit status must be RC; stdout in $T/out, stderr in
# $T/err.
expect() {
	want=$1; shift
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq "$want" ] ||
		{ cat "$T/err"; fail "exit $rc (want $want): $*"; }
	if [ "$want" -ne 0 ]; then
		grep -q '^dlpack-shard: ' "$T/err" || [ "$want" -eq 2 ] ||
			fail "no 'dlpack-shard: ' prefix: $*"
	fi
}
err_has() { grep -q -- "$1" "$T/err" || { cat "$T/err"; fail "stderr lacks '$1'"; }; }

step "usage"
expect 2 "$DS"
err_has "Usage: dlpack-shard"
expect 0 "$DS" --help
grep -q "convert SRC --out DIR" "$T/out" || fail "--help lacks convert"
expect 0 "$DS" convert --help
expect 2 "$DS" frobnicate
err_has "dlpack-shard: unknown command 'frobnicate'"

step "usage errors exit 2"
expect 2 "$DS" convert
expect 2 "$DS" convert "$T" 
err_has "needs --out"
expect 2 "$DS" convert "$T" --out "$T/o" --bogus
expect 2 "$DS" convert "$T" --out "$T/o" --block-size 64Q
err_has "bad size '64Q'"
expect 2 "$DS" convert "$T" --out "$T/o" --shard-size 1M --records-per-shard 5
expect 2 "$DS" convert "$T" --out "$T/o" --part 3/3
expect 2 "$DS" convert "$T" --out "$T/o" --part x
expect 2 "$DS" convert "$T" --out "$T/o" --compression zstd:23
expect 2 "$DS" convert "$T" --out "$T/o" --compression lz4
expect 2 "$DS" convert "$T" --out "$T/o" --from zip
expect 2 "$DS" convert "$T/file.bin" --out "$T/o"
err_has "cannot guess"
expect 2 "$DS" convert --from synth --records 3 --out "$T/o"
err_has "needs --field"
expect 2 "$DS" convert --from synth --field x:uint7 --out "$T/o"
err_has "unknown dtype"
expect 2 "$DS" convert --from synth --field x:uint8:3x0 --out "$T/o"
expect 2 "$DS" convert --from synth --field x:uint8:4x-1 --out "$T/o"
expect 2 "$DS" convert --from synth --field x:uint8:4:1.5 --out "$T/o"
expect 2 "$DS" cat "$T"
expect 2 "$DS" cat "$T" --index 1
expect 2 "$DS" cat "$T" --hash --index 1 --field x
expect 2 "$DS" info
expect 2 "$DS" verify
expect 2 "$DS" merge "$T/a"
[ ! -e "$T/o" ] || fail "a usage error created the output directory"

step "errors exit 1"
expect 1 "$DS" convert "$T/nope" --out "$T/o" --from dir
err_has "$T/nope"
expect 1 "$DS" convert "$T/nope.tar" --out "$T/o"
err_has "nope.tar"
expect 1 "$DS" info "$T/nope"
expect 1 "$DS" cat "$T/nope" --hash

step "sizes with suffixes; convert --json"
expect 2 "$DS" convert --from synth --records 64 --field x:uint8 \
	--shard-size 0.5M --out "$T/o"
expect 0 "$DS" convert --from synth --records 64 --seed 3 \
	--field data:uint8:-1:0.5 --field label:int64:scalar \
	--block-size 16k --shard-size 48KiB --compression zstd --json \
	--out "$T/d" --prefix train
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["records"] == 64 and s["shards"] >= 2, s
assert abs(s["ratio"] - s["raw_bytes"] / s["stored_bytes"]) < 0.01, s
' "$T/out" || fail "convert --json: $(cat "$T/out")"
grep -q "$T/d: 64 records" "$T/err" || fail "no summary line: $(cat "$T/err")"
ls "$T/d"/train-00000.dls >/dev/null || fail "--prefix train not used"
grep -q "$(printf '\r')" "$T/err" && fail "progress line written to a non-TTY"

expect 1 "$DS" convert --from synth --records 8 --field x:uint8 --out "$T/d"
err_has "not empty"
expect 1 "$DS" merge "$T/d" --out "$T/d"
err_has "is also part 1"

step "info"
expect 0 "$DS" info "$T/d"
grep -q "records: 64" "$T/out" || fail "info: $(cat "$T/out")"
grep -q "data .*uint8 .*\[-1\]" "$T/out" || fail "info: $(cat "$T/out")"
expect 0 "$DS" info "$T/d" --json
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["records"] == 64, s
assert [f["name"] for f in s["fields"]] == ["data", "label"], s
assert s["fields"][0]["shape"] == [-1] and s["fields"][1]["shape"] == [], s
for k in ("shards", "blocks", "raw_bytes", "stored_bytes", "ratio"):
    assert k in s, k
' "$T/out" || fail "info --json: $(cat "$T/out")"
shard=$(ls "$T/d"/train-00000.dls)
expect 0 "$DS" info "$shard"

step "cat"
expect 0 "$DS" cat "$T/d" --index 63 --field label
[ "$(od -An -tx1 "$T/out" | tr -d ' \n')" = "" ] && fail "cat printed nothing"
[ "$(wc -c <"$T/out")" -eq 8 ] || fail "label is not 8 bytes"
expect 1 "$DS" cat "$T/d" --index 64 --field label
err_has "out of range"
expect 1 "$DS" cat "$T/d" --index 0 --field nope
err_has "no field 'nope'"
expect 0 "$DS" cat "$T/d" --hash
[ "$(wc -l <"$T/out")" -eq 128 ] || fail "cat --hash: want 128 lines"
grep -qv '^[0-9][0-9]* \(data\|label\) [0-9a-f]\{16\}$' "$T/out" &&
	fail "cat --hash format: $(grep -v '^[0-9]* [a-z]* [0-9a-f]\{16\}$' "$T/out" | head -n 3)"
sed -n '1p;2p;127p;128p' "$T/out" | awk '{print $1, $2}' >"$T/order"
printf '0 data\n0 label\n63 data\n63 label\n' | cmp -s - "$T/order" ||
	fail "cat --hash order: $(cat "$T/order")"
# the hash is XXH64 (seed 0) of exactly the field's bytes: known vectors
mkdir -p "$T/kv/a"
: >"$T/kv/a/0"
printf abc >"$T/kv/a/1"
expect 0 "$DS" convert "$T/kv" --out "$T/kvd" --quiet
expect 0 "$DS" cat "$T/kvd" --hash
grep -q '^0 data ef46db3751d8e999$' "$T/out" || fail "XXH64(''): $(cat "$T/out")"
grep -q '^1 data 44bc2cf5ad770999$' "$T/out" || fail "XXH64('abc'): $(cat "$T/out")"
grep -q '^1 label ' "$T/out" || fail "no label hash: $(cat "$T/out")"

step "verify"
expect 0 "$DS" verify "$T/d"
grep -q "^$T/d: OK (" "$T/out" || fail "verify: $(cat "$T/out")"
"$DS" verify "$T/nope" >"$T/out" 2>"$T/err"
[ $? -eq 1 ] || fail "verify of a missing path did not exit 1"
grep -q "$T/nope" "$T/out" || fail "verify of a missing path: $(cat "$T/out")"

step "merge"
expect 0 "$DS" convert --from synth --records 64 --seed 3 \
	--field data:uint8:-1:0.5 --field label:int64 --out "$T/p0" \
	--part 0/2 --quiet
expect 0 "$DS" convert --from synth --records 64 --seed 3 \
	--field data:uint8:-1:0.5 --field label:int64 --out "$T/p1" \
	--part 1/2 --quiet
[ ! -s "$T/err" ] || fail "--quiet printed: $(cat "$T/err")"
expect 0 "$DS" merge "$T/p0" "$T/p1" --out "$T/m" --json
python3 -c '
import json, sys
assert json.load(open(sys.argv[1]))["records"] == 64
' "$T/out" || fail "merge --json: $(cat "$T/out")"
"$DS" cat "$T/m" --hash >"$T/h1"
"$DS" cat "$T/d" --hash >"$T/h2"
cmp -s "$T/h1" "$T/h2" || fail "merged parts differ from the whole"
expect 1 "$DS" merge "$T/p0" "$T/e" --out "$T/m2"
expect 1 "$DS" merge "$T/p0" "$T/p1" --out "$T/m"
err_has "not empty"
expect 1 "$DS" merge "$T/p0" "$T/p1" --out "$T/p1"
err_has "is also part 2"
ls "$T/p1"/*.dls >/dev/null 2>&1 || fail "merge into a part removed its shards"
expect 0 "$DS" verify "$T/p1"
expect 0 "$DS" merge "$T/p0" "$T/p1" --out "$T/m3" --verify --quiet
# a flipped byte in a block: only --verify catches it before merging
python3 -c '
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[4096 + 7] ^= 1
open(p, "wb").write(b)
' "$T/p1/data-00000.dls"
expect 1 "$DS" merge "$T/p0" "$T/p1" --out "$T/m4" --verify
err_has "verify found 1 problem; the first: .*data-00000.dls: block 0"
[ ! -e "$T/m4" ] || fail "a refused merge left $T/m4"

step "progress line on a TTY"
if command -v script >/dev/null 2>&1 &&
   script -qec true /dev/null >/dev/null 2>&1; then
	script -qec "'$DS' convert --from synth --records 400 \
		--field x:uint8:65536:0.5 --compression zstd:12 --threads 1 \
		--out '$T/tty'" "$T/typescript" >/dev/null 2>&1 ||
		fail "convert under script(1)"
	grep -q "records .*rec/s .*MB/s" "$T/typescript" ||
		fail "no progress line on a TTY: $(tr '\r' '\n' <"$T/typescript" | head -n 5)"
	grep -q "ETA" "$T/typescript" || fail "no ETA in the progress line"
	script -qec "'$DS' convert --from synth --records 100 \
		--field x:uint8:65536:0.5 --compression zstd:12 --threads 1 \
		--quiet --out '$T/tty2'" "$T/typescript2" >/dev/null 2>&1 ||
		fail "convert --quiet under script(1)"
	! grep -q "rec/s" "$T/typescript2" || fail "progress despite --quiet"
else
	echo "(no script(1): TTY progress not checked)"
fi

echo "all cli tests passed"
