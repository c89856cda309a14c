"""Elastic resume from Python: a state saved by rank 0 of a job of W ranks
is loaded by every rank of a job of W' ranks (another batch size too); the
jobs together deliver the epoch exactly once, then later epochs as a fresh
job of the last shape."""
import pytest

import sluice


def run_ranks(dataset, world, batch, stop, state=None, **kw):
    """Every rank of one job: take `stop` batches each (None: to the end
    of the epoch); returns (indices delivered, rank 0's state_dict)."""
    got, saved = [], None
    for rank in range(world):
        with sluice.Loader(dataset, batch_size=batch, rank=rank,
                           world_size=world, device="cpu", state=state,
                           **kw) as ld:
            it = iter(ld)
            taken = 0
            while stop is None or taken < stop:
                b = next(it, None)
                if b is None:
                    break
                got += list(b.indices)
                taken += 1
            if rank == 0:
                saved = ld.state_dict()
            else:
                assert ld.state_dict() == saved   # the same on every rank
    return got, saved


@pytest.mark.parametrize("shuffle", ["none", "block", "window", "full"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_chained_elastic_resume_is_exactly_once(dataset, shuffle, drop_last):
    kw = dict(shuffle=shuffle, seed=5, drop_last=drop_last)
    n = 400
    a, s1 = run_ranks(dataset, 4, 16, 2, **kw)
    b, s2 = run_ranks(dataset, 3, 10, 3, state=s1, **kw)
    assert s2["earlier"] == [(4, 32, int(drop_last))]
    c, s3 = run_ranks(dataset, 2, 7, None, state=s2, **kw)
    seen = a + b + c
    if drop_last:
        # no repeats; only the last job's tail and short batches missing
        assert len(seen) == len(set(seen))
        assert n - len(seen) <= (2 - 1) + 2 * (7 - 1)
    else:
        assert set(seen) == set(range(n))
        assert len(seen) - n < 4 + 3 + 2          # wrapped padding only
    # The next epoch is a fresh job of the last shape.
    assert s3["epoch"] == 1 and s3["earlier"] == []
    with sluice.Loader(dataset, batch_size=7, rank=0, world_size=2,
                       device="cpu", **kw) as ld:
        ld.set_epoch(1)
        want = [list(b.indices) for b in ld]
    with sluice.Loader(dataset, batch_size=7, rank=0, world_size=2,
                       device="cpu", state=s3, **kw) as ld:
        assert [list(b.indices) for b in ld] == want


def test_state_line_and_dict_agree(dataset):
    kw = dict(shuffle="window", seed=1)
    _, s1 = run_ranks(dataset, 4, 16, 2, **kw)
    with sluice.Loader(dataset, batch_size=10, rank=1, world_size=3,
                       device="cpu", state=s1, **kw) as ld:
        line = ld._ld.state_line()
        assert line.startswith("sluice-state v2 ")
        assert "earlier=4/32/0" in line
        want = ld.state_dict()
    with sluice.Loader(dataset, batch_size=10, rank=2, world_size=3,
                       device="cpu", state=line, **kw) as ld:
        assert ld.state_dict() == want


def test_bad_earlier_jobs_are_refused(dataset):
    _, s1 = run_ranks(dataset, 2, 16, 1, shuffle="full", seed=1)
    for bad in ([(0, 1, 0)], [(2, 1, 2)], "x", [(2, 1)],
                [(1, 1, 0)] * 17):
        state = dict(s1, earlier=bad)
        with pytest.raises((ValueError, TypeError)):
            sluice.Loader(dataset, batch_size=16, shuffle="full", seed=1,
                          device="cpu", state=state)
    # consumed more than an earlier job's part holds
    state = dict(s1, earlier=[(2, 10**6, 0)])
    with pytest.raises(sluice.StateError):
        sluice.Loader(dataset, batch_size=16, shuffle="full", seed=1,
                      device="cpu", state=state)
