#!/usr/bin/env python3
"""PyTorch's tutorial "Data Loading Optimization in PyTorch", on a dataset
on disk, against sluice.torch.Loader.

The tutorial's model (two strided convs, adaptive pool to 7x7, a 2-layer
TransformerEncoder with d_model 64, a linear head), its training step
(SGD, cross-entropy, loss.item() each step), and its progression of
DataLoader configurations, each row keeping the previous ones:

  baseline     num_workers=0, pin_memory=False
  tuned        num_workers=W, pin_memory, persistent_workers, prefetch_factor=4
  +prefetcher  the tutorial's DataPrefetcher: H2D copies on a side stream
  +getitems    a Dataset with __getitems__: one call per batch
  sluice       sluice.torch.Loader(device="cuda", decode_threads=W)

The tutorial's synthetic data (torch.randn plus a sleep) is replaced by
real reads: N records of uint8[3,224,224] (a 224x224 RGB image, 147 KiB)
and an int64 label, written once as one flat file for the DataLoader (a
Dataset that preads record i) and as a raw (uncompressed) sluice dataset
with one record per block, so both read the same bytes per record.  Both
shuffle every record (DataLoader shuffle=True, sluice shuffle="full").
The step turns the uint8 batch into float on the GPU, the same for all.

Storage-bound: the data files' page cache is dropped before every epoch
(posix_fadvise DONTNEED per file, and /proc/sys/vm/drop_caches when
root unless --no-global-drop), so each epoch reads from the disk.

Per configuration, over E epochs: time per epoch (mean; the first epoch,
with worker start-up, also alone), samples/s, GPU idle fraction (1 - the
time CUDA events measured around each step's forward, backward and
optimizer step over the epoch's wall time), CPU seconds per sample
(machine-wide, from /proc/stat: DataLoader worker processes and kernel
I/O threads count too).

Usage: tutorial.py --data DIR [--samples N] [--epochs E] [--workers W]
                   [--batch-size B] [--json FILE] [--only NAMES]
                   [--no-global-drop]
Without CUDA (a rehearsal) the models run on the CPU, the prefetcher row
is skipped and sluice uses host batches; GPU idle is then n/a.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

SHAPE = (3, 224, 224)
RECORD = 3 * 224 * 224
CLASSES = 10


# ---------------------------------------------------------------- data

def write_data(root, n, log):
    """The flat file pair and the sluice dataset, from one random stream;
    skipped when a complete set for @n records is there already."""
    import sluice
    done = os.path.join(root, "done-%d" % n)
    if os.path.exists(done):
        return
    os.makedirs(root, exist_ok=True)
    for f in os.listdir(root):
        p = os.path.join(root, f)
        if os.path.isfile(p):
            os.unlink(p)
    sl_dir = os.path.join(root, "sluice")
    if os.path.isdir(sl_dir):
        for f in os.listdir(sl_dir):
            os.unlink(os.path.join(sl_dir, f))
        os.rmdir(sl_dir)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, n, dtype=np.int64)
    labels.tofile(os.path.join(root, "labels.i64"))
    t0 = time.perf_counter()
    schema = [("image", "uint8", SHAPE), ("label", "int64", ())]
    with open(os.path.join(root, "images.u8"), "wb") as flat, \
            sluice.ShardWriter(sl_dir, schema, compression_level=0,
                               block_size=RECORD) as w:
        chunk = 256
        for lo in range(0, n, chunk):
            imgs = rng.integers(0, 256, (min(chunk, n - lo),) + SHAPE,
                                dtype=np.uint8)
            flat.write(imgs.tobytes())
            for k in range(imgs.shape[0]):
                w.write({"image": imgs[k], "label": int(labels[lo + k])})
        flat.flush()
        os.fsync(flat.fileno())
    open(done, "w").close()
    log("wrote %d records twice (%.1f GB each) in %.1f s" % (
        n, n * RECORD / 1e9, time.perf_counter() - t0))


def data_files(root):
    out = [os.path.join(root, "images.u8"), os.path.join(root, "labels.i64")]
    sl_dir = os.path.join(root, "sluice")
    out += [os.path.join(sl_dir, f) for f in os.listdir(sl_dir)]
    return out


def drop_cache(files, global_drop):
    """Evict the data from the page cache, so the epoch reads the disk."""
    os.sync()
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if not global_drop:
        return
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError:
        pass    # not root: the per-file advice above still applies


class DiskImages(Dataset):
    """Record i at offset i * RECORD of one flat file, read with pread."""

    def __init__(self, root):
        self.path = os.path.join(root, "images.u8")
        self.labels = np.fromfile(os.path.join(root, "labels.i64"),
                                  dtype=np.int64)
        self.fd = None
        self.pid = None

    def _file(self):
        # One descriptor per process: workers are forked.
        if self.pid != os.getpid():
            self.fd = os.open(self.path, os.O_RDONLY)
            self.pid = os.getpid()
        return self.fd

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        buf = bytearray(RECORD)
        if os.preadv(self._file(), [buf], i * RECORD) != RECORD:
            raise IOError("short read of record %d" % i)
        x = torch.frombuffer(buf, dtype=torch.uint8).view(SHAPE)
        return x, int(self.labels[i])


class DiskImagesBatched(DiskImages):
    """The same, with __getitems__: the whole batch read into one tensor
    in file order, in one call."""

    def __getitems__(self, indices):
        out = torch.empty((len(indices),) + SHAPE, dtype=torch.uint8)
        mem = memoryview(out.numpy()).cast("B")
        fd = self._file()
        for k in sorted(range(len(indices)), key=lambda k: indices[k]):
            part = mem[k * RECORD:(k + 1) * RECORD]
            if os.preadv(fd, [part], indices[k] * RECORD) != RECORD:
                raise IOError("short read of record %d" % indices[k])
        labels = torch.from_numpy(self.labels[indices])
        return [(out[k], labels[k]) for k in range(len(indices))]


class DataPrefetcher:
    """The tutorial's prefetcher: the next batch's H2D copy on a side
    stream while the current batch trains."""

    def __init__(self, loader, device):
        self.loader = iter(loader)
        self.device = device
        self.stream = torch.cuda.Stream()
        self.preload()

    def preload(self):
        try:
            self.next_data, self.next_labels = next(self.loader)
        except StopIteration:
            self.next_data = self.next_labels = None
            return
        with torch.cuda.stream(self.stream):
            self.next_data = self.next_data.to(self.device, non_blocking=True)
            self.next_labels = self.next_labels.to(self.device,
                                                   non_blocking=True)

    def __iter__(self):
        return self

    def __next__(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        data, labels = self.next_data, self.next_labels
        if data is None:
            raise StopIteration
        data.record_stream(torch.cuda.current_stream())
        labels.record_stream(torch.cuda.current_stream())
        self.preload()
        return data, labels


# ---------------------------------------------------------------- model

class SmallTransformerModel(nn.Module):
    """The tutorial's conv + transformer model."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=7, stride=4, padding=3), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d((7, 7)))
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4,
                                           dim_feedforward=128,
                                           batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, num_layers=2)
        self.classifier = nn.Linear(64, CLASSES)

    def forward(self, x):
        x = self.features(x)
        b, c, h, w = x.shape
        x = self.transformer(x.view(b, c, h * w).permute(0, 2, 1))
        return self.classifier(x.mean(dim=1))


