#!/bin/sh
# bench/make_data.sh (`make bench-data`): three benchmark workloads, built
# reproducibly from files the machine already has, under $BENCH_DATA
# (bench/data):
#   image/   image classification: real pictures (JPEG/PNG bytes, variable
#            size) + int64 label, raw blocks, from an ImageFolder tree
#            image_src/class_NN/*.jpg via `dlpack-shard convert --from dir`
#   tokens/  LLM pretraining: int32[2048] token windows from the text under
#            /usr/share (common-licenses, doc copyright files and
#            changelogs), a word -> id vocabulary in first-seen order,
#            written as tokens.npy (python3 struct, no numpy) and converted
#            with --from npy --compression zstd:3
#   synth/   uint8[3,224,224] image + int64 label, raw, --from synth
# Size knobs (defaults build in well under a minute on 2 cores):
#   IMAGES=2000 (records)  TOKEN_WINDOWS=2000  SYNTH_RECORDS=500
#   IMAGE_SIZE=500x375 (JPEG re-encode size when an encoder exists)
# Pictures: when a real encoder exists (ImageMagick `convert`, or python3
# PIL) each picture is re-encoded as JPEG (quality 90 at IMAGE_SIZE, ~100 KB
# like ImageNet); without one the files are used as found, and the script
# says so.  A picture used more than once is the same bytes again.
set -eu
BUILD=${BUILD:-build}
OUT=${BENCH_DATA:-bench/data}
IMAGES=${IMAGES:-2000}
TOKEN_WINDOWS=${TOKEN_WINDOWS:-2000}
SYNTH_RECORDS=${SYNTH_RECORDS:-500}
IMAGE_SIZE=${IMAGE_SIZE:-500x375}
SHARD="$BUILD/dlpack-shard"
export LC_ALL=C

[ -x "$SHARD" ] || { echo "make_data: $SHARD is missing (run make)" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "make_data: python3 is needed" >&2; exit 1; }
mkdir -p "$OUT"

# ---------------------------------------------------------------- image
encoder=none
if convert -version 2>/dev/null | grep -q '^Version: ImageMagick'; then
	encoder=imagemagick
elif python3 -c 'import PIL' 2>/dev/null; then
	encoder=pil
fi
src="$OUT/image_src"
rm -rf "$src" "$OUT/image"
mkdir -p "$src"
# Every picture under /usr/share larger than 8 KB (icons are smaller),
# in a fixed order so the tree is the same on every run.
find /usr/share -type f \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' \) \
	-size +8k 2>/dev/null | sort > "$OUT/pictures.txt"
npics=$(wc -l < "$OUT/pictures.txt")
[ "$npics" -gt 0 ] || { echo "make_data: no pictures found under /usr/share" >&2; exit 1; }
case $encoder in
none) echo "make_data: no JPEG encoder (no ImageMagick, no python3 PIL): using the $npics pictures as found (PNG/JPEG bytes, not re-encoded)" ;;
*) echo "make_data: re-encoding $npics pictures as JPEG q90 $IMAGE_SIZE with $encoder" ;;
esac
python3 - "$OUT/pictures.txt" "$src" "$IMAGES" "$encoder" "$IMAGE_SIZE" <<'EOF'
import os, shutil, subprocess, sys
listing, dst, n, encoder, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
pics = [l.rstrip("\n") for l in open(listing) if l.strip()]
w, h = (int(x) for x in size.split("x"))
classes = 10
made = {}
def encoded(i):
    """Picture i once, as JPEG when an encoder exists, else as found."""
    if i in made:
        return made[i]
    p = pics[i]
    out = os.path.join(dst, ".cache-%05d" % i)
    if encoder == "imagemagick":
        out += ".jpg"
        subprocess.run(["convert", p + "[0]", "-resize", "%dx%d!" % (w, h),
                        "-quality", "90", out], check=True)
    elif encoder == "pil":
        from PIL import Image
        out += ".jpg"
        Image.open(p).convert("RGB").resize((w, h)).save(out, quality=90)
    else:
        out += os.path.splitext(p)[1].lower()
        shutil.copyfile(p, out)
    made[i] = out
    return out
for k in range(n):
    c = "class_%02d" % (k % classes)
    os.makedirs(os.path.join(dst, c), exist_ok=True)
    f = encoded(k % len(pics))
    os.link(f, os.path.join(dst, c, "%06d%s" % (k, os.path.splitext(f)[1])))
for f in made.values():
    os.unlink(f)
EOF
"$SHARD" convert "$src" --from dir --out "$OUT/image" --compression none --quiet

# ---------------------------------------------------------------- tokens
rm -rf "$OUT/tokens" "$OUT/tokens_src"
mkdir -p "$OUT/tokens_src"
python3 - "$OUT/tokens_src/tokens.npy" "$TOKEN_WINDOWS" <<'EOF'
import glob, gzip, struct, sys
out, windows = sys.argv[1], int(sys.argv[2])
L = 2048
need = windows * L
files = sorted(glob.glob("/usr/share/common-licenses/*"))
files += sorted(glob.glob("/usr/share/doc/*/copyright"))
files += sorted(glob.glob("/usr/share/doc/*/changelog*.gz"))
vocab, toks = {}, []
for f in files:
    try:
        data = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
    except OSError:
        continue
    for w in data.split():
        toks.append(vocab.setdefault(w, len(vocab)))
    if len(toks) >= need:
        break
if not toks:
    sys.exit("make_data: no text found under /usr/share")
while len(toks) < need:      # a small machine: the corpus again
    toks.extend(toks[:need - len(toks)])
header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (windows, L)
pad = 64 - (10 + len(header) + 1) % 64
header = header + " " * pad + "\n"
with open(out, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%di" % need, *toks[:need]))
print("make_data: tokens: %d windows of %d from %d files, vocabulary %d words"
      % (windows, L, len(files), len(vocab)))
EOF
"$SHARD" convert "$OUT/tokens_src/tokens.npy" --from npy --out "$OUT/tokens" \
	--compression zstd:3 --quiet

# ---------------------------------------------------------------- synth
rm -rf "$OUT/synth"
"$SHARD" convert --from synth --out "$OUT/synth" --records "$SYNTH_RECORDS" \
	--seed 1 --field image:uint8:3x224x224:0.5 --field label:int64 \
	--compression none --quiet

for d in image tokens synth; do
	echo "== $OUT/$d"
	"$SHARD" info "$OUT/$d" | head -n 12
done
n=$(find "$src" -type f | wc -l)
bytes=$(find "$src" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
echo "make_data: image: $n files, mean $((bytes / n)) bytes (encoder: $encoder)"
