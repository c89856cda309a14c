#!/usr/bin/env python3
"""Randomized sweep of the default memory budget (issue 22, goal 4).

Makes small synthetic datasets in /dev/shm (fixed and variable fields,
skewed variable sizes with empty values and rare values of MiBs, raw and
zstd, blocks of 64 KiB to 64 MiB, records of a few bytes to 16 MiB, one
to many shards) and runs build/budget_probe (the library's defaults, host
batches, every epoch checked) over every shuffle mode and batch sizes
1..1024, with $LOCAL_WORLD_SIZE scaling the default cap down so that it
binds.  Checks:

  (a) the default budget refuses nothing whose largest batch fits the
      cap beside as much again for its blocks (refused-below-cap: it
      refused while taking less than its cap), takes no more than the
      cap, and says "memory binds" when the cap binds;
  (b) peak RSS (/usr/bin/time %M) <= memory_bytes + a fixed overhead;
  (c) an explicit memory_bytes is taken exactly or refused with a message:
      the smallest accepted value (bisected) and values above it are
      honoured, the page below it is refused; an explicit cache_bytes is
      honoured (io memory at least that) or refused;
  (d) every record is delivered exactly once per epoch, and `sluice
      stream --hash` delivers the bytes `dlpack-shard cat --hash` reads.

    python3 bench/budget_sweep.py [--minutes 35] [--seed S] [--keep]
        [--work DIR] [--build DIR]

Prints one line per finding (FINDING {json}: kind, dataset, command to
rerun) and a summary; exits 1 when anything failed.  The batches a
consumer keeps past the budget (hold=1, over-budget*) are reported too:
a capped default cannot always keep two batches' room.
"""
import argparse
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
WORK = "/dev/shm/budget_sweep"
SHUFFLES = ("none", "block", "window", "full")
BATCHES = (1, 2, 3, 7, 16, 31, 64, 100, 256, 512, 1024)
RANKS = (1, 1, 2, 4, 8, 16, 32, 64)      # $LOCAL_WORLD_SIZE: cap / ranks
PAGE = 4096
MiB = 1 << 20
# What RSS may hold besides the arena: the binary, libraries, thread
# stacks, the index and sampler (bytes per record), the probe's bitmap.
RSS_FIXED = 48 * MiB
RSS_PER_RECORD = 48
PROBE_TIMEOUT = 240

findings = []
stats = {"datasets": 0, "runs": 0, "default_runs": 0, "refused": 0,
         "refused_batch_fits": 0, "capped": 0, "explicit_runs": 0,
         "hash_checks": 0}


def cap_for(ranks):
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return ram // 8 // ranks


def finding(kind, ds, what, **kw):
    line = {"kind": kind, "dataset": ds["desc"], "what": what}
    line.update(kw)
    findings.append(line)
    print("FINDING " + json.dumps(line), flush=True)


def probe(ds, shuffle, batch, memory=0, cache=0, epochs=1, hold=0, ranks=1):
    env = dict(os.environ, LOCAL_WORLD_SIZE=str(ranks))
    tfile = os.path.join(WORK, "time")
    cmd = ["/usr/bin/time", "-f", "%M", "-o", tfile,
           os.path.join(BUILD, "budget_probe"), ds["path"], shuffle,
           str(batch), str(memory), str(cache), str(epochs), str(int(hold))]
    stats["runs"] += 1
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        finding("timeout", ds, " ".join(cmd[5:]), seconds=PROBE_TIMEOUT)
        return {"ok": -2, "error": "timeout", "rss": 0,
                "cmd": " ".join(cmd[5:])}
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {"ok": -1, "error": "rc %d: %s %s" % (p.returncode, p.stdout,
                                                    p.stderr)}
    with open(tfile) as f:
        out["rss"] = int(f.read().split()[-1]) * 1024
    out["cmd"] = "LOCAL_WORLD_SIZE=%d %s" % (ranks, " ".join(cmd[5:]))
    return out


# ---- datasets ------------------------------------------------------------

def log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def convert(args, out):
    subprocess.run([os.path.join(BUILD, "dlpack-shard"), "convert"] + args +
                   ["--out", out, "--quiet"], check=True)


