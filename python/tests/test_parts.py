"""sluice.parts, the retry-safe pattern under sluice.spark and sluice.ray,
driven here without an engine: attempts that fail midway or finish and
die, a commit of exactly the returned parts."""
import os

import numpy as np
import pytest

import sluice
from sluice import parts

SCHEMA = [("id", "int64", ()), ("b", "uint8", (-1,))]


def batches(lo, hi, step=10):
    for a in range(lo, hi, step):
        ids = np.arange(a, min(a + step, hi), dtype=np.int64)
        yield {"id": ids, "b": [bytes([int(i) % 256]) * int(i % 3)
                                for i in ids]}


def fail_at(records):
    def hook(event, info):
        if event == "batch" and info["records"] >= records:
            raise RuntimeError("injected")
    return hook


def test_commit_takes_exactly_the_returned_parts(tmp_path):
    out = tmp_path / "ds"
    staging = parts.staging_dir(out)
    assert os.path.dirname(staging) == str(out) + ".parts"
    os.makedirs(staging)
    # task 0: attempt a fails after 20 records, attempt b succeeds
    with pytest.raises(RuntimeError, match="injected"):
        parts.write_part(parts.part_dir(staging, 0, "a"), SCHEMA,
                         batches(0, 50), hook=fail_at(20), info={"task": 0})
    r0 = parts.write_part(parts.part_dir(staging, 0, "b"), SCHEMA,
                          batches(0, 50), info={"task": 0})
    # task 1: attempt a finishes (then "dies"), attempt b is the one kept
    parts.write_part(parts.part_dir(staging, 1, "a"), SCHEMA,
                     batches(50, 80), info={"task": 1})
    r1 = parts.write_part(parts.part_dir(staging, 1, "b"), SCHEMA,
                          batches(50, 80), info={"task": 1})
    assert len(os.listdir(staging)) == 4
    summary = parts.commit([dict(r1, task=1), dict(r0, task=0)], out,
                           staging, verify=True)
    assert summary["records"] == 80
    ds = sluice.Dataset(out)
    ids = [int(np.frombuffer(ds.read(k, "id"), np.int64)[0])
           for k in range(len(ds))]
    assert ids == list(range(80))  # task order, each once
    assert not os.path.exists(str(out) + ".parts")


def test_commit_refuses_what_it_cannot_trust(tmp_path):
    out = tmp_path / "ds"
    staging = parts.staging_dir(out)
    os.makedirs(staging)
    r = parts.write_part(parts.part_dir(staging, 0, "a"), SCHEMA,
                         batches(0, 5), info={"task": 0})
    with pytest.raises(RuntimeError, match="two results for one task"):
        parts.commit([dict(r, task=0), dict(r, task=0)], out, staging)
    elsewhere = tmp_path / "elsewhere"
    with sluice.ShardWriter(elsewhere, SCHEMA) as w:
        w.write_batch(next(batches(0, 5)))
    with pytest.raises(RuntimeError, match="is not in"):
        parts.commit([{"task": 0, "path": str(elsewhere), "records": 5}],
                      out, staging)
    with pytest.raises(FileExistsError):  # an attempt id is never reused
        parts.write_part(parts.part_dir(staging, 0, "a"), SCHEMA,
                         batches(0, 5))
    assert not os.path.exists(out / "dataset.json")
