#!/usr/bin/env python3
"""bench/gpu/streaming.py - streaming rows of the device run (issue 22):
sluice streaming a dataset larger than its memory budget, beside the
independent limits measured in the same run on the same files:

  read limit   N threads pread()ing the shard files in 64 MiB pieces into
               their own buffers (fio's numjobs; page cache or disk)
  kvikio       KvikIO CuFile.pread of the same files into GPU memory
               (64 MiB calls, 8 in flight, KVIKIO_NTHREADS threads), with
               the CPU seconds per GB it took (the reference for the
               loader's CPU per GB: page-cache copies cost it too)
  pcie         sluice bench's own H2D probe on the loader's pinned arena

Each sluice row is `sluice bench --json` with the row's options over
--epochs epochs, but python-defaults: py_stream.py, the same JSON from
sluice.torch.Loader's defaults as a PyTorch loop takes its batches (the
extension on PYTHONPATH); every figure is the median of --runs runs, taken
round-robin over the rows (interleaved()).  Writes one JSON object:
{device, kvikio_gbps, kvikio_cpu_s_per_gb, pcie_gbps, read_limit_gbps,
dataset_bytes, rows:
[{name, args, delivered_gbps, cpu_s_per_gb, consumer_wait, ...}]}.

    streaming.py --build build/gpu --data /dev/shm/sluice-stream \
        --gb 8.6 --json OUT.json [--device cuda] [--runs 2]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

PIECE = 64 << 20


def log(*a):
    print(*a, flush=True)


def shard_files(path):
    return sorted(os.path.join(path, f) for f in os.listdir(path)
                  if f.endswith(".dls"))


# 1 MiB records, half compressible; variable: 0, 1 or 2 units of 512 KiB
FIXED_FIELD = "data:uint8:1024x1024:0.5"
VARIABLE_FIELD = "data:uint8:-1x524288:0.5"
SMALL_FIELD = "data:uint8:16384:0.5"


def make_dataset(shard, path, records, codec, field=FIXED_FIELD,
                 block_size=64 << 20):
    stamp = os.path.join(path, ".records")
    want = "%d %s %s %d" % (records, codec, field, block_size)
    try:
        with open(stamp) as f:
            if f.read() == want:
                return
    except OSError:
        pass
    subprocess.run(["rm", "-rf", path], check=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t0 = time.time()
    subprocess.run([shard, "convert", "--from", "synth", "--out", path,
                    "--records", str(records), "--seed", "1",
                    "--field", field,
                    "--field", "label:int64", "--compression", codec,
                    "--block-size", str(block_size),
                    "--threads", str(os.cpu_count()), "--quiet"],
                   check=True)
    with open(stamp, "w") as f:
        f.write(want)
    log("made %s: %d records, %s, %.1f s" % (path, records, codec,
                                             time.time() - t0))


def read_limit(files, threads, buf_bytes=PIECE):
    """pread() every file once, pieces handed out to @threads threads,
    each reading into its own buffer of @buf_bytes, reused: small, it
    stays in the CPU's cache as fio's and KvikIO's buffers do; 64 MiB,
    each copy writes memory (a block's io memory in sluice without
    staging)."""
    pieces = []
    for p in files:
        size = os.path.getsize(p)
        pieces += [(p, off, min(buf_bytes, size - off))
                   for off in range(0, size, buf_bytes)]
    lock = threading.Lock()
    total = [0]

    def work():
        buf = bytearray(buf_bytes)
        fds = {}
        while True:
            with lock:
                if not pieces:
                    break
                p, off, n = pieces.pop()
            fd = fds.get(p)
            if fd is None:
                fd = fds[p] = os.open(p, os.O_RDONLY)
            got = os.preadv(fd, [memoryview(buf)[:n]], off)
            with lock:
                total[0] += got
        for fd in fds.values():
            os.close(fd)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return total[0] / (time.perf_counter() - t0) / 1e9


def cpu_seconds():
    """This process's CPU time so far, every thread's (KvikIO's pool and
    the pread threads are ours; their page-cache copies count here)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def kvikio_limit(files, inflight=8, cpu=None):
    """KvikIO into GPU memory: @inflight 64 MiB preads at once.  Appends
    its CPU seconds per GB to @cpu when given (the reference for the
    loader's CPU per GB)."""
    import cupy
    import kvikio
    bufs = [cupy.empty(PIECE, dtype=cupy.uint8) for _ in range(inflight)]
    handles = [kvikio.CuFile(p, "r") for p in files]
    work = []
    for h, p in zip(handles, files):
        size = os.path.getsize(p)
        work += [(h, off, min(PIECE, size - off))
                 for off in range(0, size, PIECE)]
    cupy.cuda.runtime.deviceSynchronize()
    t0, c0 = time.perf_counter(), cpu_seconds()
    total = 0
    pending = []
    for i, (h, off, n) in enumerate(work):
        if len(pending) == inflight:
            total += pending.pop(0).get()
        pending.append(h.pread(bufs[i % inflight], n, off))
    for f in pending:
        total += f.get()
    cupy.cuda.runtime.deviceSynchronize()
    secs = time.perf_counter() - t0
    if cpu is not None and total:
        cpu.append((cpu_seconds() - c0) / (total / 1e9))
    for h in handles:
        h.close()
    return total / secs / 1e9


