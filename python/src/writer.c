/*
 * writer.c - the Writer type: write a dataset's shards from Python.
 *
 * Values arrive as bytes objects in schema order (the Python layer turns
 * numpy arrays, scalars and buffers into bytes); the library checks each
 * length against the schema.  add() runs without the GIL, because it may
 * wait for compression workers; a busy flag keeps a second thread out.
 */
#include <stdio.h>
#include <string.h>

#include "pysluice.h"

PyTypeObject *pysluice_writer_type;

typedef struct {
	PyObject_HEAD
	sluice_writer *w;  /* NULL once closed or aborted */
	int nfields;
	int busy;          /* a write is running without the GIL */
	int failed;        /* the library accepts only abort() now */
	PyObject *prefix;  /* bytes, kept for the writer's lifetime */
} PySluiceWriter;

static int parse_field(PyObject *item, struct sluice_field *f)
{
	PyObject *name, *shape;
	const char *dtype;
	Py_ssize_t ndim;

	memset(f, 0, sizeof(*f));
	if (!PyArg_ParseTuple(item, "UsO;a field is (name, dtype, shape)",
			      &name, &dtype, &shape))
		return -1;
	if (pysluice_utf8(name, f->name, sizeof(f->name)) < 0)
		return -1;
	if (sluice_dtype_parse(dtype, &f->dtype) < 0) {
		PyErr_Format(PyExc_ValueError, "field '%s': unknown dtype '%s'",
			     f->name, dtype);
		return -1;
	}
	shape = PySequence_Tuple(shape);
	if (!shape)
		return -1;
	ndim = PyTuple_Size(shape);
	if (ndim > SLUICE_MAX_NDIM) {
		Py_DECREF(shape);
		PyErr_Format(PyExc_ValueError,
			     "field '%s': at most %d dimensions", f->name,
			     SLUICE_MAX_NDIM);
		return -1;
	}
	f->ndim = (int32_t)ndim;
	for (Py_ssize_t k = 0; k < ndim; k++) {
		f->shape[k] = PyLong_AsLongLong(PyTuple_GetItem(shape, k));
		if (f->shape[k] == -1 && PyErr_Occurred()) {
			Py_DECREF(shape);
			return -1;
		}
	}
	Py_DECREF(shape);
	return 0;
}

static int config_u64(PyObject *cfg, const char *key, uint64_t *out)
{
	PyObject *v = cfg ? PyDict_GetItemString(cfg, key) : NULL;
	unsigned long long x;

	if (!v || v == Py_None)
		return 0;
	x = PyLong_AsUnsignedLongLong(v);
	if (PyErr_Occurred())
		return -1;
	*out = x;
	return 0;
}

