"""ShardWriter round trips and merge of parts written by separate
processes."""
import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import sluice
from conftest import SCHEMA, check_batch, source, write_dataset


def test_round_trip_every_dtype(tmp_path):
    schema = {
        "u8": ("uint8", (3,)), "i16": ("int16", (2, 2)), "i32": "int32",
        "u64": "uint64", "f16": ("float16", (2,)), "f64": "float64",
        "flag": ("bool", (2,)), "bf": ("bfloat16", (1,)),
        "tokens": ("int32", (-1,)), "pts": ("float32", (-1, 3)),
    }
    rows = []
    for i in range(37):
        rows.append({
            "u8": np.array([i, 255 - i, 7], np.uint8),
            "i16": np.array([[i, -i], [2 * i, -2 * i]], np.int16),
            "i32": -i * 1000,
            "u64": 2**63 + i,
            "f16": np.array([i / 4, -i / 8], np.float16),
            "f64": i / 3,
            "flag": [i % 2 == 0, i % 3 == 0],
            "bf": bytes([i, 0x3f]),                 # raw bfloat16 bytes
            "tokens": list(range(i % 5)),
            "pts": np.arange((i % 4) * 3, dtype=np.float32).reshape(-1, 3),
        })
    with sluice.ShardWriter(tmp_path / "ds", schema, records_per_shard=10,
                            block_size=512) as w:
        for r in rows:
            w.write(r)
    assert w.summary["records"] == 37 and w.summary["shards"] == 4
    ds = sluice.Dataset(tmp_path / "ds")
    assert len(ds) == 37
    assert [tuple(f) for f in ds.fields] == [
        (name, spec if isinstance(spec, str) else spec[0],
         () if isinstance(spec, str) else spec[1])
        for name, spec in schema.items()]
    np_dtype = {"u8": np.uint8, "i16": np.int16, "i32": np.int32,
                "u64": np.uint64, "f16": np.float16, "f64": np.float64,
                "flag": np.bool_, "tokens": np.int32, "pts": np.float32}
    for i, r in enumerate(rows):
        for name, want in r.items():
            got = ds.read(i, name)
            if name == "bf":
                assert got == want
            else:
                want = np.asarray(want, np_dtype[name]).tobytes()
                assert got == want, (i, name)
    # And through the loader, as tensors.
    with sluice.Loader(tmp_path / "ds", batch_size=37, shuffle="none",
                       device="cpu") as ld:
        batch = next(iter(ld))
        i16 = np.from_dlpack(batch["i16"])
        assert i16.shape == (37, 2, 2) and i16[5, 1, 1] == -10
        pts = np.from_dlpack(batch["pts"])
        off = np.from_dlpack(batch["pts.offsets"])
        assert pts.shape[1:] == (3,)
        np.testing.assert_array_equal(pts[off[7]:off[8]], rows[7]["pts"])
        flag = np.from_dlpack(batch["flag"])
        assert flag.dtype == np.bool_ and flag[3].tolist() == [False, True]


def test_writer_checks_values_and_schema(tmp_path):
    with pytest.raises(ValueError, match="unknown dtype"):
        sluice.ShardWriter(tmp_path / "a", [("x", "complex64", ())])
    with pytest.raises(sluice.SchemaError):
        sluice.ShardWriter(tmp_path / "b", [("x", "int8", (0,))])
    w = sluice.ShardWriter(tmp_path / "c", SCHEMA)
    with pytest.raises(ValueError, match="shape"):
        w.write({"data": np.zeros(5, np.float32), "label": 1, "text": b""})
    with pytest.raises(TypeError, match="cannot store"):
        w.write({"data": np.zeros(4, np.complex64), "label": 1,
                 "text": b""})
    with pytest.raises(KeyError, match="missing"):
        w.write({"data": np.zeros(4, np.float32)})
    # Raw bytes of the wrong size reach the library, which refuses them.
    with pytest.raises(sluice.SchemaError):
        w.write({"data": b"123", "label": 1, "text": b""})
    w.abort()
    assert not os.path.exists(tmp_path / "c" / "dataset.json")


