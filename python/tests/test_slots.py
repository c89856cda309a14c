"""Slot lifetime: tensors freed on other threads, never released, or kept
by the user must give slots back or make the loader take more memory,
never corrupt data and never deadlock."""
import gc
import queue
import threading

import numpy as np
import pytest

import sluice
from conftest import epoch_order, source


def test_tensors_freed_on_another_thread(dataset, torch):
    # Each batch's tensors go to a worker thread that drops the last
    # references there; the main thread waits until it has, so with two
    # slots the loader never runs short unless a free was lost.
    work, done = queue.Queue(), queue.Queue()

    def worker():
        while True:
            item = work.get()
            if item is None:
                return
            arrays = item
            checks = [a.sum().item() for a in arrays]  # use them there
            del item, arrays        # the last references: freed here
            done.put(checks)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        with sluice.Loader(dataset, batch_size=8, seed=4, device="cpu",
                           prefetch=2) as ld:
            n = 0
            for epoch in range(3):
                ld.set_epoch(epoch)
                for batch in ld:
                    work.put([torch.from_dlpack(batch["data"]),
                              np.from_dlpack(batch["label"])])
                    batch.release()
                    del batch
                    done.get()
                    n += 1
            assert n == 3 * 50
            assert ld.stats()["rollovers"] == 0
    finally:
        work.put(None)
        thread.join()


def test_never_released_batches_return_by_refcount(dataset):
    with sluice.Loader(dataset, batch_size=8, seed=4, device="cpu",
                       prefetch=2) as ld:
        total = 0
        for epoch in range(3):
            for batch in ld:               # no release(): dropped by GC
                a = np.from_dlpack(batch["data"])
                b = np.from_dlpack(batch["text.offsets"])
                total += int(a.shape[0]) + int(b[-1] >= 0)
        assert total == 3 * (400 + 50)
        assert ld.stats()["rollovers"] == 0


@pytest.mark.parametrize("keep", ["numpy", "torch", "sluice"])
def test_thousand_batches_keeping_every_tenth_tensor(dataset, keep,
                                                     request):
    # 400 records, batch 2: 200 batches an epoch, 5 epochs.  Each kept
    # tensor pins its slot; with 4 slots the consumer holds all of them
    # after 40 batches, and the loader has to continue on fresh ones.
    if keep == "torch":
        torch = request.getfixturevalue("torch")
    kw = dict(batch_size=2, shuffle="window", seed=9, device="cpu",
              prefetch=4)
    want = epoch_order(dataset, epochs=5, **kw)
    assert len(want) == 1000
    kept, got = [], []
    with sluice.Loader(dataset, **kw) as ld:
        for epoch in range(5):
            ld.set_epoch(epoch)
            for batch in ld:
                idx = list(batch.indices)
                if len(got) % 10 == 0:
                    t = batch["data"]
                    if keep == "numpy":
                        t = np.from_dlpack(t)
                    elif keep == "torch":
                        t = torch.from_dlpack(t)
                    kept.append((idx, t))
                got.append(idx)
        assert more_memory_taken(ld, 4)           # the path was taken
    assert got == want
    assert len(kept) == 100
    for idx, t in kept:                           # nothing was reused
        arr = np.from_dlpack(t)
        for j, i in enumerate(idx):
            np.testing.assert_array_equal(arr[j], source(i)["data"])
    del kept
    gc.collect()


def more_memory_taken(loader, prefetch):
    """The library grew slots (host), or the Python layer rolled over to
    a fresh library loader (CUDA slots, or past the growth limit)."""
    stats = loader.stats()
    return stats["prefetch_depth"] > prefetch or stats["rollovers"] > 0


def test_holding_every_slot_keeps_the_order_exactly(dataset):
    # Hold every slot at once, at several points of an epoch.
    kw = dict(batch_size=16, shuffle="full", seed=5, device="cpu",
              prefetch=2)
    want = epoch_order(dataset, epochs=2, **kw)
    got, held = [], []
    with sluice.Loader(dataset, **kw) as ld:
        for epoch in range(2):
            ld.set_epoch(epoch)
            for batch in ld:
                got.append(list(batch.indices))
                held.append(batch)
                if len(held) > 3:
                    held.clear()
        assert more_memory_taken(ld, 2)
    assert got == want


def test_rollover_past_the_growth_limit(dataset):
    # Hold every batch until the library cannot grow any more slots and
    # fails next() with -EDEADLK: the Python loader then continues on a
    # fresh library loader at the same position.  (On CUDA that happens
    # as soon as every slot is held.)
    kw = dict(batch_size=1, shuffle="window", seed=8, device="cpu",
              prefetch=2)
    got, held = [], []
    with sluice.Loader(dataset, **kw) as ld:
        while ld.stats()["rollovers"] == 0:
            assert len(got) < 50000, "the library grows slots without end"
            batch = next(ld, None)
            if batch is not None:
                got.append(batch.indices[0])
                held.append((batch, np.from_dlpack(batch["label"])))
        tail = []
        while len(tail) < 10:
            batch = next(ld, None)          # None: an epoch ended
            if batch is not None:
                tail.append(batch.indices[0])
    epochs = (len(got) + 10) // 400 + 1
    want = sum(epoch_order(dataset, epochs=epochs, **kw), [])
    assert got + tail == want[:len(got) + 10]
    for batch, label in held:                     # nothing was reused
        assert label[0] == source(batch.indices[0])["label"]


def test_closing_the_loader_keeps_tensors_valid(dataset):
    ld = sluice.Loader(dataset, batch_size=8, shuffle="none", device="cpu")
    batch = next(iter(ld))
    arr = np.from_dlpack(batch["data"])
    ld.close()
    del ld
    gc.collect()
    for j, i in enumerate(batch.indices):
        np.testing.assert_array_equal(arr[j], source(i)["data"])
    closed = sluice.Loader(dataset, device="cpu")
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        next(iter(closed))
