"""Reading through Python: contents, order, epochs, ranks, resume."""
import collections.abc

import numpy as np
import pytest

import sluice
from conftest import check_batch, epoch_order, source


@pytest.mark.parametrize("shuffle", ["none", "block", "window", "full"])
@pytest.mark.parametrize("which", ["dataset", "raw_dataset"])
def test_every_record_equals_source(request, which, shuffle):
    path = request.getfixturevalue(which)
    with sluice.Loader(path, batch_size=32, shuffle=shuffle, seed=3,
                       device="cpu", prefetch=3, decode_threads=2) as ld:
        assert len(ld) == 13                       # ceil(400 / 32)
        seen = []
        for batch in ld:
            assert isinstance(batch, collections.abc.Mapping)
            assert sorted(batch) == ["data", "label", "text",
                                     "text.offsets"]
            assert batch.epoch == 0
            seen.extend(check_batch(batch))
        assert sorted(seen) == list(range(400))
        if shuffle == "none":
            assert seen == list(range(400))
        else:
            assert seen != list(range(400))


def test_padded_variable_field(dataset):
    with sluice.Loader(dataset, batch_size=50, shuffle="none",
                       device="cpu", pad_length=8) as ld:
        for batch in ld:
            text = np.from_dlpack(batch["text"])
            lengths = np.from_dlpack(batch["text.lengths"])
            assert text.shape == (batch.size, 8)
            for j, i in enumerate(batch.indices):
                want = source(i)["text"]
                assert lengths[j] == len(want)
                assert text[j, :len(want)].tobytes() == want
        assert ld.stats()["values_truncated"] == 0


def test_pad_length_cuts_but_keeps_true_lengths(dataset):
    pad, cut = 3, 0
    with sluice.Loader(dataset, batch_size=50, shuffle="none",
                       device="cpu", pad_length=pad) as ld:
        with pytest.warns(RuntimeWarning, match="pad_length=3 cut"):
            for batch in ld:
                text = np.from_dlpack(batch["text"])
                lengths = np.from_dlpack(batch["text.lengths"])
                assert text.shape == (batch.size, pad)
                for j, i in enumerate(batch.indices):
                    want = source(i)["text"]
                    assert lengths[j] == len(want)      # not min(len, 3)
                    n = min(len(want), pad)
                    assert text[j, :n].tobytes() == want[:n]
                    assert not text[j, n:].any()
                    cut += max(len(want) - pad, 0)
        assert cut > 0
        assert ld.stats()["values_truncated"] == cut


def test_epochs_and_set_epoch(dataset):
    with sluice.Loader(dataset, batch_size=64, seed=1, device="cpu") as ld:
        e0 = [list(b.indices) for b in ld]
        e1 = [list(b.indices) for b in ld]   # the next epoch follows
        assert e0 != e1
        assert sorted(sum(e1, [])) == list(range(400))
        ld.set_epoch(0)
        assert [list(b.indices) for b in ld] == e0
        ld.set_epoch(1)
        batches = list(ld)
        assert [list(b.indices) for b in batches] == e1
        assert all(b.epoch == 1 for b in batches)


def test_ranks_split_the_epoch(dataset, monkeypatch):
    parts, states = [], []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        with sluice.Loader(dataset, batch_size=20, seed=7,
                           device="cpu") as ld:
            assert len(ld) == 10                 # 200 records per rank
            assert ld.state_dict()["world_size"] == 2
            parts.append(sum((list(b.indices) for b in ld), []))
            states.append(ld.state_dict())
    assert states[0] == states[1]                # rank 0 alone saves it
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == list(range(400))
    # Explicit arguments win over the environment.
    with sluice.Loader(dataset, batch_size=20, rank=0, world_size=1,
                       device="cpu") as ld:
        assert len(ld) == 20


def take(loader, n):
    """The next n batches' indices, across epoch ends."""
    out = []
    while len(out) < n:
        batch = next(loader, None)        # None: an epoch ended
        if batch is not None:
            out.append(list(batch.indices))
    return out


