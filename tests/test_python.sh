#!/bin/sh
# The Python package: build the extension with $BUILD/libsluice.a linked
# in, into $BUILD/python, then run its pytest suite (python/tests) with a
# python3 that has pytest and numpy (tools/python_env.sh: the system's, or
# build/venv, filled on first use), less the CUDA tests, which
# tests/test_gpu_python.sh runs (and skips as a whole).
# SLUICE_PYTEST_K selects tests by name (pytest -k; default "not cuda").
# Exit 0 pass, 1 fail, 77 skip with the reason on the last line.
# SLUICE_PY_TESTS (python/tests) and SLUICE_PY_OUT ($BUILD/python) let
# tests/test_engines.sh run other suites the same way.
BUILD=${BUILD:-build}
SLUICE_PYTEST_K=${SLUICE_PYTEST_K-not cuda}
PY=${PYTHON:-python3}
root=$(pwd)
case $BUILD in /*) build=$BUILD ;; *) build=$root/$BUILD ;; esac

skip() { echo "$*"; exit 77; }

command -v "$PY" >/dev/null 2>&1 || skip "$PY not found"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 8))' ||
	skip "Python 3.8 or later needed"
# pytest and numpy: the system's, or a project-local venv made for them.
env_err=$(mktemp) || exit 1
PY=$(PYTHON="$PY" SLUICE_VENV="$root/build/venv" sh tools/python_env.sh \
	2>"$env_err")
rc=$?
cat "$env_err"
rm -f "$env_err"
[ $rc -eq 0 ] || skip "no Python with pytest and numpy (see above)"
echo "python: $PY"
[ -f "$build/libsluice.a" ] || { echo "no $build/libsluice.a"; exit 1; }

# Sanitizer builds: the runtime must be loaded before the interpreter.
case ${SAN:-} in
*thread*)
	skip "SAN=thread: python is not TSan-instrumented (run without SAN)" ;;
*address*|*undefined*)
	pre=
	for lib in asan ubsan; do
		case $SAN in *address*) ;; *) [ $lib = asan ] && continue ;; esac
		case $SAN in *undefined*) ;; *) [ $lib = ubsan ] && continue ;; esac
		f=$(${CC:-cc} -print-file-name=lib$lib.so)
		[ -f "$f" ] || skip "lib$lib.so not found for LD_PRELOAD"
		pre="$pre $f"
	done
	export LD_PRELOAD="${pre# }"
	# The interpreter's own allocations are not ours to judge.
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	;;
esac

out=${SLUICE_PY_OUT:-$build/python}
rm -rf "$out"
mkdir -p "$out"
san_flags=${SAN:+-fsanitize=$SAN -fno-sanitize-recover=all -fno-omit-frame-pointer}
(cd python && LD_PRELOAD= SLUICE_BUILD="$build" CFLAGS="$san_flags" \
	LDFLAGS="${SAN:+-fsanitize=$SAN}" "$PY" setup.py -q build \
	--build-base "$out/tmp" --build-lib "$out/lib") >"$out/build.log" 2>&1 ||
	{ cat "$out/build.log"; echo "building the extension failed"; exit 1; }

# Import the package just built, never a stale in-place one.
cd "$out" || exit 1
PYTHONPATH="$out/lib" PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -q -rs \
	-p no:cacheprovider --basetemp="${TMPDIR:-/tmp}/sluice-pytest-$$" \
	${SLUICE_PYTEST_K:+-k "$SLUICE_PYTEST_K"} \
	$(for t in ${SLUICE_PY_TESTS:-python/tests}; do echo "$root/$t"; done)
rc=$?
rm -rf "${TMPDIR:-/tmp}/sluice-pytest-$$"
case $rc in
0) exit 0 ;;
5) echo "pytest collected no tests"; exit 1 ;;
*) exit 1 ;;
esac
