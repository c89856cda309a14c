"""Write a Spark DataFrame as a sluice dataset, retry-safe.

    import sluice.spark
    summary = sluice.spark.write_dataframe(df, "/data/train")

Each task attempt streams its partition's Arrow batches (mapInArrow) into
its own part folder, OUT.parts/run-ID/part-PARTITION-aATTEMPTID; the
job's result is the list of part paths of the attempts Spark counted; the
driver merges exactly those (sluice.parts.commit) and removes the run's
folder with the orphans of failed or speculative attempts.  pyspark and
pyarrow are imported only when this runs.
"""
import os

from . import parts
from .writer import normalize_schema

_RESULT = "task long, path string, records long"


def _arrow_schema(df):
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(df.schema)


def write_dataframe(df, out, schema=None, *, keep_parts=False, verify=False,
                    task_hook=None, **writer_options):
    """Write @df into the dataset folder @out (any mounted filesystem the
    executors and the driver share); returns the merge summary.

    schema: the sluice schema (as ShardWriter takes); None infers it from
        the DataFrame's Arrow types (sluice.columns.fields_from_arrow).
        Spark has no fixed-size arrays: give array columns that hold a
        fixed shape as fixed fields here, e.g. ("img", "uint8", (32, 32)).
    keep_parts: leave the parts (OUT.parts/run-ID) after the merge.
    verify: the merge checks every block's checksum (reads every part
        once more) before it writes dataset.json.
    task_hook: hook(event, info), called in the tasks (see
        sluice.parts.write_part); for tests that inject failures.
    writer_options: ShardWriter options for every part (threads,
        compression_level, block_size, shard_size, ...).  threads defaults
        to a few per task (at most 4), not one per CPU.
    """
    out = os.path.abspath(os.fspath(out))
    if schema is None:
        from .columns import fields_from_arrow
        fields = fields_from_arrow(_arrow_schema(df))
    else:
        fields = normalize_schema(schema)
    names = [f[0] for f in fields]
    # Taken before any task runs: a second write into @out fails here,
    # in seconds, not at its merge after the whole job.
    claimed = parts.claim(out)
    try:
        staging = parts.staging_dir(out)
        os.makedirs(staging, exist_ok=True)
        rows = _run(df, names, staging, fields, writer_options, task_hook)
        return parts.commit(results_of(rows), out, staging, keep_parts,
                            verify, claimed)
    finally:
        # Released by commit before its merge; here when the job or
        # the commit's checks failed (the parts stay in OUT.parts:
        # `dlpack-shard clean OUT`).
        claimed.release(remove_if_empty=True)


def _run(df, names, staging, fields, writer_options, task_hook):
    """The Spark job: one write_attempt per partition; the rows of the
    attempts Spark counted."""

    def write_partition(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        yield write_attempt(staging, fields, ctx.partitionId(),
                            ctx.taskAttemptId(), ctx.attemptNumber(),
                            batches, writer_options, task_hook)

    return df.select(*names).mapInArrow(write_partition, _RESULT).collect()


def write_attempt(staging, fields, task, attempt_id, attempt_number,
                  batches, writer_options=None, task_hook=None):
    """One task attempt: @batches (Arrow) into the part folder of
    @attempt_id (unique in the application: speculative and retried
    attempts of a task each get their own), returned as the one-row
    Arrow batch of _RESULT that Spark collects for the task."""
    import pyarrow as pa

    path = parts.part_dir(staging, task, "a%d" % attempt_id)
    info = {"task": task, "attempt": attempt_number}
    res = parts.write_part(path, fields, batches, writer_options,
                           task_hook, info)
    return pa.RecordBatch.from_pydict(
        {"task": [task], "path": [res["path"]],
         "records": [res["records"]]},
        schema=pa.schema([("task", pa.int64()), ("path", pa.string()),
                          ("records", pa.int64())]))


def results_of(rows):
    """The collected rows of _RESULT (one per task: the attempt Spark
    counted) as sluice.parts.commit takes them."""
    return [{"task": r["task"], "path": r["path"],
             "records": r["records"]} for r in rows]
