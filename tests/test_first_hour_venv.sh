#!/bin/sh
# A user's first hour, from a fresh venv (issue 25): `pip install ./python`
# (offline: --no-build-isolation --no-index, with the setuptools and wheel
# of tools/python_env.sh's python, as tests/test_python_install.sh does)
# and nothing else, then, with only the venv's bin/ on PATH:
# - `dlpack-shard` and `sluice` are there, from the venv (the wheel ships
#   them), and each answers --help;
# - the README's ImageFolder line, `dlpack-shard convert data/train --out
#   data/train-shards`, run as written, keeps the class names;
# - `sluice stream` reads it and says its host fallback once;
# - the README's first Python example, as written (with epochs = 2), runs
#   and sees every record each epoch; where torch is not in the venv it
#   runs with sluice.Loader in place of sluice.torch.Loader (said so), and
#   sluice.torch says to install torch;
# - `dlpack-shard convert --from parquet` runs the venv's python (the
#   parquet importer needs pyarrow: checked only where the venv has it).
# Exit 0 pass, 1 fail, 77 skip with the reason on the last line.
PY=${PYTHON:-python3}
root=$(pwd)

skip() { echo "$*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

case ${SAN:-} in ?*) skip "SAN=$SAN: this test builds its own (plain) library" ;; esac
command -v make >/dev/null 2>&1 || skip "make not found"
PY=$(PYTHON="$PY" SLUICE_VENV="$root/build/venv" sh tools/python_env.sh) ||
	skip "no Python with setuptools, wheel and build (see above)"
"$PY" -c 'import venv, ensurepip' 2>/dev/null ||
	skip "python venv/ensurepip missing (apt-get install python3-venv)"
"$PY" -c 'import setuptools, sys
v = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
sys.exit(v < (61, 0))' || skip "setuptools < 61 in $PY"
tools_site=$("$PY" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))')

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-firsthour-venv.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# What a clone has: the committed tree's folders, no build outputs.
mkdir "$tmp/src"
for p in Makefile include datasets io pipeline gpu programs python README.md; do
	cp -r "$root/$p" "$tmp/src/" || fail "copying $p"
done
rm -rf "$tmp/src/python/build" "$tmp/src/python/"*.egg-info "$tmp/src/python/sluice/bin"
find "$tmp/src" \( -name '*.so' -o -name '*.o' -o -name '*.d' \) -delete

"$PY" -m venv "$tmp/venv" || fail "venv"
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$tools_site" >"$site/build-tools.pth"
"$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-index \
	--no-deps "$tmp/src/python" >"$tmp/pip.log" 2>&1 ||
	{ tail -n 30 "$tmp/pip.log"; fail "pip install ./python"; }
echo "ok: pip install ./python"

# Only the venv's bin and the system's: no build/ tree, no PYTHONPATH.
PATH="$tmp/venv/bin:/usr/local/bin:/usr/bin:/bin"
export PATH
unset PYTHONPATH LD_LIBRARY_PATH SLUICE_PYTHON SLUICE_BIN
cd "$tmp" || fail "cd $tmp"
for prog in dlpack-shard sluice; do
	where=$(command -v "$prog") || fail "$prog is not on PATH after pip install ./python"
	[ "$where" = "$tmp/venv/bin/$prog" ] || fail "$prog is $where, not the venv's"
	"$prog" --help >"$tmp/help" 2>&1 || fail "$prog --help: exit $?"
	grep -q "Usage" "$tmp/help" || fail "$prog --help: $(head -n 3 "$tmp/help")"
done
echo "ok: dlpack-shard and sluice on the venv's PATH"

# An ImageFolder tree: 3 classes x 20 files.
for c in cat dog fish; do
	mkdir -p data/train/$c
	i=0
	while [ $i -lt 20 ]; do
		printf '%s-%03d-%0200d' $c $i $i >data/train/$c/$i.jpg
		i=$((i + 1))
	done
