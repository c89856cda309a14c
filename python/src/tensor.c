/*
 * tensor.c - DLPack export of one batch tensor.
 *
 * A Tensor object only names a tensor of a live batch; each __dlpack__
 * call asks the library for a fresh DLManagedTensor (its own reference
 * on the slot, and for CUDA the consumer stream made to wait on the
 * batch's copy) and wraps it in a capsule:
 *  - "dltensor" (DLManagedTensor) when the consumer gave no max_version
 *    or one below 1.0: older torch and numpy;
 *  - "dltensor_versioned" (DLManagedTensorVersioned) when it allows 1.x.
 * A consumer renames the capsule to "used_..." and owns the deleter from
 * then on; the capsule destructor calls the deleter only when the name is
 * unchanged (never consumed).  The library's deleters are GIL-free and may
 * run on any thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

PyTypeObject *pysluice_tensor_type;

typedef struct {
	PyObject_HEAD
	PySluiceBatch *batch; /* strong reference: keeps the handle */
	PyObject *key;        /* the name as given */
	char name[SLUICE_NAME_MAX + 16];
	DLDevice device;
	DLDataType dtype;
	int32_t ndim;
	int64_t shape[SLUICE_MAX_NDIM + 1];
	void *data;
} PySluiceTensor;

static const char legacy_name[] = "dltensor";
static const char versioned_name[] = "dltensor_versioned";

static uint64_t tensor_nbytes(const PySluiceTensor *t)
{
	uint64_t n = ((uint64_t)t->dtype.bits * t->dtype.lanes + 7) / 8;

	for (int k = 0; k < t->ndim; k++)
		n *= (uint64_t)t->shape[k];
	return n;
}

PyObject *pysluice_tensor_new(PySluiceBatch *batch, const char *name,
			      PyObject *key)
{
	allocfunc alloc = (allocfunc)PyType_GetSlot(pysluice_tensor_type,
						    Py_tp_alloc);
	DLManagedTensor *m;
	PySluiceTensor *self;
	int r;

	/* Export once without synchronising, only to learn the layout. */
	r = sluice_batch_tensor(batch->b, name, -1, &m);
	if (r == -ENOENT)
		return pysluice_batch_key_error(batch, key);
	if (r < 0)
		return pysluice_raise_code(r, name);
	self = (PySluiceTensor *)alloc(pysluice_tensor_type, 0);
	if (!self) {
		m->deleter(m);
		return NULL;
	}
	Py_INCREF(batch);
	self->batch = batch;
	Py_INCREF(key);
	self->key = key;
	strncpy(self->name, name, sizeof(self->name) - 1);
	self->device = m->dl_tensor.device;
	self->dtype = m->dl_tensor.dtype;
	self->ndim = m->dl_tensor.ndim;
	if (self->ndim < 0 || self->ndim > SLUICE_MAX_NDIM + 1)
		self->ndim = 0; /* cannot happen: the library's bound */
	memcpy(self->shape, m->dl_tensor.shape,
	       (size_t)self->ndim * sizeof(int64_t));
	self->data = (char *)m->dl_tensor.data + m->dl_tensor.byte_offset;
	m->deleter(m);
	return (PyObject *)self;
}

static void tensor_dealloc(PyObject *o)
{
	PySluiceTensor *self = (PySluiceTensor *)o;

	Py_XDECREF(self->key);
	Py_XDECREF(self->batch);
	pysluice_free(o);
}

/* Capsule destructors: free only what no consumer took. */
static void capsule_free_legacy(PyObject *cap)
{
	PyObject *type, *value, *tb;

	PyErr_Fetch(&type, &value, &tb);
	if (PyCapsule_IsValid(cap, legacy_name)) {
		DLManagedTensor *m = PyCapsule_GetPointer(cap, legacy_name);

		if (m && m->deleter)
			m->deleter(m);
	}
	PyErr_Restore(type, value, tb);
}

