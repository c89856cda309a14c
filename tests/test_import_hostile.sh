#!/bin/sh
# Hostile importer inputs (issue 10): sizes from headers that no data
# backs, FIFOs, pipes read twice, empty class folders and control
# characters in names.  Each case failed (crash, huge allocation, hang,
# wrong message or raw terminal escapes) before its fix.
set -u
BUILD=${BUILD:-build}
DS="$BUILD/dlpack-shard"
[ -x "$DS" ] || { echo "skip: $DS is not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/test_import_hostile.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; }

# run_fails PATTERN CMD...: must exit 1 (not time out) with PATTERN in
# stderr.  A hang is caught by the timeout (exit 124).
run_fails() {
	pat=$1; shift
	timeout 60 "$@" >"$T/out" 2>"$T/err" </dev/null
	rc=$?
	[ $rc -eq 1 ] || { cat "$T/err"; fail "exit $rc (want 1): $*"; }
	grep -q -- "$pat" "$T/err" ||
		{ cat "$T/err"; fail "stderr lacks '$pat': $*"; }
	echo "  ok: $(head -n 1 "$T/err")"
}

python3 - "$T" <<'EOF' || fail "generating the inputs"
import io, os, struct, sys, tarfile
t = sys.argv[1]

def tar_header(name, size_field, typ=b"0"):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field
    h[136:148] = b"00000000000\0"
    h[156:157] = typ
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)

# A member claiming 2**50 bytes (GNU base-256 size) with 1 KiB behind it.
size = b"\x80" + (2**50).to_bytes(11, "big")
open(os.path.join(t, "huge.tar"), "wb").write(
    tar_header(b"a.bin", size) + b"x" * 1024)

def npy(path, shape, descr="|u1", data=b""):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        descr, shape)
    pad = 64 - (10 + len(d) + 1) % 64
    hdr = (d + " " * pad + "\n").encode()
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr)
        f.write(data)
npy(os.path.join(t, "empty62.npy"), "(0, %d)" % 2**62)
npy(os.path.join(t, "empty34.npy"), "(0, %d)" % 2**34)
npy(os.path.join(t, "empty_small.npy"), "(0, 16)", "<f4")

# WebDataset samples; the second lacks a field, so the message names its
# key, which holds an escape sequence, a newline and a C1 control (CSI).
def tar(path, members):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
evil = "b\x1b[2J\x1b]0;owned\x07\nfake\u009b31m"
tar(os.path.join(t, "evil.tar"), [("a.jpg", b"1"), ("a.cls", b"2"),
                                  (evil + ".jpg", b"3")])
tar(os.path.join(t, "good.tar"), [("k%03d.%s" % (i, e), b"v%d" % i)
                                  for i in range(10) for e in ("jpg", "cls")])

# ImageFolder with an empty class between two others.
for c, n in (("ant", 2), ("bee", 0), ("cat", 3)):
    os.makedirs(os.path.join(t, "imgs", c))
    for i in range(n):
        open(os.path.join(t, "imgs", c, "%d.jpg" % i), "wb").write(b"x" * i)
EOF

step "tar from a pipe: a base-256 size of 2^50 is a claim, not an allocation"
# Memory is capped so a buffer sized by the claim fails even where
# overcommit would let it pass (not under ASan, which reserves terabytes
# of address space).
case "${SAN:-}" in
*address*|*thread*) vlimit= ;;
*) vlimit="ulimit -v 1048576;" ;;
esac
sh -c "$vlimit cat '$T/huge.tar' | '$DS' convert /dev/stdin --from tar \
	--out '$T/o1' --quiet" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 1 ] || { cat "$T/err"; fail "pipe 2^50: exit $rc (want 1)"; }
grep -q "truncated tar at offset 1536: a.bin" "$T/err" ||
	{ cat "$T/err"; fail "pipe 2^50: not reported as truncated data"; }
echo "  ok: $(head -n 1 "$T/err")"
run_fails "truncated tar" "$DS" convert "$T/huge.tar" --out "$T/o2" --quiet

step "npy: empty arrays with huge rows are refused"
run_fails "empty62.npy: an empty array with rows of 4611686018427387904 bytes" \
	"$DS" convert "$T/empty62.npy" --out "$T/o3" --quiet
run_fails "empty34.npy: an empty array with rows of 17179869184 bytes" \
	"$DS" convert "$T/empty34.npy" --out "$T/o4" --quiet
[ ! -e "$T/o4/dataset.json" ] || fail "(0, 2**34) left a dataset"
timeout 60 "$DS" convert "$T/empty_small.npy" --out "$T/o5" --quiet ||
	fail "an empty array with small rows is a valid (empty) dataset"

step "FIFOs: refused or read once, never waited on forever"
mkfifo "$T/fifo.npy" "$T/fifo.tar"
run_fails "fifo.npy: not a regular file" \
	"$DS" convert "$T/fifo.npy" --out "$T/o6" --quiet
