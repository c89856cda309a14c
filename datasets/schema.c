/*
 * schema.c - field specs: validation, derived sizes, the disk form.
 */
#include <stdio.h>
#include <string.h>


#include "shard_internal.h"
#include "sluice_xxh3.h"

/* The one place that decides which dtypes sluice stores. */
static int dtype_supported(DLDataType dt)
{
	return sluice_dtype_name(dt) != NULL;
}

/* Validate one field and fill its derived sizes.  @err gets "what". */
static int field_derive(const struct sluice_field *f, struct shard_field *out,
			char *err, size_t errlen)
{
	uint64_t unit, prod = 1;
	int32_t d;

	memset(out, 0, sizeof(*out));
	if (strnlen(f->name, SLUICE_NAME_MAX) >= SLUICE_NAME_MAX) {
		errf(err, errlen, "name is not NUL-terminated within %d bytes",
		     SLUICE_NAME_MAX);
		return -SLUICE_ESCHEMA;
	}
	if (f->name[0] == '\0') {
		errf(err, errlen, "empty name");
		return -SLUICE_ESCHEMA;
	}
	for (const char *p = f->name; *p; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			errf(err, errlen, "name has a control character");
			return -SLUICE_ESCHEMA;
		}
	}
	if (!dtype_supported(f->dtype)) {
		errf(err, errlen,
		     "'%s': unsupported dtype (code %u, bits %u, lanes %u)",
		     f->name, f->dtype.code, f->dtype.bits, f->dtype.lanes);
		return -SLUICE_ESCHEMA;
	}
	if (f->ndim < 0 || f->ndim > SLUICE_MAX_NDIM) {
		errf(err, errlen, "'%s': ndim %d not in 0..%d", f->name,
		     (int)f->ndim, SLUICE_MAX_NDIM);
		return -SLUICE_ESCHEMA;
	}
	out->f = *f;
	/* Normalise what lies past ndim so that equal schemas compare equal. */
	for (d = f->ndim; d < SLUICE_MAX_NDIM; d++)
		out->f.shape[d] = 0;
	out->item_bytes = f->dtype.bits / 8u;
	out->variable = f->ndim > 0 && f->shape[0] == DLS_VARIABLE_DIM;
	for (d = 0; d < f->ndim; d++) {
		int64_t dim = f->shape[d];

		if (d == 0 && dim == DLS_VARIABLE_DIM)
			continue;
		if (dim <= 0) {
			errf(err, errlen,
			     "'%s': dim %d is %lld (dims are > 0; only the "
			     "first may be -1)",
			     f->name, (int)d, (long long)dim);
			return -SLUICE_ESCHEMA;
		}
		if (__builtin_mul_overflow(prod, (uint64_t)dim, &prod))
			goto overflow;
	}
	if (__builtin_mul_overflow(prod, out->item_bytes, &unit) ||
	    unit > DLS_MAX_BLOCK_BYTES)
		goto overflow;
	if (out->variable)
		out->unit_bytes = unit;
	else
		out->record_bytes = unit;
	return 0;
overflow:
	errf(err, errlen, "'%s': shape too large", f->name);
	return -SLUICE_ESCHEMA;
}

int schema_from_fields(const struct sluice_field *fields, int nfields,
		       struct shard_schema *out, char *err, size_t errlen)
{
	char what[160];
	int i, j, r;

	memset(out, 0, sizeof(*out));
	if (!fields || nfields < 1 || nfields > (int)DLS_MAX_FIELDS) {
		errf(err, errlen, "field count %d not in 1..%u", nfields,
		     DLS_MAX_FIELDS);
		return -SLUICE_ESCHEMA;
	}
	for (i = 0; i < nfields; i++) {
		r = field_derive(&fields[i], &out->fields[i], what,
				 sizeof(what));
		if (r < 0) {
			errf(err, errlen, "field %d: %s", i, what);
			memset(out, 0, sizeof(*out));
			return r;
		}
		for (j = 0; j < i; j++) {
			if (strcmp(out->fields[j].f.name, fields[i].name) == 0) {
				errf(err, errlen, "field %d: duplicate name '%s'",
				     i, fields[i].name);
				memset(out, 0, sizeof(*out));
				return -SLUICE_ESCHEMA;
			}
		}
	}
	out->nfields = (uint32_t)nfields;
	return 0;
}

