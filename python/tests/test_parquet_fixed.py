"""Parquet lists of one length in every row become fixed fields (issue 25:
a list<float32> of 128 in every row, as Spark writes embeddings, was a
variable field): inferred over every file, refused when one row differs
or is null; --field / fields= give a field explicitly; the CLI module
takes both."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import sluice  # noqa: E402
import sluice.parquet  # noqa: E402

N = 500


def emb_rows(first, n, dim=128):
    return [list(np.arange(dim, dtype=np.float32) + k)
            for k in range(first, first + n)]


def write(path, first, n, dim=128, tok_len=None):
    tok_len = tok_len or (lambda k: k % 5)
    pq.write_table(pa.table({
        "id": pa.array(np.arange(first, first + n), pa.int64()),
        "emb": pa.array(emb_rows(first, n, dim), pa.list_(pa.float32())),
        "tok": pa.array([list(range(tok_len(k)))
                         for k in range(first, first + n)],
                        pa.list_(pa.int32())),
    }), path, row_group_size=128)


def schema_of(out):
    with open(os.path.join(out, "dataset.json")) as f:
        m = json.load(f)
    return {f["name"]: tuple(f["shape"]) for f in m["fields"]}


def test_fixed_length_list_becomes_fixed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write(str(src / "a.parquet"), 0, N)
    write(str(src / "b.parquet"), N, N)
    out = str(tmp_path / "out")
    sluice.parquet.convert(str(src), out, threads=1)
    got = schema_of(out)
    assert got["emb"] == (128,), got
    assert got["tok"] == (-1,), got        # lengths differ: variable
    assert got["id"] == (), got
    seen = 0
    for b in sluice.Loader(out, batch_size=100, shuffle="none",
                           device="cpu"):
        emb = np.from_dlpack(b["emb"])
        ids = np.from_dlpack(b["id"])
        assert emb.shape == (len(ids), 128)
        want = np.arange(128, dtype=np.float32)[None, :] + ids[:, None]
        assert (emb == want).all()
        seen += len(ids)
    assert seen == 2 * N


def test_one_row_of_another_length_keeps_it_variable(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write(str(src / "a.parquet"), 0, N)
    write(str(src / "b.parquet"), N, 1, dim=127)   # one row, last file
    out = str(tmp_path / "out")
    sluice.parquet.convert(str(src), out, threads=1)
    assert schema_of(out)["emb"] == (-1,)


def test_a_null_row_keeps_it_variable(tmp_path):
    path = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"emb": pa.array([[1.0, 2.0], None, [3.0, 4.0]],
                                             pa.list_(pa.float32()))}), path)
    fields = sluice.parquet.infer_fields(
        [path], pq.ParquetFile(path).schema_arrow, pq.ParquetFile)
    assert fields == [("emb", "float32", (-1,))]


def test_infer_fixed_off_and_fields_given(tmp_path):
    path = str(tmp_path / "a.parquet")
    write(path, 0, N, tok_len=lambda k: 4)
    out = str(tmp_path / "off")
    sluice.parquet.convert(path, out, threads=1, infer_fixed=False)
    assert schema_of(out)["emb"] == (-1,)
    assert schema_of(out)["tok"] == (-1,)
    out = str(tmp_path / "given")
    sluice.parquet.convert(path, out, threads=1, infer_fixed=False,
                           fields=[("emb", "float32", (128,))])
    got = schema_of(out)
    assert got["emb"] == (128,) and got["tok"] == (-1,), got
    with pytest.raises(KeyError, match="nope"):
        sluice.parquet.convert(path, str(tmp_path / "bad"),
                               fields=[("nope", "float32", (2,))])
    # a shape the rows do not have is refused, naming the file
    with pytest.raises(ValueError, match="a.parquet"):
        sluice.parquet.convert(path, str(tmp_path / "wrong"), threads=1,
                               fields=[("emb", "float32", (64,))])


def test_module_cli_field_and_inference(tmp_path):
    path = str(tmp_path / "a.parquet")
    write(path, 0, N, tok_len=lambda k: 4)
    env = dict(os.environ)
    out = str(tmp_path / "cli")
    subprocess.run([sys.executable, "-m", "sluice.parquet", path, "--out",
                    out, "--quiet", "--field", "tok:int32:-1"],
                   check=True, env=env)
    got = schema_of(out)
    assert got["emb"] == (128,) and got["tok"] == (-1,), got
    r = subprocess.run([sys.executable, "-m", "sluice.parquet", path,
                        "--out", str(tmp_path / "x"), "--quiet",
                        "--field", "emb:float32:12a"],
                       env=env, stderr=subprocess.PIPE,
                       universal_newlines=True)
    assert r.returncode != 0 and "SHAPE" in r.stderr, r.stderr
