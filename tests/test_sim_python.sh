#!/bin/sh
# The simulated device through Python (python/tests/test_sim.py) on its
# own, so that `make test T=sim` runs it too; test_python.sh runs it
# with the rest of the suite.  Exit codes as test_python.sh's.
BUILD=${BUILD:-build}
case $BUILD in /*) build=$BUILD ;; *) build=$(pwd)/$BUILD ;; esac
SLUICE_PYTEST_K=sim SLUICE_PY_OUT="$build/python-sim" exec sh tests/test_python.sh