int schema_equal(const struct shard_schema *a, const struct shard_schema *b)
{
	if (a->nfields != b->nfields)
		return 0;
	for (uint32_t i = 0; i < a->nfields; i++) {
		const struct sluice_field *x = &a->fields[i].f;
		const struct sluice_field *y = &b->fields[i].f;

		if (strcmp(x->name, y->name) != 0 ||
		    x->dtype.code != y->dtype.code ||
		    x->dtype.bits != y->dtype.bits ||
		    x->dtype.lanes != y->dtype.lanes || x->ndim != y->ndim)
			return 0;
		for (int32_t d = 0; d < x->ndim; d++)
			if (x->shape[d] != y->shape[d])
				return 0;
	}
	return 1;
}

void schema_to_disk(const struct shard_schema *s, struct dls_field_disk *out)
{
	memset(out, 0, DLS_MAX_FIELDS * sizeof(*out));
	for (uint32_t i = 0; i < s->nfields; i++) {
		const struct sluice_field *f = &s->fields[i].f;

		memcpy(out[i].name, f->name, strlen(f->name));
		out[i].dtype_code = f->dtype.code;
		out[i].dtype_bits = f->dtype.bits;
		out[i].dtype_lanes = f->dtype.lanes;
		out[i].ndim = (uint32_t)f->ndim;
		for (int32_t d = 0; d < f->ndim; d++)
			out[i].shape[d] = f->shape[d];
		out[i].max_value_bytes = s->fields[i].max_value_bytes;
	}
}

int schema_from_disk(const struct dls_field_disk *fields, uint32_t n,
		     struct shard_schema *out, uint32_t *bad_field, char *err,
		     size_t errlen)
{
	struct sluice_field tmp[DLS_MAX_FIELDS];
	uint32_t i;
	int r;

	memset(out, 0, sizeof(*out));
	*bad_field = 0;
	if (n < 1 || n > DLS_MAX_FIELDS) {
		errf(err, errlen, "field count %u not in 1..%u", n,
		     DLS_MAX_FIELDS);
		return -SLUICE_ECORRUPT;
	}
	memset(tmp, 0, sizeof(tmp));
	for (i = 0; i < n; i++) {
		const struct dls_field_disk *d = &fields[i];

		*bad_field = i;
		if (memchr(d->name, '\0', DLS_NAME_MAX) == NULL) {
			errf(err, errlen, "field %u: name not terminated", i);
			return -SLUICE_ECORRUPT;
		}
		if (d->ndim > DLS_MAX_NDIM) {
			errf(err, errlen, "field %u: ndim %u > %u", i, d->ndim,
			     DLS_MAX_NDIM);
			return -SLUICE_ECORRUPT;
		}
		for (uint32_t k = d->ndim; k < DLS_MAX_NDIM; k++) {
			if (d->shape[k] != 0) {
				errf(err, errlen,
				     "field %u: shape[%u] set past ndim", i, k);
				return -SLUICE_ECORRUPT;
			}
		}
		if (d->max_value_bytes > DLS_MAX_BLOCK_BYTES ||
		    (d->max_value_bytes && !(d->ndim && d->shape[0] == -1))) {
			errf(err, errlen, "field %u: max_value_bytes %llu invalid",
			     i, (unsigned long long)d->max_value_bytes);
			return -SLUICE_ECORRUPT;
		}
		memcpy(tmp[i].name, d->name, DLS_NAME_MAX);
		tmp[i].dtype.code = d->dtype_code;
		tmp[i].dtype.bits = d->dtype_bits;
		tmp[i].dtype.lanes = d->dtype_lanes;
		tmp[i].ndim = (int32_t)d->ndim;
		memcpy(tmp[i].shape, d->shape, sizeof(d->shape));
	}
	r = schema_from_fields(tmp, (int)n, out, err, errlen);
	if (r < 0) {
		/* schema_from_fields names the field first: "field I: ". */
		if (err && sscanf(err, "field %u:", bad_field) != 1)
			*bad_field = 0;
		if (*bad_field >= n)
			*bad_field = 0;
		return -SLUICE_ECORRUPT;
	}
	for (i = 0; i < n; i++)
		out->fields[i].max_value_bytes = fields[i].max_value_bytes;
	return 0;
}

uint64_t header_checksum(const void *header_page)
{
	return XXH3_64bits(header_page, DLS_HEADER_CHECKSUM_OFFSET);
}
