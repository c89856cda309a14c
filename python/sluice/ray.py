"""A Ray Data datasink that writes a sluice dataset, retry-safe.

    import sluice.ray
    sink = sluice.ray.SluiceDatasink("/data/train", schema)
    ds.write_datasink(sink, ray_remote_args={"max_retries": 3,
                                             "retry_exceptions": True})

Each write task attempt streams its blocks into its own part folder,
OUT.parts/run-ID/part-TASK-ATTEMPT (ATTEMPT is fresh for every attempt:
Ray reuses task ids across retries) and returns the part's path; when the
write finishes, on_write_complete merges exactly the parts Ray returned
(sluice.parts.commit) and removes the run's folder with the orphans of
failed attempts.  The summary is then in sink.summary.  Use one sink per
write.  ray and pyarrow are imported only when this module is.
"""
import os
import uuid

from ray.data.datasource.datasink import Datasink

from . import parts
from .writer import normalize_schema


class SluiceDatasink(Datasink):
    """SluiceDatasink(out, schema=None, *, keep_parts=False, verify=False,
    task_hook=None, **writer_options)

    schema: the sluice schema; None infers it from the dataset's Arrow
        schema at the start of the write (sluice.columns.fields_from_arrow).
    verify: the merge checks every block's checksum before it writes
        dataset.json.
    task_hook: hook(event, info) called in the write tasks (see
        sluice.parts.write_part); for tests that inject failures.
    writer_options: ShardWriter options for every part; threads defaults
        to a few per task (at most 4), not one per CPU.
    """

    def __init__(self, out, schema=None, *, keep_parts=False, verify=False,
                 task_hook=None, **writer_options):
        self.out = os.path.abspath(os.fspath(out))
        self.fields = normalize_schema(schema) if schema is not None else None
        self.keep_parts = keep_parts
        self.verify = verify
        self.task_hook = task_hook
        self.writer_options = writer_options
        self.staging = parts.staging_dir(self.out)
        self.claimed = None
        self.summary = None

    def get_name(self):
        return "Sluice"

    def on_write_start(self, schema=None):
        if self.fields is None:
            if schema is None:
                raise ValueError("SluiceDatasink: no schema given and the "
                                 "dataset has none to infer it from")
            from .columns import fields_from_arrow
            arrow = getattr(schema, "base_schema", schema)
            self.fields = fields_from_arrow(arrow)
        # Taken before any write task runs: a second write into out
        # fails here, in seconds, not at its merge after the whole job.
        self.claimed = parts.claim(self.out)
        try:
            os.makedirs(self.staging, exist_ok=True)
        except BaseException:
            self.claimed.release(remove_if_empty=True)
            raise

    def write(self, blocks, ctx):
        from ray.data.block import BlockAccessor

        task = ctx.task_idx
        path = parts.part_dir(self.staging, task, uuid.uuid4().hex[:12])
        batches = (BlockAccessor.for_block(b).to_arrow() for b in blocks)
        res = parts.write_part(path, self.fields, batches,
                               self.writer_options, self.task_hook,
                               {"task": task})
        return {"task": task, "path": res["path"],
                "records": res["records"]}

    def on_write_complete(self, write_result):
        try:
            self.summary = parts.commit(write_result.write_returns,
                                        self.out, self.staging,
                                        self.keep_parts, self.verify,
                                        self.claimed)
        finally:
            self.claimed.release(remove_if_empty=True)

    def on_write_failed(self, error):
        """The write failed: let go of out (its parts stay in
        OUT.parts until `dlpack-shard clean OUT`)."""
        if self.claimed is not None:
            self.claimed.release(remove_if_empty=True)
