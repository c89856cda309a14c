"""The Spark and Ray writers take their destination at the start (issue
24): a second write into the same folder fails in seconds, naming the
first one's pid, instead of at its merge after the whole job.  Driven
without Spark or Ray (fakes of the few names the modules use), so the
Python-level logic is tested where neither is installed."""
import os
import sys
import time
import types

import numpy as np
import pytest

import sluice
from sluice import parts

SCHEMA = [("id", "int64", ())]


def batches(lo, hi, step=10):
    for a in range(lo, hi, step):
        yield {"id": np.arange(a, min(a + step, hi), dtype=np.int64)}


def ids_of(out):
    ds = sluice.Dataset(str(out))
    return [int(np.frombuffer(ds.read(k, "id"), np.int64)[0])
            for k in range(len(ds))]


def test_claim_holds_the_writer_lock(tmp_path):
    out = tmp_path / "ds"
    c = parts.claim(out)
    try:
        with pytest.raises(parts.DestinationBusy,
                           match="process %d" % os.getpid()):
            parts.claim(out)
        # The C writer takes the same lock, and names the same pid.
        with pytest.raises(OSError, match="busy.*process %d" % os.getpid()):
            sluice.ShardWriter(str(out), SCHEMA)
    finally:
        c.release()
    assert os.listdir(out) == []
    parts.claim(out).release(remove_if_empty=True)
    assert os.path.isdir(out)   # not made by that claim: kept


def test_claim_refuses_a_folder_that_is_not_empty(tmp_path):
    out = tmp_path / "ds"
    with sluice.ShardWriter(str(out), SCHEMA) as w:
        w.write_batch({"id": np.arange(3, dtype=np.int64)})
    with pytest.raises(FileExistsError, match="new or empty folder"):
        parts.claim(out)
    left = tmp_path / "left"
    left.mkdir()
    (left / ".data-00000.dls.abc.tmp").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="dlpack-shard clean"):
        parts.claim(left)
    assert not (left / parts.LOCK_NAME).exists()


class FakeDataFrame:
    """df.select(...).mapInArrow(fn, schema).collect(): @job(staging)
    plays the tasks and returns the rows."""

    def __init__(self, out, job):
        self.out, self.job, self.collected = str(out), job, False

    def select(self, *names):
        return self

    def mapInArrow(self, fn, schema):
        return self

    def collect(self):
        self.collected = True
        runs = os.listdir(self.out + parts.STAGING_SUFFIX)
        assert len(runs) == 1
        return self.job(os.path.join(self.out + parts.STAGING_SUFFIX,
                                     runs[0]))


def test_spark_clash_fails_at_the_start(tmp_path):
    from sluice import spark

    out = tmp_path / "ds"
    second = FakeDataFrame(out, lambda staging: pytest.fail("ran"))

    def job(staging):
        # A second job into the same folder, while this one runs.
        t0 = time.monotonic()
        with pytest.raises(parts.DestinationBusy,
                           match="process %d" % os.getpid()):
            spark.write_dataframe(second, out, SCHEMA)
        assert time.monotonic() - t0 < 5
        rows = []
        for task, (lo, hi) in enumerate([(0, 30), (30, 50)]):
            r = parts.write_part(parts.part_dir(staging, task, "a1"),
                                 SCHEMA, batches(lo, hi))
            rows.append(dict(r, task=task))
        return rows

    summary = spark.write_dataframe(FakeDataFrame(out, job), out, SCHEMA)
    assert not second.collected
    assert summary["records"] == 50
    assert ids_of(out) == list(range(50))
    assert not os.path.exists(str(out) + parts.STAGING_SUFFIX)
    assert not (out / parts.LOCK_NAME).exists()
    # A write into a folder that now holds a dataset fails before its job.
    third = FakeDataFrame(out, lambda staging: pytest.fail("ran"))
    with pytest.raises(FileExistsError):
        spark.write_dataframe(third, out, SCHEMA)
    assert not third.collected


def test_spark_failed_job_lets_go(tmp_path):
    from sluice import spark

    out = tmp_path / "ds"

    def job(staging):
        raise RuntimeError("a stage failed")

    with pytest.raises(RuntimeError, match="a stage failed"):
        spark.write_dataframe(FakeDataFrame(out, job), out, SCHEMA)
    assert not out.exists()         # made by the claim, empty: removed
    parts.claim(out).release()      # free again


@pytest.fixture
def fake_ray(monkeypatch):
    """sluice.ray imported against a stand-in for ray's Datasink."""
    mods = {}
    for name in ("ray", "ray.data", "ray.data.datasource",
                 "ray.data.datasource.datasink"):
        mods[name] = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, mods[name])

    class Datasink:
        pass

    mods["ray.data.datasource.datasink"].Datasink = Datasink
    monkeypatch.delitem(sys.modules, "sluice.ray", raising=False)
    import sluice.ray
    yield sluice.ray
    sys.modules.pop("sluice.ray", None)


def test_ray_clash_fails_at_the_start(tmp_path, fake_ray):
    out = tmp_path / "ds"
    first = fake_ray.SluiceDatasink(str(out), SCHEMA)
    first.on_write_start()
    second = fake_ray.SluiceDatasink(str(out), SCHEMA)
    t0 = time.monotonic()
    with pytest.raises(parts.DestinationBusy,
                       match="process %d" % os.getpid()):
        second.on_write_start()
    assert time.monotonic() - t0 < 5
    assert not os.path.exists(second.staging)
    r = parts.write_part(parts.part_dir(first.staging, 0, "x"), SCHEMA,
                         batches(0, 20))
    first.on_write_complete(types.SimpleNamespace(
        write_returns=[dict(r, task=0)]))
    assert first.summary["records"] == 20
    assert ids_of(out) == list(range(20))
    third = fake_ray.SluiceDatasink(str(out), SCHEMA)
    with pytest.raises(FileExistsError):
        third.on_write_start()


def test_ray_failed_write_lets_go(tmp_path, fake_ray):
    out = tmp_path / "ds"
    sink = fake_ray.SluiceDatasink(str(out), SCHEMA)
    sink.on_write_start()
    parts.write_part(parts.part_dir(sink.staging, 0, "x"), SCHEMA,
                     batches(0, 20))
    sink.on_write_failed(RuntimeError("a block failed"))
    assert not out.exists()
    # The orphan part stays until `dlpack-shard clean OUT`.
    assert os.listdir(sink.staging) != []
    parts.claim(out).release()
