#!/usr/bin/env python3
"""Writing speed from Python against the CLI, side by side on the same
bytes: ShardWriter.write() per record, ShardWriter.write_batch() of NumPy
columns and of an Arrow table, `dlpack-shard convert --from npy` and
`--from parquet`.  All use zstd:3 and the same --threads; each run writes
a fresh dataset next to the input (page cache, shards fsynced); the
methods take turns run by run, so a noisy neighbour hits them alike.

Usage: PYTHONPATH=<built sluice package> python3 bench/write_batch.py
Env: RECORDS (200000), PER_RECORD (20000: write() is timed on the first
PER_RECORD records only, its rows built beforehand and not counted), RUNS
(5), THREADS (2), LEVEL (zstd level, 3; 0: raw blocks), IMG (bytes of the
img field, 512), BUILD (build), BENCH_DIR (scratch; $TMPDIR or /tmp),
INPUTS (a folder: only write the inputs there, label.npy, vec.npy,
img.npy and t.parquet, for bench/cpu_compare.py, and exit).  Arrow and parquet rows need pyarrow; the
"pyarrow read only" row is the parquet decoding inside --from parquet.
Prints per method the median records/s and input MB/s, then the ratios.
"""
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import sluice

RECORDS = int(os.environ.get("RECORDS", 200000))
PER_RECORD = int(os.environ.get("PER_RECORD", 20000))
RUNS = int(os.environ.get("RUNS", 5))
THREADS = int(os.environ.get("THREADS", 2))
LEVEL = int(os.environ.get("LEVEL", 3))
IMG = int(os.environ.get("IMG", 512))
BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
SCHEMA = [("label", "int64", ()), ("vec", "float32", (32,)),
          ("img", "uint8", (IMG,))]
OPTS = dict(compression_level=LEVEL, threads=THREADS)
CODEC = "zstd:%d" % LEVEL if LEVEL else "none"


def make_data(rng):
    """label, vec (random floats) and img (half a fixed pattern, half
    random: compressibility 0.5, like synth's img:uint8:512:0.5)."""
    half = IMG // 2
    img = np.empty((RECORDS, IMG), np.uint8)
    img[:, :half] = rng.integers(0, 256, half, dtype=np.uint8)
    img[:, half:] = rng.integers(0, 256, (RECORDS, IMG - half),
                                 dtype=np.uint8)
    return {"label": np.arange(RECORDS, dtype=np.int64),
            "vec": rng.random((RECORDS, 32), dtype=np.float32),
            "img": img}


def main():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        pa = pq = None
    if os.environ.get("INPUTS"):
        os.makedirs(os.environ["INPUTS"], exist_ok=True)
        write_inputs(os.environ["INPUTS"], pa, pq)
        return
    ds_bin = os.path.join(BUILD, "dlpack-shard")
    if not os.access(ds_bin, os.X_OK):
        sys.exit("write_batch.py: build %s first (make)" % ds_bin)
    work = tempfile.mkdtemp(prefix="bench_write_batch.",
                            dir=os.environ.get("BENCH_DIR"))
    try:
        run(work, ds_bin, pa, pq)
    finally:
        shutil.rmtree(work)


def cpu_seconds():
    """User + system time of this process and its waited-for children (the
    CLI runs): a measure the other load on a shared machine disturbs less
    than wall time.  write()'s includes building its row dicts."""
    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        t += r.ru_utime + r.ru_stime
    return t


def read_only(pq, path):
    """Reading as sluice.parquet.convert does: buffered, batches of about
    4 MiB."""
    from sluice.parquet import READ_BUFFER, batch_rows_for
    n = 0
    pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=READ_BUFFER)
    rows = batch_rows_for(pf, pf.schema_arrow.names)
    for b in pf.iter_batches(batch_size=rows):
        n += b.num_rows
    return n


