"""sluice.torch.Loader, and CUDA batches where a GPU is usable."""
import numpy as np
import pytest

import sluice
from conftest import epoch_order, source


def test_torch_loader_yields_dicts_of_tensors(dataset, torch):
    import sluice.torch as st
    kw = dict(batch_size=32, seed=2, device="cpu")
    want = epoch_order(dataset, epochs=2, **kw)
    with st.Loader(dataset, **kw) as ld:
        assert len(ld) == 13 and ld.batch_size == 32
        assert ld.device == torch.device("cpu")
        got = []
        for epoch in range(2):
            ld.set_epoch(epoch)
            for batch in ld:
                assert isinstance(batch, dict)
                assert all(isinstance(v, torch.Tensor)
                           for v in batch.values())
                labels = batch["label"].tolist()
                idx = [(v - 1) // 3 for v in labels]
                for j, i in enumerate(idx):
                    assert torch.equal(batch["data"][j],
                                       torch.from_numpy(source(i)["data"]))
                got.append(idx)
    assert got == want


def test_torch_loader_resume(dataset, torch):
    import sluice.torch as st
    kw = dict(batch_size=50, shuffle="full", seed=6, device="cpu")
    want = epoch_order(dataset, **kw)
    with st.Loader(dataset, **kw) as ld:
        it = iter(ld)
        got = [next(it)["label"].tolist() for _ in range(3)]
        state = ld.state_dict()
    with st.Loader(dataset, state=state, **kw) as ld:
        got += [b["label"].tolist() for b in ld]
    assert [[(v - 1) // 3 for v in b] for b in got] == want


def cuda_loader(dataset, **kw):
    torch = pytest.importorskip(
        "torch", reason="torch is not installed (python3 -m pip install "
        "torch)")
    if not torch.cuda.is_available():
        pytest.skip("no usable CUDA GPU for torch")
    try:
        ld = sluice.Loader(dataset, device="cuda:0", **kw)
    except sluice.DeviceError as e:
        pytest.skip("libsluice has no usable CUDA device: %s" % e)
    return torch, ld


def test_cuda_batches_zero_copy(dataset):
    torch, ld = cuda_loader(dataset, batch_size=32, shuffle="none")
    with ld:
        assert ld.device == (2, 0)
        seen = []
        for batch in ld:
            t = batch["data"]
            assert t.__dlpack_device__() == (2, 0)
            x = torch.from_dlpack(t)
            assert x.is_cuda and x.data_ptr() == t.data_ptr
            idx = list(batch.indices)
            want = np.stack([source(i)["data"] for i in idx])
            np.testing.assert_array_equal(x.cpu().numpy(), want)
            seen += idx
        assert seen == list(range(400))
        with pytest.raises(BufferError, match="copy"):
            next(iter(ld))["data"].__dlpack__(copy=True)


def test_cuda_consumer_stream_waits(dataset):
    # On a side stream, from_dlpack passes that stream: the library makes
    # it wait on the batch's copy, so a kernel there sees the data.
    torch, ld = cuda_loader(dataset, batch_size=64, seed=1, prefetch=2)
    side = torch.cuda.Stream()
    with ld:
        for epoch in range(2):
            for batch in ld:
                with torch.cuda.stream(side):
                    x = torch.from_dlpack(batch["label"])
                    total = int(x.sum().item())
                assert total == sum(source(i)["label"]
                                    for i in batch.indices)
        # stream=-1: no synchronisation requested, still the same memory.
        batch = next(iter(ld))
        cap = batch["label"].__dlpack__(stream=-1)
        assert cap is not None


def test_cuda_keeping_tensors_never_deadlocks(dataset):
    # CUDA slots cannot grow in the library: holding every slot makes
    # the Python loader continue on a fresh library loader.
    torch, ld = cuda_loader(dataset, batch_size=4, seed=3, prefetch=2)
    kept = []
    with ld:
        for n, batch in enumerate(ld):
            if n % 10 == 0:
                kept.append((list(batch.indices),
                             torch.from_dlpack(batch["data"])))
        assert ld.stats()["rollovers"] >= 1
    for idx, x in kept:
        want = np.stack([source(i)["data"] for i in idx])
        np.testing.assert_array_equal(x.cpu().numpy(), want)


def test_cuda_release_waits_for_consumer_stream(dataset):
    # A slow kernel queued on the consumer's side stream before the read
    # of each batch; the batch is let go at once (the read has not run).
    # The loader reuses the slot meanwhile, so only a release ordered on
    # the stream the tensor was exported to (torch passes its current
    # stream to __dlpack__) keeps the queued reads right.
    torch, ld = cuda_loader(dataset, batch_size=16, seed=4, prefetch=2)
    side = torch.cuda.Stream()
    kept = []
    with ld, torch.cuda.stream(side):
        for batch in ld:
            torch.cuda._sleep(20_000_000)    # about 10 ms of GPU time
            x = torch.from_dlpack(batch["data"])
            kept.append((list(batch.indices), x.clone()))
            del x
            batch.release()
        side.synchronize()
    assert sum(len(idx) for idx, _ in kept) == 400
    for idx, y in kept:
        want = np.stack([source(i)["data"] for i in idx])
        np.testing.assert_array_equal(y.cpu().numpy(), want)
