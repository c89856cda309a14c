"""The forced fallbacks from Python: plain reads (no registered buffers)
on the host, and on a GPU pageable copies too; same data either way."""
import numpy as np
import pytest

import sluice
from conftest import epoch_order, source
from test_torch import cuda_loader


def test_plain_reads_same_batches(dataset):
    kw = dict(batch_size=32, shuffle="full", seed=8, device="cpu")
    want = epoch_order(dataset, **kw)
    # Every fallback is reported once, the asked-for ones too.
    with pytest.warns(RuntimeWarning, match="buffer registration off"):
        ld = sluice.Loader(dataset, plain_reads=True, **kw)
    with ld:
        got = []
        for batch in ld:
            idx = list(batch.indices)
            data = np.from_dlpack(batch["data"])
            for j, i in enumerate(idx):
                np.testing.assert_array_equal(data[j], source(i)["data"])
            got.append(idx)
        stats = ld.stats()
    assert got == want
    assert stats["registered_buffers"] == 0
    assert "buffer registration off (asked)" in stats["fallbacks"]


def test_cuda_fallbacks_same_data(dataset):
    for knob in ("pageable_copies", "plain_reads"):
        torch, ld = cuda_loader(dataset, batch_size=32, shuffle="none",
                                **{knob: True})
        with ld:
            seen = []
            for batch in ld:
                x = torch.from_dlpack(batch["data"])
                idx = list(batch.indices)
                want = np.stack([source(i)["data"] for i in idx])
                np.testing.assert_array_equal(x.cpu().numpy(), want)
                seen += idx
            stats = ld.stats()
        assert seen == list(range(400))
        assert "(asked)" in stats["fallbacks"]
        if knob == "pageable_copies":
            assert stats["device_pinned"] == 0
