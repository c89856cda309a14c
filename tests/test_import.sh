#!/bin/sh
# Importers end to end through $BUILD/dlpack-shard: dir, tar, npy and synth
# sources round-trip byte for byte (raw and zstd), parts merge into the
# whole conversion, malformed sources fail with messages that name the
# file or key, verify catches a flipped byte and an interrupted conversion.
# Source data is generated with python3 (no numpy needed); a few MB.
set -u
BUILD=${BUILD:-build}
DS="$BUILD/dlpack-shard"
[ -x "$DS" ] || { echo "skip: $DS is not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/test_import.XXXXXX") || exit 1
bgpid=""
cleanup() {
	[ -n "$bgpid" ] && kill -9 "$bgpid" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; }

# run CMD...: must exit 0 (stderr shown on failure).
run() {
	"$@" >"$T/out" 2>"$T/err" ||
		{ cat "$T/err"; fail "exit $?: $*"; }
}
# run_fails PATTERN CMD...: must exit 1 with PATTERN in stderr.
run_fails() {
	pat=$1; shift
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq 1 ] || { cat "$T/err"; fail "exit $rc (want 1): $*"; }
	grep -q -- "$pat" "$T/err" ||
		{ cat "$T/err"; fail "stderr lacks '$pat': $*"; }
	grep -q '^dlpack-shard: ' "$T/err" ||
		fail "stderr lacks the 'dlpack-shard: ' prefix: $*"
	echo "  ok: $(head -n 1 "$T/err")"
}