# ---------------------------------------------------------------- timing

def cpu_busy_seconds():
    """Machine-wide busy CPU time (all modes but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = sum(v) - v[3] - (v[4] if len(v) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def train(name, batches_of_epoch, epochs, device, files, global_drop, log):
    """Train the model for @epochs, each from batches_of_epoch(epoch)
    (an iterable of (uint8 images, labels), on any device)."""
    torch.manual_seed(42)
    model = SmallTransformerModel().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    cuda = device.type == "cuda"
    rows = []
    for epoch in range(epochs):
        drop_cache(files, global_drop)
        events = []
        samples = steps = 0
        loss_sum = 0.0
        cpu0, t0 = cpu_busy_seconds(), time.perf_counter()
        for data, labels in batches_of_epoch(epoch):
            data = data.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record()
            out = model(data.float().div_(255))
            loss = loss_fn(out, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if cuda:
                stop.record()
                events.append((start, stop))
            loss_sum += loss.item()
            samples += data.shape[0]
            steps += 1
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        cpu = cpu_busy_seconds() - cpu0
        busy = sum(a.elapsed_time(b) for a, b in events) / 1e3
        rows.append({"epoch": epoch, "seconds": wall, "samples": samples,
                     "cpu_seconds": cpu,
                     "gpu_idle": (1 - busy / wall) if cuda else None,
                     "loss": loss_sum / max(1, steps)})
        log("  %-11s epoch %d: %.2f s, %d samples, %.0f samples/s, CPU %.1f s%s"
            % (name, epoch, wall, samples, samples / wall, cpu,
               ", GPU idle %.0f%%" % (100 * rows[-1]["gpu_idle"])
               if cuda else ""))
    return summarize(name, rows)


def summarize(name, rows):
    samples = sum(r["samples"] for r in rows)
    secs = sum(r["seconds"] for r in rows)
    idle = [r["gpu_idle"] for r in rows if r["gpu_idle"] is not None]
    return {
        "config": name,
        "epochs": len(rows),
        "samples_per_epoch": rows[0]["samples"],
        "epoch_seconds": secs / len(rows),
        "first_epoch_seconds": rows[0]["seconds"],
        "epoch_seconds_median": statistics.median(r["seconds"] for r in rows),
        "samples_per_s": samples / secs,
        "gpu_idle": statistics.mean(idle) if idle else None,
        "cpu_s_per_sample": sum(r["cpu_seconds"] for r in rows) / samples,
        "per_epoch": rows,
    }


# ---------------------------------------------------------------- configs

def configs(root, args, device):
    w = args.workers
    bs = args.batch_size
    cuda = device.type == "cuda"
    plain, batched = DiskImages(root), DiskImagesBatched(root)

    def dataloader(ds, **kw):
        ld = DataLoader(ds, batch_size=bs, shuffle=True, **kw)
        return lambda epoch: ld

    tuned = dict(num_workers=w, pin_memory=cuda, persistent_workers=True,
                 prefetch_factor=4)
    yield "baseline", lambda: dataloader(plain, num_workers=0,
                                         pin_memory=False)
    yield "tuned", lambda: dataloader(plain, **tuned)
    if cuda:
        def prefetched(ds):
            ld = DataLoader(ds, batch_size=bs, shuffle=True, **tuned)
            return lambda epoch: DataPrefetcher(ld, device)
        yield "+prefetcher", lambda: prefetched(plain)
        yield "+getitems", lambda: prefetched(batched)
    else:
        yield "+getitems", lambda: dataloader(batched, **tuned)

    def sluice_loader():
        import sluice.torch
        ld = sluice.torch.Loader(os.path.join(root, "sluice"),
                                 batch_size=bs, shuffle="full", seed=0,
                                 device="cuda" if cuda else "host",
                                 decode_threads=w, prefetch=8)

        def epoch_batches(epoch):
            ld.set_epoch(epoch)
            return ((b["image"], b["label"]) for b in ld)
        return epoch_batches
    yield "sluice", sluice_loader


def table(results, device_name):
    best_dl = max((r for r in results if r["config"] != "sluice"),
                  key=lambda r: r["samples_per_s"], default=None)
    lines = ["| config | s/epoch | samples/s | GPU idle | CPU s/sample | vs best DataLoader |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        idle = "n/a" if r["gpu_idle"] is None else "%.0f%%" % (100 * r["gpu_idle"])
        vs = ""
        if best_dl and r["config"] == "sluice":
            vs = "%.2fx samples/s at %.2fx CPU" % (
                r["samples_per_s"] / best_dl["samples_per_s"],
                r["cpu_s_per_sample"] / best_dl["cpu_s_per_sample"])
        lines.append("| %s | %.2f | %.0f | %s | %.5f | %s |" % (
            r["config"], r["epoch_seconds"], r["samples_per_s"], idle,
            r["cpu_s_per_sample"], vs))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--json")
    ap.add_argument("--only", help="comma-separated config names")
    ap.add_argument("--no-global-drop", action="store_true",
                    help="only per-file page cache advice, no "
                    "/proc/sys/vm/drop_caches (a machine shared with others)")
    args = ap.parse_args()

    def log(msg):
        print(msg, flush=True)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    log("device %s, torch %s, %d CPUs, workers/decode threads %d, "
        "batch %d, %d samples, %d epochs" % (
            name, torch.__version__, os.cpu_count(), args.workers,
            args.batch_size, args.samples, args.epochs))
    write_data(args.data, args.samples, log)
    files = data_files(args.data)
    only = set(args.only.split(",")) if args.only else None
    results = []
    for cname, make in configs(args.data, args, device):
        if only and cname not in only:
            continue
        results.append(train(cname, make(), args.epochs, device, files,
                             not args.no_global_drop, log))
        if args.json:   # after each row: a timeout still leaves the rest
            with open(args.json, "w") as f:
                json.dump({"device": name, "torch": torch.__version__,
                           "cpus": os.cpu_count(), "workers": args.workers,
                           "batch_size": args.batch_size,
                           "samples": args.samples, "results": results},
                          f, indent=1)
    log(table(results, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
