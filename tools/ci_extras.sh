#!/bin/sh
# Tools the tests use beyond the build dependencies: fio and zstd (bench
# comparisons in tests of the bench).  Best effort: tests skip with a
# reason without.  pytest and numpy are not installed here: `make test`
# puts them in a project-local venv when the system lacks them
# (tools/python_env.sh).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	need=""
	command -v zstd >/dev/null 2>&1 || need="$need zstd"
	command -v fio >/dev/null 2>&1 || need="$need fio"
	if [ -n "$need" ]; then
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need) >/dev/null 2>&1 ||
			echo "ci_extras: could not install$need" >&2
	fi
fi
exit 0
