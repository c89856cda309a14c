"""Loader: iterate a dataset's batches as mappings of DLPack tensors."""
from . import _sluice
from ._errors import warn as _warn
from .dataset import Dataset
from .stream import Stream

_SHUFFLE = {"none": 0, "block": 1, "window": 2, "full": 3}
_ON_ERROR = {"fail": 0, "skip": 1}
_RANGE_READS = {"auto": 0, "on": 1, "off": 2}
_DEVICE_GATHER = {"auto": 0, "on": 1, "off": 2}
_AUTO, _HOST, _CUDA = 0, 1, 2


def _parse_device(device):
    """(kind, device_id) for the library from None, "cpu", "cuda",
    "cuda:N", an int N (a GPU) or a torch.device."""
    if device is None or device == "auto":
        return _AUTO, -1
    if isinstance(device, int) and not isinstance(device, bool):
        return _CUDA, device
    text = str(device)
    if text in ("cpu", "host"):
        return _HOST, 0
    if text == "cuda":
        return _CUDA, -1        # $LOCAL_RANK's GPU, else 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return _CUDA, int(text[5:])
    raise ValueError("device must be None, 'cpu', 'cuda', 'cuda:N' or an "
                     "int, not %r" % (device,))


def _direct_io(value):
    """"auto"/None -> 0, True -> 1, False -> 2 (the library's tri-state:
    AUTO 0, ON 1, OFF 2)."""
    if value is None or value == "auto":
        return 0
    if isinstance(value, (bool, int)) and value in (0, 1):
        return 1 if value else 2
    raise ValueError("direct_io must be 'auto', True or False, not %r"
                     % (value,))


