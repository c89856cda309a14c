#!/bin/sh
# `sluice bench` on the device it runs on, checked through --json:
# - host: --plain-reads and --pageable are accepted, the stats say plain
#   reads with the reason, the PCIe limit is "n/a (host device)";
# - cuda: the PCIe probe measured a bandwidth, at least every delivered
#   byte was copied to the device (prefetch may have copied more), --compute-ms gives a GPU idle fraction in
#   [0, 1), and both forced fallbacks deliver every record.
# Without a usable GPU the cuda part skips: the test then ends SKIP (77)
# after the host part passed; with SLUICE_REQUIRE_GPU=1 that is a failure.
BUILD=${BUILD:-build}
SLUICE="$BUILD/sluice"
SHARD="$BUILD/dlpack-shard"
for b in "$SLUICE" "$SHARD"; do
	[ -x "$b" ] || { echo "missing $b (run make)"; exit 1; }
done
command -v python3 >/dev/null 2>&1 || { echo "skip: python3 is needed to check JSON"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-gpu-bench.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

"$SHARD" convert --from synth --out "$T/d" --records 300 --seed 3 \
	--field image:uint8:64x1024:0.5 --field label:int64 \
	--block-size 256K --compression zstd:1 --quiet || { echo "convert failed"; exit 1; }

check() { # JSON-FILE PYTHON-EXPRESSIONS (each must hold; j is the object)
	python3 - "$@" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
bad = [e for e in sys.argv[2:] if not eval(e)]
for e in bad:
    print("FAIL:", e)
sys.exit(1 if bad else 0)
PY
}

"$SLUICE" bench "$T/d" --device host --batch-size 32 --plain-reads --pageable \
	--compute-ms 0.5 --json >"$T/host.json" || { echo "host bench failed"; exit 1; }
check "$T/host.json" \
	'j["result"]["records"] == 300' \
	'j["fallbacks"]["registered_buffers"] == 0' \
	'"buffer registration off (asked)" in j["fallbacks"]["reasons"]' \
	'j["limits"]["pcie"]["status"] == "n/a (host device)"' \
	'"gpu_idle_fraction" not in j["result"]' || exit 1
echo "host part: ok"

"$SLUICE" bench "$T/d" --device cuda --batch-size 32 --json >"$T/cuda.json" 2>"$T/cuda.err"
if grep -q "no CUDA GPU found" "$T/cuda.err"; then
	why=$(head -n 1 "$T/cuda.err")
	[ "$SLUICE_REQUIRE_GPU" = 1 ] && { echo "SLUICE_REQUIRE_GPU=1 but: $why"; exit 1; }
	echo "skip: cuda part: $why (the host part passed)"
	exit 77
fi
[ -s "$T/cuda.json" ] || { cat "$T/cuda.err"; echo "cuda bench failed"; exit 1; }
check "$T/cuda.json" \
	'j["config"]["device"] == "cuda"' \
	'j["result"]["records"] == 300' \
	'j["limits"]["pcie"]["gbps"] > 0' \
	'j["limits"]["pcie_probe"]["bytes_per_s"] > 0' \
	'j["stages"]["copy"]["bytes"] >= 300 * (64 * 1024 + 8)' \
	'j["result"]["device_copy_gbps"] > 0' || exit 1

"$SLUICE" bench "$T/d" --device cuda --batch-size 32 --compute-ms 2 --json >"$T/step.json" ||
	{ echo "cuda bench --compute-ms failed"; exit 1; }
check "$T/step.json" \
	'0 <= j["result"]["gpu_idle_fraction"] < 1' \
	'j["result"]["seconds"] >= j["result"]["batches"] * 0.002' || exit 1

for knob in --pageable --plain-reads; do
	"$SLUICE" bench "$T/d" --device cuda --batch-size 32 $knob --json >"$T/knob.json" ||
		{ echo "cuda bench $knob failed"; exit 1; }
	check "$T/knob.json" 'j["result"]["records"] == 300' \
		'"(asked)" in j["fallbacks"]["reasons"]' || exit 1
done
echo "cuda part: ok"
