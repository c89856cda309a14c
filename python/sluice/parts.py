"""Retry-safe distributed writes (the pattern under sluice.spark and
sluice.ray): every task attempt writes its own part folder, named with
the attempt's id, under a staging folder; the task returns its part's
path; the driver merges exactly the parts its engine reports as the
successful attempts, in task order, then removes the staging folder with
everything else in it (failed, retried and speculative attempts).  The
staging folder is OUT.parts/run-ID, one per write.

A glob over the staging folder would take a dead attempt's finished part
as well and duplicate its records: never merge by listing the folder.
"""
import os
import shutil
import time
import uuid

from ._errors import warn as _warn
from .writer import ShardWriter, merge

STAGING_SUFFIX = ".parts"


def staging_dir(out):
    """Where the parts of one write into @out go: OUT.parts/RUN, beside
    @out on the same filesystem (so merge hard-links instead of copying),
    RUN fresh for every write (a folder left by a driver that died is
    never mistaken for this run's)."""
    return os.path.join(os.fspath(out).rstrip("/") + STAGING_SUFFIX,
                        "run-" + uuid.uuid4().hex[:12])


def part_dir(staging, task, attempt):
    """The folder of one task attempt: part-TASK-ATTEMPT."""
    return os.path.join(staging, "part-%05d-%s" % (task, attempt))


def write_part(path, schema, batches, writer_options=None, hook=None,
               info=None):
    """Write @batches (each anything ShardWriter.write_batch takes) into a
    fresh part folder @path, made here inside its staging folder (which
    the driver made: os.makedirs(staging_dir(out))); returns {"path", "records"}.  @hook, when
    given, is called as hook(event, info) with event "batch" after each
    batch (info["records"] updated) and "closed" once the part is finished:
    raising from it fails the attempt (the tests inject failures so)."""
    info = dict(info or {}, path=path, records=0)
    # mkdir, not makedirs: an attempt that starts after the driver has
    # committed and removed the staging folder (a speculative copy Spark
    # had not killed yet) fails here, instead of making the folder again
    # with a part nobody merges or removes.
    try:
        os.mkdir(path)
    except FileExistsError:
        # An attempt id is never reused; a folder here is not ours.
        raise FileExistsError("part folder %s exists already" % path) \
            from None
    except FileNotFoundError:
        raise FileNotFoundError(
            "staging folder %s is gone: this write was committed or "
            "abandoned" % os.path.dirname(path)) from None
    with ShardWriter(path, schema, **(writer_options or {})) as w:
        for batch in batches:
            info["records"] += w.write_batch(batch)
            if hook:
                hook("batch", info)
    if w.summary["records"] != info["records"]:
        raise RuntimeError("%s: wrote %d records, the writer counted %d" % (
            path, info["records"], w.summary["records"]))
    if hook:
        hook("closed", info)
    return {"path": path, "records": info["records"]}


def commit(parts, out, staging, keep_parts=False, verify=False):
    """Merge the parts the engine returned ({"task", "path", "records"}
    each, one per task) into @out, in task order; check the merged count
    against the tasks' counts; then remove @staging (unless @keep_parts),
    which drops the orphans of failed and duplicate attempts too.
    verify: merge checks every block's checksum before it writes
    dataset.json.  Returns the merge summary."""
    parts = sorted(parts, key=lambda p: p["task"])
    tasks = [p["task"] for p in parts]
    if len(set(tasks)) != len(tasks):
        raise RuntimeError("two results for one task: %s" % tasks)
    staging_real = os.path.realpath(staging)
    for p in parts:
        if os.path.dirname(os.path.realpath(p["path"])) != staging_real:
            raise RuntimeError("part %s is not in %s" % (p["path"], staging))
    expected = sum(p["records"] for p in parts)
    summary = merge([p["path"] for p in parts], out, verify=verify)
    if summary["records"] != expected:
        raise RuntimeError("merged %d records into %s, the tasks wrote %d" %
                           (summary["records"], out, expected))
    if not keep_parts:
        remove_staging(staging)
        try:
            os.rmdir(os.path.dirname(staging))  # OUT.parts, when empty
        except OSError:
            pass
    return summary


def remove_staging(staging, tries=5):
    """Remove a run's staging folder.  A losing attempt may still be
    writing in it (Spark kills speculative copies asynchronously) and add a
    file while rmtree runs: try again.  Once the folder is gone that
    attempt fails at its next file (its folder is gone too), so nothing
    comes back.  What still cannot be removed is left with a warning: the
    dataset itself is complete by then."""
    for i in range(tries):
        shutil.rmtree(staging, ignore_errors=True)
        if not os.path.exists(staging):
            return
        time.sleep(0.05 * (i + 1))
    _warn("could not remove %s (an attempt still writing?); remove it by "
          "hand" % staging, UserWarning)