static int writer_init(PyObject *o, PyObject *args, PyObject *kw)
{
	PySluiceWriter *self = (PySluiceWriter *)o;
	static char *kwlist[] = { "out_dir", "fields", "config", NULL };
	static const char *known[] = { "prefix",	    "shard_size",
				       "records_per_shard", "block_size",
				       "compression_level", "threads",
				       "alignment",	    "no_manifest",
				       NULL };
	struct sluice_field fields[SLUICE_MAX_FIELDS];
	struct sluice_writer_config wc;
	PyObject *out_bytes, *list, *cfg = NULL, *key, *value, *seq;
	uint64_t v[7];
	Py_ssize_t n, pos = 0;
	char msg[1024];
	int r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|O!", kwlist,
					 PyUnicode_FSConverter, &out_bytes,
					 &list, &PyDict_Type, &cfg))
		return -1;
	if (self->w) {
		PyErr_SetString(PyExc_RuntimeError, "writer already open");
		goto fail;
	}
	seq = PySequence_List(list);
	if (!seq)
		goto fail;
	n = PyList_Size(seq);
	if (n < 1 || n > SLUICE_MAX_FIELDS) {
		Py_DECREF(seq);
		PyErr_Format(PyExc_ValueError, "a schema has 1 to %d fields",
			     SLUICE_MAX_FIELDS);
		goto fail;
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (parse_field(PyList_GetItem(seq, i), &fields[i]) < 0) {
			Py_DECREF(seq);
			goto fail;
		}
	Py_DECREF(seq);

	while (cfg && PyDict_Next(cfg, &pos, &key, &value)) {
		char name[32];
		int ok = 0;

		if (pysluice_utf8(key, name, sizeof(name)) < 0)
			goto fail;
		for (int i = 0; known[i]; i++)
			ok |= strcmp(known[i], name) == 0;
		if (!ok) {
			PyErr_Format(PyExc_TypeError,
				     "unknown writer option '%s'", name);
			goto fail;
		}
	}
	sluice_writer_config_init(&wc);
	v[0] = wc.shard_size;
	v[1] = wc.records_per_shard;
	v[2] = wc.block_size;
	v[3] = (uint64_t)(wc.compression_level < 0 ? 0 : wc.compression_level);
	v[4] = wc.threads;
	v[5] = wc.alignment;
	v[6] = (uint64_t)wc.no_manifest;
	if (config_u64(cfg, "shard_size", &v[0]) ||
	    config_u64(cfg, "records_per_shard", &v[1]) ||
	    config_u64(cfg, "block_size", &v[2]) ||
	    config_u64(cfg, "compression_level", &v[3]) ||
	    config_u64(cfg, "threads", &v[4]) ||
	    config_u64(cfg, "alignment", &v[5]) ||
	    config_u64(cfg, "no_manifest", &v[6]))
		goto fail;
	if (v[3] > 22 || v[4] > 1024 || v[5] > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError,
				"compression_level is 0..22, threads at most "
				"1024, alignment a 32-bit value");
		goto fail;
	}
	wc.shard_size = v[0];
	wc.records_per_shard = v[1];
	wc.block_size = v[2];
	wc.compression_level = (int)v[3];
	wc.threads = (uint32_t)v[4];
	wc.alignment = (uint32_t)v[5];
	wc.no_manifest = v[6] != 0;
	value = cfg ? PyDict_GetItemString(cfg, "prefix") : NULL;
	if (value && value != Py_None) {
		Py_XDECREF(self->prefix);
		self->prefix = PyUnicode_AsUTF8String(value);
		if (!self->prefix)
			goto fail;
		wc.prefix = PyBytes_AsString(self->prefix);
	}

	{
		const char *out_dir = PyBytes_AsString(out_bytes);
		sluice_writer *w = NULL;

		Py_BEGIN_ALLOW_THREADS
		r = sluice_writer_open(out_dir, fields, (int)n, &wc, &w);
		Py_END_ALLOW_THREADS
		if (r < 0) {
			if (!w || sluice_writer_error(w, msg, sizeof(msg)) <= 0)
				snprintf(msg, sizeof(msg), "%s: %s", out_dir,
					 sluice_strerror(r));
			sluice_writer_abort(w);
			pysluice_raise(r, msg);
			goto fail;
		}
		self->w = w;
		self->nfields = (int)n;
	}
	Py_DECREF(out_bytes);
	return 0;
fail:
	Py_DECREF(out_bytes);
	return -1;
}

static int need_idle(PySluiceWriter *self)
{
	if (!self->w) {
		PyErr_SetString(PyExc_ValueError, "writer is closed");
		return -1;
	}
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError,
				"writer used from two threads at once");
		return -1;
	}
	if (self->failed) {
		PyErr_SetString(PyExc_RuntimeError,
				"writer failed earlier; only abort() is possible");
		return -1;
	}
	return 0;
}

/* write(values): one record, a tuple of bytes in schema order. */
static PyObject *writer_write(PyObject *o, PyObject *values)
{
	PySluiceWriter *self = (PySluiceWriter *)o;
	const void *ptrs[SLUICE_MAX_FIELDS];
	uint64_t lens[SLUICE_MAX_FIELDS];
	sluice_writer *w = self->w;
	char msg[1024];
	int r;

	if (need_idle(self))
		return NULL;
	if (!PyTuple_Check(values) || PyTuple_Size(values) != self->nfields) {
		PyErr_Format(PyExc_TypeError,
			     "write() takes a tuple of %d bytes objects",
			     self->nfields);
		return NULL;
	}
	for (int i = 0; i < self->nfields; i++) {
		char *p;
		Py_ssize_t n;

		if (PyBytes_AsStringAndSize(PyTuple_GetItem(values, i), &p,
					    &n) < 0)
			return NULL;
		ptrs[i] = p;
		lens[i] = (uint64_t)n;
	}
	/* The tuple (and its bytes) is held by the caller for the call. */
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	r = sluice_writer_add(w, ptrs, lens);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	if (r < 0) {
		self->failed = 1;
		sluice_writer_error(w, msg, sizeof(msg));
		return pysluice_raise(r, msg);
	}
	Py_RETURN_NONE;
}

/* write_columns(n, columns): n records column-wise; columns is a tuple,
 * one per field, of (values_address, values_len, offsets_address or 0).
 * The addresses are of buffers the Python caller (sluice/columns.py) holds
 * for the call; offsets are n + 1 native uint64 byte offsets. */
