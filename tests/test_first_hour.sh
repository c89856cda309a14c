#!/bin/sh
# A new user's first hour with the CLIs (issue 25): every message on the
# way is true and says what to do next.
# - `sluice stream` says its fallbacks once (stderr), as bench and Python do
# - with a CUDA build on a machine with no NVIDIA driver, --device cuda
#   says "no NVIDIA driver", never "driver version is insufficient"
# - an unconverted folder is "not a sluice dataset" and the message's
#   convert command, run as printed, makes one that streams
# - an ImageFolder's class names are kept (info, merge), and datasets
#   without them still open
# - `sluice stream --help` and `sluice bench --help` are each command's
# - the summary line's GB/s is the delivered rate (records x bytes); a
#   bench run too short to mean anything says so
# - every flag the README's CLI block shows is in --help, and back
BUILD=${BUILD:-build}
SLUICE="$BUILD/sluice"
SHARD="$BUILD/dlpack-shard"
for b in "$SLUICE" "$SHARD"; do
	[ -x "$b" ] || { echo "missing $b (run make)"; exit 1; }
done

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-first.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

# 4096-byte records: the delivered rate is records/s x 4096.
"$SHARD" convert --from synth --out "$T/ds" --records 2000 --seed 3 \
	--field x:uint8:4096:0.5 --block-size 64K --quiet ||
	{ echo "convert failed"; exit 1; }

# 1. fallbacks said once.  --plain-reads is one on every machine.
"$SLUICE" stream "$T/ds" --plain-reads >"$T/out" 2>"$T/err" ||
	fail "stream --plain-reads failed: $(cat "$T/err")"
n=$(grep -c "buffer registration off (asked)" "$T/err")
[ "$n" -eq 1 ] && ok "stream says a fallback once on stderr" ||
	fail "stream said the fallback $n times: $(cat "$T/err")"
grep -q "registration" "$T/out" && fail "the fallback went to stdout"
"$SLUICE" stream "$T/ds" --device auto >/dev/null 2>"$T/err" ||
	fail "stream --device auto failed: $(cat "$T/err")"
if "$SLUICE" stream "$T/ds" --device cuda >/dev/null 2>"$T/cuda"; then
	[ -s "$T/err" ] && grep -q "no CUDA GPU" "$T/err" &&
		fail "a GPU works, yet auto said: $(cat "$T/err")"
	ok "a usable GPU: --device auto takes it"
else
	n=$(grep -c "no CUDA GPU found" "$T/err")
	[ "$n" -eq 1 ] && ok "--device auto without a GPU says so once" ||
		fail "--device auto without a GPU said it $n times: $(cat "$T/err")"
fi

# 2. no driver at all is not an old driver.
if grep -q "built without CUDA" "$T/cuda" 2>/dev/null; then
	echo "note: built without CUDA: the driver message is not reachable"
elif [ -s "$T/cuda" ] && ! ls /dev/nvidia* >/dev/null 2>&1 &&
     ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
	if grep -q "no NVIDIA driver" "$T/cuda" &&
	   ! grep -qi "insufficient" "$T/cuda"; then
		ok "no driver: $(cat "$T/cuda")"
	else
		fail "no driver here, yet: $(cat "$T/cuda")"
	fi
else
	echo "note: this machine has an NVIDIA driver; tests/test_no_gpu covers the messages"
fi

# 3. an unconverted ImageFolder tree.
mkdir -p "$T/photos/cat" "$T/photos/dog"
for c in cat dog; do
	for i in 1 2 3; do head -c $((1000 * i)) /dev/urandom >"$T/photos/$c/$i.jpg"; done
done
for cmd in "$SLUICE stream" "$SLUICE bench" "$SHARD info"; do
	$cmd "$T/photos/" >/dev/null 2>"$T/err"
	rc=$?
	if [ $rc -eq 1 ] && grep -q "is not a sluice dataset" "$T/err" &&
	   grep -q "dlpack-shard convert $T/photos --out $T/photos-shards" "$T/err"; then
		ok "${cmd##*/} on a folder of pictures names the convert command"
	else
		fail "${cmd##*/} on a folder of pictures (exit $rc): $(cat "$T/err")"
	fi
done
# The command as printed (the installed name is dlpack-shard).
line=$(sed -n 's/.*: \(dlpack-shard convert .*\)$/\1/p' "$T/err")
set -- $line
shift
if "$SHARD" "$@" --quiet && "$SLUICE" stream "$T/photos-shards" \
	--device host >"$T/out" 2>&1 && grep -q "^records 6 " "$T/out"; then
	ok "the printed convert command makes a dataset that streams"
else
	fail "the printed command '$line' did not give a dataset: $(cat "$T/out")"
fi
# 4. the class names: kept in dataset.json, shown by info, kept by merge;
# a dataset.json without them (older datasets) still opens.
"$SHARD" info "$T/photos-shards" >"$T/out" 2>&1
grep -q "classes (label = index): 0=cat 1=dog" "$T/out" &&
	ok "info shows the class names" || fail "info: $(cat "$T/out")"
"$SHARD" info "$T/photos-shards" --json | python3 -c '
import json, sys
sys.exit(json.load(sys.stdin).get("classes") != {"label": ["cat", "dog"]})' &&
	ok "info --json has the class names" || fail "info --json lacks the class names"
for i in 0 1; do
	"$SHARD" convert "$T/photos" --out "$T/part$i" --part $i/2 --quiet ||
		fail "convert --part $i/2"
