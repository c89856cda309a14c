"""Columns for ShardWriter.write_batch: a pyarrow RecordBatch or Table, or a
dict of NumPy arrays, turned into one (values, byte offsets) pair of
contiguous NumPy buffers per field, without a Python loop per record.

A fixed field (shape without -1) takes an array [n, *shape]: a NumPy array,
an Arrow primitive array (scalar fields), a FixedSizeList / List array
whose lists all hold prod(shape) items, or FixedSizeBinary.
A variable field (shape [-1, *rest]) takes an Arrow List / LargeList
(items: numbers, or fixed-size lists for rest), Binary / LargeBinary /
String (uint8 and int8 fields), a pair (values, offsets) of NumPy arrays
(offsets: n + 1 positions along values' first axis, like Arrow's), or a
list of n NumPy arrays (a convenience: concatenated, one copy).
Arrow nulls are refused: a record has every field.
"""
import numpy as np

_NUMPY_DTYPE = {"int8": "<i1", "int16": "<i2", "int32": "<i4",
                "int64": "<i8", "uint8": "<u1", "uint16": "<u2",
                "uint32": "<u4", "uint64": "<u8", "float16": "<f2",
                "float32": "<f4", "float64": "<f8", "bool": "?",
                # NumPy has no bfloat16: its raw 16-bit patterns.
                "bfloat16": "<u2"}


def _pyarrow():
    try:
        import pyarrow
        return pyarrow
    except ImportError:
        return None


def _is_arrow(value):
    return type(value).__module__.startswith("pyarrow")


def _cast(arr, dtype, name):
    """arr as a contiguous little-endian array of the field's dtype; a
    lossy kind of cast (float to int, say) is refused."""
    target = np.dtype(_NUMPY_DTYPE[dtype])
    if dtype == "bfloat16":
        if arr.dtype.itemsize != 2 or arr.dtype.kind not in "iu":
            raise TypeError("field %r (bfloat16): pass the raw 16-bit "
                            "patterns as uint16/int16, not %s" % (
                                name, arr.dtype))
        return np.ascontiguousarray(arr.view("<u2"))
    if not np.can_cast(arr.dtype, target, "same_kind"):
        raise TypeError("field %r: cannot store %s as %s" % (
            name, arr.dtype, dtype))
    return np.ascontiguousarray(arr, dtype=target)


