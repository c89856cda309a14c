"""sluice.spark.write_dataframe on Spark local[2,4] (4 attempts per
task): a clean run, a task that fails after some records, and a worker
that dies after finishing its part.  Each must deliver every record
exactly once, and leave no staging folder."""
import os

import pytest

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import sluice  # noqa: E402
import sluice.spark  # noqa: E402
from expect import SCHEMA, check_exactly_once  # noqa: E402
from faults import fail_once, fired, run_dir  # noqa: E402

N = 20000
PARTITIONS = 8


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2,4]")
         .appName("sluice-test")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def frame(spark):
    """The records of expect.record(i), built by Spark itself."""
    from pyspark.sql import functions as F
    i = F.col("id")
    return spark.range(0, N, numPartitions=PARTITIONS).select(
        i.alias("id"),
        F.array(*[(i + k).cast("float") for k in range(4)]).alias("vec"),
        F.expr("slice(array(id, id + 1, id + 2), 1, cast(id % 4 as int))"
               ).alias("tok"),
        F.concat(F.lit("r"), i.cast("string")).alias("text"))


def test_clean_run(spark, tmp_path):
    out = tmp_path / "ds"
    summary = sluice.spark.write_dataframe(frame(spark), out, SCHEMA,
                                           verify=True, threads=1)
    assert summary["records"] == N
    check_exactly_once(str(out), N)
    assert not os.path.exists(str(out) + ".parts")


def test_inferred_schema(spark, tmp_path):
    """Without schema=: arrays become variable fields, strings uint8."""
    out = tmp_path / "ds"
    sluice.spark.write_dataframe(frame(spark).limit(100), out, threads=1)
    fields = [tuple(f) for f in sluice.Dataset(out).fields]
    assert fields == [("id", "int64", ()), ("vec", "float32", (-1,)),
                      ("tok", "int64", (-1,)), ("text", "uint8", (-1,))]


def test_task_fails_after_some_records(spark, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    hook = fail_once(str(marks), "batch", task=3, after_records=1000)
    out = tmp_path / "ds"
    sluice.spark.write_dataframe(frame(spark), out, SCHEMA, task_hook=hook,
                                 keep_parts=True, threads=1)
    assert fired(str(marks), "batch", 3) >= 1000  # it did fail once
    check_exactly_once(str(out), N)
    # The failed attempt's folder is an orphan: unfinished, never merged.
    staging = run_dir(out)
    task3 = [d for d in os.listdir(staging) if d.startswith("part-00003-")]
    assert len(task3) == 2, task3


def test_worker_dies_after_finished_part(spark, tmp_path):
    """The first attempt of task 5 finishes a valid part, then its worker
    dies: a glob over the parts would take that part too and duplicate
    its records; the merge takes only the retried attempt's."""
    marks = tmp_path / "marks"
    marks.mkdir()
    hook = fail_once(str(marks), "closed", task=5, crash=True)
    out = tmp_path / "ds"
    sluice.spark.write_dataframe(frame(spark), out, SCHEMA, task_hook=hook,
                                 keep_parts=True, threads=1)
    assert fired(str(marks), "closed", 5) == N // PARTITIONS
    check_exactly_once(str(out), N)
    staging = run_dir(out)
    task5 = sorted(d for d in os.listdir(staging)
                   if d.startswith("part-00005-"))
    assert len(task5) == 2, task5
    # Both are complete datasets: only the returned list tells them apart.
    for d in task5:
        assert len(sluice.Dataset(os.path.join(staging, d))) == N // PARTITIONS
    # Without keep_parts the staging folder, orphans included, is gone.
    out2 = tmp_path / "ds2"
    sluice.spark.write_dataframe(frame(spark), out2, SCHEMA, threads=1)
    assert not os.path.exists(str(out2) + ".parts")
