"""Parquet files into a sluice dataset, with pyarrow: numeric columns
become fixed fields, list and binary/string columns variable fields
(sluice.columns.fields_from_arrow), written by ShardWriter.write_batch.
A list column whose every row has the same length L (an embedding,
list<float32> of 128 in every row: Spark and most writers have no
fixed-size list type) becomes a fixed field [L] (infer_fixed, one pass
over those columns first); schema= / --field give fields explicitly.

    sluice.parquet.convert("part-*.parquet", "data/train")
    python3 -m sluice.parquet SRC --out DIR [options]   # what
    dlpack-shard convert --from parquet runs
"""
import argparse
import glob
import json
import os
import queue
import sys
import threading

from .writer import ShardWriter, normalize_schema


def source_files(src):
    """A file, a folder of *.parquet files (sorted), or a glob."""
    src = os.fspath(src)
    if os.path.isdir(src):
        files = sorted(glob.glob(os.path.join(src, "*.parquet")))
    elif any(c in src for c in "*?["):
        files = sorted(glob.glob(src))
    else:
        files = [src]
    if not files:
        raise FileNotFoundError("%s: no parquet files" % src)
    return files


def read_ahead(items, depth=2):
    """Yield from @items, produced by a thread up to @depth ahead: pyarrow
    decodes the next batch while the writer (without the GIL) compresses
    this one.  The producer's exception is raised here, in order."""
    q = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce():
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((end, None))
        except BaseException as e:  # handed over, raised by the consumer
            put((end, e))

    t = threading.Thread(target=produce, name="sluice-parquet-read",
                         daemon=True)
    t.start()
    try:
        while True:
            item, err = q.get()
            if item is end:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
        t.join()


# Rows per batch when not given: about this many decoded bytes.  Batches
# of a few MiB are reused by pyarrow's allocator and stay in cache; 64k
# rows of 648 bytes (42 MB) were mapped and zeroed afresh each batch and
# cost twice the CPU of the whole conversion.
BATCH_BYTES = 4 << 20
READ_BUFFER = 1 << 20


