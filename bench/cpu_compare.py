#!/usr/bin/env python3
"""CPU time of shell commands side by side: each run of each command under
`perf stat -e task-clock` (the CPU of the command and every thread and
child of it), the commands taking turns run by run so a noisy neighbour
hits them alike; prints the median CPU milliseconds and wall seconds.

Usage: bench/cpu_compare.py RUNS NAME=COMMAND [NAME=COMMAND ...]
Env: OUT (a folder removed before every run: the commands' output).

E.g. convert --from npy against --from parquet on the same records
(inputs from `INPUTS=DIR bench/write_batch.py`):
    OUT=/tmp/o bench/cpu_compare.py 5 \\
        "npy=build/dlpack-shard convert D/label.npy,D/vec.npy,D/img.npy --out /tmp/o -q" \\
        "parquet=build/dlpack-shard convert --from parquet D/t.parquet --out /tmp/o -q"
"""
import os
import shutil
import statistics
import subprocess
import sys
import time


def task_clock_ms(command):
    p = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock",
                        "sh", "-c", command], capture_output=True, text=True)
    if p.returncode:
        sys.exit("%s failed:\n%s" % (command, p.stderr))
    for line in p.stderr.splitlines():
        if "task-clock" in line:
            return float(line.split(",")[0])
    sys.exit("no task-clock from perf stat:\n%s" % p.stderr)


def main():
    if len(sys.argv) < 3 or not shutil.which("perf"):
        sys.exit(__doc__ if shutil.which("perf") else "perf not found")
    runs = int(sys.argv[1])
    cmds = [a.split("=", 1) for a in sys.argv[2:]]
    out = os.environ.get("OUT")
    cpu = {n: [] for n, _ in cmds}
    wall = {n: [] for n, _ in cmds}
    for _ in range(runs):
        for name, command in cmds:
            if out:
                shutil.rmtree(out, ignore_errors=True)
            t = time.perf_counter()
            cpu[name].append(task_clock_ms(command))
            wall[name].append(time.perf_counter() - t)
    for name, _ in cmds:
        print("%-12s CPU median %7.0f ms (%s)  wall median %.2f s" % (
            name, statistics.median(cpu[name]),
            " ".join("%.0f" % x for x in cpu[name]),
            statistics.median(wall[name])))


if __name__ == "__main__":
    main()
