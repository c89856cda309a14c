#!/bin/sh
# make demo: a sample ImageFolder dataset from pictures this machine ships
# (random bytes when it ships none), converted with dlpack-shard, streamed
# through the pipeline (GPU when present, host otherwise), benchmarked.
set -eu
BUILD=${1:-build}
root=demo-data
src=$root/src
out=$root/shards
rm -rf "$root"
mkdir -p "$src"

# Up to 600 real pictures, split into classes by their folder name.
n=0
find /usr/share -type f \( -name '*.jpg' -o -name '*.jpeg' -o -name '*.png' \) \
	-size +2k 2>/dev/null | sort | head -n 600 >"$root/pictures.txt" || true
while IFS= read -r f; do
	cls=$(basename "$(dirname "$f")" | tr -c 'A-Za-z0-9_\n-' '_')
	mkdir -p "$src/$cls"
	cp "$f" "$src/$cls/$n-$(basename "$f")"
	n=$((n + 1))
done <"$root/pictures.txt"
if [ "$n" -lt 50 ]; then
	echo "demo: few pictures on this machine; adding random 'images'"
	for c in cat dog; do
		mkdir -p "$src/$c"
		i=0
		while [ $i -lt 300 ]; do
			head -c $((20000 + (i * 997) % 90000)) /dev/urandom >"$src/$c/$i.jpg"
			i=$((i + 1))
		done
	done
fi
echo "demo: $(find "$src" -type f | wc -l) files in $(ls "$src" | wc -l) classes under $src"

"$BUILD/dlpack-shard" convert "$src" --out "$out" --from dir \
	--compression zstd:3 --block-size 1M --quiet
"$BUILD/dlpack-shard" info "$out"
"$BUILD/dlpack-shard" verify "$out"
echo
"$BUILD/sluice" bench "$out" --batch-size 64 --epochs 2 --decode-threads 2