done
"$SHARD" merge "$T/part0" "$T/part1" --out "$T/merged" >/dev/null &&
	"$SHARD" info "$T/merged" | grep -q "0=cat 1=dog" &&
	ok "merge keeps the class names" || fail "merge lost the class names"
sed 's/"classes":{"label":\["cat","dog"\]},//' "$T/photos-shards/dataset.json" >"$T/dj" &&
	cp "$T/dj" "$T/photos-shards/dataset.json"
grep -q classes "$T/photos-shards/dataset.json" && fail "could not strip classes"
"$SHARD" info "$T/photos-shards" >"$T/out" 2>&1 && ! grep -q classes "$T/out" &&
	"$SLUICE" stream "$T/photos-shards" --device host >/dev/null 2>&1 &&
	ok "a dataset.json without class names opens" ||
	fail "a dataset.json without class names: $(cat "$T/out")"

mkdir -p "$T/wds"
touch "$T/wds/train-000.tar"
"$SLUICE" stream "$T/wds" >/dev/null 2>"$T/err"
grep -q "dlpack-shard convert '$T/wds/\*.tar' --from tar --out $T/wds-shards" "$T/err" &&
	ok "a folder of tars gets the tar convert command" ||
	fail "a folder of tars: $(cat "$T/err")"

# 5. per-command help.
"$SLUICE" stream --help >"$T/h.stream" || fail "stream --help failed"
"$SLUICE" bench --help >"$T/h.bench" || fail "bench --help failed"
if grep -q "^Usage: sluice stream" "$T/h.stream" &&
   ! grep -q "drop-cache" "$T/h.stream" &&
   grep -q "^Usage: sluice bench" "$T/h.bench" &&
   grep -q -- "--drop-cache" "$T/h.bench" &&
   ! grep -q -- "--hash" "$T/h.bench" &&
   grep -q -- "--batch-size" "$T/h.stream" &&
   grep -q -- "--batch-size" "$T/h.bench"; then
	ok "stream --help and bench --help are each command's"
else
	fail "per-command help: $(head -3 "$T/h.stream") / $(head -3 "$T/h.bench")"
fi

# 6. the delivered rate.
"$SLUICE" stream "$T/ds" --device host --epochs 20 >"$T/out" 2>/dev/null ||
	fail "stream --epochs 20"
if awk '{ for (i = 1; i < NF; i++) { if ($i == "records/s") r = $(i + 1)
		if ($i == "GB/s" && $(i + 2) == "delivered") g = $(i + 1) } }
	END { if (r <= 0 || g <= 0) exit 1
	      x = g * 1e9 / r / 4096; exit (x < 0.95 || x > 1.05) }' "$T/out"; then
	ok "GB/s delivered = records/s x record bytes: $(cat "$T/out")"
else
	fail "the summary line's delivered rate: $(cat "$T/out")"
fi

# A bench of a few MB (the demo's size) says its figures mean little.
"$SLUICE" bench "$T/ds" --device host >"$T/out" 2>&1 || fail "bench: $(cat "$T/out")"
grep -q "^note     the run took 0\.[0-9]* s: too short" "$T/out" &&
	ok "bench of a tiny dataset says its figures mean little" ||
	fail "bench of a tiny dataset gave no caveat: $(tail -3 "$T/out")"

# 7. the README's CLI block and --help name the same flags.
readme=README.md
if [ -f "$readme" ]; then
	sed -n '/^## The CLIs/,/^```$/p' "$readme" | sed '1,/^```sh$/d' >"$T/block"
	[ -s "$T/block" ] || fail "no CLI block under '## The CLIs' in README.md"
	"$SLUICE" --help >"$T/h.sluice"
	"$SHARD" --help >"$T/h.shard"
	flags() { grep -o -- '--[a-z][a-z-]*' "$@" | sed 's/^.*://' | sort -u; }
	flags "$T/block" | grep -v -- '^--help$' >"$T/f.readme"
	flags "$T/h.sluice" "$T/h.shard" | grep -v -- '^--help$' >"$T/f.help"
	missing=$(comm -23 "$T/f.readme" "$T/f.help" | tr '\n' ' ')
	unshown=$(comm -13 "$T/f.readme" "$T/f.help" | tr '\n' ' ')
	[ -z "$missing" ] && ok "every README flag is in --help" ||
		fail "README flags --help lacks: $missing"
	[ -z "$unshown" ] && ok "every --help flag is in the README" ||
		fail "--help flags the README lacks: $unshown"
	grep -q -- "--device host|cuda|auto" "$T/block" ||
		fail "README: --device should read host|cuda|auto"
fi

# 8. the README's first screen is for users; no link out of the repository.
if [ -f README.md ]; then
	head -n 45 README.md >"$T/first"
	for want in "make demo" "make test" "sluice.torch.Loader" \
		"dlpack-shard convert" "images/s"; do
		grep -q "$want" "$T/first" || fail "README's first screen lacks '$want'"
	done
	grep -n "\.\./shared" README.md ARCHITECTURE.md &&
		fail "README/ARCHITECTURE link a file outside the repository"
	grep -q "ARCHITECTURE.md" "$T/first" ||
		fail "README's first screen does not point to ARCHITECTURE.md"
	ok "README's first screen: commands, the PyTorch swap, a measured figure"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all first-hour CLI checks passed"
