/*
 * dataset.c - the Dataset type: an open dataset, its schema, and the
 * slow per-record read used by tools and tests.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pysluice.h"

PyTypeObject *pysluice_dataset_type;

static int dataset_init(PyObject *o, PyObject *args, PyObject *kw)
{
	PySluiceDataset *self = (PySluiceDataset *)o;
	static char *kwlist[] = { "path", NULL };
	PyObject *path_bytes;
	const char *path;
	char msg[1024];
	int r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", kwlist,
					 PyUnicode_FSConverter, &path_bytes))
		return -1;
	if (self->ds) {
		Py_DECREF(path_bytes);
		PyErr_SetString(PyExc_RuntimeError, "dataset already open");
		return -1;
	}
	path = PyBytes_AsString(path_bytes);
	Py_BEGIN_ALLOW_THREADS
	r = sluice_dataset_open(path, &self->ds);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		if (self->ds)
			sluice_dataset_error(self->ds, msg, sizeof(msg));
		else
			snprintf(msg, sizeof(msg), "%s: %s", path,
				 sluice_strerror(r));
		sluice_dataset_close(self->ds);
		self->ds = NULL;
		Py_DECREF(path_bytes);
		pysluice_raise(r, msg);
		return -1;
	}
	Py_DECREF(path_bytes);
	return 0;
}

static void dataset_dealloc(PyObject *o)
{
	PySluiceDataset *self = (PySluiceDataset *)o;

	sluice_dataset_close(self->ds);
	pysluice_free(o);
}

static int need_open(PySluiceDataset *self)
{
	if (self->ds)
		return 0;
	PyErr_SetString(PyExc_ValueError, "dataset is closed");
	return -1;
}

static PyObject *shape_tuple(const int64_t *shape, int ndim)
{
	PyObject *t = PyTuple_New(ndim);

	if (!t)
		return NULL;
	for (int k = 0; k < ndim; k++) {
		PyObject *d = PyLong_FromLongLong(shape[k]);

		if (!d) {
			Py_DECREF(t);
			return NULL;
		}
		PyTuple_SetItem(t, k, d);
	}
	return t;
}

/* fields() -> [(name, dtype, shape), ...]; shape[0] == -1: variable. */
static PyObject *dataset_fields(PyObject *o, PyObject *unused)
{
	PySluiceDataset *self = (PySluiceDataset *)o;
	PyObject *list;
	int n;

	(void)unused;
	if (need_open(self))
		return NULL;
	n = sluice_dataset_field_count(self->ds);
	list = PyList_New(n);
	if (!list)
		return NULL;
	for (int i = 0; i < n; i++) {
		const struct sluice_field *f = sluice_dataset_field(self->ds, i);
		const char *dt = sluice_dtype_name(f->dtype);
		PyObject *shape = shape_tuple(f->shape, f->ndim);
		PyObject *item;

		if (!shape) {
			Py_DECREF(list);
			return NULL;
		}
		item = Py_BuildValue("(ssN)", f->name, dt ? dt : "unknown",
				     shape);
		if (!item) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SetItem(list, i, item);
	}
	return list;
}

static PyObject *dataset_counts(PyObject *o, PyObject *unused)
{
	PySluiceDataset *self = (PySluiceDataset *)o;

	(void)unused;
	if (need_open(self))
		return NULL;
	return Py_BuildValue(
		"{sKsIsK}", "records",
		(unsigned long long)sluice_dataset_records(self->ds), "shards",
		(unsigned int)sluice_dataset_shards(self->ds), "blocks",
		(unsigned long long)sluice_dataset_blocks(self->ds));
}

/* classes() -> (label field, [names]) from dataset.json, or None. */
static PyObject *dataset_classes(PyObject *o, PyObject *unused)
{
	PySluiceDataset *self = (PySluiceDataset *)o;
	const char *field = NULL;
	PyObject *names;
	int64_t n;

	(void)unused;
	if (need_open(self))
		return NULL;
	n = sluice_dataset_class_count(self->ds, &field);
	if (n <= 0)
		Py_RETURN_NONE;
	names = PyList_New((Py_ssize_t)n);
	if (!names)
		return NULL;
	for (int64_t i = 0; i < n; i++) {
		PyObject *s = PyUnicode_DecodeUTF8(
			sluice_dataset_class_name(self->ds, (uint32_t)i),
			(Py_ssize_t)strlen(sluice_dataset_class_name(
				self->ds, (uint32_t)i)),
			"surrogateescape");

		if (!s) {
			Py_DECREF(names);
			return NULL;
		}
		PyList_SetItem(names, (Py_ssize_t)i, s);
	}
	return Py_BuildValue("(sN)", field, names);
}