static PyObject *writer_write_columns(PyObject *o, PyObject *args)
{
	PySluiceWriter *self = (PySluiceWriter *)o;
	struct sluice_column cols[SLUICE_MAX_FIELDS];
	sluice_writer *w = self->w;
	unsigned long long n;
	PyObject *tuple;
	char msg[1024];
	int r;

	if (!PyArg_ParseTuple(args, "KO!", &n, &PyTuple_Type, &tuple))
		return NULL;
	if (need_idle(self))
		return NULL;
	if (PyTuple_Size(tuple) != self->nfields) {
		PyErr_Format(PyExc_TypeError,
			     "write_columns() takes %d columns", self->nfields);
		return NULL;
	}
	memset(cols, 0, sizeof(cols));
	for (int i = 0; i < self->nfields; i++) {
		unsigned long long values, len, offsets;

		if (!PyArg_ParseTuple(PyTuple_GetItem(tuple, i),
				      "KKK;a column is (values_address, "
				      "values_len, offsets_address)",
				      &values, &len, &offsets))
			return NULL;
		cols[i].values = (const void *)(uintptr_t)values;
		cols[i].values_len = len;
		cols[i].offsets = (const uint64_t *)(uintptr_t)offsets;
	}
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	r = sluice_writer_add_columns(w, n, cols, self->nfields);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	if (r < 0) {
		self->failed = 1;
		sluice_writer_error(w, msg, sizeof(msg));
		return pysluice_raise(r, msg);
	}
	Py_RETURN_NONE;
}

static PyObject *writer_close(PyObject *o, PyObject *unused)
{
	PySluiceWriter *self = (PySluiceWriter *)o;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	sluice_writer *w = self->w;
	char msg[1024];
	int r;

	(void)unused;
	if (need_idle(self))
		return NULL;
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	r = sluice_writer_close(w, &sum);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	self->w = NULL;
	if (r < 0) {
		/* The handle is freed by close either way; no message left. */
		snprintf(msg, sizeof(msg), "closing the writer: %s",
			 sluice_strerror(r));
		return pysluice_raise(r, msg);
	}
	return pysluice_summary_dict(&sum);
}

static void abort_now(PySluiceWriter *self)
{
	sluice_writer *w = self->w;

	self->w = NULL;
	Py_BEGIN_ALLOW_THREADS
	sluice_writer_abort(w);
	Py_END_ALLOW_THREADS
}

static PyObject *writer_abort(PyObject *o, PyObject *unused)
{
	PySluiceWriter *self = (PySluiceWriter *)o;

	(void)unused;
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "writer is busy");
		return NULL;
	}
	abort_now(self);
	Py_RETURN_NONE;
}

static PyObject *writer_progress(PyObject *o, PyObject *unused)
{
	PySluiceWriter *self = (PySluiceWriter *)o;
	uint64_t rec = 0, raw = 0, stored = 0;

	(void)unused;
	if (self->w && !self->busy)
		sluice_writer_progress(self->w, &rec, &raw, &stored);
	return Py_BuildValue("{sKsKsK}", "records", (unsigned long long)rec,
			     "raw_bytes", (unsigned long long)raw,
			     "stored_bytes", (unsigned long long)stored);
}

static void writer_dealloc(PyObject *o)
{
	PySluiceWriter *self = (PySluiceWriter *)o;

	/* Never closed: the data is incomplete, leave no dataset.json. */
	abort_now(self);
	Py_XDECREF(self->prefix);
	pysluice_free(o);
}

static PyMethodDef writer_methods[] = {
	{ "write", writer_write, METH_O,
	  "write(values): one record, a tuple of bytes in schema order" },
	{ "write_columns", writer_write_columns, METH_VARARGS,
	  "write_columns(n, columns): n records, one (values_address, "
	  "values_len, offsets_address) per field" },
	{ "close", writer_close, METH_NOARGS,
	  "close() -> summary dict: finish shards and dataset.json" },
	{ "abort", writer_abort, METH_NOARGS,
	  "abort(): stop and remove unfinished files" },
	{ "progress", writer_progress, METH_NOARGS,
	  "progress() -> {'records', 'raw_bytes', 'stored_bytes'}" },
	{ NULL, NULL, 0, NULL },
};

static PyType_Slot writer_slots[] = {
	{ Py_tp_doc, (void *)"Writer(out_dir, fields, config={})" },
	{ Py_tp_new, (void *)PyType_GenericNew },
	{ Py_tp_init, (void *)writer_init },
	{ Py_tp_dealloc, (void *)writer_dealloc },
	{ Py_tp_methods, writer_methods },
	{ 0, NULL },
};

static PyType_Spec writer_spec = {
	"sluice._sluice.Writer",
	sizeof(PySluiceWriter),
	0,
	Py_TPFLAGS_DEFAULT,
	writer_slots,
};

int pysluice_writer_init(PyObject *module)
{
	pysluice_writer_type = (PyTypeObject *)PyType_FromSpec(&writer_spec);
	if (!pysluice_writer_type)
		return -1;
	Py_INCREF(pysluice_writer_type);
	if (PyModule_AddObject(module, "Writer",
			       (PyObject *)pysluice_writer_type) < 0) {
		Py_DECREF(pysluice_writer_type);
		return -1;
	}
	return 0;
}
