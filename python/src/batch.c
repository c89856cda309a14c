/*
 * batch.c - the Batch type: a read-only mapping from tensor name to
 * Tensor, over one batch handle of the library.
 *
 * Lifetime: the Batch object holds the batch handle (one reference on
 * the slot) until release() or until it and every Tensor object made
 * from it are gone.  DLPack tensors exported from those hold references
 * of their own, so numpy arrays and torch tensors stay valid after the
 * batch is released; the slot returns to the loader with the last one.
 */
#include "pysluice.h"
#include "tensor.h"

PyTypeObject *pysluice_batch_type;

PyObject *pysluice_batch_new(sluice_batch *b, DLDevice device)
{
	allocfunc alloc = (allocfunc)PyType_GetSlot(pysluice_batch_type,
						    Py_tp_alloc);
	PySluiceBatch *self = (PySluiceBatch *)alloc(pysluice_batch_type, 0);

	if (!self) {
		sluice_batch_release(b);
		return NULL;
	}
	self->b = b;
	self->device = device;
	return (PyObject *)self;
}

static void batch_dealloc(PyObject *o)
{
	PySluiceBatch *self = (PySluiceBatch *)o;

	/* Any thread: the release is GIL-free and thread-safe. */
	sluice_batch_release(self->b);
	self->b = NULL;
	pysluice_free(o);
}

int pysluice_batch_live(PySluiceBatch *self)
{
	if (self->b)
		return 0;
	PyErr_SetString(PyExc_ValueError,
			"batch was released; take tensors before release()");
	return -1;
}

static PyObject *batch_names(PySluiceBatch *self)
{
	int n;
	PyObject *list;

	if (pysluice_batch_live(self))
		return NULL;
	n = sluice_batch_tensor_count(self->b);
	list = PyList_New(n);
	if (!list)
		return NULL;
	for (int i = 0; i < n; i++) {
		PyObject *s = PyUnicode_FromString(
			sluice_batch_tensor_name(self->b, i));

		if (!s) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SetItem(list, i, s);
	}
	return list;
}

PyObject *pysluice_batch_key_error(PySluiceBatch *self, PyObject *key)
{
	PyObject *names = batch_names(self), *sep = NULL, *joined = NULL;

	if (names)
		sep = PyUnicode_FromString(", ");
	if (sep)
		joined = PyUnicode_Join(sep, names);
	if (joined) {
		PyObject *msg = PyUnicode_FromFormat(
			"no tensor %R in this batch; it has %U (npy datasets "
			"name fields after the files' stems, tar datasets "
			"after the members' extensions)",
			key, joined);

		if (msg) {
			PyErr_SetObject(PyExc_KeyError, msg);
			Py_DECREF(msg);
		}
	}
	Py_XDECREF(joined);
	Py_XDECREF(sep);
	Py_XDECREF(names);
	return NULL;
}

static PyObject *batch_keys(PyObject *o, PyObject *unused)
{
	(void)unused;
	return batch_names((PySluiceBatch *)o);
}

static PyObject *batch_getitem(PyObject *o, PyObject *key)
{
	PySluiceBatch *self = (PySluiceBatch *)o;
	char name[SLUICE_NAME_MAX + 16];

	if (pysluice_batch_live(self))
		return NULL;
	if (!PyUnicode_Check(key))
		return pysluice_batch_key_error(self, key);
	if (pysluice_utf8(key, name, sizeof(name)) < 0) {
		PyErr_Clear();
		return pysluice_batch_key_error(self, key);
	}
	return pysluice_tensor_new(self, name, key);
}

static PyObject *batch_values_or_items(PyObject *o, int items)
{
	PyObject *names = batch_names((PySluiceBatch *)o), *out;
	Py_ssize_t n;

	if (!names)
		return NULL;
	n = PyList_Size(names);
	out = PyList_New(n);
	for (Py_ssize_t i = 0; out && i < n; i++) {
		PyObject *k = PyList_GetItem(names, i);
		PyObject *t = batch_getitem(o, k), *v = t;

		if (t && items) {
			v = PyTuple_Pack(2, k, t);
			Py_DECREF(t);
		}
		if (!v) {
			Py_CLEAR(out);
			break;
		}
		PyList_SetItem(out, i, v);
	}
	Py_DECREF(names);
	return out;
}

static PyObject *batch_values(PyObject *o, PyObject *unused)
{
	(void)unused;
	return batch_values_or_items(o, 0);
}

static PyObject *batch_items(PyObject *o, PyObject *unused)
{
	(void)unused;
	return batch_values_or_items(o, 1);
}

static Py_ssize_t batch_len(PyObject *o)
{
	PySluiceBatch *self = (PySluiceBatch *)o;

	if (pysluice_batch_live(self))
		return -1;
	return sluice_batch_tensor_count(self->b);
}

