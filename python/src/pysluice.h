/*
 * pysluice.h - shared declarations of the _sluice extension module.
 *
 * The extension uses only the CPython limited API (stable ABI, 3.8+), so
 * one build serves every later Python.  Types are heap types made with
 * PyType_FromSpec; their objects are created here, never by users.
 */
#ifndef PYSLUICE_H
#define PYSLUICE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sluice.h"

/* Types, created at module init. */
extern PyTypeObject *pysluice_dataset_type;
extern PyTypeObject *pysluice_loader_type;
extern PyTypeObject *pysluice_batch_type;
extern PyTypeObject *pysluice_tensor_type;
extern PyTypeObject *pysluice_writer_type;

/* Each file makes its types; @return 0 or -1 with an exception set. */
int pysluice_dataset_init(PyObject *module);
int pysluice_loader_init(PyObject *module);
int pysluice_batch_init(PyObject *module);
int pysluice_writer_init(PyObject *module);

/* The Dataset object: owns one sluice_dataset. */
typedef struct {
	PyObject_HEAD
	sluice_dataset *ds;
	int nloaders; /* open loaders on ds: close() must wait for them */
} PySluiceDataset;

/*
 * A batch handed out by a loader.  Holds the batch handle (one reference
 * on its slot) until release() or deallocation.  Tensor objects made from
 * it keep the batch object alive; DLPack tensors taken from those hold
 * their own slot references and outlive everything here.
 */
typedef struct {
	PyObject_HEAD
	sluice_batch *b; /* NULL once released */
	DLDevice device;
} PySluiceBatch;

/* Wrap @b (owned from now on) in a new Batch object; NULL on failure
 * (then @b is released). */
PyObject *pysluice_batch_new(sluice_batch *b, DLDevice device);

/* KeyError for @key naming the batch's tensors; @return NULL. */
PyObject *pysluice_batch_key_error(PySluiceBatch *self, PyObject *key);

/*
 * Raise the library's error: the registered Python factory turns
 * (code, message) into an exception instance (sluice.SluiceError and its
 * subclasses); without one, RuntimeError.  @return NULL, for tail calls.
 */
PyObject *pysluice_raise(int code, const char *message);

/* "what: strerror" when no handle has a message. */
PyObject *pysluice_raise_code(int code, const char *what);

/* A str object as UTF-8 into @buf; @return 0 or -1 with an exception. */
int pysluice_utf8(PyObject *str, char *buf, size_t len);

/* Free a heap-type object and drop the reference on its type. */
void pysluice_free(PyObject *self);

/* Summary of a writer or merge as a dict. */
PyObject *pysluice_summary_dict(const struct sluice_writer_summary *s);

#endif /* PYSLUICE_H */
