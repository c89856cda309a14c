#!/bin/sh
# tools/engines_env.sh - the python for `make test-engines`: a project-local
# virtual environment (build/engines-venv, git-ignored) with pyspark, ray
# and pyarrow (about 1 GB, from PyPI), created and filled on first use.
# Never installs into the system.  Exit 0 with the path on stdout, or 1
# with the reason on stderr.  Env: PYTHON (python3), ENGINES_VENV.
PY=${PYTHON:-python3}
VENV=${ENGINES_VENV:-build/engines-venv}
NEED="numpy pytest setuptools pyarrow pyspark ray[data]"

has_all() {
	"$1" -c 'import numpy, pytest, setuptools, pyarrow, pyspark, ray.data' \
		2>/dev/null
}
fail() { echo "$*" >&2; exit 1; }

case $VENV in /*) ;; *) VENV=$(pwd)/$VENV ;; esac
mkdir -p "$(dirname "$VENV")" || fail "cannot create $(dirname "$VENV")"
fill() {
	has_all "$VENV/bin/python" && return 0
	if [ ! -x "$VENV/bin/python" ]; then
		echo "engines_env: creating $VENV" >&2
		"$PY" -m venv "$VENV" >&2 ||
			fail "$PY -m venv failed (Debian: apt-get install python3-venv)"
	fi
	echo "engines_env: installing $NEED into $VENV" >&2
	# shellcheck disable=SC2086
	"$VENV/bin/python" -m pip install -q $NEED >&2 ||
		fail "could not install $NEED into $VENV (offline?)"
	has_all "$VENV/bin/python" || fail "$VENV lacks $NEED after install"
}
( flock 9 && fill ) 9>"$VENV.lock" || exit 1
echo "$VENV/bin/python"
