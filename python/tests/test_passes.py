"""DataLoader semantics: every iter() starts a pass; an unfinished pass
is started over; the first pass after a resume goes on from there."""
import pytest

import sluice
from conftest import epoch_order

KW = dict(batch_size=10, shuffle="window", seed=4, device="cpu")


def indices(batches):
    return [list(b.indices) for b in batches]


def test_peek_then_loop_gives_the_whole_epoch(dataset):
    want = epoch_order(dataset, **KW)                  # 40 batches
    with sluice.Loader(dataset, **KW) as ld:
        peek = list(next(iter(ld)).indices)
        assert peek == want[0]
        got = indices(ld)
        assert got == want and len(got) == 40
        # That pass finished: the next one is epoch 1.
        assert ld.epoch == 1
        assert indices(ld) == epoch_order(dataset, epochs=2, **KW)[40:]


def test_break_then_new_loop_restarts_the_epoch(dataset):
    want = epoch_order(dataset, **KW)
    with sluice.Loader(dataset, **KW) as ld:
        for i, _ in enumerate(ld):
            if i == 9:
                break
        assert indices(ld) == want


def test_first_pass_after_resume_goes_on(dataset):
    want = epoch_order(dataset, epochs=2, **KW)
    with sluice.Loader(dataset, **KW) as ld:
        it = iter(ld)
        head = [list(next(it).indices) for _ in range(7)]
        state = ld.state_dict()
    with sluice.Loader(dataset, state=state, **KW) as ld:
        ld.set_epoch(0)          # the usual epoch loop keeps the position
        assert head + indices(ld) == want[:40]
        assert indices(ld) == want[40:]
    with sluice.Loader(dataset, **KW) as ld:
        ld.load_state_dict(state)
        assert head + indices(ld) == want[:40]
        ld.load_state_dict(state)
        ld.set_epoch(1)          # another epoch: the resume is dropped
        assert indices(ld) == want[40:]


def test_epochs_ends_the_job(dataset):
    """epochs=E: E passes, then passes that yield nothing (len 0) until
    set_epoch goes back."""
    want = epoch_order(dataset, epochs=2, **KW)
    with sluice.Loader(dataset, epochs=2, **KW) as ld:
        assert indices(ld) == want[:40]
        assert indices(ld) == want[40:]
        assert ld.epoch == 2 and len(ld) == 0
        assert indices(ld) == []
        ld.set_epoch(1)
        assert len(ld) == 40 and indices(ld) == want[40:]
        assert indices(ld) == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="epochs"):
            sluice.Loader(dataset, epochs=bad, **KW)
