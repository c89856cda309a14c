#!/usr/bin/env python3
"""Randomized differential sweep of the loader's position: exact and
elastic resume, rank partitioning, epochs and mixtures.

Makes small datasets in /dev/shm (synth fixed and variable fields, or a
WebDataset tar of small variable values; raw and zstd; blocks of 64 KiB to
4 MiB; one to many shards; 1..20000 records) and, for random loader
configs (shuffle, batch, drop_last, world 1..8, seed, prefetch_depth,
decode_threads, on_error, range_reads, cache, pad_length, epochs), runs
build/state_probe, which checks every delivered record's bytes against
the shard's (block_read) and prints what each rank delivered.  Checks,
with include/sluice.h as the oracle:

  (a) an uninterrupted job over all ranks delivers each epoch's records
      once (padding: fewer than world repeats; drop_last: fewer than
      world x batch missing), ranks in lockstep, every batch full but a
      last short one, sluice_loader_batches() right; the same order as
      a plain run (prefetch 1, one decode thread, no range reads) of
      world 1 cut into the ranks' contiguous parts (sampler.h); with
      cfg.epochs=E nothing past epoch E-1;
  (b) a job stopped after K batches, its state (get, format, parse, the
      same on every rank) restored into new loaders of the same shape,
      delivers exactly what the uninterrupted job delivered after K;
  (c) an elastic chain of 2-3 jobs of other world/batch/drop_last
      delivers the epoch's records once overall (the same allowances);
  (d) the epochs after a resume are those of the uninterrupted job, or,
      after an elastic one, of a fresh job of the last shape;
  (e) mixtures (2-3 datasets, weights or exact samples): each stream's
      samples per epoch as documented, records repeated evenly or a
      subset, every batch of a world-1 epoch in the proportions; (b)-(d)
      for mixtures too.

    python3 bench/state_sweep.py [--minutes 10] [--seed S] [--keep]
        [--work DIR] [--build DIR]

Prints FINDING {json} per finding (kind, what, the probe commands to
rerun) and a summary with coverage; exits 1 when anything was found.
"""
import argparse
import collections
import io
import json
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
WORK = "/dev/shm/state_sweep/sweep-%d" % os.getpid()
SHUFFLES = ("none", "block", "window", "full")
PROBE_TIMEOUT = 180

findings = []
stats = collections.Counter()
coverage = collections.Counter()


class Finding(Exception):
    pass


class Refused(Exception):
    """open said -ENOSPC: the budget given holds no batch (documented)."""


def finding(kind, ds, what, cmds):
    line = {"kind": kind, "dataset": ds["desc"], "what": what,
            "rerun": cmds}
    findings.append(line)
    print("FINDING " + json.dumps(line), flush=True)


def log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


# ---- datasets ------------------------------------------------------------

def convert(args, out):
    subprocess.run([os.path.join(BUILD, "dlpack-shard"), "convert"] + args +
                   ["--out", out, "--quiet"], check=True)


