/*
 * t_field.h - a one-dimensional field for the tests' writers: the four
 * assignments each of them would otherwise repeat.
 */
#ifndef SLUICE_TESTS_T_FIELD_H
#define SLUICE_TESTS_T_FIELD_H

#include <stdio.h>
#include <string.h>

#include "sluice.h"

/* @name's values are @dtype[@len], or variable-length with @len -1. */
static inline struct sluice_field t_field(const char *name, DLDataType dtype,
					  int64_t len)
{
	struct sluice_field f;

	memset(&f, 0, sizeof(f));
	snprintf(f.name, sizeof(f.name), "%s", name);
	f.dtype = dtype;
	f.ndim = 1;
	f.shape[0] = len;
	return f;
}

#endif /* SLUICE_TESTS_T_FIELD_H */
