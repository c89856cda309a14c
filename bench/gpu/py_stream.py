#!/usr/bin/env python3
"""bench/gpu/py_stream.py - a streaming row as a PyTorch user runs it
(issue 22: "sluice.torch.Loader, defaults"): sluice.torch.Loader with
its defaults but the batch size, each batch's tensors taken with
torch.from_dlpack and dropped, as a training loop would.  Without torch
(a rehearsal), sluice.Loader's DLPack tensors instead.

Prints one JSON object shaped as `sluice bench --json`'s, from the
loader's own stats() and this process's clocks, so that streaming.py's
rows read it alike: result (delivered_gbps over the epochs' wall time,
open excluded; cpu_s_per_gb_delivered, the whole process's CPU: the
interpreter's loop included; consumer_wait_fraction; slot_occupancy;
memory_bytes; seconds; read_bytes and the byte counters), stages (busy
threads), limits (none measured here: the bench rows beside it have
them) and fallbacks.

Usage: py_stream.py PATH [--batch-size B] [--shuffle S] [--epochs E]
                    [--device D] [--memory-bytes N]
"""
import argparse
import json
import resource
import sys
import time


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--shuffle", default=None,
                    help="the loader's default (window) unless given")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--memory-bytes", type=int, default=0)
    a = ap.parse_args()

    import sluice
    try:
        import torch
        from sluice.torch import Loader
    except ImportError:
        torch = None
        Loader = sluice.Loader
    kw = {"batch_size": a.batch_size, "device": a.device,
          "memory_bytes": a.memory_bytes}
    if a.shuffle:
        kw["shuffle"] = a.shuffle
    if a.device in ("cpu", "host") or torch is None or \
            not torch.cuda.is_available():
        sync = None
    else:
        sync = torch.cuda.synchronize

    t_open = time.perf_counter()
    loader = Loader(a.path, **kw)
    open_s = time.perf_counter() - t_open
    base = loader._loader if torch is not None else loader
    delivered = 0
    t0, c0 = time.perf_counter(), cpu_seconds()
    for epoch in range(a.epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            if torch is not None:
                delivered += sum(t.numel() * t.element_size()
                                 for t in batch.values())
            else:
                delivered += sum(t.nbytes for t in batch.values())
                batch.release()
            del batch
    if sync:
        sync()
    secs = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    st = base.stats()
    batches = max(st["batches"], 1)
    gb = delivered / 1e9

    def busy(stage):
        return st[stage]["busy_ns"] / 1e9 / secs

    out = {
        "tool": "bench/gpu/py_stream.py",
        "torch": torch.__version__ if torch is not None else None,
        "result": {
            "delivered_gbps": gb / secs,
            "cpu_s_per_gb_delivered": cpu / gb if gb else None,
            "cpu_s_per_gb": cpu / gb if gb else None,
            "consumer_wait_fraction": st["consumer_wait_ns"] / 1e9 / secs,
            "slot_occupancy": st["slot_occupancy_sum"] / batches,
            "memory_bytes": st["memory_bytes"],
            "open_seconds": open_s,
            "seconds": secs,
            "delivered_bytes": delivered,
            "read_bytes": st["read"]["bytes"],
            "bytes_verified_landing": st["bytes_verified_landing"],
            "bytes_verified_device": st["bytes_verified_device"],
            "bytes_staged": st["bytes_staged"],
            "bytes_staged_overlapped": st["bytes_staged_overlapped"],
            "batches_gathered": st["batches_gathered"],
            "read_ahead_blocks": st["read_ahead_blocks"],
            "device_upload_threads": st["device_upload_ns"] / 1e9 / secs,
            "device_check_threads": st["device_check_ns"] / 1e9 / secs,
            "lock_wait_threads": st["lock_wait_ns"] / 1e9 / secs,
        },
        "stages": {s: {"busy_threads": busy(s),
                       "wait_seconds": st[s]["wait_ns"] / 1e9}
                   for s in ("read", "decode", "assemble", "copy")},
        "limits": {"pcie": {}, "disk": {}},
        "fallbacks": {"reasons": st["fallbacks"]},
    }
    base.close()
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
