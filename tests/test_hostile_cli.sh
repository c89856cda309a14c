#!/bin/sh
# Hostile inputs to the CLIs, round 3 (issue 24): special files where a
# shard, dataset.json or a state file should be.  Every command runs
# under a timeout: before the fix each of them waited forever in open().
set -u
BUILD=${BUILD:-build}
DS="$BUILD/dlpack-shard"
SL="$BUILD/sluice"
[ -x "$DS" ] && [ -x "$SL" ] || { echo "skip: the CLIs are not built"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/test_hostile_cli.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; }

# run_fails PATTERN CMD...: must exit 1 (a hang times out: 124) with
# PATTERN in its output (verify reports problems on stdout).
run_fails() {
	pat=$1; shift
	timeout 20 "$@" >"$T/out" 2>"$T/err" </dev/null
	rc=$?
	[ $rc -eq 1 ] || { cat "$T/err"; fail "exit $rc (want 1): $*"; }
	cat "$T/out" "$T/err" >"$T/all"
	grep -q -- "$pat" "$T/all" ||
		{ cat "$T/all"; fail "output lacks '$pat': $*"; }
	echo "  ok: $(grep -- "$pat" "$T/all" | head -n 1)"
}

"$DS" convert --from synth --records 300 --field x:int32:4 --seed 1 \
	--records-per-shard 100 --out "$T/good" --quiet ||
	fail "making the dataset"

step "a FIFO named as a shard"
mkfifo "$T/lone.dls"
for cmd in "info" "verify" "cat --hash"; do
	# shellcheck disable=SC2086
	run_fails "lone.dls: not a regular file (it is a FIFO)" \
		"$DS" $cmd "$T/lone.dls"
done
run_fails "lone.dls: not a regular file" "$SL" stream "$T/lone.dls" \
	--device host
run_fails "lone.dls: not a regular file" "$SL" bench "$T/lone.dls" \
	--device host

step "a FIFO as dataset.json"
cp -r "$T/good" "$T/man"
rm "$T/man/dataset.json"
mkfifo "$T/man/dataset.json"
for cmd in info verify; do
	run_fails "man/dataset.json: not a regular file (it is a FIFO)" \
		"$DS" $cmd "$T/man"
done
run_fails "man/dataset.json: not a regular file" "$SL" stream "$T/man" \
	--device host

step "a FIFO listed by dataset.json and matched by a glob"
cp -r "$T/good" "$T/sh"
rm "$T/sh/data-00001.dls"
mkfifo "$T/sh/data-00001.dls"
for src in "$T/sh" "$T/sh/*.dls"; do
	for cmd in info verify; do
		run_fails "data-00001.dls: not a regular file (it is a FIFO)" \
			"$DS" $cmd "$src"
	done
	run_fails "data-00001.dls: not a regular file" \
		"$SL" stream "$src" --device host
done
run_fails "data-00001.dls: not a regular file" \
	"$DS" merge "$T/good" "$T/sh" --out "$T/merged"
[ ! -e "$T/merged/dataset.json" ] || fail "merge wrote a dataset"

step "a FIFO as the state file"
mkfifo "$T/state"
run_fails "state: not a regular file (it is a FIFO)" \
	"$SL" stream "$T/good" --device host --state-in "$T/state"

step "a FIFO matched by a glob of tars (a pipe streams only when named alone)"
mkdir "$T/tars"
python3 - "$T/tars/a.tar" <<'PY' || fail "making a tar"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as tf:
    for name, data in (("k0.jpg", b"x"), ("k0.cls", b"1")):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
PY
mkfifo "$T/tars/b.tar"
run_fails "b.tar: matched by '.*' but not a regular file (it is a FIFO)" \
	"$DS" convert "$T/tars/*.tar" --from tar --out "$T/fromtar" --quiet

step "--memory is reported as given"
for m in 1:1 1K:1024 4095:4095; do
	run_fails "memory_bytes ${m#*:} (0 in whole 4096-byte pages)" \
		"$SL" stream "$T/good" --device host --memory "${m%%:*}"
done

step "state lines past the dataset or past --epochs are errors"
timeout 20 "$SL" stream "$T/good" --device host --epochs 2 --batch-size 16 \
	--stop-after-batches 3 --state-out "$T/st" >/dev/null ||
	fail "saving a state"
grep -q " epoch=0 .* batches=3 " "$T/st" || fail "state: $(cat "$T/st")"
sed 's/ epoch=0 / epoch=18446744073709551615 /' "$T/st" >"$T/st_max"
run_fails "epoch 18446744073709551615 is past the last epoch" \
	"$SL" stream "$T/good" --device host --epochs 2 --batch-size 16 \
	--state-in "$T/st_max"
sed 's/ epoch=0 / epoch=5 /' "$T/st" >"$T/st_5"
run_fails "the state is at epoch 5, and --epochs 2 stops before it" \
	"$SL" stream "$T/good" --device host --epochs 2 --batch-size 16 \
	--state-in "$T/st_5"
sed 's/ batches=3 / batches=99 /' "$T/st" >"$T/st_99"
run_fails "more batches than the epoch has" \
	"$SL" stream "$T/good" --device host --epochs 2 --batch-size 16 \
	--state-in "$T/st_99"
timeout 20 "$SL" stream "$T/good" --device host --epochs 2 --batch-size 16 \
	--state-in "$T/st" >"$T/out" || fail "resuming the saved state"
grep -q "^records 552 " "$T/out" || fail "resume: $(cat "$T/out")"

step "merge: hard links documented, --copy copies"
"$DS" --help | tr '\n' ' ' | tr -s ' ' | grep -q "OUT's shards are hard links to the parts'" ||
	fail "--help does not say merge hard-links"
"$DS" --help | grep -q -- "--copy copies every shard" || fail "--help: --copy"
for k in 0 1; do
	"$DS" convert --from synth --records 50 --field x:int32:4 --seed $k \
		--part $k/2 --out "$T/part$k" --quiet || fail "part $k"
done
"$DS" merge "$T/part0" "$T/part1" --out "$T/linked" --quiet ||
	fail "merge"
[ "$(stat -c %i "$T/part0/data-00000.dls")" = \
  "$(stat -c %i "$T/linked/data-00000.dls")" ] || fail "merge did not link"
"$DS" merge "$T/part0" "$T/part1" --out "$T/copied" --copy --quiet ||
	fail "merge --copy"
[ "$(stat -c %i "$T/part0/data-00000.dls")" != \
  "$(stat -c %i "$T/copied/data-00000.dls")" ] || fail "--copy linked"
[ "$(stat -c %h "$T/copied/data-00000.dls")" = 1 ] || fail "--copy: links"
cmp -s "$T/part0/data-00000.dls" "$T/copied/data-00000.dls" ||
	fail "--copy: bytes differ"
# A part edited in place: the linked merge changes with it, the copy not.
printf 'X' | dd of="$T/part0/data-00000.dls" bs=1 seek=4100 conv=notrunc \
	2>/dev/null
"$DS" verify "$T/copied" >/dev/null || fail "the copy changed with its part"
! "$DS" verify "$T/linked" >/dev/null 2>&1 ||
	fail "the linked merge did not change with its part"

echo "all hostile CLI cases handled"
