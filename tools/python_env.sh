#!/bin/sh
# tools/python_env.sh - print the path of a python3 that has what the
# Python tests need (pytest, numpy; setuptools, wheel and build to build
# the package offline in tests/test_python_install.sh): the system's when it has
# them, otherwise a project-local virtual environment (build/venv,
# git-ignored) created and filled on first use.  Never installs into the
# system.  Exit 0 with the path on stdout, or 1 with the reason on stderr.
# Env: PYTHON (python3), SLUICE_VENV (build/venv), SLUICE_FORCE_VENV=1
# (use the venv even when the system has everything), SLUICE_PY_NEED (the
# modules needed, space-separated; default all of the above).
PY=${PYTHON:-python3}
VENV=${SLUICE_VENV:-build/venv}
NEED=${SLUICE_PY_NEED:-pytest numpy setuptools wheel build}

has_all() {
	"$1" -c "import $(echo $NEED | sed 's/ /, /g')" 2>/dev/null
}
fail() { echo "$*" >&2; exit 1; }

command -v "$PY" >/dev/null 2>&1 || fail "$PY not found"
if [ "${SLUICE_FORCE_VENV:-0}" != 1 ] && has_all "$PY"; then
	command -v "$PY"
	exit 0
fi
case $VENV in /*) ;; *) VENV=$(pwd)/$VENV ;; esac
mkdir -p "$(dirname "$VENV")" || fail "cannot create $(dirname "$VENV")"

fill_venv() {
	has_all "$VENV/bin/python" && return 0
	if [ ! -x "$VENV/bin/python" ]; then
		echo "python_env: creating $VENV" >&2
		"$PY" -m venv "$VENV" >&2 ||
			fail "$PY -m venv failed (Debian: apt-get install python3-venv)"
	fi
	echo "python_env: installing $NEED into $VENV" >&2
	# shellcheck disable=SC2086
	"$VENV/bin/python" -m pip install -q $NEED >&2 ||
		fail "could not install $NEED into $VENV (offline?)"
	has_all "$VENV/bin/python" || fail "$VENV lacks $NEED after install"
}

# Two test runs at once (plain and sanitizer builds) fill it once.
if command -v flock >/dev/null 2>&1; then
	( flock 9 && fill_venv ) 9>"$VENV.lock" || exit 1
else
	( fill_venv ) || exit 1
fi
echo "$VENV/bin/python"