def _raw_or_cast(value, dtype, name):
    """Bytes are the field's raw bytes (as in write()); anything else is
    cast."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = np.frombuffer(value, np.uint8)
        if raw.size % np.dtype(_NUMPY_DTYPE[dtype]).itemsize:
            raise ValueError("field %r: %d bytes are not whole %s "
                             "values" % (name, raw.size, dtype))
        return raw.view(_NUMPY_DTYPE[dtype])
    return _cast(np.asarray(value), dtype, name)


def _units(shape):
    """Items per record (fixed) or per step along the first axis
    (variable)."""
    rest = shape[1:] if shape and shape[0] == -1 else shape
    return int(np.prod(rest, dtype=np.int64)) if rest else 1


def _no_nulls(arr, name):
    if arr.null_count:
        raise ValueError("field %r: %d null values (every record needs "
                         "every field)" % (name, arr.null_count))


def _arrow_leaf(arr, name, depth):
    """The numeric values under @depth levels of (fixed-size) lists, as
    NumPy."""
    pa = _pyarrow()
    for _ in range(depth):
        if isinstance(arr, (pa.ListArray, pa.LargeListArray,
                            pa.FixedSizeListArray)):
            _no_nulls(arr, name)
            arr = _list_items(arr)
        else:
            raise TypeError("field %r: expected nested lists, got %s" % (
                name, arr.type))
    _no_nulls(arr, name)
    return _arrow_numbers(arr)


def _list_items(arr):
    """The items of a null-free (fixed-size) list array's slice, as
    flatten() gives them, without its cost: flatten() imports
    pyarrow.compute, about 40 ms of CPU per process."""
    if isinstance(arr, _pyarrow().FixedSizeListArray):
        k = arr.type.list_size
        return arr.values.slice(arr.offset * k, len(arr) * k)
    offs = _arrow_offsets(arr)
    first = int(offs[0]) if len(offs) else 0
    return arr.values.slice(first, int(offs[-1]) - first if len(offs) else 0)


def _arrow_numbers(arr):
    """A null-free numeric or bool Arrow array as NumPy, without a copy
    from its buffer.  (Array.to_numpy imports pandas, even zero-copy: a
    second of start-up for a short conversion.)"""
    pa = _pyarrow()
    if pa.types.is_boolean(arr.type):  # bit-packed in Arrow
        bits = np.frombuffer(arr.buffers()[1], np.uint8)
        return np.unpackbits(bits, bitorder="little")[
            arr.offset:arr.offset + len(arr)].astype(bool)
    name = _arrow_numeric(arr.type)
    if name is None:
        raise TypeError("%s is not a numeric Arrow type" % arr.type)
    data = arr.buffers()[1]
    if data is None or len(arr) == 0:
        return np.zeros(0, _NUMPY_DTYPE[name])
    return np.frombuffer(data, _NUMPY_DTYPE[name])[
        arr.offset:arr.offset + len(arr)]


def _arrow_offsets(arr):
    """Arrow offsets of a list or binary array (its slice included) as
    int64 NumPy."""
    return np.asarray(_arrow_numbers(arr.offsets), dtype=np.int64)


def _list_depth(t):
    pa = _pyarrow()
    depth = 0
    while pa.types.is_list(t) or pa.types.is_large_list(t) or \
            pa.types.is_fixed_size_list(t):
        depth += 1
        t = t.value_type
    return depth


def _arrow_fixed(arr, field, n):
    """A fixed field from an Arrow column: primitive (scalar fields),
    fixed-size binary, or lists nested once per dimension (or once, with
    prod(shape) items): every list's length is checked."""
    pa = _pyarrow()
    name, dtype, shape = field
    if isinstance(arr, pa.FixedSizeBinaryArray):
        _no_nulls(arr, name)
        width = arr.type.byte_width
        data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
        data = data[arr.offset * width:(arr.offset + n) * width]
        return _cast(data.view(_NUMPY_DTYPE[dtype]) if dtype != "bool"
                     else data, dtype, name).reshape((n,) + shape)
    depth = _list_depth(arr.type)
    if depth == len(shape):
        dims = list(shape)
    elif depth == 1:
        dims = [_units(shape)]
    else:
        raise TypeError("field %r %s: a %s column (lists nested %d deep)" % (
            name, list(shape), arr.type, depth))
    for d in dims:
        _no_nulls(arr, name)
        if isinstance(arr, pa.FixedSizeListArray):
            got = arr.type.list_size
            if got != d:
                raise ValueError("field %r: lists of %d items, expected %d" %
                                 (name, got, d))
        else:
            lengths = np.diff(_arrow_offsets(arr))
            if (lengths != d).any():
                bad = int(np.argmax(lengths != d))
                raise ValueError("field %r: list %d has %d items, expected "
                                 "%d (shape %s)" % (name, bad, lengths[bad],
                                                    d, list(shape)))
        arr = _list_items(arr)
    _no_nulls(arr, name)
    values = _cast(_arrow_numbers(arr), dtype, name)
    return values.reshape((n,) + tuple(shape))