PY_STREAM = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "py_stream.py")


def run_bench(sluice, path, args, timeout, env=None):
    """`sluice bench --json` on @path, or py_stream.py (the same JSON, from
    sluice.torch.Loader) where @args start with "--python"."""
    if args[:1] == ["--python"]:
        cmd = [sys.executable, PY_STREAM, path] + args[1:]
    else:
        cmd = [sluice, "bench", path, "--json"] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=timeout,
                           env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired:
        return None, "timeout after %d s" % timeout
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" %
                                                         p.returncode])[-1]
    return json.loads(p.stdout), None


# Rows whose first run also writes a Chrome trace (sluice bench --trace)
# beside its JSON: where in the epochs the consumer waited.
TRACED_ROWS = ("defaults", "defaults-window")
# Batches at the start of each epoch whose waits epoch_start_waits()
# counts: the pipeline refilling after an epoch's last batch.
EPOCH_START_BATCHES = 4


def epoch_start_waits(trace_path, epochs):
    """The consumer's waits (next() spans) from a bench trace: in all,
    and in the first EPOCH_START_BATCHES batches of every epoch after the
    first (the read-ahead stops at the end of the planner's epoch, so an
    epoch starts with reads the last one did not overlap)."""
    try:
        with open(trace_path) as f:
            t = json.load(f)
    except (OSError, ValueError):
        return None
    ev = t["traceEvents"] if isinstance(t, dict) else t
    nxt = sorted((e for e in ev if e.get("name") == "next" and
                  e.get("ph") == "X"), key=lambda e: e["ts"])
    if not nxt or epochs < 2:
        return None
    per = len(nxt) // epochs
    start = sum(e["dur"] for i, e in enumerate(nxt)
                if i >= per and i % per < EPOCH_START_BATCHES) / 1e6
    return {"batches": len(nxt), "wait_s": sum(e["dur"] for e in nxt) / 1e6,
            "epoch_start_wait_s": start,
            "median_wait_s": statistics.median(e["dur"] for e in nxt) / 1e6}


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def interleaved(sluice, rows, timeout, out, path):
    """Rows (name, data, args, env, runs) run round-robin: run k of every
    row, then run k + 1 of every row, so that a drift of the shared
    machine over the run (page cache, clocks, neighbours) falls on all
    of them alike, not on whichever row ran first.  A row whose run
    failed runs no more.  Saves the rows so far after every round, and
    each run's whole `sluice bench --json` in streaming-runs/ beside
    @path (every stage's busy and wait time, CPU by stage: what a row's
    medians leave out, for reading after the lease)."""
    got = [[] for _ in rows]
    err = [None] * len(rows)
    done = []
    raw_dir = os.path.join(os.path.dirname(path), "streaming-runs")
    os.makedirs(raw_dir, exist_ok=True)
    waits = {}
    for k in range(max((r[4] for r in rows), default=0)):
        for i, (name, data, args, env, runs) in enumerate(rows):
            if k >= runs or err[i]:
                continue
            trace = None
            if k == 0 and name in TRACED_ROWS:
                trace = os.path.join(raw_dir, "%s-1.trace.json" % name)
            r, err[i] = run_bench(sluice, data, args + (
                ["--trace", trace] if trace else []), timeout, env)
            if r is not None:
                got[i].append(r)
                save(r, os.path.join(raw_dir, "%s-%d.json" % (name, k + 1)))
                if trace and "--epochs" in args:
                    waits[name] = epoch_start_waits(
                        trace, int(args[args.index("--epochs") + 1]))
        done = [summary(name, args, env, got[i], err[i])
                for i, (name, data, args, env, _) in enumerate(rows)]
        for d in done:
            if waits.get(d["name"]):
                d["trace_waits"] = waits[d["name"]]
        save(dict(out, rows=out["rows"] + done), path)
        log("  round %d of the rows done" % (k + 1))
    for r in done:
        log("  %-28s %s" % (r["name"], fmt_row(r)))
    return done


