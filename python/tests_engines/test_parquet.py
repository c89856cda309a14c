"""Parquet into sluice: sluice.parquet.convert and `dlpack-shard convert
--from parquet` give the same blocks and index, byte for byte, as
write_batch of the same table; inferred fields; a corrupt file fails naming it and leaves no
dataset."""
import os
import subprocess
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import sluice  # noqa: E402
import sluice.columns  # noqa: E402
import sluice.parquet  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
N = 3000


def dlpack_shard():
    build = os.environ.get("SLUICE_BIN", os.environ.get("BUILD", "build"))
    path = os.path.join(build if os.path.isabs(build)
                        else os.path.join(ROOT, build), "dlpack-shard")
    if not os.access(path, os.X_OK):
        pytest.skip("no %s (make)" % path)
    return path


def table():
    i = np.arange(N)
    return pa.table({
        "id": pa.array(i, pa.int32()),
        "score": pa.array(i / 7, pa.float64()),
        "emb": pa.array([[k, k + 1, k + 2] for k in range(N)],
                        pa.list_(pa.float32(), 3)),
        "tok": pa.array([list(range(k % 6)) for k in range(N)],
                        pa.list_(pa.int16())),
        "blob": pa.array([bytes([k % 256]) * (k % 5) for k in range(N)]),
        "name": pa.array(["n%d" % k for k in range(N)]),
    })


FIELDS = [("id", "int32", ()), ("score", "float64", ()),
          ("emb", "float32", (3,)), ("tok", "int16", (-1,)),
          ("blob", "uint8", (-1,)), ("name", "uint8", (-1,))]
OPTS = dict(block_size=8192, threads=2)


def shards(path):
    """Blocks and index of each shard: the bytes after the 4 KiB header
    (a header may carry its dataset's random id)."""
    return [open(os.path.join(path, f), "rb").read()[4096:]
            for f in sorted(os.listdir(path)) if f.endswith(".dls")]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pq")
    t = table()
    # Two files, several row groups each.
    pq.write_table(t.slice(0, 1200), d / "a.parquet", row_group_size=500)
    pq.write_table(t.slice(1200), d / "b.parquet", row_group_size=700)
    ref = d / "ref"
    with sluice.ShardWriter(ref, FIELDS, **OPTS) as w:
        w.write_batch(t)
    return d, shards(ref)


def test_fields_inferred():
    assert sluice.columns.fields_from_arrow(table().schema) == FIELDS
    with pytest.raises(TypeError, match="'when'"):
        sluice.columns.fields_from_arrow(pa.schema([("when",
                                                     pa.timestamp("s"))]))


def test_convert_folder_matches_write_batch(files, tmp_path):
    d, ref = files
    s = sluice.parquet.convert(d, tmp_path / "ds", batch_rows=333, **OPTS)
    assert s["records"] == N
    assert shards(tmp_path / "ds") == ref


def test_cli_convert_from_parquet(files, tmp_path):
    d, ref = files
    out = tmp_path / "ds"
    env = dict(os.environ, SLUICE_PYTHON=sys.executable)
    r = subprocess.run([dlpack_shard(), "convert", "--from", "parquet",
                        str(d), "--out", str(out), "--block-size", "8192",
                        "--threads", "2", "--json"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"records": %d' % N in r.stdout
    assert shards(out) == ref
    v = subprocess.run([dlpack_shard(), "verify", str(out)],
                       capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr


def test_cli_corrupt_parquet_fails_naming_the_file(files, tmp_path):
    d, _ = files
    bad = tmp_path / "bad.parquet"
    data = open(d / "a.parquet", "rb").read()
    bad.write_bytes(data[:len(data) // 2])  # footer gone
    out = tmp_path / "ds"
    env = dict(os.environ, SLUICE_PYTHON=sys.executable)
    r = subprocess.run([dlpack_shard(), "convert", str(bad), "--out",
                        str(out)], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "bad.parquet" in r.stderr
    assert not os.path.exists(out / "dataset.json")


def test_cli_without_python_package_says_what_it_needs(files, tmp_path):
    d, _ = files
    env = dict(os.environ, SLUICE_PYTHON="/nonexistent/python3")
    r = subprocess.run([dlpack_shard(), "convert", "--from", "parquet",
                        str(d), "--out", str(tmp_path / "ds")],
                       env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "pyarrow" in r.stderr and "SLUICE_PYTHON" in r.stderr


def test_bad_second_file_fails_naming_it(files, tmp_path):
    """The read-ahead thread's error surfaces in order, naming the file,
    after the first file's batches were written; no dataset is left."""
    d, _ = files
    src = tmp_path / "src"
    src.mkdir()
    data = open(d / "a.parquet", "rb").read()
    (src / "a.parquet").write_bytes(data)
    (src / "b.parquet").write_bytes(data[:100])
    out = tmp_path / "ds"
    with pytest.raises(ValueError) as e:  # pyarrow's ArrowInvalid
        sluice.parquet.convert(src, out, batch_rows=100)
    assert str(e.value).count("b.parquet") == 1
    assert not os.path.exists(out / "dataset.json")
    # A file with other columns: the schema error names it too.
    pq.write_table(pa.table({"other": [1, 2]}), src / "b.parquet")
    with pytest.raises(Exception) as e:
        sluice.parquet.convert(src, tmp_path / "ds2")
    assert "b.parquet" in str(e.value)
    assert not os.path.exists(tmp_path / "ds2" / "dataset.json")


def test_batches_of_a_few_mib(tmp_path):
    """Default batches hold about BATCH_BYTES of the columns read, not a
    fixed row count: wide rows make short batches (memory stays bounded),
    narrow rows long ones (at most 65536)."""
    wide = pa.table({"id": np.arange(200, dtype=np.int64),
                     "blob": pa.array([bytes(64 << 10)] * 200)})
    pq.write_table(wide, tmp_path / "wide.parquet", compression="none",
                   use_dictionary=False)
    pf = pq.ParquetFile(tmp_path / "wide.parquet")
    rows = sluice.parquet.batch_rows_for(pf, ["id", "blob"])
    assert 64 <= rows <= sluice.parquet.BATCH_BYTES // (64 << 10) + 1
    # Only the columns kept count.
    assert sluice.parquet.batch_rows_for(pf, ["id"]) == 65536
    s = sluice.parquet.convert(tmp_path / "wide.parquet", tmp_path / "ds",
                               threads=1)
    assert s["records"] == 200
