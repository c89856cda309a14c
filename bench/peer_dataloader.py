#!/usr/bin/env python3
"""PyTorch DataLoader over the ORIGINAL source files of a bench workload,
the way a PyTorch user would read them without sluice:

  image:  the ImageFolder tree (bench/data/image_src/<class>/<file>):
          each record = the file's bytes + its class index
  tokens: the .npy file (bench/data/tokens_src/tokens.npy): each record =
          one int32[2048] row, read with seek + read

One configuration per process (so each starts from the same memory:
Python with torch imported), the loader built inside the measurement:
  naive: DataLoader(ds, batch_size=B, shuffle=True, num_workers=0)
  tuned: num_workers=cores, pin_memory=True, persistent_workers=True,
         prefetch_factor=2, a BatchSampler yielding whole index lists and
         a dataset with __getitems__ reading a batch at once
  sluice: sluice.Loader(PATH, batch_size=B, shuffle="window",
          device="host"), each field through torch.from_dlpack

Usage: peer_dataloader.py image|tokens naive|tuned|sluice [--sluice PATH]
Prints one JSON object on stdout:
  {"name", "samples_per_s", "gbps", "cpu_s_per_gb", "records", "seconds",
   "peak_pss_mb", "peak_rss_mb", "start_pss_mb"}
(peak memory of this process and its workers from the loader's
construction to its end, from bench/peak_memory.py; start_pss_mb is what
the process held before, torch's import included)
Exit 77 (with a message) when torch is not installed.
"""
import argparse
import ast
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peak_memory import TreePeak  # noqa: E402


def cpu_seconds():
    """User + system CPU of this process and of its finished workers."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def npy_layout(path):
    """(data offset, rows, row bytes, dtype string) of a C-order .npy."""
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic[:6] != b"\x93NUMPY":
            raise ValueError("%s: not a .npy file" % path)
        if magic[6] == 1:
            hlen = int.from_bytes(f.read(2), "little")
            off = 10 + hlen
        else:
            hlen = int.from_bytes(f.read(4), "little")
            off = 12 + hlen
        header = ast.literal_eval(f.read(hlen).decode("latin1"))
    shape = header["shape"]
    item = int(header["descr"][2:])
    row = item
    for d in shape[1:]:
        row *= d
    return off, shape[0], row, header["descr"]


def make_dataset(torch, kind, root):
    class ImageFiles(torch.utils.data.Dataset):
        def __init__(self, top):
            classes = sorted(d for d in os.listdir(top)
                             if not d.startswith(".") and
                             os.path.isdir(os.path.join(top, d)))
            self.items = []
            for label, c in enumerate(classes):
                for name in sorted(os.listdir(os.path.join(top, c))):
                    if not name.startswith("."):
                        self.items.append((os.path.join(top, c, name),
                                           label))

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            path, label = self.items[i]
            with open(path, "rb") as f:
                data = f.read()
            return torch.frombuffer(bytearray(data), dtype=torch.uint8), label

        def __getitems__(self, idx):
            return [self[i] for i in idx]

    class NpyRows(torch.utils.data.Dataset):
        def __init__(self, path):
            self.path = path
            self.off, self.n, self.row, _ = npy_layout(path)
            self.f = None

        def __len__(self):
            return self.n

        def _file(self):
            if self.f is None:   # opened in each worker after the fork
                self.f = open(self.path, "rb", buffering=0)
            return self.f

        def __getitem__(self, i):
            f = self._file()
            f.seek(self.off + i * self.row)
            b = f.read(self.row)
            return torch.frombuffer(bytearray(b), dtype=torch.int32)

        def __getitems__(self, idx):
            return [self[i] for i in idx]

    if kind == "image":
        return ImageFiles(os.path.join(root, "image_src"))
    if kind == "tokens":
        return NpyRows(os.path.join(root, "tokens_src", "tokens.npy"))
    raise SystemExit("peer_dataloader: no original source files for '%s' "
                     "(synth has none)" % kind)


def collate(kind, torch, items):
    # Variable-size bytes travel as one flat tensor plus offsets (what
    # sluice hands out too): a list of small tensors would cost one
    # shared-memory segment per image between worker processes.
    if kind == "image":
        data = torch.cat([d for d, _ in items])
        lens = torch.tensor([d.numel() for d, _ in items], dtype=torch.int64)
        offsets = torch.zeros(len(items) + 1, dtype=torch.int64)
        torch.cumsum(lens, 0, out=offsets[1:])
        labels = torch.tensor([l for _, l in items], dtype=torch.int64)
        return data, offsets, labels
    return torch.stack(items)


def batch_bytes(kind, b):
    if isinstance(b, dict):     # sluice, after from_dlpack: name -> tensor
        return sum(t.numel() * t.element_size() for t in b.values())
    if kind == "image":
        return b[0].numel() + b[2].numel() * 8
    return b.numel() * b.element_size()


def batch_records(tensors):
    """B of a sluice batch: a fixed field's first dimension, or a variable
    field's offsets minus one."""
    for name, t in tensors.items():
        if name.endswith(".offsets"):
            return t.shape[0] - 1
        if (name + ".offsets" not in tensors
                and not name.endswith(".lengths")):
            return t.shape[0]
    return 0