static void capsule_free_versioned(PyObject *cap)
{
	PyObject *type, *value, *tb;

	PyErr_Fetch(&type, &value, &tb);
	if (PyCapsule_IsValid(cap, versioned_name)) {
		DLManagedTensorVersioned *m =
			PyCapsule_GetPointer(cap, versioned_name);

		if (m && m->deleter)
			m->deleter(m);
	}
	PyErr_Restore(type, value, tb);
}

/*
 * copy=True on the host: one allocation holds the managed tensor, its
 * shape and the bytes, freed by its deleter (from any thread).
 */
struct host_copy {
	union {
		DLManagedTensor legacy;
		DLManagedTensorVersioned versioned;
	} m;
	int64_t shape[SLUICE_MAX_NDIM + 1];
};

#define COPY_DATA_OFFSET 256 /* sizeof(struct host_copy), rounded up */

static void free_copy_legacy(DLManagedTensor *m)
{
	free(m ? m->manager_ctx : NULL);
}

static void free_copy_versioned(DLManagedTensorVersioned *m)
{
	free(m ? m->manager_ctx : NULL);
}

static PyObject *host_copy_capsule(const PySluiceTensor *self, int versioned)
{
	uint64_t n = tensor_nbytes(self);
	struct host_copy *c;
	DLManagedTensor *src;
	DLTensor dl;
	void *mem;
	PyObject *cap;
	int r;

	_Static_assert(sizeof(struct host_copy) <= COPY_DATA_OFFSET,
		       "copy header fits before the data");
	if (n > SIZE_MAX - COPY_DATA_OFFSET ||
	    posix_memalign(&mem, COPY_DATA_OFFSET,
			   COPY_DATA_OFFSET + (size_t)n))
		return PyErr_NoMemory();
	/* Read through an export on stream 0, which waits for the batch's
	 * copy where a device makes one (the simulated device's memory is
	 * host memory, written by its copy stream). */
	r = sluice_batch_tensor(self->batch->b, self->name, 0, &src);
	if (r < 0) {
		free(mem);
		return pysluice_raise_code(r, self->name);
	}
	c = mem;
	memset(c, 0, sizeof(*c));
	memcpy(c->shape, self->shape, sizeof(c->shape));
	memcpy((char *)mem + COPY_DATA_OFFSET, src->dl_tensor.data, (size_t)n);
	src->deleter(src);
	dl = (DLTensor){
		.data = (char *)mem + COPY_DATA_OFFSET,
		.device = self->device,
		.ndim = self->ndim,
		.dtype = self->dtype,
		.shape = c->shape,
		.strides = NULL,
		.byte_offset = 0,
	};
	if (versioned) {
		c->m.versioned.version = (DLPackVersion){
			DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION
		};
		c->m.versioned.manager_ctx = c;
		c->m.versioned.deleter = free_copy_versioned;
		c->m.versioned.flags = DLPACK_FLAG_BITMASK_IS_COPIED;
		c->m.versioned.dl_tensor = dl;
		cap = PyCapsule_New(&c->m.versioned, versioned_name,
				    capsule_free_versioned);
	} else {
		c->m.legacy.dl_tensor = dl;
		c->m.legacy.manager_ctx = c;
		c->m.legacy.deleter = free_copy_legacy;
		cap = PyCapsule_New(&c->m.legacy, legacy_name,
				    capsule_free_legacy);
	}
	if (!cap)
		free(c);
	return cap;
}

/* max_version: None, or a (major, minor) sequence. */
static int wants_versioned(PyObject *max_version, int *out)
{
	PyObject *major;
	long v;

	*out = 0;
	if (max_version == Py_None)
		return 0;
	major = PySequence_GetItem(max_version, 0);
	if (!major) {
		PyErr_SetString(PyExc_TypeError,
				"max_version must be a (major, minor) tuple");
		return -1;
	}
	v = PyLong_AsLong(major);
	Py_DECREF(major);
	if (v == -1 && PyErr_Occurred())
		return -1;
	*out = v >= 1;
	return 0;
}