# check_expect DATASET EXPECTDIR: each file EXPECTDIR/INDEX.FIELD holds
# the bytes record INDEX's FIELD must read back as.
check_expect() {
	n=0
	for f in "$2"/*; do
		b=$(basename "$f")
		idx=${b%%.*}
		field=${b#*.}
		"$DS" cat "$1" --index "$idx" --field "$field" >"$T/got" ||
			fail "cat $1 --index $idx --field $field"
		cmp -s "$T/got" "$f" ||
			fail "$1: record $idx field $field differs from $f"
		n=$((n + 1))
	done
	[ $n -gt 0 ] || fail "no expectations in $2"
}

# records DATASET: the record count from info --json.
records() {
	"$DS" info "$1" --json >"$T/info.json" || fail "info $1"
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["records"])' \
		"$T/info.json" || fail "info --json of $1 does not parse"
}

# same_hashes A B: cat --hash of two datasets agree (and are not empty).
same_hashes() {
	"$DS" cat "$1" --hash >"$T/h1" || fail "cat --hash $1"
	"$DS" cat "$2" --hash >"$T/h2" || fail "cat --hash $2"
	[ -s "$T/h1" ] || fail "cat --hash $1 printed nothing"
	cmp -s "$T/h1" "$T/h2" || { diff "$T/h1" "$T/h2" | head; \
		fail "hashes of $1 and $2 differ"; }
}

# parts_equal_whole WHOLE CONVERT-ARGS...: convert in 3 parts, merge,
# compare with WHOLE.
parts_equal_whole() {
	whole=$1; shift
	rm -rf "$T/part0" "$T/part1" "$T/part2" "$T/merged"
	for i in 0 1 2; do
		run "$DS" convert "$@" --out "$T/part$i" --part "$i/3" --quiet
	done
	run "$DS" merge "$T/part0" "$T/part1" "$T/part2" --out "$T/merged" \
		--quiet
	same_hashes "$whole" "$T/merged"
	[ "$(records "$T/merged")" = "$(records "$whole")" ] ||
		fail "merged record count differs"
}

# ------------------------------------------------------------------ dir
step "dir: round trip, raw and zstd, record larger than a block"
python3 - "$T" <<'EOF' || fail "generating the dir source"
import os, random, struct, sys
t = sys.argv[1]
rnd = random.Random(1)
src = os.path.join(t, "imgs")
exp = os.path.join(t, "exp_dir")
os.makedirs(exp)
classes = ["dog", "cat", "ant"]  # sorted: ant=0, cat=1, dog=2
files = []
for c in classes:
    os.makedirs(os.path.join(src, c))
    for i in range(40):
        name = "img%03d.jpg" % rnd.randrange(1000000)
        size = rnd.choice([0, 1, 100, 3000, 20000])
        data = rnd.randbytes(size)
        with open(os.path.join(src, c, name), "wb") as f:
            f.write(data)
# a record larger than the 64 KiB block
with open(os.path.join(src, "cat", "zz_big.bin"), "wb") as f:
    f.write(rnd.randbytes(300000))
# entries that must not become records
open(os.path.join(src, "cat", ".hidden.jpg"), "wb").write(b"x")
os.makedirs(os.path.join(src, "cat", "subdir"))
os.makedirs(os.path.join(src, ".hiddenclass"))
open(os.path.join(src, ".hiddenclass", "a.jpg"), "wb").write(b"x")
open(os.path.join(src, "toplevel.txt"), "wb").write(b"x")
os.mkfifo(os.path.join(src, "dog", "fifo"))
order = []
classes = [c for c in sorted(os.listdir(src))
           if not c.startswith(".") and os.path.isdir(os.path.join(src, c))]
for label, c in enumerate(classes):
    for name in sorted(os.listdir(os.path.join(src, c))):
        p = os.path.join(src, c, name)
        if name.startswith(".") or not os.path.isfile(p):
            continue
        order.append((p, label))
for i, (p, label) in enumerate(order):
    if i % 7 == 0 or "big" in p or os.path.getsize(p) == 0:
        os.link(p, os.path.join(exp, "%d.data" % i))
        open(os.path.join(exp, "%d.label" % i), "wb").write(struct.pack("<q", label))
open(os.path.join(t, "dir_count"), "w").write(str(len(order)))
EOF
run "$DS" convert "$T/imgs" --out "$T/dir_raw" --block-size 64K \
	--compression none --quiet
run "$DS" convert "$T/imgs" --out "$T/dir_zstd" --from dir --block-size 64K \
	--compression zstd:3 --quiet
[ "$(records "$T/dir_raw")" = "$(cat "$T/dir_count")" ] ||
	fail "dir: record count $(records "$T/dir_raw") != $(cat "$T/dir_count")"
check_expect "$T/dir_raw" "$T/exp_dir"
check_expect "$T/dir_zstd" "$T/exp_dir"
same_hashes "$T/dir_raw" "$T/dir_zstd"
grep -q '"name": "label", "dtype": "int64", "shape": \[\]' "$T/info.json" ||
	fail "dir: label field not int64 scalar: $(cat "$T/info.json")"

step "dir: 3 parts merged equal the whole"
parts_equal_whole "$T/dir_raw" "$T/imgs" --block-size 64K --compression none

step "dir: an unreadable file is named"
if [ "$(id -u)" != 0 ]; then
	chmod 000 "$T/imgs/ant/"*
	f=$(ls "$T/imgs/ant" | head -n 1)
	run_fails "$f" "$DS" convert "$T/imgs" --out "$T/dir_bad" --quiet
	chmod 644 "$T/imgs/ant/"*
else
	# root reads any file; reading /proc/self/mem at offset 0 fails (EIO)
	# (a link out of the tree: followed only when asked)
	ln -s /proc/self/mem "$T/imgs/ant/aaa_unreadable.jpg"
	run_fails "ant/aaa_unreadable.jpg: " \
		"$DS" convert "$T/imgs" --out "$T/dir_bad" --quiet \
		--follow-symlinks
	rm "$T/imgs/ant/aaa_unreadable.jpg"
fi
[ ! -e "$T/dir_bad/dataset.json" ] || fail "dataset.json after error"

# ------------------------------------------------------------------ tar
step "tar: round trip (ustar, GNU long names, pax), empty member, __key__, int64 .cls"
python3 - "$T" <<'EOF' || fail "generating the tar sources"
import io, os, random, struct, sys, tarfile
t = sys.argv[1]
rnd = random.Random(2)
exp = os.path.join(t, "exp_tar")
os.makedirs(exp)
samples = []
longdir = "d" * 120  # forces a GNU 'L' or pax path header
for i in range(150):
    key = "%s/s%05d" % ("shard-a" if i < 75 else longdir, i)
    fields = [
        ("jpg", rnd.randbytes(rnd.choice([10, 5000, 90000]))),
        ("cls", (" %d\n" if i == 3 else "%d") % (i % 10 - 5)),
        ("seg.png", rnd.randbytes(rnd.randrange(0, 2000))),
    ]
    if i % 2:  # a later sample may list its fields in another order
        fields.reverse()
    samples.append((key, fields))
def write(path, fmt, samples=samples):
    with tarfile.open(path, "w", format=fmt) as tf:
        d = tarfile.TarInfo("shard-a")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        for key, fields in samples:
            for ext, data in fields:
                data = data.encode() if isinstance(data, str) else data
                ti = tarfile.TarInfo(key + "." + ext)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
write(os.path.join(t, "gnu.tar"), tarfile.GNU_FORMAT)
write(os.path.join(t, "pax.tar"), tarfile.PAX_FORMAT)
# The same samples as a WebDataset of 12 shards (the last one short).
os.makedirs(os.path.join(t, "wds"))
for k in range(12):
    write(os.path.join(t, "wds", "shard-%03d.tar" % k), tarfile.GNU_FORMAT,
          samples[13 * k:13 * (k + 1)])
for i, (key, fields) in enumerate(samples):
    if i % 5 == 0 or i in (3, 149):
        open(os.path.join(exp, "%d.__key__" % i), "wb").write(key.encode())
        for ext, data in fields:
            if ext == "cls":
                data = struct.pack("<q", int(data))
            open(os.path.join(exp, "%d.%s" % (i, ext)), "wb").write(data)
EOF
run "$DS" convert "$T/gnu.tar" --out "$T/tar_raw" --block-size 64K \
	--compression none --quiet
run "$DS" convert "$T/pax.tar" --out "$T/tar_zstd" --compression zstd \
	--block-size 64K --quiet
[ "$(records "$T/tar_raw")" = 150 ] || fail "tar: record count"
python3 -c '
import json, sys
names = [f["name"] for f in json.load(open(sys.argv[1]))["fields"]]
assert names == ["__key__", "jpg", "cls", "seg.png"], names
' "$T/info.json" || fail "tar: fields not __key__ then first-sample order"
"$DS" info "$T/tar_raw" | grep -q 'cls.*int64' || fail "tar: cls is not int64"
check_expect "$T/tar_raw" "$T/exp_tar"
check_expect "$T/tar_zstd" "$T/exp_tar"
same_hashes "$T/tar_raw" "$T/tar_zstd"

step "tar: 3 parts merged equal the whole"
parts_equal_whole "$T/tar_raw" "$T/gnu.tar" --block-size 64K

step "tar: many tars (brace pattern, glob, list) in order equal one tar"
run "$DS" convert "$T/wds/shard-{000..011}.tar" --out "$T/wds_brace" \
	--block-size 64K --compression none --quiet
same_hashes "$T/tar_raw" "$T/wds_brace"
run "$DS" convert "$T/wds/shard-*.tar" --from tar --out "$T/wds_glob" \
	--block-size 64K --compression none --quiet
same_hashes "$T/tar_raw" "$T/wds_glob"
list=$(ls "$T"/wds/shard-*.tar | tr '\n' ',' | sed 's/,$//')
run "$DS" convert "$list" --out "$T/wds_list" --block-size 64K \
	--compression none --quiet
same_hashes "$T/tar_raw" "$T/wds_list"
run "$DS" convert "$T/wds/shard-{000..005}.tar,$T/wds/shard-{006,007,008,009,010,011}.tar" \
	--from tar --out "$T/wds_mixed" --block-size 64K --compression none --quiet
same_hashes "$T/tar_raw" "$T/wds_mixed"
run_fails "shard-6.tar" "$DS" convert "$T/wds/shard-{6..7}.tar" --from tar \
	--out "$T/x_unpadded" --quiet
run "$DS" convert "$T/wds/shard-00{0..9}.tar,$T/wds/shard-01{0,1}.tar" \
	--from tar --out "$T/wds_mixed2" --block-size 64K --compression none --quiet
same_hashes "$T/tar_raw" "$T/wds_mixed2"
parts_equal_whole "$T/tar_raw" "$T/wds/shard-{000..011}.tar" --block-size 64K
run "$DS" convert "$T/wds/shard-{011..000}.tar" --out "$T/wds_rev" --quiet
"$DS" cat "$T/wds_rev" --index 0 --field __key__ >"$T/key0" || fail "cat key"
[ "$(cat "$T/key0")" = "$(printf 'd%.0s' $(seq 120))/s00143" ] ||
	fail "a descending range is read in its order: first key $(cat "$T/key0")"
run_fails "no file matches" "$DS" convert "$T/wds/nope-*.tar" \
	--out "$T/x_nomatch" --quiet
run_fails "nested braces" "$DS" convert "$T/wds/s-{0,{1,2}}.tar" \
	--out "$T/x_nested" --quiet
run_fails "empty path" "$DS" convert "$T/gnu.tar,,$T/gnu.tar" --from tar \
	--out "$T/x_empty" --quiet

step "tar: --drop-key; labels that are not integers stay bytes"
run "$DS" convert "$T/gnu.tar" --out "$T/tar_nokey" --drop-key --quiet
"$DS" info "$T/tar_nokey" --json >"$T/info.json" || fail "info"
python3 -c '
import json, sys
names = [f["name"] for f in json.load(open(sys.argv[1]))["fields"]]
assert names == ["jpg", "cls", "seg.png"], names
' "$T/info.json" || fail "tar --drop-key: fields"
python3 - "$T" <<'EOF' || fail "generating label tars"
import io, os, sys, tarfile
t = sys.argv[1]
def tar(path, members):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
tar(os.path.join(t, "textcls.tar"), [("a.jpg", b"1"), ("a.cls", b"cat"),
    ("b.jpg", b"2"), ("b.cls", b"7")])
tar(os.path.join(t, "badcls.tar"), [("a.jpg", b"1"), ("a.cls", b"3"),
    ("b.jpg", b"2"), ("b.cls", b"4"), ("sample-b.cls", b"x"),
    ("sample-b.jpg", b"2")])
tar(os.path.join(t, "bigcls.tar"), [("a.cls", b"9223372036854775807"),
    ("b.cls", b"9223372036854775808")])
tar(os.path.join(t, "keyext.tar"), [("a.__key__", b"1")])
EOF
run "$DS" convert "$T/textcls.tar" --out "$T/tar_textcls" --quiet
"$DS" info "$T/tar_textcls" | grep -q 'cls.*uint8' || fail "text cls is not bytes"
"$DS" cat "$T/tar_textcls" --index 1 --field cls >"$T/got" || fail "cat cls"
[ "$(cat "$T/got")" = 7 ] || fail "text cls: '$(cat "$T/got")'"
run_fails "key 'sample-b': 'cls' is not an integer" \
	"$DS" convert "$T/badcls.tar" --out "$T/x_badcls" --quiet
run_fails "key 'b': 'cls' is not an integer" \
	"$DS" convert "$T/bigcls.tar" --out "$T/x_bigcls" --quiet
run_fails "drop-key" "$DS" convert "$T/keyext.tar" --out "$T/x_keyext" --quiet
run "$DS" convert "$T/keyext.tar" --out "$T/tar_keyext" --drop-key --quiet

step "tar: malformed archives"
python3 - "$T" <<'EOF' || fail "generating bad tars"
import io, os, sys, tarfile
t = sys.argv[1]
def tar(path, members):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
tar(os.path.join(t, "missing.tar"), [("a.jpg", b"1"), ("a.cls", b"2"),
    ("b.jpg", b"3"), ("keyb2.jpg", b"4"), ("keyb2.cls", b"5")])
tar(os.path.join(t, "missing2.tar"), [("a.jpg", b"1"), ("a.cls", b"2"),
    ("sample-nocls.jpg", b"3")])
tar(os.path.join(t, "extra.tar"), [("a.jpg", b"1"), ("b.jpg", b"2"),
    ("b.txt", b"3")])
tar(os.path.join(t, "good.tar"), [("a.jpg", b"1" * 3000), ("b.jpg", b"2")])
raw = open(os.path.join(t, "good.tar"), "rb").read()
open(os.path.join(t, "trunc_data.tar"), "wb").write(raw[:512 + 1000])
open(os.path.join(t, "trunc_hdr.tar"), "wb").write(raw[:300])
open(os.path.join(t, "no_end.tar"), "wb").write(raw[:512 + 3072 + 512 + 512])
bad = bytearray(raw)
bad[0] ^= 0x20  # name byte: checksum no longer matches
open(os.path.join(t, "badsum.tar"), "wb").write(bad)
EOF
run_fails "sample-nocls" "$DS" convert "$T/missing2.tar" --out "$T/x1" --quiet
run_fails "key 'b'" "$DS" convert "$T/missing.tar" --out "$T/x2" --quiet
run_fails "key 'b'.*txt" "$DS" convert "$T/extra.tar" --out "$T/x3" --quiet
run_fails "truncated tar at offset 1512" \
	"$DS" convert "$T/trunc_data.tar" --out "$T/x4" --quiet
run_fails "truncated tar at offset 0" \
	"$DS" convert "$T/trunc_hdr.tar" --out "$T/x5" --quiet
run_fails "truncated tar at offset 4608" \
	"$DS" convert "$T/no_end.tar" --out "$T/x6" --quiet
run_fails "offset 0: bad tar header checksum" \
	"$DS" convert "$T/badsum.tar" --out "$T/x7" --quiet
for d in x1 x2 x3 x4 x5 x6 x7; do
	[ ! -e "$T/$d/dataset.json" ] || fail "$d: dataset.json after an error"
done
run "$DS" convert "$T/good.tar" --out "$T/x8" --quiet

# ------------------------------------------------------------------ npy
step "npy: several dtypes, 2-D trailing shape, raw and zstd"
python3 - "$T" <<'EOF' || fail "generating npy files"
import os, random, struct, sys
t = sys.argv[1]
rnd = random.Random(3)
N = 500
exp = os.path.join(t, "exp_npy")
os.makedirs(exp)
def npy(path, descr, shape, data, fortran=False, version=1):
    d = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (
        descr if descr.startswith("[") else repr(descr), fortran, repr(tuple(shape)))
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(d) + 1) % 64) % 64
    h = (d + " " * pad + "\n").encode()
    if version == 1:
        head = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h))
    else:
        head = b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(h))
    with open(path, "wb") as f:
        f.write(head + h + data)
arrays = [
    ("i8s", "|i1", [N], 1), ("u16", "<u2", [N], 2), ("i32", "<i4", [N], 4),
    ("labels", "<i8", [N], 8), ("f16", "<f2", [N, 2], 2),
    ("f32", "<f4", [N, 3], 4), ("f64", "<f8", [N], 8),
    ("mask", "|b1", [N, 5], 1), ("img", "|u1", [N, 3, 4], 1),
    ("u32", "<u4", [N], 4), ("u64", "<u8", [N], 8), ("i16", "<i2", [N], 2),
]
paths = []
for k, (name, descr, shape, item) in enumerate(arrays):
    row = item
    for d in shape[1:]:
        row *= d
    if descr == "|b1":
        data = bytes(rnd.randrange(2) for _ in range(N * row))
    else:
        data = rnd.randbytes(N * row)
    p = os.path.join(t, name + ".npy")
    npy(p, descr, shape, data, version=1 + k % 3)
    paths.append(p)
    for i in range(0, N, 37):
        open(os.path.join(exp, "%d.%s" % (i, name)), "wb").write(data[i * row:(i + 1) * row])
open(os.path.join(t, "npy_list"), "w").write(",".join(paths))
# malformed
one = lambda n: bytes(n)
npy(os.path.join(t, "fortran.npy"), "<f4", [4, 3], one(48), fortran=True)
npy(os.path.join(t, "object.npy"), "|O", [4], one(32))
npy(os.path.join(t, "bigend.npy"), ">i4", [4], one(16))
npy(os.path.join(t, "struct.npy"), "[('a', '<i4'), ('b', '<f4')]", [4], one(32))
npy(os.path.join(t, "short.npy"), "<i4", [N - 1], one(4 * (N - 1)))
npy(os.path.join(t, "truncated.npy"), "<i4", [N], one(4 * N - 3))
npy(os.path.join(t, "complex.npy"), "<c8", [4], one(32))
with open(os.path.join(t, "junk.npy"), "wb") as f:
    h = b"{'descr': '<i4', 'fortran_order': False, 'shape': (4,), 'x': 1}\n"
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + one(16))
EOF
npys=$(cat "$T/npy_list")
run "$DS" convert "$npys" --out "$T/npy_raw" --from npy --block-size 8K \
	--compression none --quiet
run "$DS" convert "$npys" --out "$T/npy_zstd" --compression zstd:5 --quiet
[ "$(records "$T/npy_raw")" = 500 ] || fail "npy: record count"
python3 -c '
import json, sys
f = {x["name"]: x for x in json.load(open(sys.argv[1]))["fields"]}
assert f["img"]["dtype"] == "uint8" and f["img"]["shape"] == [3, 4], f["img"]
assert f["f16"]["dtype"] == "float16" and f["f16"]["shape"] == [2], f["f16"]
assert f["labels"]["dtype"] == "int64" and f["labels"]["shape"] == [], f
assert f["mask"]["dtype"] == "bool" and f["i8s"]["dtype"] == "int8", f
' "$T/info.json" || fail "npy: schema from info --json"
check_expect "$T/npy_raw" "$T/exp_npy"
check_expect "$T/npy_zstd" "$T/exp_npy"
same_hashes "$T/npy_raw" "$T/npy_zstd"

step "npy: 3 parts merged equal the whole"
parts_equal_whole "$T/npy_raw" "$npys" --block-size 8K

step "npy: clear errors naming the file"
run_fails "fortran.npy: Fortran" "$DS" convert "$T/fortran.npy" --out "$T/y1" --quiet
run_fails "object.npy: object" "$DS" convert "$T/object.npy" --out "$T/y2" --quiet
run_fails "bigend.npy: big-endian" "$DS" convert "$T/bigend.npy" --out "$T/y3" --quiet
run_fails "struct.npy: structured" "$DS" convert "$T/struct.npy" --out "$T/y4" --quiet
run_fails "complex.npy: unsupported dtype" "$DS" convert "$T/complex.npy" --out "$T/y5" --quiet
run_fails "short.npy: 499 rows" \
	"$DS" convert "$T/labels.npy,$T/short.npy" --out "$T/y6" --quiet
run_fails "truncated.npy: the shape needs" \
	"$DS" convert "$T/truncated.npy" --out "$T/y7" --quiet
run_fails "junk.npy: malformed .npy header" \
	"$DS" convert "$T/junk.npy" --out "$T/y8" --quiet
run_fails "labels" "$DS" convert "$T/labels.npy,$T/labels.npy" --out "$T/y9" --quiet
for d in "$T"/y*; do
	[ ! -e "$d/dataset.json" ] || fail "$d: dataset.json after an npy error"
done

# ------------------------------------------------------------------ synth
step "synth: fixed and variable fields, raw and zstd, parts, many shards"
SYN="--from synth --records 300 --seed 7 --field img:uint8:3x16x16:0.5
	--field label:int64 --field tok:int32:-1:0.3 --field box:float32:-1x4
	--field flag:bool:2"
# shellcheck disable=SC2086
run "$DS" convert $SYN --out "$T/syn_raw" --block-size 16K \
	--compression none --quiet
# shellcheck disable=SC2086
run "$DS" convert $SYN --out "$T/syn_zstd" --block-size 16K \
	--compression zstd:3 --threads 2 --json
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
for k in ("records", "shards", "blocks", "raw_bytes", "stored_bytes",
          "ratio", "seconds", "MB_per_s"):
    assert k in s, k
assert s["records"] == 300 and s["stored_bytes"] < s["raw_bytes"], s
' "$T/out" || fail "synth: convert --json summary: $(cat "$T/out")"
same_hashes "$T/syn_raw" "$T/syn_zstd"
# shellcheck disable=SC2086
parts_equal_whole "$T/syn_raw" $SYN --block-size 16K
# shellcheck disable=SC2086
run "$DS" convert $SYN --out "$T/syn_many" --records-per-shard 7 --quiet
same_hashes "$T/syn_raw" "$T/syn_many"
n=$(ls "$T/syn_many"/*.dls | wc -l)
[ "$n" -eq 43 ] || fail "records-per-shard 7: $n shards, want 43"
# shellcheck disable=SC2086
run "$DS" convert $SYN --out "$T/syn_sz" --shard-size 64K --block-size 8K \
	--compression zstd --quiet
same_hashes "$T/syn_raw" "$T/syn_sz"
n=$(ls "$T/syn_sz"/*.dls | wc -l)
[ "$n" -gt 3 ] || fail "--shard-size 64K: only $n shards"

step "synth: one record; a seed changes the bytes"
run "$DS" convert --from synth --records 1 --field x:uint8:-1 --out "$T/one" \
	--quiet
[ "$(records "$T/one")" = 1 ] || fail "one record"
run "$DS" cat "$T/one" --hash
[ "$(wc -l <"$T/out")" -eq 1 ] || fail "one record: hash lines"
# shellcheck disable=SC2086
run "$DS" convert $(echo "$SYN" | sed 's/--seed 7/--seed 8/') \
	--out "$T/syn_seed8" --quiet
"$DS" cat "$T/syn_raw" --hash >"$T/h1"
"$DS" cat "$T/syn_seed8" --hash >"$T/h2"
! cmp -s "$T/h1" "$T/h2" || fail "seed 8 gave the same bytes as seed 7"

# ------------------------------------------------------------------ verify
step "verify: clean, then a flipped byte in a block"
run "$DS" verify "$T/syn_zstd"
grep -q "^$T/syn_zstd: OK ([0-9]* shards, [0-9]* blocks)$" "$T/out" ||
	fail "verify: '$(cat "$T/out")'"
cp -r "$T/syn_zstd" "$T/flip"
shard=$(ls "$T/flip"/*.dls | head -n 1)
python3 - "$shard" <<'EOF' || fail "flipping a byte"
import sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(4096 + 100)  # inside block 0 (blocks start at the 4 KiB header)
    b = f.read(1)
    f.seek(4096 + 100)
    f.write(bytes([b[0] ^ 0x01]))
EOF
"$DS" verify "$T/flip" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 1 ] || fail "verify of a flipped byte: exit $rc"
grep -q "$(basename "$shard").*block 0" "$T/out" ||
	fail "verify output does not name the shard and block 0: $(cat "$T/out")"

# ------------------------------------------------------------------ kill -9
step "interrupted conversion leaves no dataset that verifies"
"$DS" convert --from synth --records 100000 --field x:uint8:65536:0.5 \
	--compression zstd:19 --threads 1 --records-per-shard 2 \
	--out "$T/killed" --quiet >/dev/null 2>&1 &
bgpid=$!
i=0
# wait for finished shards (shard 2 begun: 0 and 1 hold their index and
# header), so the directory holds shards that look complete
tmps() { ls -a "$T/killed" 2>/dev/null | grep -c '^\.data-.*\.tmp$'; }
while [ $i -lt 600 ] && [ "$(tmps)" -lt 3 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ "$(tmps)" -ge 3 ] || fail "no finished shard after 60 s"
kill -9 "$bgpid" 2>/dev/null
wait "$bgpid" 2>/dev/null
bgpid=""
[ -d "$T/killed" ] || fail "the killed conversion made no directory"
[ ! -e "$T/killed/dataset.json" ] || fail "dataset.json after kill -9"
ls "$T/killed"/*.dls >/dev/null 2>&1 && fail "shards under final names after kill -9"
"$DS" verify "$T/killed" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -ne 0 ] || fail "verify of an interrupted conversion exited 0: $(cat "$T/out")"
echo "verify after kill -9 (exit $rc): $(head -n 3 "$T/out" "$T/err")"
run_fails "no file matches" "$DS" info "$T/killed/*.dls"
run_fails "uncommitted shard" "$DS" info "$T/killed/.*.tmp"
run_fails "uncommitted shard" "$DS" info "$(ls -d "$T"/killed/.data-00000.dls.*.tmp)"
run_fails "dataset.json" "$DS" info "$T/killed"
run_fails "leftovers of an interrupted conversion.*dlpack-shard clean" \
	"$DS" convert --from synth --records 8 --field x:uint8 --out "$T/killed"

step "a failed conversion says how to clean up"
mkdir -p "$T/full"
run_fails "holds nothing to keep (remove it with .rm -r" \
	"$DS" convert --from npy "$T/no-such.npy" --out "$T/full"

echo "all import tests passed"