@pytest.mark.parametrize("dtype,value", [
    ("int64", 1.5), ("int64", np.float64(2.5)), ("int64", [1, 2.5]),
    ("uint8", 300), ("uint8", -1), ("uint64", np.int64(-1)),
    ("int8", np.int64(128)), ("bool", 2), ("float16", 1e6),
    ("int32", float("nan")), ("int32", np.array([1.0, float("inf")])),
])
def test_value_that_does_not_fit_raises(tmp_path, dtype, value):
    shape = (2,) if isinstance(value, (list, np.ndarray)) else ()
    with sluice.ShardWriter(tmp_path / "ds", [("x", dtype, shape)]) as w:
        with pytest.raises((ValueError, TypeError)) as e:
            w.write({"x": value})
        assert "'x'" in str(e.value)
        w.write({"x": np.zeros(shape, dtype)})
    with sluice.Dataset(tmp_path / "ds") as ds:
        assert len(ds) == 1


def test_values_that_fit_are_stored_exactly(tmp_path):
    schema = [("i", "int64", ()), ("u", "uint8", (3,)), ("f", "float16", ()),
              ("b", "bool", ())]
    with sluice.ShardWriter(tmp_path / "ds", schema) as w:
        w.write({"i": 2.0, "u": [0, 255, 7], "f": 0.5, "b": 1})
        w.write({"i": -2**63, "u": np.array([1, 2, 3], np.int64),
                 "f": np.float64(-2), "b": True})
    with sluice.Dataset(tmp_path / "ds") as ds:
        assert np.frombuffer(ds.read(0, "i"), np.int64)[0] == 2
        assert np.frombuffer(ds.read(1, "i"), np.int64)[0] == -2**63
        assert list(ds.read(0, "u")) == [0, 255, 7]
        assert np.frombuffer(ds.read(1, "f"), np.float16)[0] == -2
        assert ds.read(0, "b") == b"\x01"


def test_wrong_field_names_list_the_fields(dataset):
    with sluice.Loader(dataset, batch_size=4, device="cpu") as ld:
        batch = next(iter(ld))
        with pytest.raises(KeyError) as e:
            batch["image"]
        msg = str(e.value)
        assert "'image'" in msg, msg
        assert "data, label, text, text.offsets" in msg, msg
        assert batch.get("image") is None
    with sluice.Dataset(dataset) as ds:
        with pytest.raises(KeyError, match="data, label, text"):
            ds.read(0, "image")


