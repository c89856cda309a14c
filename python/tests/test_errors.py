"""Errors raise Python exceptions carrying the library's message;
Ctrl-C stops cleanly and loses no batch."""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest

import sluice
from conftest import epoch_order, write_dataset


def test_missing_path(tmp_path):
    missing = str(tmp_path / "no" / "such")
    with pytest.raises(sluice.DatasetNotFoundError) as e:
        sluice.Loader(missing)
    assert missing in str(e.value)
    assert isinstance(e.value, FileNotFoundError)
    assert e.value.code < 0 and e.value.reason


def test_not_a_shard(tmp_path):
    bad = tmp_path / "bad-00000.dls"
    bad.write_bytes(b"hello, not a shard" * 300)
    with pytest.raises(sluice.CorruptDataError) as e:
        sluice.Dataset(bad)
    assert "bad-00000.dls" in str(e.value)


@pytest.mark.parametrize("where", ["shard", "manifest", "glob"])
def test_fifo_refused_not_waited_on(tmp_path, where):
    """A FIFO no writer opens, in place of a shard, of dataset.json or
    matched by a glob, is refused with its path (issue 24: it hung)."""
    path = tmp_path / "ds"
    write_dataset(path, 300)
    victim = path / ("dataset.json" if where == "manifest"
                     else "data-00001.dls")
    victim.unlink()
    os.mkfifo(victim)
    target = str(path / "*.dls") if where == "glob" else str(path)

    def hung(signum, frame):
        raise AssertionError("sluice blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        with pytest.raises(sluice.CorruptDataError) as e:
            sluice.Loader(target, batch_size=8, device="host")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert str(victim) in str(e.value)
    assert "not a regular file (it is a FIFO)" in str(e.value)


def test_truncated_shard(tmp_path):
    write_dataset(tmp_path / "ds", 100, compression_level=0)
    shard = tmp_path / "ds" / "data-00000.dls"
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(sluice.SluiceError) as e:
        sluice.Dataset(tmp_path / "ds")
    assert "data-00000.dls" in str(e.value)


def corrupt_first_block(path):
    """Flip one byte inside the first block of the first shard."""
    shard = os.path.join(path, "data-00000.dls")
    with open(shard, "r+b") as f:
        f.seek(4096 + 40)
        byte = f.read(1)
        f.seek(4096 + 40)
        f.write(bytes([byte[0] ^ 0x5A]))
    return shard


@pytest.mark.parametrize("level", [0, 3])
def test_corrupt_block_names_shard_and_offset(tmp_path, level):
    path = str(tmp_path / "ds")
    write_dataset(path, 100, compression_level=level)
    corrupt_first_block(path)
    ds = sluice.Dataset(path)                 # headers and index are fine
    with pytest.raises(sluice.CorruptDataError) as e:
        ds.read(0, "data")
    assert "data-00000.dls" in str(e.value)
    with sluice.Loader(path, batch_size=10, shuffle="none",
                       device="cpu") as ld:
        with pytest.raises(sluice.CorruptDataError) as e:
            for _ in ld:
                pass
        msg = str(e.value)
        assert "data-00000.dls" in msg and "4096" in msg, msg
        # The loader stays failed, with the same message.
        with pytest.raises(sluice.SluiceError):
            next(iter(ld))


def test_skip_corrupt_records(tmp_path):
    path = str(tmp_path / "ds")
    write_dataset(path, 100, compression_level=0)
    corrupt_first_block(path)
    with sluice.Loader(path, batch_size=10, shuffle="none", device="cpu",
                       on_error="skip") as ld:
        with pytest.warns(RuntimeWarning) as caught:
            n = sum(b.size for b in ld)
        assert 0 < n < 100
        assert ld.stats()["records_skipped"] == 100 - n
        # Once per loader, naming the first corrupt block.
        assert len(caught) == 1, [str(w.message) for w in caught]
        msg = str(caught[0].message)
        assert "skipped" in msg and "data-00000.dls" in msg, msg
        assert "offset 4096" in msg, msg
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert sum(b.size for b in ld) == n        # no second warning


def test_skip_warning_as_error_loses_no_batch(tmp_path):
    path = str(tmp_path / "ds")
    write_dataset(path, 100, compression_level=0)
    corrupt_first_block(path)
    kw = dict(batch_size=10, shuffle="none", device="cpu", on_error="skip")
    with sluice.Loader(path, **kw) as ld, pytest.warns(RuntimeWarning):
        want = [list(b.indices) for b in ld]
    with sluice.Loader(path, **kw) as ld:
        it = iter(ld)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(RuntimeWarning):
                next(it)
        assert [list(b.indices) for b in it] == want


def test_cuda_without_a_gpu_says_so(dataset):
    try:
        ld = sluice.Loader(dataset, device="cuda")
    except sluice.DeviceError as e:
        assert str(e).startswith("no CUDA GPU found: "), str(e)
        # device="auto" falls back to host memory and says why, once.
        with pytest.warns(RuntimeWarning, match="no CUDA GPU found"):
            ld = sluice.Loader(dataset, device="auto")
        assert ld.device == (1, 0)
        assert "no CUDA GPU found" in ld.stats()["fallbacks"]
        ld.close()
        return
    ld.close()
    pytest.skip("a CUDA GPU is present: the fallback is not taken")


def test_bad_arguments(dataset):
    with pytest.raises(ValueError, match="shuffle"):
        sluice.Loader(dataset, shuffle="sometimes")
    with pytest.raises(ValueError, match="device"):
        sluice.Loader(dataset, device="tpu")
    with pytest.raises(sluice.SluiceError):
        sluice.Loader(dataset, batch_size=0, device="cpu")
    with pytest.raises((OverflowError, ValueError)):
        sluice.Loader(dataset, batch_size=-1, device="cpu")


def test_state_from_another_dataset(dataset, tmp_path):
    write_dataset(tmp_path / "small", 30)
    with sluice.Loader(dataset, batch_size=10, device="cpu") as ld:
        state = ld.state_dict()
    with pytest.raises(sluice.StateError) as e:
        sluice.Loader(tmp_path / "small", batch_size=10, device="cpu",
                      state=state)
    assert str(e.value)
    with pytest.raises(ValueError, match="state"):
        sluice.Loader(dataset, device="cpu", state="not a state")


def test_ctrl_c_loses_no_batch(dataset):
    # SIGINT arrives while the loop runs: inside the extension's next()
    # (the batch in hand is kept for the next call) or between epochs.
    # list.extend() drives the iterator from C, so every batch the
    # extension hands over is recorded: delivered + resumed must be the
    # uninterrupted sequence, with nothing lost or repeated.
    kw = dict(batch_size=1, shuffle="full", seed=3, device="cpu",
              decode_threads=1, prefetch=2)
    full = sum(epoch_order(dataset, epochs=3, **kw), [])
    batches = []
    main = threading.get_ident()

    def interrupt():
        while len(batches) < 100:
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    with sluice.Loader(dataset, **kw) as ld:
        thread = threading.Thread(target=interrupt)
        thread.start()
        with pytest.raises(KeyboardInterrupt):
            for epoch in range(3):            # 1200 batches: never ends
                batches.extend(ld)
        thread.join()
        got = [b.indices[0] for b in batches]
        del batches[:]
        state = ld.state_dict()
        # The same loader goes on exactly where the loop stopped (next()
        # continues the pass; a new for loop would start it over).
        after = []
        while len(after) < 3:
            b = next(ld, None)                # None: an epoch ended
            if b is not None:
                after.append(b.indices[0])
        assert after == full[len(got):len(got) + 3]
    with sluice.Loader(dataset, state=state, **kw) as ld:
        while len(got) < len(full):
            got.extend(b.indices[0] for b in ld)
    assert got == full


LOOP_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[2])
import sluice
ld = sluice.Loader(sys.argv[1], batch_size=4, device="cpu")
print("started", flush=True)
while True:
    for batch in ld:
        pass
"""


def test_ctrl_c_stops_a_training_loop(dataset):
    pkg = os.path.dirname(os.path.dirname(sluice.__file__))
    p = subprocess.Popen([sys.executable, "-c", LOOP_SCRIPT, dataset, pkg],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"started"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)      # a hang fails here
    assert p.returncode != 0
    assert b"KeyboardInterrupt" in err, err
    assert b"Segmentation" not in err and b"Abort" not in err


def test_dataset_directory_removed_under_open_dataset(tmp_path):
    path = str(tmp_path / "ds")
    write_dataset(path, 50)
    ds = sluice.Dataset(path)
    shutil.rmtree(path)
    # Reads open the shard by path, so the read fails with an exception
    # that names the missing file (never a crash, never stale bytes).
    with pytest.raises(sluice.SluiceError) as e:
        ds.read(0, "label")
    assert "data-00000.dls" in str(e.value), str(e.value)
    assert "No such file" in str(e.value), str(e.value)
