#!/bin/sh
# Install the build dependencies when they are missing: with apt-get when we
# are root, else print the exact command and stop.
missing=""
have_header() { printf '#include <%s>\n' "$1" | ${CC:-cc} -E -x c - >/dev/null 2>&1; }
have_header liburing.h || missing="$missing liburing-dev"
have_header zstd.h || missing="$missing libzstd-dev"
have_header xxhash.h || missing="$missing libxxhash-dev"
command -v ${CC:-cc} >/dev/null 2>&1 || missing="$missing gcc make"
[ -z "$missing" ] && exit 0
cmd="apt-get install -y$missing"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "deps: installing$missing"
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive $cmd -qq) >/dev/null ||
		{ echo "deps: '$cmd' failed" >&2; exit 1; }
else
	echo "deps: missing$missing; run as root:" >&2
	echo "  apt-get update && $cmd" >&2
	exit 1
fi
