"""ShardWriter and merge: write datasets from Python.

Distributed writers (Ray Data, Spark, multiprocessing) each write one
part with ShardWriter(part_dir, schema); the driver then calls
merge([part_dir, ...], out_dir), which joins the parts without rewriting
block data.
"""
import os
import struct

from . import _sluice

_STRUCT = {"int8": "b", "int16": "h", "int32": "i", "int64": "q",
           "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
           "float16": "e", "float32": "f", "float64": "d", "bool": "?"}
_ITEMSIZE = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1,
             "uint16": 2, "uint32": 4, "uint64": 8, "float16": 2,
             "float32": 4, "float64": 8, "bfloat16": 2, "bool": 1}


def _numpy():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def normalize_schema(schema):
    """[(name, dtype, shape)] from a list of (name, dtype[, shape]) or
    a dict name -> dtype | (dtype, shape) | {"dtype": .., "shape": ..}.
    shape[0] == -1 makes a field variable-length."""
    if isinstance(schema, dict):
        items = []
        for name, spec in schema.items():
            if isinstance(spec, str):
                items.append((name, spec, ()))
            elif isinstance(spec, dict):
                items.append((name, spec["dtype"], spec.get("shape", ())))
            else:
                items.append((name,) + tuple(spec))
    else:
        items = list(schema)
    fields = []
    for item in items:
        item = tuple(item)
        if len(item) == 2:
            item += ((),)
        if len(item) != 3:
            raise ValueError("a field is (name, dtype, shape): %r" % (item,))
        name, dtype, shape = item
        dtype = str(dtype)
        if dtype not in _ITEMSIZE:
            raise ValueError("field %r: unknown dtype %r (one of %s)" % (
                name, dtype, ", ".join(sorted(_ITEMSIZE))))
        fields.append((str(name), dtype, tuple(int(d) for d in shape)))
    return fields


def _to_bytes(value, field):
    """The bytes of one field value, checked against the field's shape."""
    name, dtype, shape = field
    variable = len(shape) > 0 and shape[0] == -1
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        if dtype in ("uint8", "int8"):
            return value.encode("utf-8")
        raise TypeError("field %r (%s): a str is only stored in uint8 "
                        "fields" % (name, dtype))
    if type(value).__module__ == "torch":
        value = value.detach().cpu().contiguous()
        if dtype == "bfloat16":
            import torch
            value = value.to(torch.bfloat16).view(torch.int16)
            dtype_for_numpy = "int16"
        else:
            dtype_for_numpy = dtype
        value = value.numpy()
    else:
        dtype_for_numpy = dtype
    np = _numpy()
    if np is not None and dtype_for_numpy != "bfloat16":
        target = np.dtype("bool" if dtype_for_numpy == "bool"
                          else dtype_for_numpy)
        arr = _fitting_array(np, value, target, name)  # C order bytes
        want = tuple(shape[1:]) if variable else tuple(shape)
        got = arr.shape[1:] if variable else arr.shape
        if variable and arr.ndim == 0:
            raise ValueError("field %r: a variable field takes an "
                             "array" % name)
        if tuple(got) != want:
            raise ValueError("field %r: shape %s does not fit %s" % (
                name, arr.shape, shape))
        return arr.tobytes()
    if shape == () and dtype in _STRUCT and isinstance(
            value, (int, float, bool)):
        if dtype not in ("float16", "float32", "float64") and \
                not isinstance(value, int):
            raise ValueError("field %r (%s): %r is not an integer" % (
                name, dtype, value))
        try:
            return struct.pack("<" + _STRUCT[dtype], value)
        except (struct.error, OverflowError) as e:
            raise ValueError("field %r (%s): %r does not fit (%s)" % (
                name, dtype, value, e)) from None
    raise TypeError("field %r (%s): cannot convert %s without numpy; pass "
                    "bytes" % (name, dtype, type(value).__name__))


def _fitting_array(np, value, target, name):
    """value as an array of dtype target, or ValueError when a value would
    change on the way (1.5 into an int field, 300 into uint8, -1 into an
    unsigned field, 1e6 into float16): a writer never stores what it was
    not given."""
    src = np.asarray(value)
    if src.dtype == target or src.size == 0:
        return np.asarray(src, dtype=target)
    if src.dtype.kind not in "biuf":
        raise TypeError("field %r: cannot store %s values as %s" % (
            name, src.dtype, target))
    with np.errstate(all="ignore"):
        if target.kind in "biu":
            if src.dtype.kind == "f" and not (
                    np.isfinite(src).all() and (src == np.trunc(src)).all()):
                bad = src[~(np.isfinite(src) & (src == np.trunc(src)))]
                raise ValueError("field %r (%s): %r is not an integer" % (
                    name, target, bad.flat[0].item()))
            lo, hi = ((0, 1) if target.kind == "b" else
                      (int(np.iinfo(target).min), int(np.iinfo(target).max)))
            if src.dtype.kind == "f":
                low, high = float(src.min()), float(src.max())
            else:
                low, high = int(src.min()), int(src.max())
            if low < lo or high > hi:
                raise ValueError("field %r (%s): %r does not fit (%d..%d)" % (
                    name, target, low if low < lo else high, lo, hi))
            return src.astype(target)
        arr = src.astype(target)
        if np.isfinite(src).all() and not np.isfinite(arr).all():
            raise ValueError("field %r (%s): %r overflows it" % (
                name, target, src[~np.isfinite(arr)].flat[0].item()))
        return arr