def test_exception_in_with_block_aborts(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with sluice.ShardWriter(tmp_path / "ds", SCHEMA) as w:
            w.write(source(0))
            raise RuntimeError("boom")
    assert not os.path.exists(tmp_path / "ds" / "dataset.json")
    with pytest.raises(sluice.SluiceError):
        sluice.Dataset(tmp_path / "ds")


PART_SCRIPT = r"""
import sys
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from conftest import write_dataset
write_dataset(sys.argv[1], 50, start=int(sys.argv[2]),
              records_per_shard=20)
"""


def test_merge_parts_written_by_separate_processes(tmp_path):
    # As a Ray or Spark job would: each task writes one part in its own
    # process; the driver merges.
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.dirname(os.path.dirname(sluice.__file__))
    procs, parts = [], []
    for k in range(3):
        part = str(tmp_path / ("part-%d" % k))
        parts.append(part)
        procs.append(subprocess.Popen(
            [sys.executable, "-c", PART_SCRIPT, part, str(50 * k), here,
             pkg]))
    for p in procs:
        assert p.wait(timeout=120) == 0
    summary = sluice.merge(parts, tmp_path / "merged")
    assert summary["records"] == 150
    assert summary["shards"] == 9
    ds = sluice.Dataset(tmp_path / "merged")
    assert len(ds) == 150
    with sluice.Loader(tmp_path / "merged", batch_size=25, seed=1,
                       device="cpu") as ld:
        seen = sum((check_batch(b) for b in ld), [])
    assert sorted(seen) == list(range(150))


@pytest.mark.parametrize("copy", [False, True])
def test_merge_links_or_copies(tmp_path, copy):
    """Merged shards are hard links to the parts' (documented), or
    independent copies with copy=True (issue 24)."""
    write_dataset(tmp_path / "p0", 30, records_per_shard=10)
    write_dataset(tmp_path / "p1", 30, start=30, records_per_shard=10)
    sluice.merge([tmp_path / "p0", tmp_path / "p1"], tmp_path / "m",
                 copy=copy)
    src = os.stat(tmp_path / "p0" / "data-00000.dls")
    dst = os.stat(tmp_path / "m" / "data-00000.dls")
    assert (src.st_ino == dst.st_ino) == (not copy)
    assert dst.st_nlink == (1 if copy else 2)
    assert len(sluice.Dataset(tmp_path / "m")) == 60
    assert "hard link" in sluice.merge.__doc__


def test_merge_refuses_different_schemas(tmp_path):
    write_dataset(tmp_path / "a", 10)
    with sluice.ShardWriter(tmp_path / "b", [("other", "int8", ())]) as w:
        w.write({"other": 1})
    with pytest.raises(sluice.SchemaError) as e:
        sluice.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert str(e.value)                       # the library's message


def _files(path):
    return sorted(os.listdir(path))


def test_merge_refuses_a_source_as_destination(tmp_path):
    write_dataset(tmp_path / "t1", 30, records_per_shard=10)
    write_dataset(tmp_path / "t2", 30, start=30, records_per_shard=10)
    before = _files(tmp_path / "t1")
    with pytest.raises(sluice.SluiceError) as e:
        sluice.merge([tmp_path / "t1", tmp_path / "t2"], tmp_path / "t1")
    assert e.value.errno == errno.EINVAL
    assert "is also part 1" in str(e.value)
    assert _files(tmp_path / "t1") == before        # nothing removed
    assert len(sluice.Dataset(tmp_path / "t1")) == 30


def test_merge_refuses_a_used_folder(tmp_path):
    write_dataset(tmp_path / "a", 20, records_per_shard=10)
    used = tmp_path / "used"
    used.mkdir()
    (used / "data-00007.dls").write_bytes(b"stale")
    with pytest.raises(sluice.SluiceError) as e:
        sluice.merge([tmp_path / "a"], used)
    assert e.value.errno == errno.ENOTEMPTY
    assert _files(used) == ["data-00007.dls"]


def test_merge_checks_record_counts_and_verifies(tmp_path):
    write_dataset(tmp_path / "a", 20, records_per_shard=10)
    write_dataset(tmp_path / "b", 20, start=20, records_per_shard=10,
                  compression_level=0)
    manifest = tmp_path / "a" / "dataset.json"
    good = manifest.read_text()
    doc = json.loads(good)
    doc["shards"][1]["records"] += 1
    doc["records"] += 1
    manifest.write_text(json.dumps(doc))
    with pytest.raises(sluice.CorruptDataError) as e:
        sluice.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m1")
    assert "data-00001.dls" in str(e.value) and "manifest says 11" in str(
        e.value)
    assert not (tmp_path / "m1").exists()
    manifest.write_text(good)
    # A flipped byte inside a block: only verify=True reads every block.
    shard = tmp_path / "b" / "data-00001.dls"
    img = bytearray(shard.read_bytes())
    img[4096 + 3] ^= 0x10
    shard.write_bytes(bytes(img))
    with pytest.raises(sluice.CorruptDataError) as e:
        sluice.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m2",
                     verify=True)
    assert "data-00001.dls: block 0" in str(e.value)
    assert not (tmp_path / "m2").exists()