def _arrow_variable(arr, field, n):
    pa = _pyarrow()
    name, dtype, shape = field
    unit = _units(shape)
    _no_nulls(arr, name)
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or \
            pa.types.is_string(t) or pa.types.is_large_string(t):
        if dtype not in ("uint8", "int8") or len(shape) != 1:
            raise TypeError("field %r (%s %s): binary and string columns "
                            "go into uint8 [-1] fields" % (
                                name, dtype, list(shape)))
        wide = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        offs = np.frombuffer(arr.buffers()[1],
                             dtype=np.int64 if wide else np.int32)
        offs = offs[arr.offset:arr.offset + n + 1].astype(np.uint64)
        data = arr.buffers()[2]
        values = (np.frombuffer(data, dtype=np.uint8) if data is not None
                  else np.zeros(0, np.uint8))
        return values, offs
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        raise TypeError("field %r: a variable field takes a list, binary "
                        "or string column, not %s" % (name, t))
    offs = _arrow_offsets(arr)
    child = arr.values  # the whole child: offsets index into it
    inner = child.type
    for _ in shape[1:]:
        if not pa.types.is_fixed_size_list(inner):
            raise TypeError("field %r %s: items must be fixed-size lists, "
                            "not %s" % (name, list(shape), inner))
        inner = inner.value_type
    values = _cast(_arrow_leaf(child, name, len(shape) - 1), dtype, name)
    if values.size != len(child) * unit:
        raise ValueError("field %r: items of shape %s expected" % (
            name, list(shape[1:])))
    return values, _byte_offsets(offs, unit * values.itemsize, name)


def _byte_offsets(offs, unit_bytes, name):
    offs = np.asarray(offs)
    if offs.ndim != 1 or offs.dtype.kind not in "iu":
        raise TypeError("field %r: offsets must be a 1-D integer array" %
                        name)
    if len(offs) and offs.dtype.kind == "i" and offs.min() < 0:
        raise ValueError("field %r: negative offset" % name)
    return offs.astype(np.uint64) * np.uint64(unit_bytes)


def _numpy_variable(value, field, n):
    name, dtype, shape = field
    unit = _units(shape)
    if isinstance(value, tuple) and len(value) == 2:
        values, offs = value
        values = _cast(np.asarray(values), dtype, name)
        # Offsets count steps along values' first axis: rows of the
        # field's trailing shape, or single items of a flat array.
        if values.ndim == 1:
            step = 1
        elif tuple(values.shape[1:]) == tuple(shape[1:]):
            step = unit
        else:
            raise ValueError("field %r: values of shape %s, expected "
                             "[m, %s] or flat" % (name, values.shape,
                                                  list(shape[1:])))
        if len(offs) != n + 1:
            raise ValueError("field %r: %d offsets for %d records (need "
                             "n + 1)" % (name, len(offs), n))
        return values, _byte_offsets(offs, step * values.itemsize, name)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError("field %r: %d values for %d records" % (
                name, len(value), n))
        parts = [_raw_or_cast(v, dtype, name).reshape(-1) for v in value]
        lengths = np.fromiter((p.size for p in parts), np.int64, n)
        if (lengths % unit).any():
            bad = int(np.argmax(lengths % unit != 0))
            raise ValueError("field %r: record %d has %d items, not a "
                             "multiple of %d" % (name, bad, lengths[bad],
                                                 unit))
        values = (np.concatenate(parts) if parts
                  else np.zeros(0, _NUMPY_DTYPE[dtype]))
        offs = np.zeros(n + 1, np.uint64)
        np.cumsum(lengths, out=offs[1:], dtype=np.uint64)
        return values, offs * np.uint64(values.itemsize)
    arr = np.asarray(value)
    if arr.ndim >= 2 and arr.shape[0] == n:
        # A dense [n, L, *rest] array: every record L steps long.
        values = _cast(arr, dtype, name)
        return values, None
    raise TypeError("field %r: a variable field takes (values, offsets), "
                    "a list of arrays or an Arrow list/binary column" %
                    name)


def _column(value, field, n):
    """(values ndarray, byte offsets ndarray or None) for one field."""
    name, dtype, shape = field
    variable = bool(shape) and shape[0] == -1
    if _is_arrow(value):
        pa = _pyarrow()
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        if len(value) != n:
            raise ValueError("field %r: %d values for %d records" % (
                name, len(value), n))
        if variable:
            return _arrow_variable(value, field, n)
        return _arrow_fixed(value, field, n), None
    if variable:
        return _numpy_variable(value, field, n)
    arr = _cast(np.asarray(value), dtype, name)
    if arr.ndim == 0 or arr.shape[0] != n or tuple(arr.shape[1:]) != \
            tuple(shape):
        raise ValueError("field %r: shape %s, expected %s" % (
            name, arr.shape, (n,) + tuple(shape)))
    return arr, None


