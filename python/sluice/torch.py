"""sluice.torch.Loader: batches as dicts of torch tensors, for code that
used a torch DataLoader.

    from sluice.torch import Loader
    loader = Loader("data/train", batch_size=256, device="auto")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:               # {"data": Tensor, ...}
            loss = model(batch["data"]).loss

The tensors are zero-copy views of the loader's slots (torch.from_dlpack
on the current CUDA stream, which waits for the batch's copy).  A slot
returns to the loader when the batch's tensors are freed; clone what you
keep for long, or the loader has to take more memory.
"""
import inspect as _inspect

try:
    import torch as _torch
except ImportError as e:
    raise ImportError(
        "sluice.torch needs PyTorch (%s); install it (pip install torch), "
        "or use sluice.Loader, whose batches numpy.from_dlpack takes" % (e,)
    ) from e

from . import loader as _loader


class Loader:
    """Batches as dicts of torch tensors, for code that used a torch
    DataLoader.  Also len(), set_epoch(), state_dict(),
    load_state_dict(), and batch_size / dataset attributes, as a
    DataLoader loop expects.  The arguments are sluice.Loader's:

    """

    def __init__(self, path, *args, **kwargs):
        self._loader = _loader.Loader(path, *args, **kwargs)
        self.batch_size = self._loader.batch_size
        self.dataset = self._loader.dataset
        # A batch taken from the library but not yet handed to the caller
        # (interrupted between the two): delivered first next time.
        self._undelivered = None

    def _convert(self, batch):
        out = {name: _torch.from_dlpack(batch[name]) for name in batch}
        # The tensors hold the slot now; the batch handle is not needed.
        batch.release()
        return out

    def __iter__(self):
        if self._loader._begin_pass():
            self._undelivered = None    # that pass is started over
        it = self._loader._ld
        while True:
            if self._undelivered is None:
                try:
                    self._undelivered = next(it)
                except StopIteration:
                    return
            out = self._convert(self._undelivered)
            self._undelivered = None
            yield out

    def __len__(self):
        return len(self._loader)

    def set_epoch(self, epoch):
        if not (self._loader._resuming and epoch == self._loader.epoch):
            self._undelivered = None
        self._loader.set_epoch(epoch)

    def state_dict(self):
        state = self._loader.state_dict()
        if self._undelivered is not None and state["batches_consumed"] > 0:
            state["batches_consumed"] -= 1
        return state

    def load_state_dict(self, state):
        self._undelivered = None
        self._loader.load_state_dict(state)

    @property
    def device(self):
        device_type, device_id = self._loader.device
        if device_type == 2:
            return _torch.device("cuda", device_id)
        return _torch.device("cpu")

    def stats(self):
        return self._loader.stats()

    def close(self):
        self._undelivered = None
        self._loader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# help() and inspect.signature() show sluice.Loader's real parameters and
# their documentation, not (path, *args, **kwargs): one list, kept there.
Loader.__init__.__signature__ = _inspect.signature(_loader.Loader.__init__)
Loader.__doc__ = (_inspect.cleandoc(Loader.__doc__) + "\n\n" +
                  _inspect.cleandoc(_loader.Loader.__doc__))
