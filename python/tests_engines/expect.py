"""The records every engine test writes, as functions of the id, and a
check that a dataset holds each id exactly once with the right values."""
import numpy as np

import sluice

SCHEMA = [("id", "int64", ()), ("vec", "float32", (4,)),
          ("tok", "int64", (-1,)), ("text", "uint8", (-1,))]


def record(i):
    return {"id": i,
            "vec": np.arange(4, dtype=np.float32) + np.float32(i),
            "tok": np.arange(i % 4, dtype=np.int64) + i,
            "text": ("r%d" % i).encode()}


def check_exactly_once(path, n):
    """Every id in [0, n) once, every field as record(id)."""
    ds = sluice.Dataset(path)
    assert len(ds) == n, "%d records, expected %d" % (len(ds), n)
    seen = np.zeros(n, np.int64)
    for k in range(len(ds)):
        r = ds.record(k)
        i = int(np.frombuffer(r["id"], np.int64)[0])
        assert 0 <= i < n, i
        seen[i] += 1
        want = record(i)
        assert np.frombuffer(r["vec"], np.float32).tolist() == \
            want["vec"].tolist(), i
        assert np.frombuffer(r["tok"], np.int64).tolist() == \
            want["tok"].tolist(), i
        assert r["text"] == want["text"], i
    dup = np.flatnonzero(seen > 1)
    lost = np.flatnonzero(seen == 0)
    assert not len(dup) and not len(lost), \
        "duplicated ids %s, lost ids %s" % (dup[:10], lost[:10])