def summary(name, args, env, got, err):
    """A row from its runs' `sluice bench --json` outputs (@got), medians;
    @err: why a run failed, if one did."""
    out = {"name": name, "args": " ".join(
        ["%s=%s" % kv for kv in (env or {}).items()] + args),
        "runs": len(got)}
    if err:
        out["error"] = err
    if got:
        res = [g["result"] for g in got]
        st = [g["stages"] for g in got]
        out.update({
            "delivered_gbps": med(r["delivered_gbps"] for r in res),
            "cpu_s_per_gb": med(r.get("cpu_s_per_gb_delivered",
                                      r["cpu_s_per_gb"]) for r in res),
            "consumer_wait": med(r["consumer_wait_fraction"] for r in res),
            "slot_occupancy": med(r["slot_occupancy"] for r in res),
            "memory_bytes": got[0]["result"].get("memory_bytes"),
            "open_seconds": med(r.get("open_seconds") for r in res),
            "read_threads_busy": med(s["read"]["busy_threads"] for s in st),
            "decode_threads_busy": med(s["decode"]["busy_threads"]
                                       for s in st),
            "assemble_threads_busy": med(s["assemble"]["busy_threads"]
                                         for s in st),
            "batches_gathered": got[0]["result"].get("batches_gathered"),
            "pcie_gbps": med(g["limits"]["pcie"].get("gbps") for g in got),
            "disk_limit_gbps": med(g["limits"]["disk"].get("gbps")
                                   for g in got),
            "decompression_gbps": med(
                g["limits"].get("decompression", {}).get("gbps")
                for g in got),
            "cpus_gbps": med(g["limits"].get("cpus", {}).get("gbps")
                             for g in got),
            "cpu_s_per_gb_by_stage": got[0]["result"].get(
                "cpu_s_per_gb_by_stage"),
            "verified_landing_fraction": med(
                r.get("bytes_verified_landing", 0) / r["read_bytes"]
                for r in res if r.get("read_bytes")),
            "verified_device_fraction": med(
                r.get("bytes_verified_device", 0) / r["read_bytes"]
                for r in res if r.get("read_bytes")),
            "staged_fraction": med(
                r.get("bytes_staged", 0) / r["read_bytes"]
                for r in res if r.get("read_bytes")),
            # of the staged bytes, uploaded while the next part was read
            "overlapped_fraction": med(
                r.get("bytes_staged_overlapped", 0) / r["bytes_staged"]
                for r in res if r.get("bytes_staged")),
            "read_ahead_blocks": got[0]["result"].get("read_ahead_blocks"),
            # threads in uploads, waits included (a fetch's upload)
            "upload_threads_busy": med(r.get("device_upload_threads")
                                       for r in res),
            # threads waiting for checksums on the device
            "check_threads_busy": med(r.get("device_check_threads")
                                      for r in res),
            # threads queued on the loader's one lock
            "lock_threads": med(r.get("lock_wait_threads") for r in res),
            # decode workers asleep for want of a job: what is left of
            # them after r/d/a/up/ck (no job to take, or none allowed)
            "idle_threads": med(g["stages"]["decode"]["wait_seconds"] /
                                g["result"]["seconds"] for g in got
                                if g["result"].get("seconds")),
            "binding": got[0]["limits"].get("binding"),
            "fallbacks": got[0]["fallbacks"].get("reasons"),
        })
    return out