@pytest.mark.parametrize("shuffle", ["window", "full"])
@pytest.mark.parametrize("stop", [0, 5, 13, 20])
def test_resume_reproduces_uninterrupted_order(dataset, shuffle, stop):
    kw = dict(batch_size=32, shuffle=shuffle, seed=11, device="cpu")
    full = epoch_order(dataset, epochs=2, **kw)        # 13 + 13 batches
    with sluice.Loader(dataset, **kw) as ld:
        got = take(ld, stop)
        state = ld.state_dict()
    # A new process would do exactly this.
    with sluice.Loader(dataset, state=state, **kw) as ld:
        assert ld.state_dict() == state
        got += take(ld, len(full) - stop)
    assert got == full


def test_state_dict_round_trips_as_line_and_dict(dataset):
    with sluice.Loader(dataset, batch_size=10, seed=2, device="cpu") as ld:
        it = iter(ld)
        for _ in range(3):
            next(it)
        line = ld._ld.state_line()
        state = ld.state_dict()
        want = list(next(it).indices)
    for saved in (state, line):
        with sluice.Loader(dataset, batch_size=10, seed=2, device="cpu",
                           state=saved) as ld:
            assert list(next(iter(ld)).indices) == want


def test_host_batches_are_kdlcpu(dataset):
    with sluice.Loader(dataset, batch_size=8, device="cpu") as ld:
        assert ld.device == (1, 0)
        batch = next(iter(ld))
        for name in batch:
            assert batch[name].__dlpack_device__() == (1, 0)
        assert batch["data"].shape == (8, 4)
        assert batch["data"].dtype == "float32"
        assert batch["label"].dtype == "int64"
        assert batch["text.offsets"].dtype == "int64"
        assert "data" in batch and "nope" not in batch
        with pytest.raises(KeyError):
            batch["nope"]
        assert batch.get("nope") is None


def test_release_early(dataset):
    with sluice.Loader(dataset, batch_size=8, device="cpu") as ld:
        batch = next(iter(ld))
        tensor = batch["data"]
        arr = np.from_dlpack(tensor)
        want = arr.copy()
        batch.release()
        assert batch.released
        with pytest.raises(ValueError, match="released"):
            batch["data"]
        with pytest.raises(BufferError, match="released"):
            tensor.__dlpack__()
        # The array taken before release keeps its slot and its bytes.
        for _ in range(20):
            next(ld, None)
        np.testing.assert_array_equal(arr, want)


def test_direct_io_auto_reads_cached_shards_buffered(dataset):
    # The dataset was just written: the page cache holds it.
    shards = sluice.Dataset(dataset).shards
    with sluice.Loader(dataset, batch_size=50, device="cpu") as ld:
        st = ld.stats()
        assert st["cached_shards"] == shards and st["direct_io"] == 0
        assert sum(b.size for b in ld) == 400
    with sluice.Loader(dataset, batch_size=50, device="cpu",
                       direct_io=False) as ld:
        assert ld.stats()["cached_shards"] == 0
    with pytest.raises(ValueError, match="direct_io"):
        sluice.Loader(dataset, device="cpu", direct_io="sometimes")


