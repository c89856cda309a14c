"""ShardWriter.write_batch: NumPy and Arrow columns make the same blocks,
byte for byte, as one write() per record; bad columns are refused with
the field's name and leave no dataset."""
import os

import numpy as np
import pytest

import sluice

SCHEMA = [("label", "int64", ()), ("vec", "float32", (2, 3)),
          ("tok", "int32", (-1,)), ("text", "uint8", (-1,)),
          ("pts", "float32", (-1, 2))]
OPTS = dict(block_size=1024, records_per_shard=150, threads=2)
N = 400


def rows(n=N):
    out = []
    for i in range(n):
        out.append({
            "label": i * 7 - 3,
            "vec": np.arange(6, dtype=np.float32).reshape(2, 3) + i,
            "tok": np.arange(i % 5, dtype=np.int32) * i,
            "text": ("r%d" % i * (i % 3)).encode(),
            "pts": np.full((i % 4, 2), i / 2, np.float32),
        })
    return out


def offsets_of(parts):
    offs = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=offs[1:])
    return offs


def shard_bytes(path):
    """Every shard's blocks and index: the bytes after the 4 KiB header
    page (a header may carry its dataset's random id)."""
    names = sorted(n for n in os.listdir(path) if n.endswith(".dls"))
    assert names
    return [open(os.path.join(path, n), "rb").read()[4096:] for n in names]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The dataset written one record at a time."""
    path = tmp_path_factory.mktemp("ref") / "ds"
    with sluice.ShardWriter(path, SCHEMA, **OPTS) as w:
        for r in rows():
            w.write(r)
    return shard_bytes(path)


def numpy_batch(rs):
    tok = [r["tok"] for r in rs]
    pts = [r["pts"] for r in rs]
    return {
        "label": np.array([r["label"] for r in rs], np.int64),
        "vec": np.array([r["vec"] for r in rs], np.float32).reshape(-1, 2, 3),
        # (values, offsets) with offsets along values' first axis
        "tok": (np.concatenate(tok + [np.zeros(0, np.int32)]),
                offsets_of(tok)),
        # a list of arrays
        "text": [np.frombuffer(r["text"], np.uint8) for r in rs],
        "pts": (np.concatenate(pts + [np.zeros((0, 2), np.float32)]),
                offsets_of(pts)),
    }


def test_numpy_batches_match_per_record_writes(tmp_path, reference):
    rs = rows()
    with sluice.ShardWriter(tmp_path / "ds", SCHEMA, **OPTS) as w:
        for lo, hi in ((0, 1), (1, 1), (1, 130), (130, N)):
            assert w.write_batch(numpy_batch(rs[lo:hi])) == hi - lo
    assert w.summary["records"] == N
    assert shard_bytes(tmp_path / "ds") == reference


def test_values_offsets_slice_and_dense_variable(tmp_path):
    """Offsets need not start at 0 (a slice of a larger column); a dense
    [n, L] array is n records of L items each."""
    values = np.arange(100, dtype=np.int32)
    offs = np.array([10, 12, 12, 20])
    with sluice.ShardWriter(tmp_path / "a", [("t", "int32", (-1,))]) as w:
        w.write_batch({"t": (values, offs)})
        w.write_batch({"t": np.arange(6, dtype=np.int32).reshape(2, 3)})
    ds = sluice.Dataset(tmp_path / "a")
    assert len(ds) == 5
    got = [np.frombuffer(ds.read(i, "t"), np.int32).tolist()
           for i in range(5)]
    assert got == [[10, 11], [], list(range(12, 20)), [0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("batch, error, text", [
    ({"a": np.zeros((3, 2), np.int32), "b": [b"x"] * 3}, ValueError,
     "shape (3, 2)"),
    ({"a": np.zeros((3, 3), np.float64), "b": [b"x"] * 3}, TypeError,
     "float64 as int32"),
    ({"a": np.zeros((3, 3), np.int32), "b": [b"x"] * 2}, ValueError,
     "different lengths"),
    ({"a": np.zeros((3, 3), np.int32)}, KeyError, "'b'"),
    ({"a": np.zeros((2, 3), np.int32), "b": (np.zeros(4, np.uint8), [0, 1])},
     ValueError, "different lengths: [1, 2]"),
    ({"a": np.zeros((1, 3), np.int32), "b": (np.zeros(4, np.uint8), [0, -1])},
     ValueError, "negative offset"),
])
def test_bad_numpy_columns(tmp_path, batch, error, text):
    schema = [("a", "int32", (3,)), ("b", "uint8", (-1,))]
    w = sluice.ShardWriter(tmp_path / "ds", schema)
    with pytest.raises(error, match=None) as e:
        w.write_batch(batch)
    assert text in str(e.value)
    w.abort()
    assert not os.path.exists(tmp_path / "ds" / "dataset.json")


def test_decreasing_offsets_fail_in_the_library(tmp_path):
    w = sluice.ShardWriter(tmp_path / "ds", [("b", "uint8", (-1,))])
    with pytest.raises(sluice.SluiceError) as e:
        w.write_batch({"b": (np.zeros(4, np.uint8), [0, 3, 1])})
    assert "'b': offsets decrease at record 1" in str(e.value)
    with pytest.raises(RuntimeError, match="only abort"):
        w.write_batch({"b": [b"x"]})
    w.abort()
    assert not os.path.exists(tmp_path / "ds" / "dataset.json")


# ---- Arrow ---------------------------------------------------------------

def arrow_table(rs):
    pa = pytest.importorskip("pyarrow")
    return pa.table({
        "label": pa.array([r["label"] for r in rs], pa.int64()),
        "vec": pa.array([r["vec"].reshape(-1).tolist() for r in rs],
                        pa.list_(pa.float32(), 6)),
        "tok": pa.array([r["tok"].tolist() for r in rs],
                        pa.list_(pa.int32())),
        "text": pa.array([r["text"] for r in rs], pa.binary()),
        "pts": pa.array([r["pts"].tolist() for r in rs],
                        pa.large_list(pa.list_(pa.float32(), 2))),
    })


def test_arrow_table_matches_per_record_writes(tmp_path, reference):
    pa = pytest.importorskip("pyarrow")
    rs = rows()
    # Three chunks of uneven size: write_batch follows the chunks.
    table = pa.concat_tables([arrow_table(rs[:7]), arrow_table(rs[7:250]),
                              arrow_table(rs[250:])])
    with sluice.ShardWriter(tmp_path / "ds", SCHEMA, **OPTS) as w:
        assert w.write_batch(table) == N
    assert shard_bytes(tmp_path / "ds") == reference


def test_arrow_sliced_record_batches(tmp_path, reference):
    """Slices share buffers with offsets not at 0."""
    pa = pytest.importorskip("pyarrow")
    whole = arrow_table(rows()).combine_chunks().to_batches()[0]
    assert isinstance(whole, pa.RecordBatch)
    with sluice.ShardWriter(tmp_path / "ds", SCHEMA, **OPTS) as w:
        for lo in range(0, N, 97):
            w.write_batch(whole.slice(lo, 97))
    assert shard_bytes(tmp_path / "ds") == reference


def test_arrow_strings_lists_for_fixed_and_nulls(tmp_path):
    pa = pytest.importorskip("pyarrow")
    schema = [("s", "uint8", (-1,)), ("v", "int16", (2,)),
              ("b", "bool", ())]
    batch = pa.record_batch({
        "s": pa.array(["héllo", "", "x"], pa.large_string()),
        "v": pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int8())),
        "b": pa.array([True, False, True]),
    })
    with sluice.ShardWriter(tmp_path / "ok", schema) as w:
        w.write_batch(batch)
    ds = sluice.Dataset(tmp_path / "ok")
    assert ds.read(0, "s") == "héllo".encode()
    assert ds.read(1, "s") == b""
    assert np.frombuffer(ds.read(2, "v"), np.int16).tolist() == [5, 6]
    assert ds.read(1, "b") == b"\x00" and ds.read(2, "b") == b"\x01"

    bad = {
        "nulls": (pa.array(["a", None, "c"]), "1 null values"),
        "ragged": (pa.array([[1, 2], [3], [5, 6]], pa.list_(pa.int16())),
                   "list 1 has 1 items, expected 2"),
    }
    for what, (col, text) in bad.items():
        cols = {"s": batch.column(0), "v": batch.column(1),
                "b": batch.column(2)}
        cols["s" if what == "nulls" else "v"] = col
        w = sluice.ShardWriter(tmp_path / what, schema)
        with pytest.raises(ValueError) as e:
            w.write_batch(pa.record_batch(cols))
        assert text in str(e.value), what
        w.abort()


def test_arrow_nested_lists_for_a_fixed_field(tmp_path):
    """A [2, 3] field from lists of lists (every level's length checked)
    or from flat lists of 6."""
    pa = pytest.importorskip("pyarrow")
    schema = [("m", "int32", (2, 3))]
    nested = pa.array([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [0, 1, 2]]])
    flat = pa.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 0, 1, 2]])
    for col in (nested, flat):
        out = tmp_path / ("d%d" % len(os.listdir(tmp_path)))
        with sluice.ShardWriter(out, schema) as w:
            w.write_batch(pa.record_batch({"m": col}))
        got = np.frombuffer(sluice.Dataset(out).read(1, "m"), np.int32)
        assert got.tolist() == [7, 8, 9, 0, 1, 2]
    ragged = pa.array([[[1, 2, 3], [4, 5, 6]], [[7, 8], [9, 0, 1, 2]]])
    w = sluice.ShardWriter(tmp_path / "bad", schema)
    with pytest.raises(ValueError, match="list 2 has 2 items, expected 3"):
        w.write_batch(pa.record_batch({"m": ragged}))
    w.abort()


def test_values_offsets_flat_or_rows(tmp_path):
    """For a [-1, 2] field, offsets count rows of 2 when values are
    [m, 2], single items when values are flat (then every record must
    hold whole rows)."""
    schema = [("p", "float32", (-1, 2))]
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    with sluice.ShardWriter(tmp_path / "a", schema) as w:
        w.write_batch({"p": (rows, [0, 1, 4, 6])})
        w.write_batch({"p": (rows.reshape(-1), [0, 2, 8])})
    ds = sluice.Dataset(tmp_path / "a")
    got = [np.frombuffer(ds.read(i, "p"), np.float32).tolist()
           for i in range(len(ds))]
    assert got == [[0, 1], list(range(2, 8)), list(range(8, 12)),
                   [0, 1], list(range(2, 8))]
    w = sluice.ShardWriter(tmp_path / "b", schema)
    with pytest.raises(sluice.SchemaError, match="record 0"):
        w.write_batch({"p": (rows.reshape(-1), [0, 3])})  # 1.5 rows
    w.abort()
    w = sluice.ShardWriter(tmp_path / "c", schema)
    with pytest.raises(ValueError, match="expected"):
        w.write_batch({"p": (rows.reshape(3, 4), [0, 1])})
    w.abort()
