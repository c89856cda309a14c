/*
 * writer_batch.c - sluice_writer_add_columns: n records given column-wise
 * (Arrow or NumPy buffers from Python), checked whole, then appended by
 * sluice_writer_add in one C loop.  The per-record cost is the same as the
 * CLI importers'; what the batch saves is a trip through Python per record.
 */
#include <errno.h>
#include <stdio.h>

#include "writer_internal.h"

/* Check one column for @n records; on failure a message naming the field. */
static int check_column(const struct shard_field *sf,
			const struct sluice_column *c, uint64_t n, char *msg,
			size_t len)
{
	const char *name = sf->f.name;

	if (c->values_len && !c->values) {
		snprintf(msg, len, "field '%s': NULL values", name);
		return -EINVAL;
	}
	if (!c->offsets) {
		uint64_t each = c->values_len / n;

		if (each * n != c->values_len) {
			snprintf(msg, len,
				 "field '%s': %llu bytes do not split into "
				 "%llu equal records",
				 name, (unsigned long long)c->values_len,
				 (unsigned long long)n);
			return -SLUICE_ESCHEMA;
		}
		if (!sf->variable && each != sf->record_bytes) {
			snprintf(msg, len,
				 "field '%s': %llu bytes per record, expected "
				 "%llu",
				 name, (unsigned long long)each,
				 (unsigned long long)sf->record_bytes);
			return -SLUICE_ESCHEMA;
		}
		return 0;
	}
	for (uint64_t i = 0; i < n; i++)
		if (c->offsets[i + 1] < c->offsets[i]) {
			snprintf(msg, len,
				 "field '%s': offsets decrease at record %llu "
				 "(%llu after %llu)",
				 name, (unsigned long long)i,
				 (unsigned long long)c->offsets[i + 1],
				 (unsigned long long)c->offsets[i]);
			return -EINVAL;
		}
	if (c->offsets[n] > c->values_len) {
		snprintf(msg, len,
			 "field '%s': offset %llu past the %llu value bytes",
			 name, (unsigned long long)c->offsets[n],
			 (unsigned long long)c->values_len);
		return -EINVAL;
	}
	return 0;
}

SLUICE_API int sluice_writer_add_columns(sluice_writer *w, uint64_t n,
					 const struct sluice_column *cols,
					 int ncols)
{
	const struct shard_schema *schema;
	const void *values[DLS_MAX_FIELDS];
	uint64_t lengths[DLS_MAX_FIELDS], each[DLS_MAX_FIELDS];
	char msg[256];
	int r;

	if (!w)
		return -EINVAL;
	schema = writer_schema(w);
	if (n == 0)
		return 0;
	if (!cols || ncols < 0 || (uint32_t)ncols != schema->nfields) {
		snprintf(msg, sizeof(msg), "%d columns for %u fields", ncols,
			 schema->nfields);
		return writer_fail(w, -EINVAL, msg);
	}
	for (uint32_t f = 0; f < schema->nfields; f++) {
		r = check_column(&schema->fields[f], &cols[f], n, msg,
				 sizeof(msg));
		if (r < 0)
			return writer_fail(w, r, msg);
		each[f] = cols[f].values_len / n;
	}
	for (uint64_t i = 0; i < n; i++) {
		for (uint32_t f = 0; f < schema->nfields; f++) {
			const struct sluice_column *c = &cols[f];
			const uint8_t *base = c->values;
			uint64_t start, end;

			start = c->offsets ? c->offsets[i] : i * each[f];
			end = c->offsets ? c->offsets[i + 1] : start + each[f];
			lengths[f] = end - start;
			values[f] = base ? base + start : NULL;
		}
		r = sluice_writer_add(w, values, lengths);
		if (r < 0)
			return r;
	}
	return 0;
}