class ShardWriter:
    """ShardWriter(out_dir, schema, *, prefix="data", shard_size=None,
    records_per_shard=None, block_size=None, compression_level=None,
    threads=None, alignment=None, manifest=True)

    write(record) appends one record: a dict {field: value} or a sequence
    in schema order; values are bytes, numpy arrays, torch tensors,
    Python scalars or buffers.  write_batch(batch) appends many at once
    from Arrow or NumPy columns (much faster: no Python per record).
    threads=None: a few compression workers (at most 4), not one per
    CPU, so many writers can share a node.  close() commits the shards
    (until then they are hidden temporary files no reader loads) and
    writes dataset.json; leaving a with-block on an exception aborts instead
    (every file of this writer is removed).  Options left at None take
    the library's defaults (1 GiB shards, 1 MiB blocks, zstd level 3).

    The writer locks out_dir: a second writer on the same folder raises
    SluiceError (errno EBUSY) at once; a folder that already holds a
    dataset raises errno EEXIST.  Give each task attempt its own folder.
    """

    def __init__(self, out_dir, schema, *, prefix=None, shard_size=None,
                 records_per_shard=None, block_size=None,
                 compression_level=None, threads=None, alignment=None,
                 manifest=True):
        self.out_dir = os.fspath(out_dir)
        self.fields = normalize_schema(schema)
        self._names = [f[0] for f in self.fields]
        config = {"prefix": prefix, "shard_size": shard_size,
                  "records_per_shard": records_per_shard,
                  "block_size": block_size,
                  "compression_level": compression_level,
                  "threads": threads, "alignment": alignment,
                  "no_manifest": 0 if manifest else 1}
        config = {k: v for k, v in config.items() if v is not None}
        os.makedirs(self.out_dir, exist_ok=True)
        self._w = _sluice.Writer(self.out_dir, self.fields, config)
        self.summary = None

    def write(self, record):
        if isinstance(record, dict):
            missing = [n for n in self._names if n not in record]
            extra = [k for k in record if k not in self._names]
            if missing or extra:
                raise KeyError("record fields %s missing, %s unknown" % (
                    missing, extra))
            values = [record[n] for n in self._names]
        else:
            values = list(record)
            if len(values) != len(self.fields):
                raise ValueError("record has %d values, schema %d fields" % (
                    len(values), len(self.fields)))
        self._w.write(tuple(_to_bytes(v, f)
                            for v, f in zip(values, self.fields)))

    def write_batch(self, batch):
        """Append a batch of records given column-wise: a pyarrow
        RecordBatch or Table, or a dict {field: column} of NumPy arrays
        (fixed fields [n, *shape]; variable fields an Arrow list/binary
        column, (values, offsets) or a list of arrays).  No Python runs
        per record; see sluice.columns for what each field accepts.
        Returns the number of records written."""
        from . import columns
        total = 0
        for n, cols in columns.batches(batch, self.fields):
            if n == 0:
                continue
            addresses, keep = columns.address_tuple(cols)
            self._w.write_columns(n, addresses)
            del keep  # the buffers may go only after the call
            total += n
        return total

    def progress(self):
        return self._w.progress()

    def close(self):
        """Finish; returns {'records', 'blocks', 'shards', ...}."""
        if self.summary is None:
            self.summary = self._w.close()
        return self.summary

    def abort(self):
        self._w.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()


def merge(parts, out_dir, verify=False, copy=False):
    """Join datasets written as parts into out_dir, in the order given,
    without rewriting block data (hard links, else copies).  Returns the
    merged dataset's summary dict.

    The merged shards are hard links to the parts' files where they can
    be: the same files, so a part edited in place later changes the
    merged dataset too (whose checks then refuse it).  copy=True copies
    every shard instead, for parts that will change or go away.

    out_dir must be new or empty and not one of the parts; no part's file
    is ever removed or written.  Every part is checked against its
    dataset.json (records, sizes, shard identities) before anything is
    written; verify=True also checks every block's checksum.  Merge
    exactly the part folders your tasks reported as finished: a glob of
    folders also picks up a retried task's earlier attempt."""
    return _sluice.merge([os.fspath(p) for p in parts], os.fspath(out_dir),
                         bool(verify), bool(copy))