done
line=$(grep -o 'dlpack-shard convert data/train --out data/train-shards' "$tmp/src/README.md" | head -n 1)
[ -n "$line" ] || fail "the README no longer shows 'dlpack-shard convert data/train --out data/train-shards': update this test"
$line --quiet 2>"$tmp/err" || fail "$line: $(cat "$tmp/err")"
dlpack-shard info data/train-shards >"$tmp/info" 2>&1 || fail "info: $(cat "$tmp/info")"
grep -q "cat" "$tmp/info" && grep -q "fish" "$tmp/info" ||
	fail "info does not show the class names: $(cat "$tmp/info")"
echo "ok: README's convert line, class names kept"

sluice stream data/train-shards >"$tmp/out" 2>"$tmp/err" ||
	fail "sluice stream: $(cat "$tmp/err")"
grep -q "^records 60 " "$tmp/out" ||
	fail "sluice stream did not report 60 records: $(cat "$tmp/out" "$tmp/err")"
if [ ! -e /dev/nvidia0 ]; then
	n=$(grep -c "note:" "$tmp/err")
	[ "$n" = 1 ] || fail "stream said its fallbacks $n times: $(cat "$tmp/err")"
fi
echo "ok: sluice stream"

# The README's first Python example, as written.
sed -n '/^From a PyTorch DataLoader loop/,/^```$/p' "$tmp/src/README.md" |
	sed -n '/^```python$/,/^```$/p' | sed '1d;$d' >"$tmp/example.py"
grep -q "sluice.torch.Loader" "$tmp/example.py" ||
	fail "README's first example is not the sluice.torch.Loader swap: $(cat "$tmp/example.py")"
cat >"$tmp/run_example.py" <<'PYEOF'
import sys, warnings
warnings.simplefilter("ignore")   # the host fallback, said once (above)
import sluice
src = open(sys.argv[1]).read()
try:
    import torch  # noqa: F401
    how = "sluice.torch.Loader"
except ImportError:
    try:
        sluice.torch.Loader
        sys.exit("sluice.torch without torch did not raise ImportError")
    except ImportError as e:
        assert "torch" in str(e), e
    src = src.replace("sluice.torch.Loader", "sluice.Loader")
    how = "sluice.Loader (torch is not installed in the venv)"
g = {"epochs": 2, "__name__": "__main__"}
code = compile(src, "README.md example", "exec")
exec(code, g)
loader = g["loader"]
n = 0
for epoch in range(2):
    loader.set_epoch(epoch)
    for batch in loader:
        n += len(batch["label"]) if hasattr(batch["label"], "__len__") \
            else batch["label"].shape[0]
assert n == 120, n
print("README example ran with %s" % how)
PYEOF
python "$tmp/run_example.py" "$tmp/example.py" >"$tmp/ex.out" 2>&1 ||
	fail "README's first example: $(tail -n 15 "$tmp/ex.out")"
cat "$tmp/ex.out"

# dlpack-shard's parquet import runs the venv's python (SLUICE_PYTHON unset).
if python -c 'import pyarrow' 2>/dev/null; then
	python - <<'PYEOF' || fail "writing a parquet file"
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"x": list(range(100))}), "t.parquet")
PYEOF
	dlpack-shard convert t.parquet --out pq --quiet 2>"$tmp/err" ||
		fail "convert --from parquet: $(cat "$tmp/err")"
	echo "ok: dlpack-shard convert --from parquet with the venv's python"
else
	# Without pyarrow the import still runs the venv's python, which has
	# sluice and says to install pyarrow (the system's python3 has no
	# sluice and would say "No module named 'sluice'").
	: >t.parquet
	dlpack-shard convert t.parquet --out pq --quiet 2>"$tmp/err" &&
		fail "convert --from parquet without pyarrow succeeded"
	grep -q "pip install pyarrow" "$tmp/err" ||
		fail "convert --from parquet did not run the venv's python: $(cat "$tmp/err")"
	echo "ok: dlpack-shard convert --from parquet runs the venv's python (no pyarrow there: says to install it)"
fi
echo "first hour from a fresh venv: ok"