/* dl_device: None, or (device_type, device_id) equal to ours. */
static int check_device(const PySluiceTensor *self, PyObject *dl_device)
{
	int type, id;

	if (dl_device == Py_None)
		return 0;
	if (!PyArg_ParseTuple(dl_device, "ii;dl_device must be (type, id)",
			      &type, &id))
		return -1;
	if (type == (int)self->device.device_type &&
	    id == (int)self->device.device_id)
		return 0;
	PyErr_Format(PyExc_BufferError,
		     "tensor '%s' lives on device (%d, %d); sluice does not "
		     "copy it to (%d, %d)",
		     self->name, (int)self->device.device_type,
		     (int)self->device.device_id, type, id);
	return -1;
}

/*
 * The DLPack spec's stream argument for CUDA: None means the legacy
 * default stream, -1 no synchronisation, 1 legacy and 2 per-thread
 * default streams (both valid cudaStream_t values), others a handle.
 * 0 is ambiguous in the spec; the library reads it as the legacy default.
 */
static int parse_stream(const PySluiceTensor *self, PyObject *stream,
			int64_t *out)
{
	long long s;

	*out = 0;
	if (stream == Py_None || self->device.device_type != kDLCUDA)
		return 0;
	s = PyLong_AsLongLong(stream);
	if (s == -1 && PyErr_Occurred())
		return -1;
	if (s < -1) {
		PyErr_Format(PyExc_ValueError, "invalid stream %lld", s);
		return -1;
	}
	*out = s;
	return 0;
}

static PyObject *tensor_dlpack(PyObject *o, PyObject *args, PyObject *kw)
{
	PySluiceTensor *self = (PySluiceTensor *)o;
	static char *kwlist[] = { "stream", "max_version", "dl_device", "copy",
				  NULL };
	PyObject *stream = Py_None, *max_version = Py_None;
	PyObject *dl_device = Py_None, *copy = Py_None, *cap;
	int versioned, r;
	int64_t s;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream,
					 &max_version, &dl_device, &copy))
		return NULL;
	if (!self->batch || !self->batch->b) {
		PyErr_Format(PyExc_BufferError,
			     "tensor '%s': its batch was released", self->name);
		return NULL;
	}
	if (wants_versioned(max_version, &versioned) < 0 ||
	    check_device(self, dl_device) < 0 ||
	    parse_stream(self, stream, &s) < 0)
		return NULL;
	if (copy != Py_None && PyObject_IsTrue(copy)) {
		if (self->device.device_type != kDLCPU) {
			PyErr_Format(PyExc_BufferError,
				     "tensor '%s': copy=True is supported for "
				     "host tensors only; copy on the device "
				     "with the framework (e.g. .clone())",
				     self->name);
			return NULL;
		}
		return host_copy_capsule(self, versioned);
	}
	if (versioned) {
		DLManagedTensorVersioned *m;

		r = sluice_batch_tensor_versioned(self->batch->b, self->name,
						  s, &m);
		if (r < 0)
			return pysluice_raise_code(r, self->name);
		cap = PyCapsule_New(m, versioned_name, capsule_free_versioned);
		if (!cap)
			m->deleter(m);
	} else {
		DLManagedTensor *m;

		r = sluice_batch_tensor(self->batch->b, self->name, s, &m);
		if (r < 0)
			return pysluice_raise_code(r, self->name);
		cap = PyCapsule_New(m, legacy_name, capsule_free_legacy);
		if (!cap)
			m->deleter(m);
	}
	return cap;
}

static PyObject *tensor_dlpack_device(PyObject *o, PyObject *unused)
{
	PySluiceTensor *self = (PySluiceTensor *)o;

	(void)unused;
	return Py_BuildValue("(ii)", (int)self->device.device_type,
			     (int)self->device.device_id);
}

