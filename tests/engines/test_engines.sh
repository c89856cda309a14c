#!/bin/sh
# Spark and Ray writing datasets (sluice.spark, sluice.ray), parquet
# conversion and write_batch's Arrow paths: python/tests_engines and
# python/tests/test_write_batch.py under a python that has pyspark, ray and
# pyarrow.  They are big (about 1 GB), so only `make test-engines` runs
# this, after installing them into build/engines-venv (or ENGINES_PYTHON
# names such a python); without them it skips, saying so.  Java 17 for Spark.
# Exit 0 pass, 1 fail, 77 skip with the reason on the last line.
root=$(pwd)
skip() { echo "$*"; exit 77; }

case ${SAN:-} in
?*) skip "SAN=$SAN: Spark, Ray and CPython are not instrumented (the C" \
	"path, sluice_writer_add_columns, is test_writer_batch)" ;;
esac
PY=${ENGINES_PYTHON:-$root/build/engines-venv/bin/python}
[ -x "$PY" ] || skip "no python with pyspark, ray and pyarrow: run" \
	"'make test-engines' (installs them into build/engines-venv)"
"$PY" -c 'import pyspark, ray, pyarrow, pytest, numpy' 2>/dev/null ||
	skip "$PY lacks pyspark, ray, pyarrow, pytest or numpy:" \
		"'make test-engines' installs them"
command -v java >/dev/null 2>&1 || skip "no java for Spark (Java 17)"

BUILD=${BUILD:-build}
case $BUILD in /*) build=$BUILD ;; *) build=$root/$BUILD ;; esac
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
export RAY_USAGE_STATS_ENABLED=0 RAY_DISABLE_DOCKER_CPU_WARNING=1
# Only what these suites need of $PY (not wheel and build, which only the
# install test wants): else tools/python_env.sh would run them with
# another python, which has no pyspark, and every test would skip.
SLUICE_PY_TESTS="python/tests_engines python/tests/test_write_batch.py" \
SLUICE_PY_OUT="$build/python-engines" PYTHON="$PY" SLUICE_FORCE_VENV=0 \
SLUICE_PY_NEED="pytest numpy setuptools pyarrow pyspark ray" \
	exec sh tests/test_python.sh
