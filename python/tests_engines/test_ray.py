"""sluice.ray.SluiceDatasink on a local Ray: a clean run, a write task
that raises after some records (retried: retry_exceptions), and a worker
that dies after finishing its part (retried as a system failure).  Each
must deliver every record exactly once and leave no staging folder."""
import os
import sys

import pytest

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")

import sluice  # noqa: E402
import sluice.ray  # noqa: E402
from expect import SCHEMA, check_exactly_once, record  # noqa: E402
from faults import fail_once, fired, run_dir  # noqa: E402

# Ray's workers cannot import the test modules: ship them by value.
import expect, faults  # noqa: E401,E402
for _m in (sys.modules[__name__], expect, faults):
    ray.cloudpickle.register_pickle_by_value(_m)

N = 6000
BLOCKS = 6
RETRY = {"max_retries": 3, "retry_exceptions": True}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


def to_records(batch):
    """expect.record(i) for a batch of ids, as Arrow."""
    ids = batch["id"].to_numpy()
    rs = [record(int(i)) for i in ids]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "vec": pa.array([r["vec"] for r in rs], pa.list_(pa.float32(), 4)),
        "tok": pa.array([r["tok"] for r in rs], pa.list_(pa.int64())),
        "text": pa.array([r["text"] for r in rs], pa.binary()),
    })


def dataset():
    return ray.data.range(N, override_num_blocks=BLOCKS).map_batches(
        to_records, batch_format="pyarrow", batch_size=500)


def write(out, **kw):
    sink = sluice.ray.SluiceDatasink(out, SCHEMA, threads=1, **kw)
    dataset().write_datasink(sink, ray_remote_args=RETRY)
    return sink


def test_clean_run(local_ray, tmp_path):
    out = tmp_path / "ds"
    sink = write(out)
    assert sink.summary["records"] == N
    check_exactly_once(str(out), N)
    assert not os.path.exists(str(out) + ".parts")


def test_inferred_schema(local_ray, tmp_path):
    out = tmp_path / "ds"
    sink = sluice.ray.SluiceDatasink(out, threads=1)
    dataset().limit(50).write_datasink(sink)
    assert [tuple(f) for f in sluice.Dataset(out).fields] == [
        ("id", "int64", ()), ("vec", "float32", (4,)),
        ("tok", "int64", (-1,)), ("text", "uint8", (-1,))]


def failing_tasks(staging, task):
    return [d for d in os.listdir(staging) if d.startswith("part-%05d-" %
                                                             task)]


def test_task_fails_after_some_records(local_ray, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "ds"
    write(out, keep_parts=True,
          task_hook=fail_once(str(marks), "batch", task=2, after_records=500))
    assert fired(str(marks), "batch", 2) >= 500
    check_exactly_once(str(out), N)
    assert len(failing_tasks(run_dir(out), 2)) == 2


def test_worker_dies_after_finished_part(local_ray, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "ds"
    write(out, keep_parts=True,
          task_hook=fail_once(str(marks), "closed", task=4, crash=True))
    n = fired(str(marks), "closed", 4)
    assert n and n > 0
    check_exactly_once(str(out), N)
    staging = run_dir(out)
    orphans = failing_tasks(staging, 4)
    assert len(orphans) == 2, orphans
    # Both are complete datasets: only the returned list tells them apart.
    assert [len(sluice.Dataset(os.path.join(staging, d))) for d in orphans] \
        == [n, n]