# A tar may stream from a FIFO, but not with --part (read twice): the
# writer feeds one pass, a second open would wait for a writer forever.
cat "$T/good.tar" >"$T/fifo.tar" &
writer=$!
run_fails "a pipe cannot be read twice" \
	"$DS" convert "$T/fifo.tar" --from tar --part 0/2 --out "$T/o7" --quiet
kill "$writer" 2>/dev/null
wait "$writer" 2>/dev/null
cat "$T/good.tar" >"$T/fifo.tar" &
writer=$!
timeout 60 "$DS" convert "$T/fifo.tar" --from tar --out "$T/o8" --quiet ||
	fail "a tar streamed from a FIFO in one pass"
wait "$writer"
"$DS" info "$T/o8" | grep -q "records.*10" ||
	{ "$DS" info "$T/o8"; fail "FIFO tar: 10 records expected"; }

step "--part on a pipe says it cannot read a pipe twice"
cat "$T/good.tar" | timeout 60 "$DS" convert /dev/stdin --from tar \
	--part 1/2 --out "$T/o9" --quiet >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 1 ] || { cat "$T/err"; fail "--part on a pipe: exit $rc"; }
grep -q "a pipe cannot be read twice" "$T/err" ||
	{ cat "$T/err"; fail "--part on a pipe: wrong message"; }
echo "  ok: $(head -n 1 "$T/err")"

step "control characters in tar names are escaped in messages"
run_fails 'key .b\\x1b\[2J\\x1b\]0;owned\\x07\\x0afake\\xc2\\x9b31m' \
	"$DS" convert "$T/evil.tar" --out "$T/o10" --quiet
if LC_ALL=C grep -q "$(printf '[\001-\011\013-\037\177]')" "$T/err"; then
	fail "a raw control character reached stderr"
fi
! grep -q '^fake' "$T/err" || fail "a name's newline split the message"
python3 -c 'import sys; sys.exit(b"\xc2\x9b" in open(sys.argv[1], "rb").read())' \
	"$T/err" || fail "a raw C1 control (CSI) reached stderr"

step "dir: an empty class folder keeps its label and converts"
timeout 60 "$DS" convert "$T/imgs" --out "$T/o11" --quiet ||
	fail "dir with an empty class folder"
# ant=0 (2 files), bee=1 (empty), cat=2 (3 files)
for i in 0 1 2 3 4; do
	"$DS" cat "$T/o11" --index $i --field label | od -An -t d8 | tr -d ' '
done >"$T/labels"
[ "$(tr '\n' ' ' <"$T/labels")" = "0 0 2 2 2 " ] ||
	fail "labels $(cat "$T/labels")"

# ---------------------------------------------------------- round 3
# Issue 24: nothing pulled in or dropped silently.
step "dir: links out of the tree, nested folders, special files"
mkdir -p "$T/r3/cat/sub/deeper" "$T/r3/dog" "$T/outside"
printf a >"$T/r3/cat/a.jpg"
printf b >"$T/r3/cat/sub/b.jpg"
printf c >"$T/r3/cat/sub/deeper/c.jpg"
printf d >"$T/r3/dog/d.jpg"
printf SECRET >"$T/outside/secret"
ln -s "$T/outside/secret" "$T/r3/dog/evil.jpg"   # out of the tree
ln -s ../cat/a.jpg "$T/r3/dog/inside.jpg"        # inside: followed
ln -s nowhere "$T/r3/dog/dangling.jpg"
ln -s .. "$T/r3/cat/loop"                        # a folder loop
mkfifo "$T/r3/dog/fifo.jpg"
printf x >"$T/r3/dog/.hidden.jpg"
printf x >"$T/r3/README"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \
	"$T/r3/dog/sock.jpg" || fail "making a socket"
timeout 60 "$DS" convert "$T/r3" --out "$T/r3o" >"$T/out" 2>"$T/err" ||
	{ cat "$T/err"; fail "dir with skips"; }
cat "$T/err"
grep -q "skipped 7: 1 hidden entry, 1 symlink out of the source tree, 1 dangling symlink, 1 folder loop, 1 FIFO, 1 socket, 1 file outside the class folders; first: " "$T/err" ||
	fail "skips not counted by kind"
[ "$(grep -c "skipped" "$T/err")" = 1 ] || fail "one skip line expected"
# cat: a, sub/b, sub/deeper/c (label 0); dog: d, inside (label 1)
"$DS" info "$T/r3o" | grep -q "records: 5" ||
	{ "$DS" info "$T/r3o"; fail "5 records expected"; }
for i in 0 1 2 3 4; do
	printf '%s:' "$("$DS" cat "$T/r3o" --index $i --field data)"
	"$DS" cat "$T/r3o" --index $i --field label | od -An -t d8 | tr -d ' \n'
	printf ' '