def batch_rows_for(pf, names, target=BATCH_BYTES):
    """Rows per batch of about @target decoded bytes of columns @names,
    from the file's metadata (uncompressed sizes); 64..65536.  A
    dictionary-encoded column counts as its encoded size, so batches of
    one that repeats large values decode larger than @target."""
    meta = pf.metadata
    rows = nbytes = 0
    wanted = set(names)
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        rows += rg.num_rows
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.path_in_schema.split(".")[0] in wanted:
                nbytes += col.total_uncompressed_size
    if rows == 0 or nbytes == 0:
        return 65536
    return max(64, min(65536, target * rows // nbytes))


def list_lengths(files, names, open_file):
    """{name: L} for the list columns @names whose every row, in every
    file, holds exactly L >= 1 items and no row is null: one pass over
    those columns only."""
    import pyarrow.compute as pc

    lo, hi, bad = {}, {}, set()
    for path in files:
        pf = open_file(path)
        for batch in pf.iter_batches(batch_size=65536, columns=names):
            for name in names:
                if name in bad:
                    continue
                col = batch.column(name)
                if col.null_count:
                    bad.add(name)
                    continue
                if len(col) == 0:
                    continue
                mm = pc.min_max(pc.list_value_length(col)).as_py()
                lo[name] = min(lo.get(name, mm["min"]), mm["min"])
                hi[name] = max(hi.get(name, mm["max"]), mm["max"])
                if lo[name] != hi[name]:
                    bad.add(name)
    return {n: lo[n] for n in names
            if n not in bad and n in lo and lo[n] == hi[n] and lo[n] >= 1}


def infer_fields(files, arrow, open_file, infer_fixed=True):
    """The schema of Arrow schema @arrow (fields_from_arrow), with list
    columns of one length in every row made fixed (see list_lengths)."""
    import pyarrow as pa
    from .columns import fields_from_arrow

    fields = fields_from_arrow(arrow)
    lists = [f.name for f in arrow
             if pa.types.is_list(f.type) or pa.types.is_large_list(f.type)]
    if not infer_fixed or not lists:
        return fields
    fixed = list_lengths(files, lists, open_file)
    return [(n, d, (fixed[n],) + tuple(s[1:])) if n in fixed else (n, d, s)
            for n, d, s in fields]


def parse_field(spec):
    """NAME:DTYPE[:SHAPE], SHAPE as dlpack-shard's synth fields: 128,
    3x224x224, -1, -1x4, or scalar (the default)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ValueError("--field %r: want NAME:DTYPE[:SHAPE]" % spec)
    shape = ()
    if len(parts) == 3 and parts[2] not in ("", "scalar"):
        try:
            shape = tuple(int(x) for x in parts[2].split("x"))
        except ValueError:
            raise ValueError("--field %r: SHAPE is like 128, 3x224x224, "
                             "-1 or -1x4" % spec) from None
    return (parts[0], parts[1], shape)


def convert(src, out, schema=None, *, columns=None, batch_rows=None,
            progress=None, infer_fixed=True, fields=None,
            **writer_options):
    """Convert @src (see source_files) into the dataset folder @out.
    schema: None infers it from the first file (with infer_fixed, list
    columns of one length in every row of every file become fixed fields:
    one extra pass over those columns); columns: the columns to keep
    (default: all, or the schema's).  fields: [(name, dtype, shape)] that
    replace the inferred fields of those names (each row's length is still
    checked against a fixed shape).  batch_rows: rows per batch (default:
    about BATCH_BYTES of each file's columns).  progress(records) is called
    after each batch.  Returns the writer's summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def open_file(path):
        # Column pages read through one reused 1 MiB buffer: pre-buffering
        # read each row group into fresh memory, and zeroing the newly
        # mapped pages cost more than the reads.  (Not memory_map: a file
        # truncated while it is read would kill the process with SIGBUS.)
        try:
            return pq.ParquetFile(path, pre_buffer=False,
                                  buffer_size=READ_BUFFER)
        except (OSError, ValueError) as e:
            raise type(e)("%s: %s" % (path, e)) from e

    files = source_files(src)
    first = open_file(files[0])
    given = normalize_schema(fields) if fields else []
    if schema is None:
        arrow = first.schema_arrow
        if columns:
            arrow = pa.schema([arrow.field(c) for c in columns])
        known = set(arrow.names)
        for g in given:
            if g[0] not in known:
                raise KeyError("field %r: no such column in %s" % (
                    g[0], files[0]))
        named = {g[0] for g in given}
        rest = pa.schema([f for f in arrow if f.name not in named])
        inferred = dict((f[0], f) for f in infer_fields(
            files, rest, open_file, infer_fixed)) if len(rest) else {}
        by_name = dict((g[0], g) for g in given)
        fields = [by_name.get(n) or inferred[n] for n in arrow.names]
    else:
        fields = normalize_schema(schema)
    names = [f[0] for f in fields]

    def file_batches():
        for path in files:
            pf = first if path == files[0] else open_file(path)
            rows = batch_rows or batch_rows_for(pf, names)
            try:
                for batch in pf.iter_batches(batch_size=rows,
                                             columns=names):
                    yield path, batch
            except (OSError, ValueError, TypeError, KeyError) as e:
                raise type(e)("%s: %s" % (path, e)) from e

    done = 0
    with ShardWriter(out, fields, **writer_options) as w:
        for path, batch in read_ahead(file_batches()):
            try:
                done += w.write_batch(batch)
            except (ValueError, TypeError, KeyError) as e:
                raise type(e)("%s: %s" % (path, e)) from e
            if progress:
                progress(done)
    return w.summary


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m sluice.parquet",
        description="Convert parquet files into a sluice dataset.")
    p.add_argument("src", help="a parquet file, a folder of them, or a glob")
    p.add_argument("--out", "-o", required=True)
    p.add_argument("--columns", help="comma-separated columns to keep")
    p.add_argument("--field", action="append", default=[],
                   metavar="NAME:DTYPE[:SHAPE]",
                   help="give a column's field (repeatable), e.g. "
                   "emb:float32:128; the others are inferred")
    p.add_argument("--no-infer-fixed", action="store_true",
                   help="keep list columns variable even when every row "
                   "has the same length (skips the pass that checks)")
    p.add_argument("--batch-rows", type=int,
                   help="rows per batch (default: about %d MiB)" % (
                       BATCH_BYTES >> 20))
    p.add_argument("--threads", type=int)
    p.add_argument("--compression-level", type=int)
    p.add_argument("--block-size", type=int)
    p.add_argument("--shard-size", type=int)
    p.add_argument("--records-per-shard", type=int)
    p.add_argument("--prefix")
    p.add_argument("--quiet", "-q", action="store_true")
    p.add_argument("--summary-fd", type=int,
                   help="write the summary as JSON to this descriptor")
    a = p.parse_args(argv)
    opts = {k: v for k, v in {
        "threads": a.threads, "compression_level": a.compression_level,
        "block_size": a.block_size, "shard_size": a.shard_size,
        "records_per_shard": a.records_per_shard,
        "prefix": a.prefix}.items() if v is not None}

    def progress(n):
        sys.stderr.write("\r%d records" % n)

    try:
        summary = convert(a.src, a.out,
                          columns=a.columns.split(",") if a.columns else None,
                          fields=[parse_field(f) for f in a.field] or None,
                          infer_fixed=not a.no_infer_fixed,
                          batch_rows=a.batch_rows,
                          progress=None if a.quiet else progress, **opts)
    except ImportError as e:
        sys.stderr.write("sluice.parquet: %s (pip install pyarrow)\n" % e)
        return 1
    except Exception as e:  # every failure is one line, no traceback
        sys.stderr.write("%s%s: %s\n" % ("" if a.quiet else "\n",
                                        type(e).__name__, e))
        return 1
    if not a.quiet:
        sys.stderr.write("\n")
    if a.summary_fd is not None:
        with os.fdopen(a.summary_fd, "w") as f:
            json.dump(summary, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
