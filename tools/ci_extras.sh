#!/bin/sh
# Tools the tests use beyond the build dependencies: fio and zstd (bench
# comparisons in tests of the bench), clang (the libFuzzer builds CI
# replays), python3 with pytest and numpy (the Python package's tests).  Best effort: tests skip with a reason without.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	need=""
	command -v zstd >/dev/null 2>&1 || need="$need zstd"
	command -v fio >/dev/null 2>&1 || need="$need fio"
	command -v clang >/dev/null 2>&1 || need="$need clang"
	if [ -n "$need" ]; then
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need) >/dev/null 2>&1 ||
			echo "ci_extras: could not install$need" >&2
	fi
fi
if command -v python3 >/dev/null 2>&1; then
	python3 -c 'import pytest, numpy' 2>/dev/null ||
		python3 -m pip install -q pytest numpy >/dev/null 2>&1 ||
		echo "ci_extras: could not install pytest/numpy" >&2
fi
exit 0
