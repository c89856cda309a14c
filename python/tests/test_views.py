"""Batches of fixed-shape fields taken in order view their decoded block
(no copy): held across the whole epoch they keep their records, and the
stats say how many batches viewed and where the CPU went."""
import numpy as np
import pytest

import sluice

FIXED = [("data", "float32", (4,)), ("label", "int64", ())]


def record(i):
    return {"data": np.array([i, i + 0.5, -i, i * 2], np.float32),
            "label": i * 3 + 1}


@pytest.mark.parametrize("compression_level", [0, 3])
@pytest.mark.parametrize("shuffle", ["none", "block", "window", "full"])
def test_held_views_keep_their_records(tmp_path, compression_level,
                                       shuffle):
    path = str(tmp_path / "fixed")
    # 64 records a block (24 bytes each), 3000 records: 47 blocks
    with sluice.ShardWriter(path, FIXED, block_size=64 * 24,
                            compression_level=compression_level) as w:
        for i in range(3000):
            w.write(record(i))
    # one epoch: a job of more than one takes zstd blocks whole into the
    # default budget's cache, which makes no views
    with sluice.Loader(path, batch_size=16, shuffle=shuffle, seed=2,
                       device="cpu", prefetch=4, decode_threads=2,
                       epochs=1) as ld:
        held = []
        for batch in ld:
            # numpy views of the DLPack tensors; the batch stays alive
            held.append((list(batch.indices),
                         np.from_dlpack(batch["data"]),
                         np.from_dlpack(batch["label"]), batch))
            if len(held) > 8:
                held.pop(0)
            for idx, data, label, _ in held:
                for j, i in enumerate(idx):
                    assert data[j].tolist() == record(i)["data"].tolist()
                    assert label[j] == record(i)["label"]
        stats = ld.stats()
        del held
    assert stats["records"] == 3000
    for k in ("cpu_read_ns", "cpu_verify_ns", "cpu_decompress_ns",
              "cpu_assemble_ns"):
        assert stats[k] >= 0
    assert stats["cpu_verify_ns"] > 0
    if shuffle in ("none", "block"):
        assert stats["batches_viewed"] > stats["batches"] // 2
