"""What a new user meets first (issue 25): sluice.torch reached from
`import sluice` without importing torch up front, its help showing real
parameters, warnings pointing at the user's line, and errors that say
what to do next.

Each check runs in a fresh interpreter, so that what `import sluice`
imports is seen as a user would see it.  Where torch is not installed, a
minimal stand-in package (from_dlpack through numpy) plays it; it is put
on that interpreter's path only, never in this one."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

import sluice

FAKE_TORCH = '''
"""A stand-in for torch in sluice's tests: only what sluice.torch uses."""
import numpy as _np

FAKE = True


class Tensor(_np.ndarray):
    pass


class device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index


def from_dlpack(x):
    return _np.from_dlpack(x).view(Tensor)
'''


def run_python(code, tmp_path, fake_torch=None, name="user.py"):
    """Run @code as the script @name in a fresh interpreter; its stdout.
    fake_torch: None (a stand-in when torch is missing), True (always the
    stand-in) or the text of a torch package to put first on the path."""
    env = dict(os.environ)
    paths = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    if fake_torch is None:
        fake_torch = importlib.util.find_spec("torch") is None
    if fake_torch:
        pkg = tmp_path / "fake" / "torch"
        pkg.mkdir(parents=True, exist_ok=True)
        text = FAKE_TORCH if fake_torch is True else fake_torch
        (pkg / "__init__.py").write_text(text)
        paths.insert(0, str(tmp_path / "fake"))
    # the sluice this test imported, wherever it is installed
    paths.append(os.path.dirname(os.path.dirname(sluice.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    p = subprocess.run([sys.executable, str(script)], env=env,
                       cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_import_sluice_imports_no_torch(tmp_path):
    out = run_python("""
        import sys
        import sluice
        print(sorted(m for m in sys.modules
                     if m == "torch" or m.startswith(("torch.",
                                                      "sluice.torch"))))
    """, tmp_path)
    assert out.strip() == "[]"


def test_sluice_torch_from_import_sluice(tmp_path):
    out = run_python("""
        import inspect, json, pydoc
        import sluice
        L = sluice.torch.Loader           # no `import sluice.torch`
        params = list(inspect.signature(L).parameters)
        text = pydoc.render_doc(L, renderer=pydoc.plaintext)
        print(json.dumps({"params": params,
                          "help_has_batch_size": "batch_size=256" in text,
                          "help_has_doc": "memory_bytes:" in text,
                          "in_dir": "torch" in dir(sluice)}))
    """, tmp_path)
    got = json.loads(out)
    assert got["params"][:4] == ["path", "batch_size", "shuffle", "seed"]
    assert "memory_bytes" in got["params"]
    assert got["help_has_batch_size"] and got["help_has_doc"]
    assert got["in_dir"]


def test_sluice_torch_yields_torch_tensors(dataset, tmp_path):
    out = run_python("""
        import sys
        import numpy as np
        import torch
        import sluice
        n = 0
        for batch in sluice.torch.Loader(%r,
                                         batch_size=64, device="cpu"):
            assert isinstance(batch["data"], torch.Tensor)
            n += len(batch["label"])
        print(n)
    """ % dataset, tmp_path)
    assert out.strip() == "400"


def test_sluice_torch_without_torch_says_what_to_do(tmp_path):
    out = run_python("""
        import sluice
        try:
            sluice.torch
        except ImportError as e:
            print(e)
    """, tmp_path, fake_torch="raise ImportError('No module named torch')\n")
    assert "sluice.torch needs PyTorch" in out
    assert "pip install torch" in out


def test_warnings_point_at_the_callers_line(dataset, tmp_path):
    # plain_reads=True: a fallback the loader reports on any machine
    out = run_python("""
        import json, warnings
        import sluice
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            a = sluice.Loader(%r, device="cpu", plain_reads=True)
            b = sluice.torch.Loader(%r, device="cpu", plain_reads=True)
        a.close(); b.close()
        print(json.dumps([(x.filename, x.lineno, str(x.message))
                          for x in w]))
    """ % (dataset, dataset), tmp_path)
    got = json.loads(out)
    assert len(got) == 2, got
    script = str(tmp_path / "user.py")
    assert [(f, line) for f, line, _ in got] == [(script, 6), (script, 7)]
    assert all("buffer registration off" in m for _, _, m in got)


def test_unconverted_folder_names_the_convert_command(tmp_path):
    photos = tmp_path / "photos"
    (photos / "cat").mkdir(parents=True)
    (photos / "cat" / "1.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    for make in (sluice.Loader, sluice.Dataset):
        with pytest.raises(sluice.DatasetNotFoundError) as e:
            make(str(photos))
        msg = str(e.value)
        assert "is not a sluice dataset" in msg, msg
        assert ("dlpack-shard convert %s --out %s-shards" % (photos, photos)
                in msg), msg


def test_dataset_classes(tmp_path):
    from conftest import write_dataset
    path = tmp_path / "ds"
    write_dataset(str(path), 20)
    # written without class names (as every dataset before them)
    assert sluice.Dataset(str(path)).classes is None
    manifest = path / "dataset.json"
    text = manifest.read_text()
    assert '"classes"' not in text
    # what `dlpack-shard convert` of an ImageFolder tree writes
    manifest.write_text(text.replace(
        ',\n"shards":', ',\n"classes":{"label":["cat","dog"]},\n"shards":'))
    ds = sluice.Dataset(str(path))
    assert ds.classes == ["cat", "dog"] and ds.label_field == "label"
    assert "classes ['cat', 'dog']" in repr(ds)
    # a name that is not an int64 scalar field is refused
    manifest.write_text(text.replace(
        ',\n"shards":', ',\n"classes":{"data":["cat"]},\n"shards":'))
    with pytest.raises(sluice.CorruptDataError, match="not an int64"):
        sluice.Dataset(str(path))
