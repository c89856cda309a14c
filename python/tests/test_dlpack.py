"""The DLPack protocol: capsule flavours, zero copy into numpy and torch,
copy=True, device checks."""
import ctypes
import gc

import numpy as np
import pytest

import sluice
from conftest import source

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


def capsule_name(cap):
    return _get_name(cap).decode()


@pytest.fixture
def loader(dataset):
    with sluice.Loader(dataset, batch_size=16, shuffle="none", device="cpu",
                       prefetch=2) as ld:
        yield ld


def test_capsule_flavours(loader):
    t = next(iter(loader))["data"]
    assert capsule_name(t.__dlpack__()) == "dltensor"
    assert capsule_name(t.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(t.__dlpack__(max_version=(1, 0))) == \
        "dltensor_versioned"
    assert capsule_name(t.__dlpack__(max_version=(1, 3))) == \
        "dltensor_versioned"
    assert capsule_name(t.__dlpack__(stream=None, max_version=None,
                                     dl_device=(1, 0), copy=False)) == \
        "dltensor"
    with pytest.raises(TypeError):
        t.__dlpack__(None)                      # keyword-only


def test_unconsumed_capsules_give_their_slot_back(loader):
    # Capsules never consumed are freed by their destructor; if they kept
    # their slot references the two slots would run out and the loader
    # would have to roll over.
    for batch in loader:
        caps = [batch[n].__dlpack__(max_version=v) for n in batch
                for v in (None, (1, 0))]
        del caps, batch
    st = loader.stats()
    assert st["rollovers"] == 0
    # the last counters, each in its place: no checksum on a device here,
    # and the lock's waits a few seconds at most (ns)
    assert st["device_check_ns"] == 0
    assert 0 <= st["lock_wait_ns"] < 10**10


def test_numpy_sees_the_loader_memory(loader):
    batch = next(iter(loader))
    for name in batch:
        t = batch[name]
        arr = np.from_dlpack(t)
        assert arr.ctypes.data == t.data_ptr           # no copy
        assert arr.nbytes == t.nbytes
        assert arr.shape == t.shape
    data = np.from_dlpack(batch["data"])
    for j, i in enumerate(batch.indices):
        np.testing.assert_array_equal(data[j], source(i)["data"])


def test_numpy_and_torch_share_the_bytes(loader, torch):
    batch = next(iter(loader))
    t = batch["data"]
    a = np.from_dlpack(t)
    x = torch.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr == a.ctypes.data
    assert x.dtype == torch.float32 and tuple(x.shape) == t.shape
    assert x.device.type == "cpu"
    np.testing.assert_array_equal(x.numpy(), a)
    # One memory: a write through torch is seen by numpy.
    x[0, 0] = 12345.0
    assert a[0, 0] == 12345.0
    lab = torch.from_dlpack(batch["label"])
    assert lab.dtype == torch.int64
    assert lab.tolist() == [source(i)["label"] for i in batch.indices]


def test_torch_legacy_capsule(loader, torch):
    # What an older torch does: take the legacy capsule itself.
    t = next(iter(loader))["label"]
    cap = t.__dlpack__()
    x = torch.utils.dlpack.from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor"        # consumed
    assert x.data_ptr() == t.data_ptr
    del cap
    gc.collect()
    assert x.tolist() == [source(i)["label"] for i in range(16)]


def test_copy_true_gives_independent_memory(loader):
    batch = next(iter(loader))
    t = batch["data"]
    for max_version in (None, (1, 0)):
        cap = t.__dlpack__(copy=True, max_version=max_version)
        assert capsule_name(cap) in ("dltensor", "dltensor_versioned")
    copied = np.from_dlpack(t, copy=True)
    assert copied.ctypes.data != t.data_ptr
    want = np.from_dlpack(t).copy()
    np.testing.assert_array_equal(copied, want)
    batch.release()
    del batch, t
    # The slot is reused by later batches; the copy does not change.
    for _ in range(30):
        next(loader, None)
    np.testing.assert_array_equal(copied, want)


def test_dl_device_mismatch_is_a_buffer_error(loader):
    t = next(iter(loader))["data"]
    with pytest.raises(BufferError, match="device"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="device"):
        t.__dlpack__(dl_device=(2, 0), copy=True)