done >"$T/got"
[ "$(cat "$T/got")" = "a:0 b:0 c:0 d:1 a:1 " ] || fail "records: $(cat "$T/got")"
"$DS" cat "$T/r3o" --hash | grep -q . || fail "cat --hash"
! grep -rq SECRET "$T/r3o" || fail "a link out of the tree was imported"
timeout 60 "$DS" convert "$T/r3" --out "$T/r3j" --quiet --json >"$T/out" \
	2>"$T/err" || fail "--json"
grep -q '"skipped": {"total": 7, "hidden": 1, "symlink_outside": 1, "symlink_dangling": 1, "folder_loop": 1, "fifo": 1, "socket": 1, "device": 0, "not_in_class": 1' "$T/out" ||
	fail "--json skips: $(cat "$T/out")"

step "dir: --strict makes a skip an error; --follow-symlinks follows"
run_fails "(--strict: nothing is skipped)" \
	"$DS" convert "$T/r3" --out "$T/r3s" --quiet --strict
[ ! -e "$T/r3s/dataset.json" ] || fail "--strict left a dataset"
rm "$T/r3/dog/fifo.jpg" "$T/r3/dog/sock.jpg" "$T/r3/dog/dangling.jpg" \
	"$T/r3/dog/.hidden.jpg" "$T/r3/README" "$T/r3/cat/loop"
run_fails "dog/evil.jpg: a symlink out of the source tree (--strict" \
	"$DS" convert "$T/r3" --out "$T/r3s2" --quiet --strict
timeout 60 "$DS" convert "$T/r3" --out "$T/r3f" --quiet --strict \
	--follow-symlinks || fail "--follow-symlinks --strict"
"$DS" cat "$T/r3f" --hash >/dev/null || fail "cat r3f"
# dog: d, evil (the outside file), inside
[ "$("$DS" cat "$T/r3f" --index 4 --field data)" = SECRET ] ||
	fail "--follow-symlinks did not follow the link out of the tree"

step "tar: a hard link holds its target's bytes; special members counted"
python3 - "$T" <<'EOF2' || fail "making the tar"
import io, sys, tarfile
t = sys.argv[1]
def add(tf, name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))
for fmt, name in ((tarfile.GNU_FORMAT, "hl_gnu.tar"),
                  (tarfile.PAX_FORMAT, "hl_pax.tar")):
    with tarfile.open(t + "/" + name, "w", format=fmt) as tf:
        add(tf, "s1.jpg", b"JPEG-ONE"); add(tf, "s1.cls", b"1")
        ti = tarfile.TarInfo("s2.jpg"); ti.type = tarfile.LNKTYPE
        # a long target name: GNU 'K' / pax linkpath
        ti.linkname = "s1.jpg" if fmt == tarfile.GNU_FORMAT else "s1.jpg"
        tf.addfile(ti)
        add(tf, "s2.cls", b"2")
        ti = tarfile.TarInfo("s3.jpg"); ti.type = tarfile.SYMTYPE
        ti.linkname = "/etc/passwd"; tf.addfile(ti)
    long = "d" * 120 + "/k1.jpg"
    with tarfile.open(t + "/long_" + name, "w", format=fmt) as tf:
        add(tf, long, b"LONG"); add(tf, "d" * 120 + "/k1.cls", b"1")
        ti = tarfile.TarInfo("k2.jpg"); ti.type = tarfile.LNKTYPE
        ti.linkname = long; tf.addfile(ti)
        add(tf, "k2.cls", b"2")
EOF2
for f in hl_gnu hl_pax; do
	timeout 60 "$DS" convert "$T/$f.tar" --out "$T/${f}_o" >"$T/out" \
		2>"$T/err" || { cat "$T/err"; fail "$f: hard link"; }
	[ "$("$DS" cat "$T/${f}_o" --index 1 --field jpg)" = JPEG-ONE ] ||
		fail "$f: the hard link's record lacks its target's bytes"
	grep -q "skipped 1: 1 tar entry that is not a file; first: .*: s3.jpg" \
		"$T/err" || { cat "$T/err"; fail "$f: symlink member not counted"; }
	timeout 60 "$DS" convert "$T/long_$f.tar" --out "$T/long_${f}_o" \
		--quiet || fail "long_$f: hard link to a long name"
	[ "$("$DS" cat "$T/long_${f}_o" --index 1 --field jpg)" = LONG ] ||
		fail "long_$f: wrong bytes"
done
cat "$T/hl_gnu.tar" | timeout 60 "$DS" convert /dev/stdin --from tar \
	--out "$T/hl_pipe" --quiet >"$T/out" 2>"$T/err"
[ $? -eq 1 ] && grep -q "s2.jpg is a hard link to s1.jpg, whose bytes a pipe cannot read again" "$T/err" ||
	{ cat "$T/err"; fail "hard link from a pipe: wrong reason"; }
run_fails "s3.jpg: a tar entry that is not a file (--strict" \
	"$DS" convert "$T/hl_gnu.tar" --out "$T/hl_strict" --quiet --strict

echo "all hostile import cases handled"
