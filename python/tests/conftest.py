"""Shared fixtures: a deterministic source of records, datasets written
from it with sluice.ShardWriter, and helpers that check batches against
the source."""
import os

import numpy as np  # tests/test_python.sh skips when numpy is missing
import pytest

import sluice

SCHEMA = [("data", "float32", (4,)), ("label", "int64", ()),
          ("text", "uint8", (-1,))]


def source(i):
    """Record i of every test dataset."""
    n = i % 7                         # 0..6 bytes, empty values included
    return {
        "data": np.array([i, i + 0.5, -i, (i * i) % 1000], np.float32),
        "label": i * 3 + 1,
        "text": bytes((i * 13 + k) % 256 for k in range(n)),
    }


def write_dataset(path, records, start=0, **opts):
    opts.setdefault("block_size", 2048)       # many blocks: real shuffling
    opts.setdefault("records_per_shard", 100)
    with sluice.ShardWriter(path, SCHEMA, **opts) as w:
        for i in range(start, start + records):
            w.write(source(i))
    return w.summary


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """400 records in 4 shards, zstd-compressed blocks."""
    path = tmp_path_factory.mktemp("ds") / "train"
    write_dataset(path, 400, compression_level=3)
    return str(path)


@pytest.fixture(scope="session")
def raw_dataset(tmp_path_factory):
    """The same 400 records in raw (uncompressed) blocks."""
    path = tmp_path_factory.mktemp("raw") / "train"
    write_dataset(path, 400, compression_level=0)
    return str(path)


def check_batch(batch, base=0):
    """Every record of a host batch equals the source; returns indices."""
    idx = list(batch.indices)
    assert len(idx) == batch.size
    data = np.from_dlpack(batch["data"])
    label = np.from_dlpack(batch["label"])
    text = np.from_dlpack(batch["text"])
    offsets = np.from_dlpack(batch["text.offsets"])
    assert data.shape == (len(idx), 4) and label.shape == (len(idx),)
    assert offsets.shape == (len(idx) + 1,) and offsets[0] == 0
    for j, i in enumerate(idx):
        want = source(base + i)
        np.testing.assert_array_equal(data[j], want["data"])
        assert label[j] == want["label"]
        assert text[offsets[j]:offsets[j + 1]].tobytes() == want["text"]
    return idx


def epoch_order(path, epochs=1, **kw):
    """Indices per batch of an uninterrupted run."""
    kw.setdefault("device", "cpu")
    with sluice.Loader(path, **kw) as ld:
        order = []
        for e in range(epochs):
            ld.set_epoch(e)
            order.extend(list(b.indices) for b in ld)
        return order


@pytest.fixture
def torch():
    return pytest.importorskip(
        "torch", reason="torch is not installed (python3 -m pip install "
        "torch)")


def pytest_report_header(config):
    return "sluice from %s" % os.path.dirname(sluice.__file__)