def run(torch, kind, name, make_loader, epochs):
    """Build the loader with make_loader() and stream @epochs through it:
    its construction (workers, arena) counts in the memory and the CPU,
    not in the seconds."""
    records = nbytes = 0
    peak = TreePeak(os.getpid()).start()
    cpu0 = cpu_seconds()
    t_open = time.perf_counter()
    loader = make_loader()
    t0 = time.perf_counter()
    open_cpu = cpu_seconds() - cpu0
    for _ in range(epochs):
        for b in loader:
            if hasattr(b, "items"):     # a sluice batch: name -> tensor
                b = {k: torch.from_dlpack(v) for k, v in b.items()}
                records += batch_records(b)
            else:
                records += len(b[2]) if kind == "image" else b.shape[0]
            nbytes += batch_bytes(kind, b)
    secs = time.perf_counter() - t0
    # Persistent workers only exit (and so only count in RUSAGE_CHILDREN)
    # when shut down; the caller still holds the loader, so do it here.
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    cpu = cpu_seconds() - cpu0
    mem = peak.stop()
    cpu -= mem["sampler_cpu_s"]     # the sampler thread runs in this process
    out = {"name": name, "records": records, "seconds": secs,
           "open_seconds": t0 - t_open, "open_cpu_seconds": open_cpu,
           "samples_per_s": records / secs, "gbps": nbytes / secs / 1e9,
           "cpu_s_per_gb": cpu / (nbytes / 1e9) if nbytes else 0.0}
    out.update(mem)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["image", "tokens"])
    ap.add_argument("config", choices=["naive", "tuned", "sluice"])
    ap.add_argument("--data", default="bench/data")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sluice", metavar="PATH",
                    help="the converted dataset (config sluice)")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("peer_dataloader: skipped: torch is not installed "
              "(pip install torch)", file=sys.stderr)
        sys.exit(77)

    if a.config == "sluice":
        sys.path.insert(0, os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "..", "python"))
        import sluice

        def make():
            return sluice.Loader(a.sluice, batch_size=a.batch_size,
                                 shuffle="window", device="host")
        print(json.dumps(run(torch, a.kind, "sluice Python loader "
                             "(torch.from_dlpack)", make, a.epochs)))
        return

    ds = make_dataset(torch, a.kind, a.data)

    def col(items):
        return collate(a.kind, torch, items)

    def naive():
        return torch.utils.data.DataLoader(ds, batch_size=a.batch_size,
                                           shuffle=True, num_workers=0,
                                           collate_fn=col)

    class Batched(torch.utils.data.Dataset):
        # batch_size=None hands each index list from the BatchSampler to
        # the dataset as one item, so a worker reads the whole batch with
        # __getitems__ and collates it there.
        def __len__(self):
            return len(ds)

        def __getitem__(self, idx):
            return col(ds.__getitems__(idx))

    def tuned():
        sampler = torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(ds), a.batch_size,
            drop_last=False)
        return torch.utils.data.DataLoader(
            Batched(), batch_size=None, sampler=sampler,
            num_workers=a.workers, pin_memory=True,
            persistent_workers=True, prefetch_factor=2)

    if a.config == "naive":
        print(json.dumps(run(torch, a.kind, "pytorch naive", naive,
                             a.epochs)))
    else:
        print(json.dumps(run(torch, a.kind, "pytorch tuned (%d workers)"
                             % a.workers, tuned, a.epochs)))


if __name__ == "__main__":
    main()
