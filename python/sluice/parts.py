"""Retry-safe distributed writes (the pattern under sluice.spark and
sluice.ray): every task attempt writes its own part folder, named with
the attempt's id, under a staging folder; the task returns its part's
path; the driver merges exactly the parts its engine reports as the
successful attempts, in task order, then removes the staging folder with
everything else in it (failed, retried and speculative attempts).  The
staging folder is OUT.parts/run-ID, one per write.

A glob over the staging folder would take a dead attempt's finished part
as well and duplicate its records: never merge by listing the folder.

The driver takes the destination at the start (claim): OUT is made, must
be empty, and its writer lock (OUT/.sluice.lock, the one the C writer,
merge and `dlpack-shard clean` take) is held until the merge, so that a
second write into OUT fails in seconds, naming the first one's pid,
instead of after its whole job.  A driver that dies leaves OUT.parts/;
`dlpack-shard clean OUT` removes it (and refuses while a writer lives).
"""
import errno
import fcntl
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


LOCK_NAME = ".sluice.lock"


class DestinationBusy(OSError):
    """Another writer holds the destination (errno EBUSY)."""


def _read_pid(fd):
    try:
        text = os.pread(fd, 24, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() and int(text) > 0 else 0
    except (OSError, ValueError):
        return 0


class Claim:
    """The destination of one distributed write, held by its driver from
    the start until the merge (see claim)."""

    def __init__(self, out, fd, made):
        self.out = out
        self.fd = fd
        self.made = made

    @property
    def held(self):
        return self.fd is not None

    def release(self, remove_if_empty=False):
        """Drop the lock (removing its file first, as the C writer does:
        a writer waiting on an unlinked file retries on the new one).
        remove_if_empty: also remove OUT when this claim made it and it
        is empty (a write that failed)."""
        if self.fd is None:
            return
        try:
            os.unlink(os.path.join(self.out, LOCK_NAME))
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
        if remove_if_empty and self.made:
            try:
                os.rmdir(self.out)
            except OSError:
                pass


def claim(out):
    """Take @out for one write: make it (it must be missing or empty) and
    hold its writer lock, with this process's pid in it.  Raises
    DestinationBusy when a writer or merge holds it (naming its pid), and
    FileExistsError when it holds anything (a dataset, or what an
    interrupted write left: see `dlpack-shard clean`)."""
    out = os.fspath(out)
    made = False
    try:
        os.mkdir(out)
        made = True
    except FileExistsError:
        pass
    path = os.path.join(out, LOCK_NAME)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DestinationBusy(
                errno.EBUSY, "%s: busy: a writer or merge (%s) is writing "
                "into this folder; wait for it to finish, or write "
                "somewhere else" % (out, "process %d" % pid if pid else
                                    "another process")) from None
        # The holder we raced may have removed the file: lock only what
        # the name is (dir_lock.c does the same).
        try:
            held, named = os.fstat(fd), os.stat(path)
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"%d\n" % os.getpid(), 0)
    c = Claim(out, fd, made)
    others = sorted(n for n in os.listdir(out) if n != LOCK_NAME)
    if others:
        c.release()
        hidden = all(n.startswith(".") and n.endswith(".tmp")
                     for n in others)
        raise FileExistsError(
            errno.EEXIST, "%s: not empty (%s%s)%s" % (
                out, ", ".join(others[:3]),
                ", ..." if len(others) > 3 else "",
                ": what an interrupted write left; 'dlpack-shard clean "
                "%s' removes it" % out if hidden else
                "; write into a new or empty folder"))
    return c


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


def commit(parts, out, staging, keep_parts=False, verify=False,
           claimed=None):
    """Merge the parts the engine returned ({"task", "path", "records"}
    each, one per task) into @out, in task order; check the merged count
    against the tasks' counts; then remove @staging (unless @keep_parts),
    which drops the orphans of failed and duplicate attempts too.
    verify: merge checks every block's checksum before it writes
    dataset.json.  claimed: the Claim taken at the start, released here
    just before the merge takes the same lock.  Returns the merge
    summary."""
    parts = sorted(parts, key=lambda p: p["task"])
    tasks = [p["task"] for p in parts]
    if len(set(tasks)) != len(tasks):
        raise RuntimeError("two results for one task: %s" % tasks)
    staging_real = os.path.realpath(staging)
    for p in parts:
        if os.path.dirname(os.path.realpath(p["path"])) != staging_real:
            raise RuntimeError("part %s is not in %s" % (p["path"], staging))
    expected = sum(p["records"] for p in parts)
    if claimed is not None:
        claimed.release()
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
