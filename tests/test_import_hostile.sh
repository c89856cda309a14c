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

echo "all hostile import cases handled"
