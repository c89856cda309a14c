#!/usr/bin/env python3
"""Peak memory of a process and all its descendants, sampled from /proc.

Forked DataLoader workers share most of their pages with the parent, so
summed RSS counts those pages once per worker; PSS (proportional set
size, /proc/PID/smaps_rollup) divides each shared page among its users
and so sums to what the tree really holds.  Both are reported: the peak
over samples every 20 ms of the tree's summed PSS and summed RSS.

As a module: TreePeak(pid).start() ... .stop() -> {"peak_pss_mb", ...}.
As a command: peak_memory.py OUT.json -- CMD [ARG...] runs CMD (its
stdout and stderr pass through), writes the peaks to OUT.json and exits
with CMD's status.
"""
import json
import os
import subprocess
import sys
import threading
import time


def _children_map():
    """{ppid: [pid, ...]} of every process now alive."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the ppid is
        # the second field after its closing parenthesis.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _tree(pid):
    kids, todo, out = _children_map(), [pid], []
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def _pss_rss_kb(pid):
    pss = rss = 0
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
    except OSError:
        pass            # exited between the listing and the read
    return pss, rss


class TreePeak:
    def __init__(self, pid, interval=0.02):
        self.pid, self.interval = pid, interval
        self.peak_pss = self.peak_rss = self.first_pss = 0
        self.thread_cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self):
        pss = rss = 0
        for p in _tree(self.pid):
            a, b = _pss_rss_kb(p)
            pss += a
            rss += b
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_rss = max(self.peak_rss, rss)
        return pss

    def _run(self):
        # Reading smaps_rollup of a process with torch mapped costs
        # milliseconds of this thread's CPU: kept apart, so that a caller
        # measuring its own process's CPU can leave the sampler out.
        t0 = time.thread_time()
        while not self._stop.wait(self.interval):
            self.sample()
        self.thread_cpu_s = time.thread_time() - t0

    def start(self):
        self.first_pss = self.sample()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        return {"peak_pss_mb": self.peak_pss / 1024.0,
                "peak_rss_mb": self.peak_rss / 1024.0,
                "start_pss_mb": self.first_pss / 1024.0,
                "sampler_cpu_s": self.thread_cpu_s}


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: peak_memory.py OUT.json -- CMD [ARG...]")
    proc = subprocess.Popen(sys.argv[3:])
    peak = TreePeak(proc.pid).start()
    rc = proc.wait()
    result = peak.stop()
    with open(sys.argv[1], "w") as f:
        json.dump(result, f)
    sys.exit(rc)


if __name__ == "__main__":
    main()