def fmt_row(r):
    if "delivered_gbps" not in r:
        return "FAILED: %s" % r.get("error")
    return ("%6.2f GB/s  CPU %.3f s/GB  wait %.3f  occupancy %.2f  "
            "memory %.2f GB%s" % (
                r["delivered_gbps"], r["cpu_s_per_gb"], r["consumer_wait"],
                r["slot_occupancy"], (r["memory_bytes"] or 0) / 1e9,
                "  ERROR " + r["error"] if "error" in r else ""))


def save(out, path):
    """Written after every row: a run cut by its time limit keeps them."""
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", required=True)
    ap.add_argument("--disk", help="a disk folder for the cold rows")
    ap.add_argument("--gb", type=float, default=8.6)
    ap.add_argument("--zstd-gb", type=float, default=4.3)
    ap.add_argument("--variable-gb", type=float, default=4.3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--rows", default="all",
                    help="comma list of row groups: "
                    "base,staging,knobs,zstd,variable,cold")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    groups = set(a.rows.split(",")) if a.rows != "all" else \
        {"base", "staging", "knobs", "zstd", "variable", "cold"}
    sluice = os.path.join(a.build, "sluice")
    shard = os.path.join(a.build, "dlpack-shard")
    records = int(a.gb * 1e9 / (1 << 20))
    raw = os.path.join(a.data, "raw")
    make_dataset(shard, raw, records, "none")
    files = shard_files(raw)
    size = sum(os.path.getsize(p) for p in files)
    threads = os.cpu_count()
    out = {"device": a.device, "dataset_bytes": size, "cpus": threads,
           "rows": []}

    # into 2 MiB buffers reused (the loader's pieces, staged), and into
    # 64 MiB ones (a block's io memory)
    hot = 2 << 20
    out["read_limit_gbps"] = med(read_limit(files, threads, hot)
                                 for _ in range(3))
    out["read_limit_1thread_gbps"] = read_limit(files, 1, hot)
    out["read_limit_cold_gbps"] = med(read_limit(files, threads)
                                      for _ in range(3))
    log("read limit (page cache, %d threads, pread into 2 MiB buffers "
        "reused): %.2f GB/s; 1 thread %.2f; into 64 MiB buffers %.2f" % (
            threads, out["read_limit_gbps"], out["read_limit_1thread_gbps"],
            out["read_limit_cold_gbps"]))
    if a.device == "cuda":
        try:
            os.environ.setdefault("KVIKIO_NTHREADS", str(threads))
            kv_cpu = []
            kv = [kvikio_limit(files, cpu=kv_cpu) for _ in range(3)]
            out["kvikio_gbps"] = med(kv)
            out["kvikio_cpu_s_per_gb"] = med(kv_cpu)
            out["kvikio_threads"] = int(os.environ["KVIKIO_NTHREADS"])
            log("kvikio (CuFile.pread 64 MiB x 8 in flight, %s threads): "
                "%.2f GB/s, %.3f CPU s/GB" % (
                    os.environ["KVIKIO_NTHREADS"], out["kvikio_gbps"],
                    out["kvikio_cpu_s_per_gb"]))
        except Exception as e:          # reported, the rows still run
            out["kvikio_error"] = repr(e)
            log("kvikio failed: %r" % e)

    base = ["--device", a.device, "--batch-size", "64"]
    # a few epochs, so that the ramp (the first reads, the read-ahead
    # rising) weighs little against the steady state
    epochs = ["--epochs", str(a.epochs)]
    rows = []
    if "base" in groups:
        rows += [("defaults", base + ["--shuffle", "none"])]
        if a.device == "cuda":
            # raw blocks checksummed on the GPU from their upload
            # (gather_check) against on the CPU as they land: the A/B of
            # the device's checks
            rows.append(("defaults-host-checks",
                         base + ["--shuffle", "none", "--host-checks"]))
            # no checksums: what the device's checks cost the workers,
            # who wait for each (check_threads_busy), side by side
            rows.append(("defaults-no-verify",
                         base + ["--shuffle", "none", "--no-verify"]))
        rows += [("defaults-window", base),
                 # the same from Python, as a PyTorch user runs it:
                 # sluice.torch.Loader's defaults (window shuffle)
                 ("python-defaults", ["--python"] + base),
                 ("defaults-block", base + ["--shuffle", "block"]),
                 # records' byte ranges read by the workers (fetch.c)
                 ("defaults-full", base + ["--shuffle", "full"]),
                 # checksums as pieces land (stream.c) against once each
                 # block is whole: the A/B of the cache-hot checks
                 ("defaults-whole-block-checks",
                  base + ["--shuffle", "none", "--whole-block-checks"])]
        if a.device == "cuda":
            rows.append(("host-defaults", ["--device", "host",
                                           "--batch-size", "64",
                                           "--shuffle", "none"]))
    if "staging" in groups and a.device == "cuda":
        # blocks read into small staging buffers in cache and uploaded
        # from there by the workers (fetch.c) against read by the ring
        # into their io memory; the parts' length around the default
        s = base + ["--shuffle", "none"]
        if "base" not in groups:
            rows.append(("defaults", s))
        rows += [("defaults-unstaged", s, {"SLUICE_STAGING": "0"}),
                 # each part read, then uploaded, in turn by its worker:
                 # the default until the overlap (fetch.c)
                 ("defaults-no-overlap", s, {"SLUICE_FETCH_OVERLAP": "0"}),
                 # fetches' parts of 2 and 8 MiB around the 4 MiB one
                 # (overlapped, 2 MiB ones take the cache 4 MiB did)
                 ("defaults-parts-2M", s, {"SLUICE_STAGE_PIECES": "1"}),
                 ("defaults-parts-8M", s, {"SLUICE_STAGE_PIECES": "4"}),
                 # more blocks in flight: the read-ahead follows
                 # bandwidth x latency up to what the budget holds
                 ("defaults-memory-4G", s + ["--memory", "4G"]),
                 # more workers than CPUs: a fetch waits for its upload
                 # with its CPU idle (10 of 16 workers read in the H100
                 # run 4)
                 ("defaults-threads-24", s + ["--decode-threads", "24"])]
    if "knobs" in groups:
        s = base + ["--shuffle", "none"]
        rows += [("memory-4G", s + ["--memory", "4G"]),
                 ("memory-2G-prefetch-16", s + ["--memory", "2G",
                                                "--prefetch", "16"]),
                 ("decode-threads-8", s + ["--decode-threads", "8"]),
                 ("queue-depth-256", s + ["--queue-depth", "256"]),
                 ("gather-off", s + ["--device-gather", "off"]),
                 ("no-verify", s + ["--no-verify"])]
    # the knobs are a survey (is any setting better than the defaults?):
    # one run each
    out["rows"] += interleaved(
        sluice, [(name, raw, args + epochs, env[0] if env else None,
                  a.runs if name.startswith(("defaults", "host", "python"))
                  else 1)
                 for name, args, *env in rows], a.timeout, out, a.json)

    if "zstd" in groups:
        zst = os.path.join(a.data, "zstd")
        make_dataset(shard, zst, int(a.zstd_gb * 1e9 / (1 << 20)), "zstd")
        out["rows"] += interleaved(sluice, [
            ("zstd-defaults", zst, base + ["--shuffle", "none"] + epochs,
             None, a.runs),
            # the A/B of staged decodes (fetch.c's fetch_decode): stored
            # bytes read by the ring into io memory, checked on the GPU
            ("zstd-ring-decode", zst, base + ["--shuffle", "none"] + epochs,
             {"SLUICE_STAGED_DECODE": "0"}, a.runs),
            ("zstd-gather-off", zst,
             base + ["--shuffle", "none", "--device-gather", "off"] +
             epochs, None, a.runs),
            # format v4: full shuffle reads each record's frames, not its
            # block; against the window shuffle of the same files
            ("zstd-window", zst, base + ["--shuffle", "window"] + epochs,
             None, 1),
            ("zstd-full", zst, base + ["--shuffle", "full"] + epochs,
             None, 1)], a.timeout, out, a.json)
        # 16 KiB records in 1 MiB blocks (convert's default): each
        # decode worker reads a block through a staging buffer of its
        # own, 1 MiB or the longest block's stored bytes (stage.c; two
        # of 4 MiB a worker before, fewer where the io memory was short)
        z16 = os.path.join(a.data, "zstd16")
        make_dataset(shard, z16, int(a.zstd_gb * 1e9 / (1 << 14)), "zstd",
                     SMALL_FIELD, 1 << 20)
        out["rows"] += interleaved(sluice, [
            ("zstd16-none", z16, base + ["--shuffle", "none"] + epochs,
             None, 1),
            ("zstd16-window", z16, base + ["--shuffle", "window"] + epochs,
             None, 1)], a.timeout, out, a.json)
    if "variable" in groups:
        # variable-size records (512 KiB on average): gathered on the
        # device from blocks read into io memory (the host reads their
        # offsets tables), and full shuffle's record ranges from the
        # staging buffers; gather off is the CPU's copy
        var = os.path.join(a.data, "variable")
        make_dataset(shard, var, int(a.variable_gb * 1e9 / (1 << 19)),
                     "none", VARIABLE_FIELD)
        out["rows"] += interleaved(sluice, [
            ("variable-window", var, base + epochs, None, a.runs),
            ("variable-full", var, base + ["--shuffle", "full"] + epochs,
             None, a.runs),
            ("variable-gather-off", var,
             base + ["--device-gather", "off"] + epochs, None, a.runs)],
            a.timeout, out, a.json)
    if "cold" in groups and a.disk:
        cold = os.path.join(a.disk, "raw")
        make_dataset(shard, cold, records, "none")
        out["rows"] += interleaved(sluice, [
            ("cold-direct", cold, base + ["--shuffle", "none", "--direct",
                                          "on", "--drop-cache"], None, 1)],
            a.timeout, out, a.json)

    pcie = [r.get("pcie_gbps") for r in out["rows"]]
    out["pcie_gbps"] = med(pcie)
    d = next((r for r in out["rows"] if r["name"] == "defaults"), None)
    if d and d.get("delivered_gbps"):
        for k in ("kvikio_gbps", "pcie_gbps", "read_limit_gbps"):
            if out.get(k):
                out["defaults_over_" + k.replace("_gbps", "")] = \
                    d["delivered_gbps"] / out[k]
    save(out, a.json)
    log("streaming: defaults %s GB/s; kvikio %s; pcie %s; read limit %s" % (
        d and d.get("delivered_gbps"), out.get("kvikio_gbps"),
        out.get("pcie_gbps"), out.get("read_limit_gbps")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