def _epochs(value):
    """None -> 0 (the library's "no end"); else a positive int."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ValueError("epochs must be None or a positive int, not %r"
                     % (value,))


def _choice(name, value, table):
    if isinstance(value, int) and not isinstance(value, bool):
        if value in table.values():
            return value
    elif value in table:
        return table[value]
    raise ValueError("%s must be one of %s, not %r" % (
        name, ", ".join(sorted(table)), value))


class Loader:
    """Loader(path, batch_size=256, shuffle="window", seed=0, device="auto",
    prefetch=4, decode_threads=0, ...)

    Iterating yields the batches of the current epoch; each is a mapping
    from tensor name to a sluice.Tensor that torch.from_dlpack and
    numpy.from_dlpack take without a copy.  Variable-length fields give
    "F" (the values, flat) and "F.offsets" (int64[B+1]), or with
    pad_length=L "F" [B, L, ...] and "F.lengths".  At the end of an epoch
    the loader moves on to the next one: iterate again, or call
    set_epoch(e) first (as with a DistributedSampler).  As with a torch
    DataLoader, every iter() starts a pass: one started before the
    previous pass finished restarts that epoch (peeking with
    next(iter(loader)) loses nothing); the first pass after a resume
    (state=, load_state_dict) goes on from the saved position.

    path: a dataset directory, shard file, comma list, glob or Dataset;
        or a list of sluice.Stream for a mixture of datasets.
    shuffle: "none", "block", "window" (window_blocks blocks at a time)
        or "full".
    device: "auto" or None (the GPU of $LOCAL_RANK when one is usable,
        else host memory, with a RuntimeWarning saying why), "cpu",
        "cuda" ($LOCAL_RANK's GPU; DeviceError "no CUDA GPU found: ..."
        without one), "cuda:N" or N.
    on_error: "fail" (corrupt data raises CorruptDataError) or "skip"
        (its records are left out, counted in stats()["records_skipped"],
        and a RuntimeWarning names the first corrupt block).
    Every fallback the loader takes (no GPU, no O_DIRECT, unpinned
    memory, ...) is reported once by a RuntimeWarning and stays in
    stats()["fallbacks"].
    rank, world_size: default to $RANK and $WORLD_SIZE (else 0 and 1).
    prefetch: batches the loader fills ahead of the consumer.
    memory_bytes: the loader's memory budget (io buffers and batches);
        0: what the dataset needs, at most an eighth of RAM or of the
        cgroup memory limit, divided among $LOCAL_WORLD_SIZE ranks.
        Given, what batches do not need caches blocks: a dataset that
        fits is read once.  A batch or block that cannot fit raises
        naming memory_bytes.
    direct_io: "auto" (shards the page cache mostly holds are read
        buffered, the others with O_DIRECT where the filesystem allows;
        stats()["cached_shards"] counts the first), True or False.
    range_reads: "auto" (shuffle "full" reads only its records' byte
        ranges (variable fields too; from zstd blocks of format v4, the
        frames that hold them), each checked against its format-v3 record
        checksum; stats()["range_reads"]; not when
        cache_bytes or memory_bytes holds every block, each then read
        once), "on" (in every shuffle mode) or "off" (whole blocks).
    device_gather: "auto" (on a GPU, raw datasets of fixed-shape fields
        upload each decoded block once and gather batches on the device:
        no CPU copy of the bytes; costs io_memory_bytes more GPU memory,
        stats()["device_memory_bytes"]), "on" (zstd datasets too, and on
        the CPU as a memcpy: a test and benchmark mode) or "off" (batches assembled on
        the CPU, then copied); stats()["batches_gathered"].
    epochs: the epochs the job runs, if known (None: no end).  The end of
        each epoch reads ahead into the next; the last one's then reads
        nothing in vain, and a pass over epoch `epochs` yields nothing.
    plain_reads, pageable_copies: test and benchmark instruments that
        force the fallbacks (no io_uring registered buffers; no
        cudaHostRegister, so pageable copies to the GPU); slower, same
        data; stats()["fallbacks"] says so.  (In C they are in the
        internal sluice_tools.h, not in sluice.h.)
    state: a state_dict() to resume from; the next batch is the one the
        uninterrupted run would have given.

    Memory: a batch's slot returns to the loader when the batch and every
    tensor taken from it are freed (batch.release() gives the batch back
    early).  Keeping tensors only stalls prefetch; if the consumer keeps
    tensors of every slot, the loader continues on a fresh set of slots
    (memory then grows with what is kept, and only then).

    Ctrl-C: the KeyboardInterrupt is raised as soon as the library hands
    over the next batch (the wait for it is not interruptible); that batch
    is not lost: next() on the same iterator delivers it (a new for loop
    starts the pass over), and state_dict() counts it as not consumed.
    """

    def __init__(self, path, batch_size=256, shuffle="window", seed=0,
                 device="auto", prefetch=4, decode_threads=0, *,
                 window_blocks=16, drop_last=False, rank=None,
                 world_size=None, pad_length=0, queue_depth=64,
                 verify=True, on_error="fail", direct_io="auto",
                 sqpoll=False, cache_bytes=0, memory_bytes=0,
                 plain_reads=False, pageable_copies=False,
                 range_reads="auto", device_gather="auto", epochs=None,
                 state=None):
        streams = None
        if isinstance(path, (list, tuple)):
            self.streams = [s if isinstance(s, Stream) else Stream(s)
                            for s in path]
            if not self.streams:
                raise ValueError("a mixture needs at least one Stream")
            streams = [(s.dataset._ds, s.weight, s.samples)
                       for s in self.streams]
            self.dataset = self.streams[0].dataset
        else:
            self.streams = None
            self.dataset = (path if isinstance(path, Dataset)
                            else Dataset(path))
        kind, device_id = _parse_device(device)
        self.batch_size = batch_size
        config = {
            "batch_size": batch_size,
            "shuffle": _choice("shuffle", shuffle, _SHUFFLE),
            "window_blocks": window_blocks,
            "seed": seed,
            "drop_last": int(bool(drop_last)),
            "rank": -1 if rank is None else rank,
            "world_size": -1 if world_size is None else world_size,
            "prefetch_depth": prefetch,
            "decode_threads": decode_threads,
            "queue_depth": queue_depth,
            "device": kind,
            "device_id": device_id,
            "verify": int(bool(verify)),
            "on_error": _choice("on_error", on_error, _ON_ERROR),
            "direct_io": _direct_io(direct_io),
            "sqpoll": int(bool(sqpoll)),
            "pad_length": pad_length,
            "cache_bytes": cache_bytes,
            "memory_bytes": memory_bytes,
            "plain_reads": int(bool(plain_reads)),
            "pageable_copies": int(bool(pageable_copies)),
            "range_reads": _choice("range_reads", range_reads, _RANGE_READS),
            "device_gather": _choice("device_gather", device_gather,
                                     _DEVICE_GATHER),
            "epochs": _epochs(epochs),
        }
        self._ld = _sluice.Loader(self.dataset._ds, config, state, streams)
        self._resuming = state is not None
        fallbacks = self._ld.stats()["fallbacks"]
        if fallbacks:
            # e.g. device="auto" without a GPU: say so, once.
            _warn("sluice: " + fallbacks)

    def __iter__(self):
        """Start a pass, as a torch DataLoader does: the current epoch
        from its beginning, unless this is the first pass after a resume
        (state= or load_state_dict), which goes on from the saved
        position.  A pass that ran to its end moved the loader to the
        next epoch, so a new pass is that epoch; one left unfinished
        (a peek, a break) is started over, so no batch is lost."""
        self._begin_pass()
        # The extension's own iterator: no Python frame between the
        # library and the caller's loop.
        return self._ld

    def __next__(self):
        """The next batch of the current pass (no restart)."""
        self._resuming = False
        return next(self._ld)

    def _begin_pass(self):
        """Returns True when an unfinished pass was started over."""
        if self._resuming:
            self._resuming = False
            return False
        state = self._ld.state()
        if state["batches_consumed"] == 0:
            return False
        self._ld.set_epoch(state["epoch"])
        return True

    def __len__(self):
        """Batches in this rank's epoch."""
        return self._ld.batches()

    def set_epoch(self, epoch):
        """Restart at the beginning of epoch (free when already there).
        Right after a resume, set_epoch(the saved epoch) keeps the saved
        position, so the usual `for epoch in ...: set_epoch(epoch)` loop
        resumes mid-epoch."""
        if self._resuming and epoch == self.epoch:
            return
        self._resuming = False
        self._ld.set_epoch(epoch)

    @property
    def epoch(self):
        return self._ld.state()["epoch"]

    def state_dict(self):
        """The position after the last delivered batch: a dict of ints
        (and "earlier", the epoch's earlier jobs of an elastic resume),
        the same on every rank: save it on rank 0, load it on all."""
        return self._ld.state()

    def load_state_dict(self, state):
        """Continue from state_dict() output (or the library's line): the
        next pass starts there."""
        self._ld.set_state(state)
        self._resuming = True

    @property
    def device(self):
        """(DLDeviceType, device_id): (1, 0) host, (2, N) CUDA GPU N."""
        return self._ld.device()

    def stats(self):
        return self._ld.stats()

    def close(self):
        """Stop the loader's threads; batches and tensors held stay
        valid until freed."""
        self._ld.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<sluice.Loader %r batch_size=%d device=%r>" % (
            self.dataset.path, self.batch_size, self.device)