def _batch_length(batch, names):
    lengths = set()
    for name in names:
        v = batch[name]
        if isinstance(v, tuple) and len(v) == 2 and not _is_arrow(v):
            lengths.add(len(v[1]) - 1)
        else:
            lengths.add(len(v))
    if len(lengths) != 1:
        raise ValueError("columns of different lengths: %s" % sorted(
            lengths))
    return lengths.pop()


def batches(batch, fields):
    """Yield (n, columns) for write_columns: columns[i] is
    (values ndarray, offsets ndarray or None) for fields[i]."""
    names = [f[0] for f in fields]
    pa = _pyarrow()
    if pa is not None and isinstance(batch, pa.Table):
        for rb in batch.select(names).to_batches():
            yield from batches(rb, fields)
        return
    if pa is not None and isinstance(batch, pa.RecordBatch):
        missing = [n for n in names if n not in batch.schema.names]
        if missing:
            raise KeyError("batch lacks fields %s" % missing)
        cols = {n: batch.column(batch.schema.get_field_index(n))
                for n in names}
        n = batch.num_rows
    elif isinstance(batch, dict):
        missing = [n for n in names if n not in batch]
        extra = [k for k in batch if k not in names]
        if missing or extra:
            raise KeyError("batch fields %s missing, %s unknown" % (
                missing, extra))
        cols = batch
        n = _batch_length(batch, names)
    else:
        raise TypeError("write_batch takes a pyarrow RecordBatch or Table, "
                        "or a dict of arrays, not %s" % type(batch).__name__)
    yield n, [_column(cols[f[0]], f, n) for f in fields]


def address_tuple(columns):
    """(addresses, keep): the (values_address, values_len,
    offsets_address) tuple the C extension reads, and the arrays it reads
    from, which the caller holds until the call returns."""
    out, keep = [], []
    for values, offsets in columns:
        values = np.ascontiguousarray(values)
        if offsets is not None:
            offsets = np.ascontiguousarray(offsets, dtype=np.uint64)
        keep.append((values, offsets))
        out.append((values.ctypes.data if values.nbytes else 0,
                    values.nbytes,
                    offsets.ctypes.data if offsets is not None else 0))
    return tuple(out), keep


def _arrow_numeric(t):
    pa = _pyarrow()
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                 "uint32", "uint64", "float16", "float32", "float64"):
        if t == getattr(pa, name)():
            return name
    if pa.types.is_boolean(t):
        return "bool"
    return None


def fields_from_arrow(schema):
    """A sluice schema [(name, dtype, shape)] from an Arrow schema:
    numbers and bool are fixed scalars; fixed-size lists (nested) fixed
    shapes; lists and large lists variable fields [-1] (of fixed-size
    lists: [-1, k]); binary and string uint8 [-1]; fixed-size binary
    uint8 [width].  Other types raise TypeError naming the column."""
    pa = _pyarrow()
    fields = []
    for f in schema:
        t, shape = f.type, []
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or \
                pa.types.is_string(t) or pa.types.is_large_string(t):
            fields.append((f.name, "uint8", (-1,)))
            continue
        if pa.types.is_fixed_size_binary(t):
            fields.append((f.name, "uint8", (t.byte_width,)))
            continue
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            shape.append(-1)
            t = t.value_type
        while pa.types.is_fixed_size_list(t):
            shape.append(t.list_size)
            t = t.value_type
        dtype = _arrow_numeric(t)
        if dtype is None:
            raise TypeError("column %r: %s has no sluice field type (numbers, "
                            "bool, lists of them, binary, string)" % (
                                f.name, f.type))
        fields.append((f.name, dtype, tuple(shape)))
    return fields
