"""ShardWriter round trips and merge of parts written by separate
processes."""
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


def test_merge_refuses_different_schemas(tmp_path):
    write_dataset(tmp_path / "a", 10)
    with sluice.ShardWriter(tmp_path / "b", [("other", "int8", ())]) as w:
        w.write({"other": 1})
    with pytest.raises(sluice.SchemaError) as e:
        sluice.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert str(e.value)                       # the library's message
