"""sluice: stream sharded record datasets into GPU (or host) memory.

From a torch DataLoader loop, batches as dicts of torch tensors:

    import sluice
    loader = sluice.torch.Loader("data/train", batch_size=256)

sluice.torch is imported on first use, so `import sluice` alone never
imports torch.  Without torch, batches of DLPack tensors:

    import sluice
    loader = sluice.Loader("data/train", batch_size=256, shuffle="window",
                           seed=0, device="auto", prefetch=4)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:          # a mapping: name -> sluice.Tensor
            x = torch.from_dlpack(batch["data"])

Every tensor speaks DLPack (torch.from_dlpack, numpy.from_dlpack, CuPy,
JAX) without a copy.  Write datasets with ShardWriter, join parts written
by many processes with merge().
"""
import collections.abc as _abc

try:
    from . import _sluice
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        "sluice's C extension (sluice._sluice) is not built or does not "
        "load (%s). Install with `pip install ./python`, or from a "
        "checkout run `make python` and use PYTHONPATH=python." % (e,)
    ) from e

from ._errors import (CorruptDataError, DatasetNotFoundError, DeviceError,
                      HeldSlotsError, SchemaError, SluiceError, StateError)
from ._sluice import Batch, Tensor, strerror
from .dataset import Dataset
from .loader import Loader
from .stream import Stream
from .writer import ShardWriter, merge

# Batch implements the Mapping protocol in C; say so to isinstance().
_abc.Mapping.register(Batch)

__version__ = "0.1.0"


def __getattr__(name):
    # sluice.torch on first use (PEP 562): numpy users never import torch.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'sluice' has no attribute %r" % (name,))


def __dir__():
    return sorted(set(globals()) | {"torch"})


__all__ = [
    "Loader", "Stream", "Batch", "Tensor", "Dataset", "ShardWriter", "merge",
    "strerror", "SluiceError", "CorruptDataError", "SchemaError",
    "StateError", "DeviceError", "DatasetNotFoundError", "HeldSlotsError",
]