def test_merged_dataset_binds_each_shard(tmp_path):
    write_dataset(tmp_path / "a", 20, records_per_shard=10)
    write_dataset(tmp_path / "b", 20, start=20, records_per_shard=10)
    sluice.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m",
                 verify=True)
    doc = json.loads((tmp_path / "m" / "dataset.json").read_text())
    part = json.loads((tmp_path / "a" / "dataset.json").read_text())
    assert doc["version"] == 2 and doc["dataset_id"] != part["dataset_id"]
    assert [s["index"] for s in doc["shards"]] == [0, 1, 0, 1]
    assert doc["shards"][0]["dataset_id"] == part["dataset_id"]
    # Swapping two merged shards is caught by name.
    m = tmp_path / "m"
    os.rename(m / "data-00000.dls", m / "x")
    os.rename(m / "data-00002.dls", m / "data-00000.dls")
    os.rename(m / "x", m / "data-00002.dls")
    with pytest.raises(sluice.CorruptDataError) as e:
        sluice.Dataset(m)
    assert "data-00000.dls: is shard 0 of dataset" in str(e.value)


TWO_WRITERS_SCRIPT = r"""
import sys, time
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import sluice
from conftest import SCHEMA, source
w = sluice.ShardWriter(sys.argv[1], SCHEMA, records_per_shard=10)
w.write(source(0))
print("open", flush=True)
sys.stdin.readline()
for i in range(1, 30):
    w.write(source(i))
w.close()
"""


def test_two_writers_on_one_folder(tmp_path):
    # A speculative task and the original write into the same part folder
    # at once: the second fails at once, the first is unharmed.
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.dirname(os.path.dirname(sluice.__file__))
    part = tmp_path / "part-0"
    first = subprocess.Popen(
        [sys.executable, "-c", TWO_WRITERS_SCRIPT, str(part), here, pkg],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "open\n"
        with pytest.raises(sluice.SluiceError) as e:
            sluice.ShardWriter(part, SCHEMA)
        assert e.value.errno == errno.EBUSY
        assert ("busy: a writer or merge (process %d) is writing into this "
                "folder" % first.pid) in str(e.value)
        first.stdin.write("go\n")
        first.stdin.flush()
        assert first.wait(timeout=120) == 0
    finally:
        if first.poll() is None:
            first.kill()
    ds = sluice.Dataset(part)
    assert len(ds) == 30
    # Once it is done, the folder holds a dataset: a late writer is
    # refused too, and the dataset stays as it was.
    with pytest.raises(sluice.SluiceError) as e:
        sluice.ShardWriter(part, SCHEMA)
    assert e.value.errno == errno.EEXIST
    assert len(sluice.Dataset(part)) == 30


KILLED_WRITER_SCRIPT = r"""
import os, signal, sys
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import sluice
from conftest import SCHEMA, source
w = sluice.ShardWriter(sys.argv[1], SCHEMA, records_per_shard=5,
                       block_size=256, threads=1)
i = 0
# until shard 2 is begun (shards 0 and 1 finished), then die mid-write
while sum(n.endswith(".tmp") for n in os.listdir(sys.argv[1])) < 3:
    w.write(source(i))
    i += 1
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killed_writer_leaves_nothing_loadable(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.dirname(os.path.dirname(sluice.__file__))
    part = tmp_path / "part-0"
    p = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER_SCRIPT, str(part), here, pkg],
        timeout=120)
    assert p.returncode == -9
    names = os.listdir(part)
    assert not any(n.endswith(".dls") for n in names), names
    assert "dataset.json" not in names
    with pytest.raises(sluice.DatasetNotFoundError):
        sluice.Dataset(part)                        # no dataset.json
    with pytest.raises(sluice.DatasetNotFoundError):
        sluice.Dataset(str(part / "*.dls"))         # no shard
    with pytest.raises(sluice.CorruptDataError) as e:
        sluice.Dataset(str(part / ".*.tmp"))        # the leftovers
    assert "uncommitted shard" in str(e.value)
    with pytest.raises(sluice.SluiceError):
        sluice.merge([part], tmp_path / "m")
    assert not (tmp_path / "m").exists()
