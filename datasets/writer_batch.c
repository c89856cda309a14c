/*
 * writer_batch.c - sluice_writer_add_columns: n records given column-wise
 * (Arrow or NumPy buffers from Python), checked whole, then appended as
 * one run (writer_add_run): the same blocks as sluice_writer_add record
 * by record, but each block's share of a column is copied in one piece
 * from the column into the block, with no work per record but the
 * variable fields' offsets.
 */
#include <errno.h>
#include <stdio.h>

#include "writer_internal.h"

/* Check one column for @n records; on failure a message naming the
 * field (and the record). */
static int check_column(const struct shard_field *sf,
			const struct sluice_column *c, uint64_t n,
			uint64_t *each, char *msg, size_t len)
{
	const char *name = sf->f.name;
	uint64_t unit = sf->variable ? sf->unit_bytes : sf->record_bytes;

	*each = 0;
	if (c->values_len && !c->values) {
		snprintf(msg, len, "field '%s': NULL values", name);
		return -EINVAL;
	}
	if (!c->offsets) {
		*each = c->values_len / n;
		if (*each * n != c->values_len) {
			snprintf(msg, len,
				 "field '%s': %llu bytes do not split into "
				 "%llu equal records",
				 name, (unsigned long long)c->values_len,
				 (unsigned long long)n);
			return -SLUICE_ESCHEMA;
		}
		if (sf->variable ? *each % unit != 0 : *each != unit) {
			snprintf(msg, len,
				 "field '%s': %llu bytes per record, expected "
				 "%s %llu",
				 name, (unsigned long long)*each,
				 sf->variable ? "a multiple of" : "exactly",
				 (unsigned long long)unit);
			return -SLUICE_ESCHEMA;
		}
		return 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t a = c->offsets[i], b = c->offsets[i + 1];

		if (b < a) {
			snprintf(msg, len,
				 "field '%s': offsets decrease at record %llu "
				 "(%llu after %llu)",
				 name, (unsigned long long)i,
				 (unsigned long long)b, (unsigned long long)a);
			return -EINVAL;
		}
		if (sf->variable ? (b - a) % unit != 0 : b - a != unit) {
			snprintf(msg, len,
				 "record %llu: field '%s': %llu bytes, "
				 "expected %s %llu",
				 (unsigned long long)i, name,
				 (unsigned long long)(b - a),
				 sf->variable ? "a multiple of" : "exactly",
				 (unsigned long long)unit);
			return -SLUICE_ESCHEMA;
		}
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
	uint64_t each[DLS_MAX_FIELDS];
	struct record_run run = { cols, each, 0, n };
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
		r = check_column(&schema->fields[f], &cols[f], n, &each[f],
				 msg, sizeof(msg));
		if (r < 0)
			return writer_fail(w, r, msg);
	}
	return writer_add_run(w, &run);
}