def layout(rng, n):
    block = log_uniform(rng, 64 << 10, 4 << 20)
    comp = rng.choice(("none", "zstd"))
    shards = rng.choice((1, 1, 2, 3, 8, 40))
    per = max(1, -(-n // shards))
    return block, comp, ["--block-size", str(block), "--compression", comp,
                         "--records-per-shard", str(per)]


def synth_fields(rng):
    """Field specs: fixed (scalar, N, AxB) and variable (-1, -1xK)."""
    fields = []
    for k in range(rng.choice((1, 2, 3))):
        dtype = rng.choice(("uint8", "int16", "float32", "int64"))
        c = rng.random()
        r = rng.random()
        if r < 0.3:
            fields.append("f%d:%s:scalar:%.2f" % (k, dtype, c))
        elif r < 0.6:
            fields.append("f%d:%s:%d:%.2f" % (k, dtype,
                                               log_uniform(rng, 1, 512), c))
        elif r < 0.75:
            fields.append("f%d:%s:%dx%d:%.2f" % (k, dtype, rng.randint(1, 8),
                                                  rng.randint(1, 32), c))
        else:
            fields.append("v%d:%s:-1x%d:%.2f" % (k, dtype,
                                                  rng.choice((1, 2, 3)), c))
    return fields


def make_synth(rng, path, fields, n=None):
    var = sum(1 for f in fields if ":-1" in f)
    cap = 3000 if var else 20000
    for f in fields:
        dims = f.split(":")[2]
        if not dims.startswith("-1") and dims != "scalar":
            items = 1
            for d in dims.split("x"):
                items *= int(d)
            cap = min(cap, max(1, (40 << 20) // (8 * items)))
    if n is None:
        n = min(log_uniform(rng, 1, 20000), cap)
    block, comp, lay = layout(rng, n)
    args = ["--from", "synth", "--records", str(n),
            "--seed", str(rng.randrange(1 << 30))]
    for f in fields:
        args += ["--field", f]
    convert(args + lay, path)
    return {"path": path, "n": n, "var": var,
            "desc": "synth n=%d fields=%s block=%d %s %s" % (
                n, ",".join(fields), block, comp, " ".join(lay[-2:]))}


def make_tar(rng, path, n=None):
    """Small variable values (often empty), a label: many records."""
    if n is None:
        n = log_uniform(rng, 1, 20000)
    p_empty = rng.choice((0.0, 0.3, 0.9))
    tmp = path + ".tar"
    with tarfile.open(tmp, "w") as t:
        for i in range(n):
            b = 0 if rng.random() < p_empty else rng.randint(1, 200)
            vals = (("bin", os.urandom(b // 2) + b"z" * (b - b // 2)),
                    ("cls", str(i % 10).encode()))
            for ext, data in vals:
                ti = tarfile.TarInfo("s%07d.%s" % (i, ext))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    block, comp, lay = layout(rng, n)
    convert([tmp, "--from", "tar", "--drop-key"] + lay, path)
    os.unlink(tmp)
    return {"path": path, "n": n, "var": 1,
            "desc": "tar n=%d p_empty=%g block=%d %s %s" % (
                n, p_empty, block, comp, " ".join(lay[-2:]))}


def make_dataset(rng, base, nstreams):
    """One dataset, or nstreams of one schema (a mixture)."""
    kind = "tar" if rng.random() < 0.3 else "synth"
    fields = synth_fields(rng)
    if kind == "synth" and nstreams == 1 and rng.random() < 0.25:
        # one fixed field of KiBs, more bytes than a small budget holds:
        # zstd blocks decoded into their batch, chunks, views
        fields = ["f0:float32:%d:%.2f" % (rng.choice((256, 700, 2048)),
                                          rng.random())]
    out = []
    for i in range(nstreams):
        path = "%s_%d" % (base, i)
        if kind == "tar":
            out.append(make_tar(rng, path, None if nstreams == 1 else
                                log_uniform(rng, 1, 6000)))
        else:
            out.append(make_synth(rng, path, fields, None if nstreams == 1
                                  else min(log_uniform(rng, 1, 6000),
                                           3000 if any(":-1" in f for f in fields)
                                           else 6000)))
    stats["datasets"] += nstreams
    return {"big": fields[0].startswith("f0:float32:") and len(fields) == 1,
            "parts": out, "desc": " + ".join(d["desc"] for d in out),
            "n": sum(d["n"] for d in out), "var": out[0]["var"],
            "paths": [d["path"] for d in out]}


# ---- the probe -------------------------------------------------------------

class Run:
    """One probe run: per rank, its events and state."""

    def __init__(self, cmd, out):
        self.cmd = cmd
        self.events = collections.defaultdict(list)  # rank -> events
        self.opened = {}
        self.states = {}
        self.cover = {}
        self.bad = []
        self.failed = []
        for line in out.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "B":
                f = rest.split()
                r, e, n = int(f[0]), int(f[1]), int(f[2])
                idx = tuple(int(x) for x in f[3:])
                if len(idx) != n:
                    self.bad.append("batch size %d but %d indices" %
                                    (n, len(idx)))
                self.events[r].append(("B", e, idx))
            elif kind == "E":
                r, e, nb = (int(x) for x in rest.split())
                self.events[r].append(("E", e, nb))
            elif kind == "O":
                r, nb = (int(x) for x in rest.split())
                self.opened[r] = nb
                self.events.setdefault(r, [])
            elif kind == "S":
                r, _, st = rest.partition(" ")
                self.states[int(r)] = st
            elif kind == "C":
                r, _, js = rest.partition(" ")
                self.cover[int(r)] = json.loads(js)
            elif kind == "X":
                self.bad.append(rest)
            elif kind == "F":
                self.failed.append(rest)

    def state(self):
        """The one state every rank saved."""
        vals = set(self.states.values())
        if len(vals) != 1:
            raise Finding("ranks saved different states: %s" %
                          json.dumps(self.states))
        return vals.pop()


def probe_cmd(ds, cfg, **kw):
    args = [os.path.join(BUILD, "state_probe")]
    args += ["ds=%s" % p for p in ds["paths"]]
    if ds.get("mix"):
        args.append("mix=%s" % ds["mix"])
    merged = dict(cfg)
    merged.update(kw)
    for k, v in merged.items():
        if v is not None:
            args.append("%s=%s" % (k, v))
    return args


def held_past_memory(failed, cfg):
    """Documented (sluice.h, memory_bytes): on a device, a consumer that
    holds a batch while an explicit memory_bytes has no room for the next
    beside it gets -EDEADLK (an 8 MiB budget, 6.4 MB of batch memory and
    batches of 4.3 MB: seed 53)."""
    return (" next -35 " in " " + failed and "consumer holds all" in failed
            and cfg.get("device") == "sim" and cfg.get("hold")
            and cfg.get("memory"))


def probe(ds, cfg, ctx, **kw):
    cmd = probe_cmd(ds, cfg, **kw)
    text = " ".join(shlex.quote(a) for a in cmd)
    ctx.append(text)
    stats["runs"] += 1
    merged = dict(cfg, **kw)
    env = None
    if merged.get("device") == "sim":
        env = dict(os.environ, SLUICE_DEVICE_SIM=str(merged["seed"] + 1),
                   SLUICE_SIM_DELAY_US="20")
        text = "SLUICE_DEVICE_SIM=%d SLUICE_SIM_DELAY_US=20 %s" % (
            merged["seed"] + 1, text)
        ctx[-1] = text
    try:
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=PROBE_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise Finding("timeout after %ds: %s" % (PROBE_TIMEOUT, text))
    if p.returncode != 0:
        raise Finding("probe exit %d: %s" % (p.returncode, p.stderr[-500:]))
    run = Run(text, p.stdout)
    if run.bad:
        raise Finding("bytes or state: %s" % "; ".join(run.bad[:5]))
    if run.failed and all(" open -28 " in " " + f or
                          (" next -28 " in " " + f and merged.get("memory")) or
                          held_past_memory(f, merged)
                          for f in run.failed):
        # documented: an explicit memory_bytes too small for a batch
        raise Refused(run.failed[0])
    if run.failed:
        raise Finding("loader refused: %s" % "; ".join(run.failed[:3]))
    for c in run.cover.values():
        for k in ("viewed", "direct", "range_reads", "cache_hits", "gathered",
                  "over_budget", "truncated", "staged"):
            if c.get(k):
                coverage[k] += 1
        if "chunk" in c.get("fallbacks", ""):
            coverage["chunks"] += 1
        coverage["rank_runs"] += 1
    return run


# ---- what a job delivered ------------------------------------------------

def epochs_of(run, world):
    """{epoch: {rank: [batch indices...]}} and the EOF lines per rank."""
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    eofs = collections.defaultdict(list)
    for r in range(world):
        for ev in run.events.get(r, []):
            if ev[0] == "B":
                per[ev[1]][r].append(ev[2])
            else:
                eofs[r].append((ev[1], ev[2]))
    return per, eofs


def check_multiset(got, seq, extra_max, missing_max, what):
    """@got: records delivered; @seq: the epoch's sequence (a multiset)."""
    g = collections.Counter(got)
    s = collections.Counter(seq)
    extra = g - s
    missing = s - g
    if any(k not in s for k in extra):
        raise Finding("%s: records not in the epoch's sequence: %s" %
                      (what, sorted(k for k in extra if k not in s)[:10]))
    ne, nm = sum(extra.values()), sum(missing.values())
    if ne > extra_max:
        raise Finding("%s: %d records delivered more often than the epoch "
                      "holds them (allowed %d for padding): %s" %
                      (what, ne, extra_max, sorted(extra.items())[:10]))
    if nm > missing_max:
        raise Finding("%s: %d records of the epoch never delivered "
                      "(allowed %d by drop_last): %s" %
                      (what, nm, missing_max, sorted(missing.items())[:10]))


# ---- scenarios -----------------------------------------------------------

def random_cfg(rng, ds):
    shuffle = rng.choice(SHUFFLES)
    cfg = {
        "shuffle": shuffle,
        "seed": rng.choice((0, 1, rng.randrange(1 << 40))),
        "batch": rng.choice((1, 2, 3, 7, 16, 32, 64, 100, 256, 1000)),
        "drop": rng.choice((0, 0, 1)),
        "world": rng.choice((1, 1, 2, 3, 4, 5, 8)),
        "prefetch": rng.choice((None, 1, 2, 4, 8)),
        "threads": rng.choice((None, 1, 2, 3)),
        "onerr": rng.choice((None, "skip")),
        "ranges": rng.choice((None, None, "off")),
        "hold": rng.choice((0, 0, 1)),
    }
    if shuffle == "window":
        cfg["window"] = rng.choice((1, 2, 3, 16))
    if rng.random() < 0.2:
        cfg["cache"] = rng.choice((1 << 20, 64 << 20))
    elif rng.random() < 0.4:
        # a budget that holds fewer blocks than the dataset: views,
        # direct decodes, range reads and chunks instead of the cache
        cfg["memory"] = rng.choice((1 << 20, 3 << 20, 8 << 20, 24 << 20))
    if ds.get("big") and rng.random() < 0.6:
        # more blocks than the budget: chunks under full shuffle
        cfg["memory"] = rng.choice((2 << 20, 4 << 20, 8 << 20))
        cfg["cache"] = None
        if rng.random() < 0.5:
            cfg["ranges"] = "off"
    if rng.random() < 0.25:
        cfg["device"] = "sim"
    sim_hold(cfg)
    if ds["var"] and rng.random() < 0.25:
        cfg["pad"] = rng.choice((1, 7, 300))
    if rng.random() < 0.3:
        cfg["epochs"] = rng.choice((1, 2, 3))
    return cfg


def sim_hold(cfg):
    """On a device (sim) a consumer holding its batch needs a second slot:
    with prefetch_depth 1 next() says -EDEADLK (documented)."""
    if cfg.get("device") == "sim" and cfg.get("hold") and \
            cfg.get("prefetch") == 1:
        cfg["prefetch"] = 2


def plain(cfg):
    """Same order, simplest paths: one decode thread, prefetch 1, no range
    reads, no cache, no hold."""
    p = dict(cfg, prefetch=1, threads=1, ranges="off", hold=0)
    p.pop("cache", None)
    p.pop("onerr", None)
    return p


def sequence(ds, cfg, epoch, ctx, memo):
    """The epoch's whole sequence: world 1, no drop, plain paths."""
    key = (cfg["shuffle"], cfg["seed"], cfg.get("window"), epoch)
    if key not in memo:
        c = plain(cfg)
        c.update(world=1, drop=0, batch=256, epochs=None, pad=None)
        run = probe(ds, c, ctx, setepoch=epoch, eofs=1)
        seq = [i for ev in run.events[0] if ev[0] == "B" for i in ev[2]]
        memo[key] = seq
    return memo[key]


def check_fresh_epoch(ds, cfg, per_rank, eof_nb, opened_nb, seq, what):
    """(a) for one epoch of a fresh job of cfg's shape."""
    W, B, drop = cfg["world"], cfg["batch"], cfg["drop"]
    n = len(seq)
    P = n // W if drop else -(-n // W)
    nb = P // B if drop else -(-P // B)
    counts = {r: len(per_rank.get(r, [])) for r in range(W)}
    if len(set(counts.values())) != 1:
        raise Finding("%s: ranks not in lockstep: batches %s" % (what, counts))
    for r in range(W):
        bs = per_rank.get(r, [])
        if len(bs) != nb:
            raise Finding("%s: rank %d: %d batches, expected %d (n=%d)" %
                          (what, r, len(bs), nb, n))
        for k, b in enumerate(bs):
            if len(b) != B and not (k == len(bs) - 1 and not drop and
                                    len(b) < B):
                raise Finding("%s: rank %d batch %d holds %d records" %
                              (what, r, k, len(b)))
        if opened_nb is not None and opened_nb.get(r) is not None and \
                opened_nb[r] != nb:
            raise Finding("%s: rank %d: sluice_loader_batches %d, "
                          "delivered %d" % (what, r, opened_nb[r], nb))
        # the rank's contiguous part of the sequence (sampler.h)
        flat = [i for b in bs for i in b]
        want = [seq[(r * P + j) % n] for j in range(len(flat))] if n else []
        if flat != want:
            first = next(j for j in range(len(flat)) if flat[j] != want[j]) \
                if len(flat) == len(want) else min(len(flat), len(want))
            raise Finding("%s: rank %d: not its part of the world-1 "
                          "sequence from position %d (got %s, want %s)" %
                          (what, r, first, flat[first:first + 5],
                           want[first:first + 5]))
    got = [i for r in range(W) for b in per_rank.get(r, []) for i in b]
    check_multiset(got, seq, (W - 1) if not drop else 0,
                   (W * B - 1) if drop else 0, what)


def check_mixture_epoch(ds, seq, what):
    """(e) on the world-1 sequence of an epoch."""
    parts = ds["parts"]
    bases, b = [], 0
    for p in parts:
        bases.append(b)
        b += p["n"]
    want = ds["samples"]
    L = sum(want)
    if len(seq) != L:
        raise Finding("%s: epoch of %d samples, the streams' samples add up "
                      "to %d (%s)" % (what, len(seq), L, want))
    which = []
    for i in seq:
        s = max(k for k in range(len(parts)) if bases[k] <= i)
        which.append(s)
    samples = [which.count(s) for s in range(len(parts))]
    for s, p in enumerate(parts):
        recs = [i for i in seq if bases[s] <= i < bases[s] + p["n"]]
        # a weighted share that is a tie (x.5 and x.5) may round either
        # way: sluice.h says largest remainder, not which of equals
        lo, hi = ds["sample_range"][s]
        if not lo <= len(recs) <= hi:
            raise Finding("%s: stream %d: %d samples, expected %s" %
                          (what, s, len(recs),
                           lo if lo == hi else "%d..%d" % (lo, hi)))
        if p["n"] and samples[s]:
            c = collections.Counter(recs)
            lo, hi = samples[s] // p["n"], -(-samples[s] // p["n"])
            vals = [c.get(bases[s] + r, 0) for r in range(p["n"])]
            if min(vals) < lo or max(vals) > hi:
                raise Finding("%s: stream %d (%d records, %d samples): a "
                              "record taken %d..%d times, expected %d..%d" %
                              (what, s, p["n"], samples[s], min(vals),
                               max(vals), lo, hi))
    # any run of positions holds each stream's share to within one
    for run_len in (1, 7, 64, 1000):
        for start in range(0, max(1, L - run_len + 1), max(1, run_len // 2)):
            w = which[start:start + run_len]
            for s in range(len(parts)):
                want = len(w) * samples[s] / L
                have = sum(1 for x in w if x == s)
                if abs(have - want) > len(parts) - 1 + 1e-9 and \
                        abs(have - want) > 1 + 1e-9:
                    raise Finding("%s: positions %d..%d hold %d of stream "
                                  "%d, its share is %.2f" %
                                  (what, start, start + len(w) - 1, have, s,
                                   want))


def sample_range(ds, spec):
    """Per stream, the samples sluice.h allows: exact ones, or the floor
    or ceiling of the stream's exact share (Fractions of the doubles)."""
    from fractions import Fraction
    pool = sum(p["n"] for p, (w, s) in zip(ds["parts"], spec) if not s)
    total_w = sum(Fraction(w) for w, s in spec if not s)
    out = []
    for w, s in spec:
        if s:
            out.append((s, s))
        elif total_w == 0:
            out.append((0, 0))
        else:
            share = pool * Fraction(w) / total_w
            out.append((math.floor(share), math.ceil(share)))
    return out


def expected_samples(ds, spec):
    """sluice.h: exact samples, or the weighted streams' records shared by
    weight, rounded by largest remainder."""
    out = [0] * len(spec)
    pool = sum(p["n"] for p, (w, s) in zip(ds["parts"], spec) if not s)
    total_w = sum(w for w, s in spec if not s)
    rems = []
    for k, (w, s) in enumerate(spec):
        if s:
            out[k] = s
        elif total_w > 0:
            share = pool * w / total_w
            out[k] = int(math.floor(share))
            rems.append((share - out[k], k))
    left = pool - sum(o for o, (w, s) in zip(out, spec) if not s)
    if total_w > 0:
        for _, k in sorted(rems, key=lambda x: (-x[0], x[1]))[:left]:
            out[k] += 1
    return out


def scenario(rng, ds, cfg, memo):
    ctx = []
    W = cfg["world"]
    E = cfg.get("epochs")
    neofs = E + 1 if E else rng.choice((1, 2, 3))
    try:
        # (a) uninterrupted, every rank
        u = probe(ds, cfg, ctx, eofs=neofs)
        stats["jobs"] += 1
        per, eofs = epochs_of(u, W)
        for r in range(W):
            if len(eofs[r]) != neofs:
                raise Finding("rank %d: %d EOFs, expected %d" %
                              (r, len(eofs[r]), neofs))
        last = E if E else neofs
        for e in range(last):
            seq = sequence(ds, cfg, e, ctx, memo)
            if e == 0 and ds.get("mix"):
                check_mixture_epoch(ds, seq, "epoch 0 sequence")
            nbs = u.opened if e == 0 else \
                {r: eofs[r][e - 1][1] for r in range(W)}
            check_fresh_epoch(ds, cfg, per.get(e, {}), None, nbs, seq,
                              "uninterrupted epoch %d" % e)
        if E:
            for r in range(W):
                if eofs[r][E - 1][1] != 0 or per.get(E, {}).get(r):
                    raise Finding("epochs=%d: rank %d goes on past it "
                                  "(%d batches said, %d delivered)" %
                                  (E, r, eofs[r][E - 1][1],
                                   len(per.get(E, {}).get(r, []))))
        stats["checked_a"] += 1

        # (b) stopped after k, resumed exactly; (d) the epochs after
        total = len([ev for ev in u.events[0] if ev[0] == "B"])
        k = rng.randint(0, total)
        s = probe(ds, cfg, ctx, stop=k)
        st = s.state()
        for r in range(W):
            before = u.events[r]
            # the events after the k-th batch (an EOF first when k ends
            # an epoch)
            cut = 0
            seen = 0
            for j2, ev in enumerate(before):
                if seen == k:
                    cut = j2
                    break
                if ev[0] == "B":
                    seen += 1
            else:
                cut = len(before)
            want = before[cut:]
            got_s = [ev for ev in s.events[r] if ev[0] == "B"]
            if [ev for ev in before[:cut] if ev[0] == "B"] != got_s:
                raise Finding("stopped job's first %d batches differ from "
                              "the uninterrupted job's (rank %d)" % (k, r))
            rest_eofs = sum(1 for ev in want if ev[0] == "E")
            if rest_eofs == 0:
                continue
            res = probe(ds, cfg, ctx, state=st, eofs=rest_eofs, rank=r)
            got = res.events[r]
            if got != want:
                first = next((i for i in range(min(len(got), len(want)))
                              if got[i] != want[i]), min(len(got), len(want)))
                raise Finding("exact resume after %d batches (state %s): "
                              "rank %d differs at event %d: got %s, want %s" %
                              (k, st, r, first, str(got[first:first + 1])[:300],
                               str(want[first:first + 1])[:300]))
        stats["checked_b"] += 1

        # (c) elastic chain; (d) the next epoch as a fresh job
        if rng.random() < 0.8:
            elastic(rng, ds, cfg, memo, ctx)
    except Refused:
        stats["refused_open"] += 1
    except Finding as f:
        f = Finding("%s [last: %s]" % (f, ctx[-1] if ctx else "-"))
        kind = "state"
        if "more than the" in str(f) and "bytes of batch memory" in str(f):
            kind = "budget"     # a batch the budget did not size
            stats["budget_refusals"] += 1
        finding(kind, ds, str(f), ctx)


def shape(rng, cfg, prev):
    """Another job shape than @prev's (the same one is an exact resume:
    (b))."""
    c = dict(cfg)
    while True:
        c["world"] = rng.choice((1, 2, 3, 4, 5, 7, 8))
        c["batch"] = rng.choice((1, 2, 3, 5, 16, 33, 64, 100, 256))
        c["drop"] = rng.choice((0, 0, 1))
        if (c["world"], c["batch"], c["drop"]) != \
                (prev["world"], prev["batch"], prev["drop"]):
            break
    c["prefetch"] = rng.choice((None, 1, 3))
    c["threads"] = rng.choice((None, 1, 2))
    c["hold"] = rng.choice((0, 1))
    c.pop("epochs", None)
    sim_hold(c)
    return c


class Chain:
    """The elastic resume of sampler.h and sampler_split.c, as a model: a
    job of W ranks splits the sequence it is given into W parts of P
    positions (drop_last: floor(len / W), else ceil, the last parts
    wrapping to the start); rank r delivers positions [rP, rP + c) of it;
    what no rank consumed (positions past the end are padding, not
    consumed), in order, is the next job's sequence."""

    def __init__(self, seq):
        self.seq = seq
        self.cur = list(range(len(seq)))    # epoch positions
        self.job = None
        self.used = {}                      # rank -> positions delivered

    def _apply(self):
        if not self.job:
            return
        W, P = self.job["world"], self.P
        gone = set()
        for r, c in self.used.items():
            for i in range(c):
                if r * P + i < len(self.cur):
                    gone.add(r * P + i)
        self.cur = [p for i, p in enumerate(self.cur) if i not in gone]

    def new_job(self, jc):
        self._apply()
        self.job = jc
        self.used = {}
        n, W, B = len(self.cur), jc["world"], jc["batch"]
        self.P = n // W if jc["drop"] else -(-n // W)
        self.nb = self.P // B if jc["drop"] else -(-self.P // B)

    def check(self, per_rank, done, j):
        n, W, B, P = len(self.cur), self.job["world"], self.job["batch"], \
            self.P
        for r in range(W):
            flat = [i for b in per_rank.get(r, []) for i in b]
            start = done * B
            want = [self.seq[self.cur[(r * P + start + i) % n]]
                    for i in range(len(flat))] if n else []
            if flat != want:
                at = next((i for i in range(len(flat)) if flat[i] != want[i]),
                          len(flat))
                raise Finding("elastic job %d rank %d: not the model's "
                              "(sampler_split.c) from its position %d: got "
                              "%s, want %s (len %d, P %d)" %
                              (j, r, start + at, flat[at:at + 4],
                               want[at:at + 4], n, P))
            self.used[r] = start + len(flat)


def elastic(rng, ds, cfg, memo, ctx):
    e0 = rng.choice((0, 0, 1, 2))
    jobs = [dict(cfg)]
    jobs[0].pop("epochs", None)
    for _ in range(rng.choice((1, 1, 2, 3))):
        if len(jobs) > 1 and rng.random() < 0.25:
            # the same shape again: an exact resume within an elastic
            # epoch
            jobs.append(dict(jobs[-1], prefetch=rng.choice((None, 2))))
        else:
            jobs.append(shape(rng, cfg, jobs[-1]))
    seq = sequence(ds, cfg, e0, ctx, memo)
    model = Chain(seq)
    delivered = []
    state = None
    touched = []
    for j, jc in enumerate(jobs):
        last = j == len(jobs) - 1
        kw = {"setepoch": e0} if state is None else {"state": state}
        same = j > 0 and all(jc[x] == jobs[j - 1][x]
                             for x in ("world", "batch", "drop"))
        done = int(state.split(" batches=")[1].split()[0]) if same else 0
        if state is not None and not same and rng.random() < 0.3:
            kw["setepoch"] = e0   # free after an elastic state_set
        o = probe(ds, jc, ctx, stop=0, rank=0, **kw)
        nb = o.opened[0]
        if last:
            run = probe(ds, jc, ctx, eofs=2, **kw)
        else:
            k = rng.randint(0, nb - done)
            run = probe(ds, jc, ctx, stop=k, **kw)
            state = run.state()
            if ("epoch=%d " % e0) not in state:
                raise Finding("state after %d of %d batches left epoch %d: "
                              "%s" % (k, nb, e0, state))
        W = jc["world"]
        per, eofs = epochs_of(run, W)
        if not same:
            model.new_job(jc)
        model.check(per.get(e0, {}), done, j)
        counts = {r: len(per.get(e0, {}).get(r, [])) for r in range(W)}
        if len(set(counts.values())) > 1:
            raise Finding("elastic job %d: ranks not in lockstep: %s" %
                          (j, counts))
        for r in range(W):
            if run.opened.get(r) != nb:
                raise Finding("elastic job %d: rank %d says %s batches, "
                              "rank 0 %d" % (j, r, run.opened.get(r), nb))
            if last and counts[r] != nb - done:
                raise Finding("elastic job %d: rank %d delivered %d batches "
                              "of the %d sluice_loader_batches said" %
                              (j, r, counts[r], nb))
            for b in per.get(e0, {}).get(r, []):
                delivered.extend(b)
        touched.append(jc)
        stats["elastic_jobs"] += 1
    fin = jobs[-1]
    extra = sum(jc["world"] - 1 for jc in touched if not jc["drop"])
    missing = fin["world"] * fin["batch"] - 1 if fin["drop"] else 0
    check_multiset(delivered, seq, extra, missing,
                   "elastic chain over epoch %d (%s)" % (
                       e0, " -> ".join("w%d b%d d%d" % (c["world"],
                                                        c["batch"], c["drop"])
                                       for c in jobs)))
    # (d) the next epoch: a fresh job of the last shape
    nxt = probe(ds, fin, ctx, setepoch=e0 + 1, eofs=1)
    per_n, _ = epochs_of(nxt, fin["world"])
    per_r, _ = epochs_of(run, fin["world"])
    for r in range(fin["world"]):
        if per_r.get(e0 + 1, {}).get(r, []) != per_n.get(e0 + 1, {}).get(r, []):
            raise Finding("epoch %d after the elastic chain differs from a "
                          "fresh job's (rank %d)" % (e0 + 1, r))
    stats["checked_c"] += 1


def one_dataset(rng, k, minutes_left):
    base = os.path.join(WORK, "d%d" % k)
    nstreams = 1 if rng.random() < 0.65 else rng.choice((2, 3))
    ds = make_dataset(rng, base, nstreams)
    if nstreams > 1:
        spec = []
        for p in ds["parts"]:
            if rng.random() < 0.4:
                spec.append((0.0, rng.choice((1, p["n"], 2 * p["n"] + 1,
                                              log_uniform(rng, 1, 8000)))))
            else:
                spec.append((rng.choice((0.5, 1.0, 3.0, 0.1)), 0))
        if all(s == 0 and w == 0 for w, s in spec):
            spec[0] = (1.0, 0)
        ds["mix"] = ",".join("%g:%d" % ws for ws in spec)
        ds["samples"] = expected_samples(ds, spec)
        ds["sample_range"] = sample_range(ds, spec)
        ds["repeats"] = any(s > p["n"] for s, p in
                            zip(ds["samples"], ds["parts"]))
        ds["desc"] += " mix=" + ds["mix"]
        stats["mixtures"] += 1
        if sum(ds["samples"]) == 0:
            return ds
    memo = {}
    for _ in range(rng.choice((2, 3, 4))):
        if minutes_left() <= 0:
            break
        cfg = random_cfg(rng, ds)
        stats["configs"] += 1
        scenario(rng, ds, cfg, memo)
    return ds


def main():
    global WORK, BUILD
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--work", default=WORK)
    ap.add_argument("--build", default=BUILD)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--datasets", type=int, default=0,
                    help="stop after this many (0: by time)")
    a = ap.parse_args()
    WORK, BUILD = a.work, a.build
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print("state_sweep seed=%d minutes=%g" % (seed, a.minutes), flush=True)
    build = os.path.relpath(os.path.abspath(BUILD), ROOT)
    subprocess.run(["make", "-C", ROOT, "-s", "-j2", "BUILD=" + build, "all",
                    os.path.join(build, "state_probe")], check=True)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    t_end = time.time() + a.minutes * 60
    k = 0
    try:
        while time.time() < t_end and (not a.datasets or k < a.datasets):
            one_dataset(rng, k, lambda: t_end - time.time())
            if not a.keep:
                for p in os.listdir(WORK):
                    if p.startswith("d%d_" % k):
                        shutil.rmtree(os.path.join(WORK, p),
                                      ignore_errors=True)
            k += 1
    finally:
        if not a.keep:
            shutil.rmtree(WORK, ignore_errors=True)
    print("summary: seed=%d %s coverage=%s findings=%d" % (
        seed, json.dumps(dict(stats)), json.dumps(dict(coverage)),
        len(findings)), flush=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
