"""Exceptions carrying the library's message (file, shard, block, offset).

The extension builds them through make_error(code, message); code is the
library's negative return value (-errno or -SLUICE_E*).
"""
import errno as _errno
import os as _os
import sys as _sys
import warnings as _warnings

from . import _sluice


class SluiceError(OSError):
    """An error reported by libsluice.

    str(e) is the library's detailed message; e.code the negative return
    code; e.reason the code's short text; e.errno the positive errno when
    the code is one.
    """

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.reason = _sluice.strerror(code)
        self.message = message
        if -code < _sluice.ECORRUPT:
            self.errno = -code
            self.strerror = message

    def __str__(self):
        return self.message

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class CorruptDataError(SluiceError):
    """A shard failed a checksum or bound, is not a shard, or zstd failed."""


class SchemaError(SluiceError, ValueError):
    """Fields do not match, or a field spec is bad."""


class StateError(SluiceError, ValueError):
    """A saved state does not fit this dataset or configuration."""


class DeviceError(SluiceError):
    """No usable GPU, or the CUDA runtime failed."""


class DatasetNotFoundError(SluiceError, FileNotFoundError):
    """The dataset path does not exist."""


class HeldSlotsError(SluiceError):
    """The consumer holds every batch slot (see Loader docs)."""


_BY_CODE = {
    _sluice.ECORRUPT: CorruptDataError,
    _sluice.EFORMAT: CorruptDataError,
    _sluice.EZSTD: CorruptDataError,
    _sluice.ESCHEMA: SchemaError,
    _sluice.ESTATE: StateError,
    _sluice.ECUDA: DeviceError,
    _sluice.ENODEVICE: DeviceError,
    _errno.ENOENT: DatasetNotFoundError,
    _errno.EDEADLK: HeldSlotsError,
}


def make_error(code, message):
    return _BY_CODE.get(-code, SluiceError)(code, message)


_sluice._set_error_factory(make_error)


_PACKAGE_DIR = _os.path.dirname(_os.path.abspath(__file__)) + _os.sep


def warn(message, category=RuntimeWarning):
    """warnings.warn pointing at the first frame outside this package:
    the user's line, however many sluice frames (sluice.torch.Loader
    over sluice.Loader, ...) lie between it and the warning."""
    level = 2                   # 1 is this function
    frame = _sys._getframe(1)
    while frame is not None and _os.path.abspath(
            frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    _warnings.warn(message, category, stacklevel=level)