def layout_args(rng, total):
    block = log_uniform(rng, 64 << 10, 64 << 20)
    shards = rng.choice((1, 1, 2, 3, 8, 40))
    comp = rng.choice(("none", "zstd"))
    return block, comp, ["--block-size", str(block), "--compression", comp,
                         "--shard-size", str(max(total // shards, 4096))]


def make_synth(rng, path):
    """Fixed and uniform variable fields: record sizes known up to the
    variable values' range (0..2 x mean units)."""
    rec_target = log_uniform(rng, 4, 16 * MiB)
    total = log_uniform(rng, 256 << 10, 1200 * MiB)
    nfields = rng.choice((1, 2, 3))
    fields, rec_max, rec_min, var = [], 0, 0, 0
    for k in range(nfields):
        share = max(rec_target // nfields, 1)
        dtype, item = rng.choice((("uint8", 1), ("float32", 4), ("int64", 8)))
        if rng.random() < 0.5:                  # fixed
            n = max(share // item, 1)
            a = int(math.sqrt(n)) if n > 4096 and rng.random() < 0.5 else 0
            shape = "%dx%d" % (a, n // a) if a else str(n)
            size = (a * (n // a) if a else n) * item
            fields.append("f%d:%s:%s:%.2f" % (k, dtype, shape, rng.random()))
            rec_max += size
            rec_min += size
        else:                                   # variable, -1xK
            unit_items = max(share // item, 1) if share > 4096 else \
                rng.choice((1, 2, 16))
            unit = unit_items * item
            mean = max(4096 // unit, 1)
            fields.append("v%d:%s:-1x%d:%.2f" % (k, dtype, unit_items,
                                                  rng.random()))
            rec_max += 2 * mean * unit
            var += 1
    n = max(1, min(total // max(rec_max, 1), 150000))
    block, comp, lay = layout_args(rng, n * rec_max)
    args = ["--from", "synth", "--records", str(n),
            "--seed", str(rng.randrange(1 << 30))]
    for f in fields:
        args += ["--field", f]
    convert(args + lay, path)
    return {"path": path, "n": n, "rec_max": rec_max, "sizes": None,
            "var_fields": var, "block": block,
            "desc": "synth n=%d fields=%s block=%d %s shards~%s" % (
                n, ",".join(fields), block, comp, lay[-1])}


def make_skewed(rng, path):
    """A WebDataset tar: .bin mostly tiny, often empty, rarely MiBs (in
    runs or scattered), .txt tiny, .cls an integer."""
    n = log_uniform(rng, 3, 60000)
    p_big = rng.choice((0.0005, 0.005, 0.02, 0.2))
    p_empty = rng.choice((0.0, 0.1, 0.5, 0.9))
    big_hi = rng.choice((2, 8, 16)) * MiB
    runs = rng.random() < 0.5
    budget = 1100 * MiB
    tmp = path + ".tar"
    sizes, big_left, pattern = [], 0, os.urandom(64)
    with tarfile.open(tmp, "w") as t:
        for i in range(n):
            if big_left == 0 and rng.random() < p_big:
                big_left = rng.randint(2, 40) if runs else 1
            if big_left and budget > big_hi:
                big_left -= 1
                b = rng.randint(MiB, big_hi)
            elif rng.random() < p_empty:
                b = 0
            else:
                b = rng.randint(1, 64)
            budget -= b
            txt = rng.randint(0, 16)
            half = os.urandom(b // 2)            # zstd gets half of it
            fill = (pattern * ((b - len(half)) // 64 + 1))[:b - len(half)]
            vals = (("bin", half + fill), ("txt", b"x" * txt),
                    ("cls", str(i % 10).encode()))
            for ext, data in vals:
                ti = tarfile.TarInfo("s%07d.%s" % (i, ext))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
            sizes.append(b + txt + 8)
    block, comp, lay = layout_args(rng, sum(sizes))
    convert([tmp, "--from", "tar", "--drop-key"] + lay, path)
    os.unlink(tmp)
    return {"path": path, "n": n, "rec_max": max(sizes), "var_fields": 2,
            "sizes": sorted(sizes, reverse=True), "block": block,
            "desc": "skewed n=%d p_big=%g p_empty=%g big<=%dMiB runs=%d "
                    "block=%d %s shards~%s" % (n, p_big, p_empty,
                                               big_hi >> 20, runs, block,
                                               comp, lay[-1])}


def largest_batch(ds, b):
    """Bytes of the largest batch of @b records: the b largest records
    (an upper bound when sizes are not known), their offsets tables."""
    b = min(b, ds["n"])
    data = sum(ds["sizes"][:b]) if ds["sizes"] else b * ds["rec_max"]
    return data + ds["var_fields"] * 8 * (b + 1)


def block_bound(ds):
    """io bytes one block can take: read and decoded (zstd), aligned."""
    return 2 * (max(ds["block"], ds["rec_max"]) + 2 * PAGE)


# ---- checks --------------------------------------------------------------

def rss_ok(ds, r):
    return r["rss"] <= r["memory_bytes"] + RSS_FIXED + RSS_PER_RECORD * ds["n"]


def check_run(ds, r, what, memory=0):
    """(b), (d) and, for an explicit memory_bytes, that it was taken."""
    if r["ok"] != 1:
        return
    if r["bad"] or any(c != ds["n"] for c in r["epoch_records"]):
        finding("delivery", ds, what, got=r["epoch_records"], bad=r["bad"],
                cmd=r["cmd"])
    if not rss_ok(ds, r):
        finding("rss", ds, what, rss=r["rss"], memory=r["memory_bytes"],
                over=r["rss"] - r["memory_bytes"], cmd=r["cmd"])
    if memory and r["memory_bytes"] != memory // PAGE * PAGE:
        finding("explicit-changed", ds, what, asked=memory,
                took=r["memory_bytes"], cmd=r["cmd"])


def check_default(ds, rng, shuffle, batch, ranks):
    cap = cap_for(ranks)
    hold = rng.random() < 0.3
    epochs = rng.choice((1, 1, 2))
    r = probe(ds, shuffle, batch, epochs=epochs, hold=hold, ranks=ranks)
    what = "default %s batch %d ranks %d hold %d" % (shuffle, batch, ranks,
                                                     hold)
    stats["default_runs"] += 1
    lb = largest_batch(ds, batch)
    if r["ok"] != 1:
        stats["refused"] += 1
        took = re.search(r"the default memory_bytes (\d+)", r["error"])
        if lb <= cap:
            stats["refused_batch_fits"] += 1
        if took and int(took.group(1)) < cap // PAGE * PAGE:
            kind = "refused-below-cap"      # it could have taken more
        elif 2 * (lb + block_bound(ds)) <= cap:
            # the largest batch, and as much again for the blocks it
            # comes from (variable values are copied out of them), fit
            kind = "refused"
        elif r["ok"] == -2:
            return r
        elif r["ok"] == -1 or r.get("at") == "next":
            kind = "refused-at-next"
        else:
            return r
        finding(kind, ds, what, cap=cap, largest_batch=lb,
                error=r["error"], cmd=r["cmd"])
        return r
    check_run(ds, r, what)
    if r["memory_bytes"] > cap:
        finding("over-cap", ds, what, cap=cap, took=r["memory_bytes"],
                cmd=r["cmd"])
    if r["memory_bytes"] >= cap // PAGE * PAGE:
        stats["capped"] += 1
        if "memory binds" not in r["fallbacks"] and \
           "do not fit" not in r["fallbacks"]:
            finding("capped-silently", ds, what, cap=cap,
                    fallbacks=r["fallbacks"], cmd=r["cmd"])
    if r["over_budget"]:
        capped = r["memory_bytes"] >= cap // PAGE * PAGE
        finding("over-budget-capped" if capped else "over-budget", ds, what,
                batches=r["over_budget"], memory=r["memory_bytes"],
                cmd=r["cmd"])
    return r


def accepted(r):
    return r["ok"] == 1


def check_explicit(ds, rng, shuffle, batch, default):
    """(c): the default's own figure, above it, the smallest accepted
    value and the page below it, values between; an explicit cache."""
    m = default["memory_bytes"]

    def run(mem, cache=0, what=""):
        stats["explicit_runs"] += 1
        r = probe(ds, shuffle, batch, memory=mem, cache=cache)
        w = "%s %s batch %d memory %d cache %d" % (what, shuffle, batch,
                                                   mem, cache)
        if r["ok"] == 1:
            check_run(ds, r, w, memory=mem)
        elif r["ok"] == -1 or r["ok"] == 0 and \
                "memory_bytes" not in r["error"] and \
                "cache_bytes" not in r["error"]:
            finding("unclear-refusal", ds, w, error=r["error"], cmd=r["cmd"])
        return r

    for mem in (m, m + PAGE, m + rng.randrange(1, 64 * MiB)):
        if not accepted(run(mem, what="at/above default")):
            finding("explicit-refused-above-default", ds,
                    "%s batch %d memory %d (default took %d)" %
                    (shuffle, batch, mem, m), cmd="")
    lo, hi = 0, m // PAGE                      # pages: lo refused, hi ok
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if accepted(run(mid * PAGE, what="bisect")):
            hi = mid
        else:
            lo = mid
    least = hi * PAGE
    if lo and accepted(run(lo * PAGE, what="page below least")):
        finding("flaky-threshold", ds, "%s batch %d memory %d" %
                (shuffle, batch, lo * PAGE), cmd="")
    for _ in range(3):
        mem = rng.randrange(least, m + 1)
        r = run(mem, what="between least and default")
        if not accepted(r):
            finding("non-monotone", ds, "%s batch %d: least %d accepted, "
                    "%d refused" % (shuffle, batch, least, mem),
                    error=r["error"], cmd=r["cmd"])
    # An explicit cache_bytes beside the default and beside a memory_bytes.
    cache = rng.randrange(PAGE, max(2 * m, 2 * PAGE))
    r = run(0, cache=cache, what="cache")
    if accepted(r) and r["io_memory_bytes"] < min(cache, ds["stored"]):
        finding("cache-capped", ds, "%s batch %d cache %d" %
                (shuffle, batch, cache), io=r["io_memory_bytes"],
                cmd=r["cmd"])
    elif not accepted(r):
        finding("cache-refused-default", ds, "%s batch %d cache %d" %
                (shuffle, batch, cache), error=r["error"], cmd=r["cmd"])
    mem = rng.randrange(least, 2 * m + PAGE)
    r = run(mem, cache=cache, what="memory+cache")
    if accepted(r) and r["io_memory_bytes"] < min(cache, ds["stored"]):
        finding("cache-capped", ds, "%s batch %d memory %d cache %d" %
                (shuffle, batch, mem, cache), io=r["io_memory_bytes"],
                cmd=r["cmd"])
    return least


def check_hashes(ds, shuffle, batch):
    """(d) by content: stream --hash against cat --hash."""
    stats["hash_checks"] += 1
    want = subprocess.run([os.path.join(BUILD, "dlpack-shard"), "cat",
                           ds["path"], "--hash"], capture_output=True,
                          text=True, check=True).stdout.split("\n")
    p = subprocess.run([os.path.join(BUILD, "sluice"), "stream", ds["path"],
                        "--hash", "--device", "host", "--shuffle", shuffle,
                        "--batch-size", str(batch)], capture_output=True,
                       text=True)
    got = [" ".join(l.split()[1:]) for l in p.stdout.split("\n") if l]
    if p.returncode or sorted(got) != sorted(l for l in want if l):
        finding("hash", ds, "stream --hash %s batch %d" % (shuffle, batch),
                rc=p.returncode, stderr=p.stderr[-300:],
                got=len(got), want=len([l for l in want if l]))


def sweep_dataset(ds, rng, deadline):
    info = json.loads(subprocess.run(
        [os.path.join(BUILD, "dlpack-shard"), "info", ds["path"], "--json"],
        capture_output=True, text=True, check=True).stdout)
    ds["stored"] = info["stored_bytes"]
    assert info["records"] == ds["n"], (info, ds["desc"])
    print("dataset %s (%d blocks, %.1f MB)" % (
        ds["desc"], info["blocks"], info["raw_bytes"] / 1e6), flush=True)
    for shuffle in SHUFFLES:
        batches = rng.sample(BATCHES, 3)
        if ds["n"] > 20000:                    # batch 1: a batch per record
            batches = [b if b > 2 else 256 for b in batches]
        for batch in batches:
            if time.time() > deadline:
                return
            r = check_default(ds, rng, shuffle, batch, rng.choice(RANKS))
            if accepted(r) and rng.random() < 0.15 and \
               info["raw_bytes"] < 300e6:
                rd = probe(ds, shuffle, batch)
                if accepted(rd):
                    check_explicit(ds, rng, shuffle, batch, rd)
    shuffle = rng.choice(SHUFFLES)
    if info["raw_bytes"] < 200e6 and ds["n"] <= 100000:
        check_hashes(ds, shuffle, rng.choice((1, 7, 64, 256)))


def main():
    global WORK, BUILD
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=35)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--work", default=WORK, help="datasets go here")
    ap.add_argument("--build", default=BUILD, help="binaries from here")
    o = ap.parse_args()
    WORK, BUILD = o.work, o.build
    build = os.path.relpath(os.path.abspath(BUILD), ROOT)
    subprocess.run(["make", "-s", "-C", ROOT, "BUILD=" + build, "all",
                    os.path.join(build, "budget_probe")], check=True)
    rng = random.Random(o.seed)
    print("seed %d, default cap %d bytes / $LOCAL_WORLD_SIZE" % (
        o.seed, cap_for(1)), flush=True)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    deadline = time.time() + o.minutes * 60
    k = 0
    try:
        while time.time() < deadline:
            path = os.path.join(WORK, "ds%03d" % k)
            ds = (make_skewed if rng.random() < 0.4 else make_synth)(rng,
                                                                     path)
            stats["datasets"] += 1
            sweep_dataset(ds, rng, deadline)
            if not o.keep:
                shutil.rmtree(path)
            k += 1
    finally:
        if not o.keep:
            shutil.rmtree(WORK, ignore_errors=True)
    kinds = {}
    for f in findings:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    print("summary " + json.dumps({"seed": o.seed, "stats": stats,
                                   "findings": kinds}))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
