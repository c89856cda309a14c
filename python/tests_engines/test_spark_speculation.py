"""Speculative execution on the Spark path: two attempts of one partition
run at once in one staging folder, both finish, Spark counts one; the
merge takes exactly that one and the orphan is removed.  Also a losing
attempt still writing while the driver commits, and one that starts only
after the commit: neither may leave anything behind.

Spark never launches a speculative copy on a host where the task already
runs (TaskSetManager skips hosts with an attempt), and local and
local-cluster executors are all one host, so no Spark on one machine
speculates.  These tests drive the task attempt Spark runs
(sluice.spark.write_attempt: the function behind mapInArrow, given what it
reads from TaskContext) twice, concurrently, and commit what Spark would
have collected, through the same sluice.spark.results_of and
sluice.parts.commit as write_dataframe."""
import os
import threading

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import sluice  # noqa: E402
import sluice.spark  # noqa: E402
from sluice import parts  # noqa: E402
from expect import SCHEMA, check_exactly_once, record  # noqa: E402

N = 4000
PARTITIONS = 4
PER = N // PARTITIONS
FIELDS = sluice.writer.normalize_schema(SCHEMA)


def partition(task, rows=250):
    """Arrow batches of the partition's records, as mapInArrow hands
    them over."""
    for lo in range(task * PER, (task + 1) * PER, rows):
        recs = [record(i) for i in range(lo, lo + rows)]
        yield pa.RecordBatch.from_pydict({
            "id": pa.array([r["id"] for r in recs], pa.int64()),
            "vec": pa.array([r["vec"].tolist() for r in recs],
                            pa.list_(pa.float32())),
            "tok": pa.array([r["tok"].tolist() for r in recs],
                            pa.list_(pa.int64())),
            "text": pa.array([r["text"] for r in recs], pa.binary())})


def attempt(staging, task, attempt_id, number, hook=None):
    return sluice.spark.write_attempt(staging, FIELDS, task, attempt_id,
                                      number, partition(task), {"threads": 1},
                                      hook)


def run_in_thread(fn):
    """Start fn() in a thread; join() returns its result or raises its
    exception."""
    box = {}

    def go():
        try:
            box["result"] = fn()
        except BaseException as e:  # handed to the joiner
            box["error"] = e
    t = threading.Thread(target=go)
    t.start()

    def join():
        t.join(60)
        assert not t.is_alive(), "attempt still running"
        if "error" in box:
            raise box["error"]
        return box["result"]
    return join


def staging_for(tmp_path):
    out = tmp_path / "ds"
    staging = parts.staging_dir(out)
    os.makedirs(staging)  # the driver's part of write_dataframe
    return out, staging


def others(staging, skip):
    """One attempt of every other task, as Spark's collect returns them."""
    return [attempt(staging, t, 100 + t, 0).to_pylist()[0]
            for t in range(PARTITIONS) if t != skip]


def test_both_attempts_finish_one_is_merged(tmp_path):
    out, staging = staging_for(tmp_path)
    both_writing = threading.Barrier(2, timeout=30)

    def meet(event, info):
        # Both attempts have a batch written before either goes on: they
        # really run at once in the one staging folder.
        if event == "batch" and info["records"] == 250:
            both_writing.wait()
    first = run_in_thread(lambda: attempt(staging, 2, 7, 0, meet))
    copy = run_in_thread(lambda: attempt(staging, 2, 9, 1, meet))
    won = first().to_pylist()[0]
    lost = copy().to_pylist()[0]
    # Both finished a complete part of the same records: only what Spark
    # returns tells them apart.
    assert won["path"] != lost["path"]
    for r in (won, lost):
        assert r["records"] == PER
        assert len(sluice.Dataset(r["path"])) == PER
    rows = others(staging, 2) + [won]
    summary = parts.commit(sluice.spark.results_of(rows), out, staging,
                           verify=True)
    assert summary["records"] == N
    check_exactly_once(str(out), N)
    assert not os.path.exists(str(out) + ".parts")  # the orphan too


def test_loser_still_writing_at_commit(tmp_path):
    """Spark kills the losing copy asynchronously: it may still be writing
    while the driver merges and removes the staging folder.  The merge is
    unaffected, the loser fails once its folder is gone, and nothing of it
    comes back."""
    out, staging = staging_for(tmp_path)
    paused, resume = threading.Event(), threading.Event()

    def stall(event, info):
        if event == "batch" and info["records"] == 500:
            paused.set()
            assert resume.wait(30)
    copy = run_in_thread(lambda: attempt(staging, 1, 11, 1, stall))
    assert paused.wait(30)
    won = attempt(staging, 1, 10, 0).to_pylist()[0]
    summary = parts.commit(sluice.spark.results_of(others(staging, 1) +
                                                   [won]),
                           out, staging)
    assert summary["records"] == N
    assert not os.path.exists(staging)
    resume.set()
    with pytest.raises((OSError, sluice.SluiceError)):
        copy()
    assert not os.path.exists(str(out) + ".parts")
    check_exactly_once(str(out), N)


def test_loser_starting_after_commit(tmp_path):
    """A copy launched just before the original finished may start only
    after the commit: it fails at once instead of making the staging
    folder again."""
    out, staging = staging_for(tmp_path)
    rows = others(staging, None)
    parts.commit(sluice.spark.results_of(rows), out, staging)
    with pytest.raises(FileNotFoundError, match="is gone"):
        attempt(staging, 0, 12, 1)
    assert not os.path.exists(str(out) + ".parts")
    check_exactly_once(str(out), N)