/* read(index, field) -> bytes, checksum-verified (slow path). */
static PyObject *dataset_read(PyObject *o, PyObject *args)
{
	PySluiceDataset *self = (PySluiceDataset *)o;
	unsigned long long index;
	const char *field;
	size_t cap = 4096, len = 0;
	char *buf = NULL;
	char msg[1024];
	PyObject *ret;
	int r;

	if (!PyArg_ParseTuple(args, "Ks", &index, &field))
		return NULL;
	if (need_open(self))
		return NULL;
	for (;;) {
		char *nb = PyMem_Realloc(buf, cap ? cap : 1);

		if (!nb) {
			PyMem_Free(buf);
			return PyErr_NoMemory();
		}
		buf = nb;
		Py_BEGIN_ALLOW_THREADS
		r = sluice_dataset_read(self->ds, index, field, buf, cap, &len);
		Py_END_ALLOW_THREADS
		if (r != -ENOSPC || len <= cap)
			break;
		cap = len;
	}
	if (r < 0) {
		PyMem_Free(buf);
		if (r == -ERANGE)
			return PyErr_Format(PyExc_IndexError,
					    "record %llu out of range", index);
		sluice_dataset_error(self->ds, msg, sizeof(msg));
		return pysluice_raise(r, msg);
	}
	ret = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
	PyMem_Free(buf);
	return ret;
}

static PyObject *dataset_close(PyObject *o, PyObject *unused)
{
	PySluiceDataset *self = (PySluiceDataset *)o;

	(void)unused;
	/* The library requires loaders to be closed first. */
	if (self->nloaders > 0) {
		PyErr_Format(PyExc_RuntimeError,
			     "%d loader(s) still open on this dataset",
			     self->nloaders);
		return NULL;
	}
	sluice_dataset_close(self->ds);
	self->ds = NULL;
	Py_RETURN_NONE;
}

static PyMethodDef dataset_methods[] = {
	{ "fields", dataset_fields, METH_NOARGS,
	  "fields() -> [(name, dtype, shape)]" },
	{ "counts", dataset_counts, METH_NOARGS,
	  "counts() -> {'records', 'shards', 'blocks'}" },
	{ "classes", dataset_classes, METH_NOARGS,
	  "classes() -> (label field, [class names]) or None" },
	{ "read", dataset_read, METH_VARARGS,
	  "read(index, field) -> bytes of one record's field" },
	{ "close", dataset_close, METH_NOARGS, "close the dataset" },
	{ NULL, NULL, 0, NULL },
};

static PyType_Slot dataset_slots[] = {
	{ Py_tp_doc, (void *)"Dataset(path): an open sluice dataset." },
	{ Py_tp_new, (void *)PyType_GenericNew },
	{ Py_tp_init, (void *)dataset_init },
	{ Py_tp_dealloc, (void *)dataset_dealloc },
	{ Py_tp_methods, dataset_methods },
	{ 0, NULL },
};

static PyType_Spec dataset_spec = {
	"sluice._sluice.Dataset",
	sizeof(PySluiceDataset),
	0,
	Py_TPFLAGS_DEFAULT,
	dataset_slots,
};

int pysluice_dataset_init(PyObject *module)
{
	pysluice_dataset_type = (PyTypeObject *)PyType_FromSpec(&dataset_spec);
	if (!pysluice_dataset_type)
		return -1;
	Py_INCREF(pysluice_dataset_type);
	if (PyModule_AddObject(module, "Dataset",
			       (PyObject *)pysluice_dataset_type) < 0) {
		Py_DECREF(pysluice_dataset_type);
		return -1;
	}
	return 0;
}
