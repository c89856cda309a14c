"""Dataset: an open dataset's schema and counts, and the slow per-record
read (checksum-verified pread) that tools and tests use."""
import collections
import os

from . import _sluice

Field = collections.namedtuple("Field", "name dtype shape")


class Dataset:
    """Dataset(path): a dataset directory, a shard file, a comma-separated
    list of shards, or a glob.

    fields: [Field(name, dtype, shape)]; records, shards, blocks: counts;
    classes: the class names of label_field's values (label i is
    classes[i]; `dlpack-shard convert` of an ImageFolder tree keeps the
    folder names), or None."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._ds = _sluice.Dataset(self.path)
        counts = self._ds.counts()
        self.records = counts["records"]
        self.shards = counts["shards"]
        self.blocks = counts["blocks"]
        self.fields = [Field(*f) for f in self._ds.fields()]
        self._names = {f.name for f in self.fields}
        # An ImageFolder import's class folders: label i is classes[i].
        # None for datasets written without them (older ones too).
        kept = self._ds.classes()
        self.label_field, self.classes = kept if kept else (None, None)

    def __len__(self):
        return self.records

    def read(self, index, field):
        """The bytes of one record's field (a variable field: all values)."""
        if field not in self._names:
            raise KeyError("no field %r in %s; it has %s (npy datasets name "
                           "fields after the files' stems, tar datasets "
                           "after the members' extensions)" % (
                               field, self.path,
                               ", ".join(f.name for f in self.fields)))
        if index < 0:
            index += self.records
        return self._ds.read(index, field)

    def record(self, index):
        """One record as {field: bytes}."""
        return {f.name: self.read(index, f.name) for f in self.fields}

    def close(self):
        self._ds.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<sluice.Dataset %r: %d records, %d shards, fields %s%s>" % (
            self.path, self.records, self.shards,
            [tuple(f) for f in self.fields],
            ", classes %s" % (self.classes,) if self.classes else "")
