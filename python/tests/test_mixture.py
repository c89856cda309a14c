"""Mixtures of datasets: Loader([Stream(...), ...]) gives each dataset its
share of every epoch and of every batch, with the datasets' own records,
deterministically, rank-partitioned and resumable."""
import collections

import pytest

import sluice
from conftest import check_batch, write_dataset


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Records 0..299 and 300..399 (so the concatenated indices are the
    source's), written as two datasets."""
    base = tmp_path_factory.mktemp("mix")
    write_dataset(base / "a", 300, start=0, compression_level=3)
    write_dataset(base / "b", 100, start=300, compression_level=0)
    return str(base / "a"), str(base / "b")


def mixture(parts, **kw):
    a, b = parts
    return sluice.Loader([sluice.Stream(a, weight=1),
                          sluice.Stream(b, samples=150)],
                         batch_size=45, seed=3, device="cpu", **kw)


@pytest.mark.parametrize("shuffle", ["none", "block", "window", "full"])
def test_shares_per_epoch_and_batch(parts, shuffle):
    with mixture(parts, shuffle=shuffle) as ld:
        assert len(ld) == 10                     # (300 + 150) / 45
        seen = collections.Counter()
        for batch in ld:
            check_batch(batch)                   # bytes are the source's
            idx = list(batch.indices)
            from_b = sum(i >= 300 for i in idx)
            assert abs(from_b - 15) <= 2         # 150 of 450 = 1/3
            seen.update(idx)
    assert sorted(seen) == list(range(400))
    assert all(seen[i] == 1 for i in range(300))
    assert sorted(seen[i] for i in range(300, 400)) == [1] * 50 + [2] * 50


def test_resume_is_exact(parts):
    with mixture(parts, shuffle="window") as ld:
        want = [list(b.indices) for b in ld]
    with mixture(parts, shuffle="window") as ld:
        it = iter(ld)
        got = [list(next(it).indices) for _ in range(4)]
        state = ld.state_dict()
    assert state["mix"] != 0
    with mixture(parts, shuffle="window", state=state) as ld:
        got += [list(b.indices) for b in ld]
    assert got == want


def test_ranks_split_the_mixture(parts):
    with mixture(parts, shuffle="full") as ld:
        whole = collections.Counter(i for b in ld for i in b.indices)
    split = collections.Counter()
    for rank in range(3):
        with mixture(parts, shuffle="full", rank=rank, world_size=3) as ld:
            split.update(i for b in ld for i in b.indices)
    assert split == whole


def test_bad_streams(parts, tmp_path):
    a, _ = parts
    with pytest.raises(ValueError):
        sluice.Stream(a, weight=-1)
    with pytest.raises(ValueError):
        sluice.Stream(a, samples=0)
    with pytest.raises(ValueError):
        sluice.Loader([], device="cpu")
    other = tmp_path / "other"
    with sluice.ShardWriter(other, [("y", "int64", ())]) as w:
        w.write({"y": 1})
    with pytest.raises(sluice.SchemaError, match="stream 1"):
        sluice.Loader([sluice.Stream(a), sluice.Stream(str(other))],
                      device="cpu")