static int batch_contains(PyObject *o, PyObject *key)
{
	PySluiceBatch *self = (PySluiceBatch *)o;
	PyObject *names;
	int r;

	if (pysluice_batch_live(self))
		return -1;
	names = batch_names(self);
	if (!names)
		return -1;
	r = PySequence_Contains(names, key);
	Py_DECREF(names);
	return r;
}

static PyObject *batch_iter(PyObject *o)
{
	PyObject *names = batch_names((PySluiceBatch *)o), *it;

	if (!names)
		return NULL;
	it = PyObject_GetIter(names);
	Py_DECREF(names);
	return it;
}

static PyObject *batch_get(PyObject *o, PyObject *args)
{
	PyObject *key, *dflt = Py_None;
	int r;

	if (!PyArg_ParseTuple(args, "O|O", &key, &dflt))
		return NULL;
	r = batch_contains(o, key);
	if (r < 0)
		return NULL;
	if (r)
		return batch_getitem(o, key);
	Py_INCREF(dflt);
	return dflt;
}

static PyObject *batch_release(PyObject *o, PyObject *unused)
{
	PySluiceBatch *self = (PySluiceBatch *)o;

	(void)unused;
	sluice_batch_release(self->b);
	self->b = NULL;
	Py_RETURN_NONE;
}

static PyObject *batch_size(PyObject *o, void *closure)
{
	PySluiceBatch *self = (PySluiceBatch *)o;

	(void)closure;
	if (pysluice_batch_live(self))
		return NULL;
	return PyLong_FromUnsignedLong(sluice_batch_size(self->b));
}

static PyObject *batch_epoch(PyObject *o, void *closure)
{
	PySluiceBatch *self = (PySluiceBatch *)o;

	(void)closure;
	if (pysluice_batch_live(self))
		return NULL;
	return PyLong_FromUnsignedLongLong(sluice_batch_epoch(self->b));
}

static PyObject *batch_indices(PyObject *o, void *closure)
{
	PySluiceBatch *self = (PySluiceBatch *)o;
	const uint64_t *idx;
	uint32_t n;
	PyObject *t;

	(void)closure;
	if (pysluice_batch_live(self))
		return NULL;
	n = sluice_batch_size(self->b);
	idx = sluice_batch_indices(self->b);
	t = PyTuple_New(n);
	for (uint32_t i = 0; t && i < n; i++) {
		PyObject *v = PyLong_FromUnsignedLongLong(idx[i]);

		if (!v) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SetItem(t, i, v);
	}
	return t;
}

static PyObject *batch_released(PyObject *o, void *closure)
{
	(void)closure;
	return PyBool_FromLong(((PySluiceBatch *)o)->b == NULL);
}

static PyMethodDef batch_methods[] = {
	{ "keys", batch_keys, METH_NOARGS, "tensor names" },
	{ "values", batch_values, METH_NOARGS, "Tensor objects" },
	{ "items", batch_items, METH_NOARGS, "(name, Tensor) pairs" },
	{ "get", batch_get, METH_VARARGS, "get(name, default=None)" },
	{ "release", batch_release, METH_NOARGS,
	  "release(): give the batch back now; tensors already converted "
	  "(numpy, torch) stay valid and keep the slot until freed" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef batch_getset[] = {
	{ "size", batch_size, NULL, "records in the batch", NULL },
	{ "epoch", batch_epoch, NULL, "epoch of the batch", NULL },
	{ "indices", batch_indices, NULL,
	  "dataset indices of the records, in batch order", NULL },
	{ "released", batch_released, NULL, "True after release()", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot batch_slots[] = {
	{ Py_tp_doc, (void *)"A batch: a mapping of tensor name -> Tensor." },
	{ Py_tp_dealloc, (void *)batch_dealloc },
	{ Py_tp_methods, batch_methods },
	{ Py_tp_getset, batch_getset },
	{ Py_tp_iter, (void *)batch_iter },
	{ Py_mp_subscript, (void *)batch_getitem },
	{ Py_mp_length, (void *)batch_len },
	{ Py_sq_contains, (void *)batch_contains },
	{ 0, NULL },
};

static PyType_Spec batch_spec = {
	"sluice._sluice.Batch",
	sizeof(PySluiceBatch),
	0,
	Py_TPFLAGS_DEFAULT,
	batch_slots,
};

int pysluice_batch_init(PyObject *module)
{
	pysluice_batch_type = (PyTypeObject *)PyType_FromSpec(&batch_spec);
	if (!pysluice_batch_type)
		return -1;
	Py_INCREF(pysluice_batch_type);
	if (PyModule_AddObject(module, "Batch",
			       (PyObject *)pysluice_batch_type) < 0) {
		Py_DECREF(pysluice_batch_type);
		return -1;
	}
	return pysluice_tensor_init(module);
}