static PyObject *get_shape(PyObject *o, void *closure)
{
	PySluiceTensor *self = (PySluiceTensor *)o;
	PyObject *t = PyTuple_New(self->ndim);

	(void)closure;
	for (int k = 0; t && k < self->ndim; k++) {
		PyObject *d = PyLong_FromLongLong(self->shape[k]);

		if (!d) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SetItem(t, k, d);
	}
	return t;
}

static PyObject *get_dtype(PyObject *o, void *closure)
{
	const char *n = sluice_dtype_name(((PySluiceTensor *)o)->dtype);

	(void)closure;
	return PyUnicode_FromString(n ? n : "unknown");
}

static PyObject *get_name(PyObject *o, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(((PySluiceTensor *)o)->name);
}

static PyObject *get_data_ptr(PyObject *o, void *closure)
{
	(void)closure;
	return PyLong_FromVoidPtr(((PySluiceTensor *)o)->data);
}

static PyObject *get_nbytes(PyObject *o, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(
		tensor_nbytes((PySluiceTensor *)o));
}

static PyObject *get_device(PyObject *o, void *closure)
{
	(void)closure;
	return tensor_dlpack_device(o, NULL);
}

static PyObject *tensor_repr(PyObject *o)
{
	PySluiceTensor *self = (PySluiceTensor *)o;
	PyObject *shape = get_shape(o, NULL), *dtype = get_dtype(o, NULL);
	PyObject *r = NULL;

	if (shape && dtype)
		r = PyUnicode_FromFormat(
			"<sluice.Tensor '%s' %U shape=%R device=(%d, %d)>",
			self->name, dtype, shape,
			(int)self->device.device_type,
			(int)self->device.device_id);
	Py_XDECREF(shape);
	Py_XDECREF(dtype);
	return r;
}

static PyMethodDef tensor_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack,
	  METH_VARARGS | METH_KEYWORDS,
	  "__dlpack__(*, stream=None, max_version=None, dl_device=None, "
	  "copy=None) -> DLPack capsule" },
	{ "__dlpack_device__", tensor_dlpack_device, METH_NOARGS,
	  "__dlpack_device__() -> (device_type, device_id)" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef tensor_getset[] = {
	{ "shape", get_shape, NULL, "shape tuple", NULL },
	{ "dtype", get_dtype, NULL, "dtype name (as in the schema)", NULL },
	{ "name", get_name, NULL, "tensor name in the batch", NULL },
	{ "data_ptr", get_data_ptr, NULL, "address of the first byte", NULL },
	{ "nbytes", get_nbytes, NULL, "size in bytes", NULL },
	{ "device", get_device, NULL, "(device_type, device_id)", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot tensor_slots[] = {
	{ Py_tp_doc, (void *)"One tensor of a batch; export it with DLPack "
			     "(torch.from_dlpack, numpy.from_dlpack)." },
	{ Py_tp_dealloc, (void *)tensor_dealloc },
	{ Py_tp_methods, tensor_methods },
	{ Py_tp_getset, tensor_getset },
	{ Py_tp_repr, (void *)tensor_repr },
	{ 0, NULL },
};

static PyType_Spec tensor_spec = {
	"sluice._sluice.Tensor",
	sizeof(PySluiceTensor),
	0,
	Py_TPFLAGS_DEFAULT,
	tensor_slots,
};

int pysluice_tensor_init(PyObject *module)
{
	pysluice_tensor_type = (PyTypeObject *)PyType_FromSpec(&tensor_spec);
	if (!pysluice_tensor_type)
		return -1;
	Py_INCREF(pysluice_tensor_type);
	if (PyModule_AddObject(module, "Tensor",
			       (PyObject *)pysluice_tensor_type) < 0) {
		Py_DECREF(pysluice_tensor_type);
		return -1;
	}
	return 0;
}