def test_memory_budget(dataset):
    """A small budget still delivers every record once; a hoarding
    consumer past it gets its batches (host memory outside the budget,
    counted); a batch whose blocks do not fit beside it is gathered a
    chunk of blocks at a time; a budget too small for a batch names
    memory_bytes."""
    with sluice.Loader(dataset, batch_size=10, shuffle="none",
                       device="cpu", memory_bytes=64 << 10) as ld:
        kept = list(ld)
        seen = [i for b in kept for i in check_batch(b)]
        assert sorted(seen) == list(range(400))
        stats = ld.stats()
        assert stats["memory_bytes"] == 64 << 10
        assert 0 < stats["io_memory_bytes"] < stats["memory_bytes"]
        assert stats["batches_over_budget"] > 0
        # zstd blocks: each read by a worker through a staging buffer
        # of its own, however small the io memory, and checked there
        assert stats["bytes_staged"] > 0
        assert stats["bytes_verified_landing"] == stats["bytes_staged"]
        assert stats["bytes_verified_device"] == 0  # on the host
        assert stats["decode_threads"] >= 1
        assert stats["read_ahead_blocks"] >= 2 * stats["decode_threads"]
        del kept
    # One batch of all 400 records fits, their blocks beside it do not:
    # gathered a chunk of blocks at a time, said once.  (64 KiB holds
    # them where the workers read the zstd blocks: no room for their
    # stored bytes.)
    with pytest.warns(RuntimeWarning, match="a chunk of blocks at a time"):
        ld = sluice.Loader(dataset, batch_size=5000, device="cpu",
                           memory_bytes=48 << 10)
    with ld:
        seen = [i for b in ld for i in check_batch(b)]
        assert sorted(seen) == list(range(400))
        assert ld.stats()["batches_over_budget"] == 0
    with pytest.raises(sluice.SluiceError, match="memory_bytes"):
        sluice.Loader(dataset, batch_size=5000, device="cpu",
                      memory_bytes=8 << 10)


@pytest.mark.parametrize("range_reads", ["auto", "on", "off"])
def test_full_shuffle_reads_record_ranges(tmp_path, range_reads):
    """Fixed-shape raw records: shuffle="full" reads their byte ranges
    (range_reads "auto" or "on"), not their blocks, same records, same
    order."""
    path = tmp_path / "fixed"
    with sluice.ShardWriter(path, [("img", "uint8", (3, 40)),
                                   ("label", "int64", ())],
                            block_size=4096, records_per_shard=90,
                            compression_level=0) as w:
        for i in range(300):
            w.write({"img": np.full((3, 40), i % 251, np.uint8),
                     "label": i})
    order = []
    with sluice.Loader(str(path), batch_size=16, shuffle="full", seed=1,
                       device="cpu", range_reads=range_reads) as ld:
        for batch in ld:
            labels = np.from_dlpack(batch["label"])
            img = np.from_dlpack(batch["img"])
            assert (img == (labels % 251)[:, None, None]).all()
            order.extend(labels.tolist())
        stats = ld.stats()
    assert sorted(order) == list(range(300))
    blocks = epoch_order(str(path), shuffle="full", seed=1, batch_size=16,
                         range_reads="off")
    assert order == [i for batch in blocks for i in batch]
    if range_reads == "off":
        assert stats["range_records"] == 0
    else:
        assert stats["range_records"] >= 300
        assert stats["blocks_read"] == 0
    with pytest.raises(ValueError):
        sluice.Loader(str(path), shuffle="full", range_reads="sometimes")


@pytest.mark.parametrize("shuffle", ["none", "window", "full"])
def test_device_gather_on_cpu_matches(tmp_path, shuffle):
    """device_gather="on" runs the gather's run tables on the CPU (a
    memcpy per run): the same batches as the CPU assembly, counted."""
    path = tmp_path / "fixed"
    with sluice.ShardWriter(path, [("img", "uint8", (3, 40)),
                                   ("label", "int64", ())],
                            block_size=4096, records_per_shard=90,
                            compression_level=0) as w:
        for i in range(300):
            w.write({"img": np.full((3, 40), i % 251, np.uint8),
                     "label": i})
    out = {}
    for mode in ("on", "off"):
        labels = []
        with sluice.Loader(str(path), batch_size=16, shuffle=shuffle,
                           seed=3, device="cpu", range_reads="off",
                           device_gather=mode) as ld:
            for batch in ld:
                lab = np.from_dlpack(batch["label"]).copy()
                img = np.from_dlpack(batch["img"])
                assert (img == (lab % 251)[:, None, None]).all()
                labels.extend(lab.tolist())
            stats = ld.stats()
        out[mode] = labels
        if mode == "on":
            assert stats["batches_gathered"] == stats["batches"] > 0
            assert stats["device_upload_bytes"] > 0
        else:
            assert stats["batches_gathered"] == 0
    assert out["on"] == out["off"]
    with pytest.raises(ValueError):
        sluice.Loader(str(path), device_gather="sometimes")
