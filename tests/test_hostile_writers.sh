#!/bin/sh
# Hostile inputs, round 3 (issue 24), concurrent and interrupted
# conversions: a folder a live writer holds is named busy with the
# writer's pid, never called leftovers, and no command advises removing
# it; `dlpack-shard clean` removes what a killed writer left (OUT's .tmp
# files, OUT.parts/) and refuses while a writer is live.
set -u
BUILD=${BUILD:-build}
DS="$BUILD/dlpack-shard"
[ -x "$DS" ] || { echo "skip: dlpack-shard is not built"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/test_hostile_writers.XXXXXX") || exit 1
bgpid=""
cleanup() {
	[ -n "$bgpid" ] && kill -9 "$bgpid" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; }

# run_fails PATTERN CMD...: exit 1 with PATTERN in the output.
run_fails() {
	pat=$1; shift
	timeout 20 "$@" >"$T/out" 2>"$T/err" </dev/null
	rc=$?
	[ $rc -eq 1 ] || { cat "$T/out" "$T/err"; fail "exit $rc (want 1): $*"; }
	cat "$T/out" "$T/err" >"$T/all"
	grep -q -- "$pat" "$T/all" ||
		{ cat "$T/all"; fail "output lacks '$pat': $*"; }
	echo "  ok: $(grep -- "$pat" "$T/all" | head -n 1)"
}

# no_advice: the last command's output must not suggest removing anything.
no_advice() {
	if grep -q -e "rm -r" -e "leftovers" -e " clean " "$T/all"; then
		cat "$T/all"
		fail "a live writer's folder was called leftovers or removal advised"
	fi
}

# start_writer DIR: a slow conversion into DIR in the background (zstd
# level 19 on 64 KiB records, 2 per shard: minutes for 100,000), once it
# has finished shards there (hidden .tmp files that look complete).
start_writer() {
	"$DS" convert --from synth --records 100000 \
		--field x:uint8:65536:0.5 --compression zstd:19 --threads 1 \
		--records-per-shard 2 --out "$1" --quiet >/dev/null 2>&1 &
	bgpid=$!
	i=0
	while [ $i -lt 600 ] &&
		[ "$(ls -a "$1" 2>/dev/null | grep -c '^\.data-.*\.tmp$')" -lt 3 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ $i -lt 600 ] || fail "no finished shard in $1 after 60 s"
}

stop_writer() {
	kill -9 "$bgpid" 2>/dev/null
	wait "$bgpid" 2>/dev/null
	bgpid=""
}

step "a live writer's folder is busy, with its pid"
start_writer "$T/live"
run_fails "live: busy: a writer (process $bgpid) is writing into it now" \
	"$DS" convert --from synth --records 8 --field x:uint8 --out "$T/live"
no_advice
run_fails "live: busy: a writer (process $bgpid) is writing into it now" \
	"$DS" verify "$T/live"
no_advice
run_fails "live: busy: a writer or merge (process $bgpid)" \
	"$DS" clean "$T/live"
ls -a "$T/live" | grep -q '^\.data-00000\.dls\..*\.tmp$' ||
	fail "clean removed a live writer's files"
kill -0 "$bgpid" 2>/dev/null || fail "the live writer died"

step "once killed, its files are leftovers, and clean removes them"
stop_writer
[ -e "$T/live/.sluice.lock" ] || fail "kill -9 left no lock file (test setup)"
run_fails "leftovers of an interrupted conversion.*no writer holds.*dlpack-shard clean" \
	"$DS" convert --from synth --records 8 --field x:uint8 --out "$T/live"
run_fails "incomplete temporary file (an interrupted write)" \
	"$DS" verify "$T/live"
timeout 20 "$DS" clean "$T/live" >"$T/out" 2>&1 || { cat "$T/out"; fail "clean"; }
grep -q "removed [1-9][0-9]* temporary files" "$T/out" ||
	{ cat "$T/out"; fail "clean's summary"; }
left=$(ls -A "$T/live")
[ -z "$left" ] || fail "clean left: $left"
"$DS" convert --from synth --records 8 --field x:uint8 --out "$T/live" \
	--quiet || fail "convert after clean"
"$DS" verify "$T/live" >/dev/null || fail "verify after clean + convert"

step "clean keeps a committed dataset"
timeout 20 "$DS" clean "$T/live" >"$T/out" 2>&1 || { cat "$T/out"; fail "clean"; }
"$DS" verify "$T/live" >/dev/null || fail "clean broke a committed dataset"
grep -q "removed 0 temporary files" "$T/out" || { cat "$T/out"; fail "summary"; }

step "clean removes OUT.parts, but not while a part is written"
mkdir -p "$T/sink.parts/run-aaaa"
"$DS" convert --from synth --records 50 --field x:int32 \
	--out "$T/sink.parts/run-aaaa/part-00000-a1" --quiet || fail "a part"
start_writer "$T/sink.parts/run-aaaa/part-00001-a2"
run_fails "part-00001-a2: busy: a writer (process $bgpid) is writing a part" \
	"$DS" clean "$T/sink"
[ -e "$T/sink.parts/run-aaaa/part-00000-a1/dataset.json" ] ||
	fail "clean removed parts while refusing"
stop_writer
timeout 20 "$DS" clean "$T/sink/" >"$T/out" 2>&1 || { cat "$T/out"; fail "clean"; }
[ ! -e "$T/sink.parts" ] || fail "clean left $T/sink.parts"
grep -q "sink.parts (" "$T/out" || { cat "$T/out"; fail "summary lacks sink.parts"; }
run_fails "no such folder" "$DS" clean "$T/sink"

step "shards committed without dataset.json are kept and named"
"$DS" convert --from synth --records 20 --field x:int32 \
	--records-per-shard 10 --out "$T/half" --quiet || fail "convert"
rm "$T/half/dataset.json"
timeout 20 "$DS" clean "$T/half" >"$T/out" 2>&1 || { cat "$T/out"; fail "clean"; }
grep -q "2 committed shards but no dataset.json" "$T/out" ||
	{ cat "$T/out"; fail "clean did not name the shards it kept"; }
[ -e "$T/half/data-00001.dls" ] || fail "clean removed a committed shard"

step "verify over a glob refuses records duplicated across parts or attempts"
mkdir "$T/p"
synth() { # OUT SEED RECORDS-PER-SHARD
	"$DS" convert --from synth --records 100 --field x:int32:4 \
		--field v:uint8:-1 --seed "$2" --records-per-shard "$3" \
		--out "$1" --quiet || fail "convert $1"
}
synth "$T/p/part-0-a1" 7 30     # a retried task's two attempts
synth "$T/p/part-0-a2" 7 30
synth "$T/p/part-1-a1" 8 30     # another task: its own records
"$DS" verify "$T/p/part-0-a1/*.dls,$T/p/part-1-a1/*.dls" >"$T/out" 2>&1 ||
	{ cat "$T/out"; fail "two parts of different records refused"; }
run_fails "part-0-a2/data-00000.dls: record 0 is also .*part-0-a1/data-00000.dls record 0, and 100 records in all of dataset" \
	"$DS" verify "$T/p/*/*.dls"
grep -q "part-1" "$T/all" && { cat "$T/all"; fail "part-1 named a duplicate"; }
# A killed run's part beside its rerun's, split into other shards.
synth "$T/rerun" 7 45
run_fails "rerun/data-00000.dls: record 0 is also .*part-0-a1/data-00000.dls record 0, and 100 records in all" \
	"$DS" verify "$T/p/part-0-a1/*.dls,$T/rerun/*.dls"
# The same shard twice: same dataset id and index.
run_fails "shard 0 of 4 of dataset .* where shard 1 of 4 was expected" \
	"$DS" verify "$T/p/part-1-a1/data-00000.dls,$T/p/part-1-a1/data-00000.dls"

echo "all writer tests passed"
