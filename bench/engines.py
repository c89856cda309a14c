#!/usr/bin/env python3
"""Spark and Ray writing a sluice dataset end to end (the engine builds
the records, tasks write parts, the driver merges): wall seconds and
records/s, median of RUNS, against one process building the same records
(NumPy, and a list of bytes for text) and writing them with write_batch.
Every timing includes building the records.  Records: id int64, vec
float32[32] (from an array column), text uint8[-1] (a string, ~8 bytes).

Usage: PYTHONPATH=<built sluice package> PYSPARK_PYTHON=$(which python3) \\
       python3 bench/engines.py        (needs pyspark, ray, pyarrow)
Env: RECORDS (200000), PARTS (8 tasks), RUNS (3), CPUS (2: local[CPUS]
and ray.init(num_cpus=CPUS)), BENCH_DIR (scratch).
"""
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

import sluice

RECORDS = int(os.environ.get("RECORDS", 200000))
PARTS = int(os.environ.get("PARTS", 8))
RUNS = int(os.environ.get("RUNS", 3))
CPUS = int(os.environ.get("CPUS", 2))
SCHEMA = [("id", "int64", ()), ("vec", "float32", (32,)),
          ("text", "uint8", (-1,))]
OPTS = dict(threads=1)  # one per task: CPUS tasks run at once


def timed(fn, work):
    out = os.path.join(work, "out")
    times = []
    for _ in range(RUNS):
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        fn(out)
        times.append(time.perf_counter() - t)
        assert len(sluice.Dataset(out)) == RECORDS
    return statistics.median(times)


def numpy_once(out):
    ids = np.arange(RECORDS, dtype=np.int64)
    text = np.char.add("r", ids.astype(str)).astype(object)
    with sluice.ShardWriter(out, SCHEMA, **OPTS) as w:
        w.write_batch({"id": ids,
                       "vec": (ids[:, None] + np.arange(32)).astype(
                           np.float32),
                       "text": [t.encode() for t in text]})


def spark_run(spark):
    from pyspark.sql import functions as F

    import sluice.spark

    def run(out):
        i = F.col("id")
        df = spark.range(0, RECORDS, numPartitions=PARTS).select(
            i.alias("id"),
            F.array(*[(i + k).cast("float") for k in range(32)]).alias("vec"),
            F.concat(F.lit("r"), i.cast("string")).alias("text"))
        sluice.spark.write_dataframe(df, out, SCHEMA, **OPTS)
    return run


def ray_run():
    import pyarrow as pa
    import ray

    import sluice.ray

    def build(batch):
        ids = batch["id"].to_numpy()
        vec = (ids[:, None] + np.arange(32)).astype(np.float32)
        return pa.table({
            "id": ids,
            "vec": pa.FixedSizeListArray.from_arrays(vec.reshape(-1), 32),
            "text": pa.array(["r%d" % k for k in ids], pa.binary())})

    def run(out):
        ray.data.range(RECORDS, override_num_blocks=PARTS).map_batches(
            build, batch_format="pyarrow").write_datasink(
                sluice.ray.SluiceDatasink(out, SCHEMA, **OPTS))
    return run


def main():
    work = tempfile.mkdtemp(prefix="bench_engines.",
                            dir=os.environ.get("BENCH_DIR"))
    results = {}
    try:
        results["write_batch, one process (NumPy)"] = timed(numpy_once, work)
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[%d]" % CPUS)
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        results["Spark write_dataframe"] = timed(spark_run(spark), work)
        spark.stop()
        import ray
        ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
        results["Ray SluiceDatasink"] = timed(ray_run(), work)
        ray.shutdown()
    finally:
        shutil.rmtree(work)
    print("%d records, %d tasks, %d CPUs, median of %d runs" % (
        RECORDS, PARTS, CPUS, RUNS))
    for name, secs in results.items():
        print("  %-34s %6.2f s  %9.0f records/s" % (name, secs,
                                                    RECORDS / secs))


if __name__ == "__main__":
    main()
