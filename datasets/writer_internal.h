/*
 * writer_internal.h - what writer_batch.c needs from writer.c's private
 * writer: its schema, its error slot, and appending records column-wise.
 */
#ifndef SLUICE_DATASETS_WRITER_INTERNAL_H
#define SLUICE_DATASETS_WRITER_INTERNAL_H

#include "shard_internal.h"

/* The writer's schema (derived sizes included); owned by @w. */
const struct shard_schema *writer_schema(const sluice_writer *w);
/* Mark @w failed with @code and @msg (the first failure's message stays);
 * returns @code. */
int writer_fail(sluice_writer *w, int code, const char *msg);

/* Records [first, first + count) given column-wise.  Record i of field f
 * is bytes [start(i), start(i + 1)) of cols[f].values, where start(i) is
 * cols[f].offsets[i], or i * each[f] when offsets is NULL.  The caller has
 * checked them: offsets nondecreasing and in bounds, every length right
 * for its field. */
struct record_run {
	const struct sluice_column *cols;
	const uint64_t *each;
	uint64_t first, count;
};

/* Append @run's records into the same blocks as sluice_writer_add one by
 * one would, each block's share of a column copied in one piece. */
int writer_add_run(sluice_writer *w, const struct record_run *run);

#endif /* SLUICE_DATASETS_WRITER_INTERNAL_H */
