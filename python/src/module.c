/*
 * module.c - the _sluice extension: module functions, errors, init.
 *
 * Policy (defaults from the environment, argument names, exception
 * classes) lives in the pure-Python package; this file and its siblings
 * only translate between Python objects and include/sluice.h.
 */
#include <stdio.h>
#include <string.h>

#include "pysluice.h"

/* sluice._errors.make_error(code, message) -> exception instance. */
static PyObject *error_factory;

PyObject *pysluice_raise(int code, const char *message)
{
	PyObject *exc;

	if (!error_factory) {
		PyErr_Format(PyExc_RuntimeError, "%s (%s)", message,
			     sluice_strerror(code));
		return NULL;
	}
	exc = PyObject_CallFunction(error_factory, "is", code, message);
	if (!exc)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

PyObject *pysluice_raise_code(int code, const char *what)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "%s: %s", what, sluice_strerror(code));
	return pysluice_raise(code, msg);
}

int pysluice_utf8(PyObject *str, char *buf, size_t len)
{
	PyObject *bytes;
	char *s;
	Py_ssize_t n;

	if (!PyUnicode_Check(str)) {
		PyErr_SetString(PyExc_TypeError, "expected a str");
		return -1;
	}
	bytes = PyUnicode_AsUTF8String(str);
	if (!bytes)
		return -1;
	if (PyBytes_AsStringAndSize(bytes, &s, &n) < 0) {
		Py_DECREF(bytes);
		return -1;
	}
	if ((size_t)n >= len || strlen(s) != (size_t)n) {
		Py_DECREF(bytes);
		PyErr_Format(PyExc_ValueError,
			     "name too long or contains NUL (at most %d bytes)",
			     (int)len - 1);
		return -1;
	}
	memcpy(buf, s, (size_t)n + 1);
	Py_DECREF(bytes);
	return 0;
}

void pysluice_free(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	f(self);
	Py_DECREF(tp);
}

PyObject *pysluice_summary_dict(const struct sluice_writer_summary *s)
{
	return Py_BuildValue("{sKsKsIsKsKsd}", "records",
			     (unsigned long long)s->records, "blocks",
			     (unsigned long long)s->blocks, "shards",
			     (unsigned int)s->shards, "raw_bytes",
			     (unsigned long long)s->raw_bytes, "stored_bytes",
			     (unsigned long long)s->stored_bytes, "seconds",
			     s->seconds);
}

static PyObject *set_error_factory(PyObject *self, PyObject *f)
{
	(void)self;
	if (!PyCallable_Check(f)) {
		PyErr_SetString(PyExc_TypeError, "factory must be callable");
		return NULL;
	}
	Py_INCREF(f);
	Py_XDECREF(error_factory);
	error_factory = f;
	Py_RETURN_NONE;
}

static PyObject *py_strerror(PyObject *self, PyObject *args)
{
	int code;

	(void)self;
	if (!PyArg_ParseTuple(args, "i", &code))
		return NULL;
	return PyUnicode_FromString(sluice_strerror(code));
}

/* merge(parts: sequence of str, out_dir: str, verify: bool, copy: bool)
 * -> dict */
static PyObject *py_merge(PyObject *self, PyObject *args)
{
	PyObject *parts, *seq = NULL, *ret = NULL;
	PyObject **encoded = NULL;
	const char **paths = NULL;
	const char *out_dir;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	char err[1024] = "";
	Py_ssize_t n, i;
	int r, verify = 0, copy = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "Os|pp", &parts, &out_dir, &verify, &copy))
		return NULL;
	seq = PySequence_List(parts);
	if (!seq)
		return NULL;
	n = PyList_Size(seq);
	if (n <= 0 || n > 1 << 20) {
		PyErr_SetString(PyExc_ValueError, "merge needs 1 or more parts");
		goto out;
	}
	encoded = PyMem_Calloc((size_t)n, sizeof(*encoded));
	paths = PyMem_Calloc((size_t)n, sizeof(*paths));
	if (!encoded || !paths) {
		PyErr_NoMemory();
		goto out;
	}
	for (i = 0; i < n; i++) {
		/* str or os.PathLike, as the filesystem encoding gives it. */
		if (!PyUnicode_FSConverter(PyList_GetItem(seq, i),
					   &encoded[i]))
			goto out;
		paths[i] = PyBytes_AsString(encoded[i]);
		if (!paths[i])
			goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	r = sluice_merge(paths, (int)n, out_dir,
			 (verify ? SLUICE_MERGE_VERIFY : 0u) |
				 (copy ? SLUICE_MERGE_COPY : 0u), &sum, err,
			 sizeof(err));
	Py_END_ALLOW_THREADS
	if (r < 0) {
		if (!err[0])
			snprintf(err, sizeof(err), "merge into %s: %s", out_dir,
				 sluice_strerror(r));
		pysluice_raise(r, err);
		goto out;
	}
	ret = pysluice_summary_dict(&sum);
out:
	if (encoded)
		for (i = 0; i < n; i++)
			Py_XDECREF(encoded[i]);
	PyMem_Free(encoded);
	PyMem_Free(paths);
	Py_XDECREF(seq);
	return ret;
}

static PyMethodDef module_methods[] = {
	{ "_set_error_factory", set_error_factory, METH_O,
	  "Register f(code, message) -> exception instance." },
	{ "strerror", py_strerror, METH_VARARGS,
	  "strerror(code) -> the library's text for an error code." },
	{ "merge", py_merge, METH_VARARGS,
	  "merge(parts, out_dir, verify=False, copy=False) -> summary dict; joins "
	  "datasets written as parts without rewriting block data." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	"_sluice",
	"Low-level binding of libsluice; use the sluice package instead.",
	-1,
	module_methods,
	NULL,
	NULL,
	NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__sluice(void);

PyMODINIT_FUNC PyInit__sluice(void)
{
	PyObject *m = PyModule_Create(&module_def);

	if (!m)
		return NULL;
	if (pysluice_dataset_init(m) < 0 || pysluice_loader_init(m) < 0 ||
	    pysluice_batch_init(m) < 0 || pysluice_writer_init(m) < 0 ||
	    PyModule_AddIntConstant(m, "EOF", SLUICE_EOF) < 0 ||
	    PyModule_AddIntConstant(m, "ECORRUPT", SLUICE_ECORRUPT) < 0 ||
	    PyModule_AddIntConstant(m, "ESCHEMA", SLUICE_ESCHEMA) < 0 ||
	    PyModule_AddIntConstant(m, "EFORMAT", SLUICE_EFORMAT) < 0 ||
	    PyModule_AddIntConstant(m, "EZSTD", SLUICE_EZSTD) < 0 ||
	    PyModule_AddIntConstant(m, "ECUDA", SLUICE_ECUDA) < 0 ||
	    PyModule_AddIntConstant(m, "ENODEVICE", SLUICE_ENODEVICE) < 0 ||
	    PyModule_AddIntConstant(m, "EINPUT", SLUICE_EINPUT) < 0 ||
	    PyModule_AddIntConstant(m, "ESTATE", SLUICE_ESTATE) < 0 ||
	    PyModule_AddIntConstant(m, "ECLOSED", SLUICE_ECLOSED) < 0 ||
	    PyModule_AddIntConstant(m, "kDLCPU", kDLCPU) < 0 ||
	    PyModule_AddIntConstant(m, "kDLCUDA", kDLCUDA) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
