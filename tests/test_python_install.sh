#!/bin/sh
# The Python package installs self-contained: `pip install ./python` into a
# fresh venv builds libsluice from source and links it in (no libsluice.so,
# no RUNPATH into a build tree, no make install/ldconfig); a change to the
# library's sources is picked up by the next install (no stale build); the
# sdist carries the library, and the wheel built from it (python -m build)
# works in another fresh venv.  Offline: each fresh venv sees the
# setuptools, wheel and build of tools/python_env.sh's python (the
# system's, or build/venv) through a .pth file, and pip runs with
# --no-build-isolation --no-index.
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
# Every site directory of $PY, in its order (a venv made with
# --system-site-packages has two).
tools_site=$("$PY" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))')

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# A clean copy of the checkout: what pip sees is only what is committed to
# the tree, never a build left in python/build or python/sluice/*.so.
mkdir "$tmp/src"
for p in Makefile include datasets io pipeline gpu programs python; do
	cp -r "$root/$p" "$tmp/src/" || fail "copying $p"
done
rm -rf "$tmp/src/python/build" "$tmp/src/python/"*.egg-info
find "$tmp/src" \( -name '*.so' -o -name '*.o' -o -name '*.d' \) -delete

quiet() { # run, show the log only when it fails
	log=$tmp/log
	"$@" >"$log" 2>&1 || { tail -n 40 "$log"; fail "$*"; }
}

check_venv() { # venv: import from elsewhere, write and load a dataset
	(cd "$tmp" && env -u PYTHONPATH -u LD_LIBRARY_PATH "$1/bin/python" - "$tmp/ds-$2" <<'EOF'
import os, sys
import numpy as np
import sluice

assert "/src/" not in sluice.__file__, sluice.__file__
so = sluice._sluice.__file__
with open(so, "rb") as f:
    blob = f.read()
assert b"libsluice.so" not in blob, "extension still needs libsluice.so"
path = sys.argv[1]
with sluice.ShardWriter(path, [("x", "int64", (3,))]) as w:
    for i in range(50):
        w.write({"x": np.arange(3) + 10 * i})
got = []
for b in sluice.Loader(path, batch_size=8, shuffle="none", device="cpu"):
    got.append(np.from_dlpack(b["x"]).copy())
got = np.concatenate(got)
want = np.arange(3)[None, :] + 10 * np.arange(50)[:, None]
assert (got == want).all()
print(sluice.strerror(0))
EOF
	)
}

# 0. The package without its extension says how to build it.
out=$(cd "$tmp" && PYTHONPATH="$tmp/src/python" "$PY" -c 'import sluice' 2>&1) &&
	fail "import without the extension succeeded"
case $out in *"make python"*"pip install ./python"*|*"pip install ./python"*"make python"*) ;;
*) fail "import without the extension: $out" ;; esac

new_venv() { # DIR: a fresh venv that sees the build tools, not sluice
	"$PY" -m venv "$1" || fail "venv $1"
	site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	echo "$tools_site" >"$site/build-tools.pth"
}

# 1. pip install ./python into a fresh venv.
new_venv "$tmp/venv"
pipi() { "$tmp/venv/bin/python" -m pip install -q --no-build-isolation \
	--no-index --no-deps "$@"; }
quiet pipi "$tmp/src/python"
out=$(check_venv "$tmp/venv" 1) || fail "installed package: $out"
[ "$out" = success ] || fail "strerror(0) is '$out'"
if command -v readelf >/dev/null 2>&1; then
	so=$(cd "$tmp" && "$tmp/venv/bin/python" -c 'import sluice._sluice as m; print(m.__file__)')
	readelf -d "$so" >"$tmp/dyn" || fail "readelf $so"
	grep -q 'libsluice' "$tmp/dyn" && fail "the extension needs libsluice: $(grep libsluice "$tmp/dyn")"
	grep -E 'RPATH|RUNPATH' "$tmp/dyn" | grep -q -e "$tmp" -e "$root" &&
		fail "RUNPATH into a build tree: $(grep -E 'RPATH|RUNPATH' "$tmp/dyn")"
fi
echo "pip install ./python: ok"

# 2. A change to libsluice's sources reaches the next install.
sed -i 's/"success"/"success, rebuilt"/' "$tmp/src/datasets/errors.c"
grep -q 'success, rebuilt' "$tmp/src/datasets/errors.c" ||
	fail "datasets/errors.c no longer says \"success\": update this test"
quiet pipi --force-reinstall "$tmp/src/python"
out=$(check_venv "$tmp/venv" 2) || fail "reinstalled package: $out"
[ "$out" = "success, rebuilt" ] || fail "stale library after reinstall: '$out'"
echo "reinstall after a library change: rebuilt"
sed -i 's/"success, rebuilt"/"success"/' "$tmp/src/datasets/errors.c"

# 3. sdist -> wheel (python -m build), installed into another venv.
if "$PY" -c 'import build' 2>/dev/null; then
	quiet "$PY" -m build --no-isolation --outdir "$tmp/dist" "$tmp/src/python"
	tar tzf "$tmp"/dist/sluice-*.tar.gz | grep -q 'libsluice/include/sluice.h' ||
		fail "the sdist does not carry libsluice's sources"
	new_venv "$tmp/venv2"
	quiet "$tmp/venv2/bin/python" -m pip install -q --no-index --no-deps \
		"$tmp"/dist/sluice-*.whl
	out=$(check_venv "$tmp/venv2" 3) || fail "wheel: $out"
	echo "python -m build (sdist, then wheel from it): ok"
else
	echo "python -m build: not checked (the 'build' package is not installed)"
fi
