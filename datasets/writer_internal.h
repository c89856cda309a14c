/*
 * writer_internal.h - what writer_batch.c needs from writer.c's private
 * writer: its schema and its error slot.
 */
#ifndef SLUICE_DATASETS_WRITER_INTERNAL_H
#define SLUICE_DATASETS_WRITER_INTERNAL_H

#include "shard_internal.h"

/* The writer's schema (derived sizes included); owned by @w. */
const struct shard_schema *writer_schema(const sluice_writer *w);
/* Mark @w failed with @code and @msg (the first failure's message stays);
 * returns @code. */
int writer_fail(sluice_writer *w, int code, const char *msg);

#endif /* SLUICE_DATASETS_WRITER_INTERNAL_H */
