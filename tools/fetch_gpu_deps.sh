#!/bin/sh
# Fetch what the GPU machine lacks into .gpu-deps/ (git-ignored), to be
# carried with the run (bench/gpu/run.sh unpacks it there): that machine
# has CUDA, nvcc, PyTorch and compute-sanitizer but no liburing, zstd or
# xxhash headers and no package registry.
#
# The .deb files of this (Debian/Ubuntu, x86-64) machine: headers plus the
# static archives, which run.sh links into the programs and tests so the
# GPU machine's runtime library versions do not matter; and the shared
# libraries, for libsluice.so (Debian's libzstd.a is not position-
# independent), found through an rpath to the unpacked copies.  libpython3.11-dev supplies Python.h for the
# abi3 extension when that machine's interpreter has no headers (a
# limited-API build from 3.11 headers loads in any later CPython).
# About 5 MB; the run tool carries at most 64 MiB with the working tree.
set -e
cd "$(dirname "$0")/.."
pkgs="liburing-dev libzstd-dev libxxhash-dev liburing2 libzstd1 libxxhash0"
py=$(apt-cache search --names-only '^libpython3\.[0-9]+-dev$' 2>/dev/null |
	awk '{print $1}' | sort -V | tail -n 1)
[ -n "$py" ] && pkgs="$pkgs $py"
[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] ||
	{ echo "fetch_gpu_deps: the GPU machine is x86-64; run this on amd64" >&2; exit 1; }
rm -rf .gpu-deps
mkdir -p .gpu-deps
# apt-get download writes to the current directory; a private one keeps
# the _apt sandbox warning about root-owned folders harmless.
(cd .gpu-deps && apt-get download $pkgs)
ls -l .gpu-deps
du -sh .gpu-deps