def write_inputs(work, pa, pq):
    """The data as columns, as .npy files (their paths) and as an Arrow
    table written to work/t.parquet (None without pyarrow)."""
    cols = make_data(np.random.default_rng(1))
    npys = []
    for name, arr in cols.items():
        npys.append(os.path.join(work, name + ".npy"))
        np.save(npys[-1], arr)
    table = None
    if pa is not None:
        table = pa.table({
            "label": cols["label"],
            "vec": pa.FixedSizeListArray.from_arrays(
                cols["vec"].reshape(-1), 32),
            # image bytes as binary, as parquet datasets keep them
            "img": pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(IMG), RECORDS,
                [None, pa.py_buffer(cols["img"].reshape(-1))])})
        pq.write_table(table, os.path.join(work, "t.parquet"),
                       compression="none", row_group_size=65536)
    return cols, npys, table


def run(work, ds_bin, pa, pq):
    cols, npys, table = write_inputs(work, pa, pq)
    raw = sum(a.nbytes for a in cols.values())
    out = os.path.join(work, "out")
    env = dict(os.environ, SLUICE_PYTHON=sys.executable)

    def cli(*args):
        subprocess.run([ds_bin, "convert", *args, "--out", out,
                        "--threads", str(THREADS), "--compression", CODEC,
                        "--quiet"], check=True, env=env)
        return RECORDS

    def per_record():
        rows = [{k: v[i] for k, v in cols.items()}
                for i in range(PER_RECORD)]
        c = cpu_seconds()
        t = time.perf_counter()
        with sluice.ShardWriter(out, SCHEMA, **OPTS) as w:
            for r in rows:
                w.write(r)
        return PER_RECORD, time.perf_counter() - t, cpu_seconds() - c

    def batch(source):
        with sluice.ShardWriter(out, SCHEMA, **OPTS) as w:
            w.write_batch(source)
        return RECORDS

    methods = [("write() per record", per_record),
               ("write_batch(numpy)", lambda: batch(cols)),
               ("convert --from npy", lambda: cli(",".join(npys)))]
    if table is not None:
        methods += [("write_batch(arrow)", lambda: batch(table)),
                    ("convert --from parquet",
                     lambda: cli("--from", "parquet",
                                 os.path.join(work, "t.parquet"))),
                    ("pyarrow read only", lambda: read_only(
                        pq, os.path.join(work, "t.parquet")))]
    rates = {name: [] for name, _ in methods}
    cpu = {name: [] for name, _ in methods}
    for _ in range(RUNS):
        for name, fn in methods:
            shutil.rmtree(out, ignore_errors=True)
            c = cpu_seconds()
            t = time.perf_counter()
            got = fn()
            n, secs, used = got if isinstance(got, tuple) else \
                (got, time.perf_counter() - t, cpu_seconds() - c)
            rates[name].append(n / secs)
            cpu[name].append(used / n * 1e6)
    per_rec_bytes = raw / RECORDS
    print("%d records of %d bytes (%.0f MB), %s, %d threads, median of "
          "%d runs" % (RECORDS, per_rec_bytes, raw / 1e6, CODEC, THREADS,
                       RUNS))
    med = {k: statistics.median(v) for k, v in rates.items()}
    for name, r in med.items():
        print("  %-24s %10.0f records/s  %7.1f MB/s  %6.2f CPU us/record" % (
            name, r, r * per_rec_bytes / 1e6, statistics.median(cpu[name])))
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print("  write_batch(numpy) / write()             %.1fx records/s, "
          "%.1fx less CPU per record" % (
              med["write_batch(numpy)"] / med["write() per record"],
              mcpu["write() per record"] / mcpu["write_batch(numpy)"]))
    print("  write_batch(numpy) / convert --from npy  %.2f" % (
        med["write_batch(numpy)"] / med["convert --from npy"]))
    if table is not None:
        print("  write_batch(arrow) / convert --from npy  %.2f" % (
            med["write_batch(arrow)"] / med["convert --from npy"]))


if __name__ == "__main__":
    main()
