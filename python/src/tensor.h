/*
 * tensor.h - the Tensor type: one named tensor of a batch, exported with
 * the DLPack protocol (__dlpack__, __dlpack_device__).
 */
#ifndef PYSLUICE_TENSOR_H
#define PYSLUICE_TENSOR_H

#include "pysluice.h"

/* 0 while @self holds its batch handle, else -1 with ValueError set. */
int pysluice_batch_live(PySluiceBatch *self);

/* Tensor @name of @batch (KeyError naming @key when there is none). */
PyObject *pysluice_tensor_new(PySluiceBatch *batch, const char *name,
			      PyObject *key);

int pysluice_tensor_init(PyObject *module);

#endif /* PYSLUICE_TENSOR_H */
