"""The simulated asynchronous device (gpu/sim_device.c) through Python.

With SLUICE_DEVICE_SIM=SEED a loader on device "auto" gets the simulated
device: batches are copied, on a copy stream running after random delays,
into device memory apart from the host batch memory, poisoned before each
copy lands and after each release.  Its memory is host memory, so tensors
are exported as CPU tensors; the export waits on the batch's ready event
first (stream 0: the calling thread is the consumer), as a CUDA consumer
waits on its stream.  A read before the copy, or after the memory's reuse,
sees poison.  The seed is printed (shown on failure); SLUICE_SIM_SEED=N
reruns it.
"""
import os
import random

import numpy as np
import pytest

import sluice
from conftest import check_batch, source

# The loader says it runs on the simulation, once per loader.
pytestmark = pytest.mark.filterwarnings(
    "ignore:sluice. simulated device:RuntimeWarning")


@pytest.fixture
def sim_seed(monkeypatch):
    seed = int(os.environ.get("SLUICE_SIM_SEED") or
               random.randrange(1, 1 << 31))
    print("sim seed %d (rerun: SLUICE_SIM_SEED=%d)" % (seed, seed))
    monkeypatch.setenv("SLUICE_DEVICE_SIM", str(seed))
    return seed


@pytest.mark.parametrize("shuffle", ["none", "block", "window", "full"])
@pytest.mark.parametrize("which", ["dataset", "raw_dataset"])
def test_sim_every_record_after_the_wait(request, sim_seed, which, shuffle):
    path = request.getfixturevalue(which)
    with sluice.Loader(path, batch_size=32, shuffle=shuffle, seed=sim_seed,
                       device="auto", prefetch=3, decode_threads=2) as ld:
        assert "simulated device" in ld.stats()["fallbacks"]
        seen = []
        for batch in ld:
            seen.extend(check_batch(batch))
        assert sorted(seen) == list(range(400))


def test_sim_held_batches_stay_intact(raw_dataset, sim_seed):
    """Arrays of two earlier batches, kept while the loader goes on, still
    hold their bytes: the device memory of a batch is not reused before
    it is released."""
    rng = random.Random(sim_seed)
    with sluice.Loader(raw_dataset, batch_size=32, shuffle="window",
                       seed=sim_seed, device="auto", prefetch=4,
                       decode_threads=2) as ld:
        held, seen = [], []
        for batch in ld:
            held.append((batch, np.from_dlpack(batch["data"]).copy()))
            if len(held) > 2:
                old, data = held.pop(rng.randrange(len(held)))
                np.testing.assert_array_equal(
                    np.from_dlpack(old["data"]), data)
                seen.extend(check_batch(old))
                old.release()
        for old, data in held:
            seen.extend(check_batch(old))
        assert sorted(seen) == list(range(400))


class Copied:
    """A tensor whose export asks for copy=True."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kw):
        kw["copy"] = True
        return self.tensor.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def test_sim_copy_true_waits_for_the_copy(dataset, sim_seed):
    """copy=True, the batch's first export, copies the bytes the device
    copy wrote, not the poison before it."""
    with sluice.Loader(dataset, batch_size=32, shuffle="window",
                       seed=sim_seed, device="auto", prefetch=3,
                       decode_threads=2) as ld:
        seen = []
        for batch in ld:
            data = np.from_dlpack(Copied(batch["data"]))
            idx = list(batch.indices)
            for j, i in enumerate(idx):
                np.testing.assert_array_equal(data[j], source(i)["data"])
            seen.extend(idx)
        assert sorted(seen) == list(range(400))
