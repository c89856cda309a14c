/*
 * direct.h - zstd blocks decompressed straight into their batch
 * (direct.c): the loader's state for them and its functions.  A cache
 * entry's (direct_slot, direct_row, direct, forget) is in struct
 * cache_entry.
 */
#ifndef SLUICE_PIPELINE_DIRECT_H
#define SLUICE_PIPELINE_DIRECT_H

#include <stdint.h>

struct loader_core;
struct slot;

/* The loader's: direct decodes (direct.c) */
struct loader_direct {
	int on;                     /* blocks may decode into batches
				       (direct.c) */
	uint64_t *ahead_recs;       /* records of one batch for the
				       read-ahead (direct.c) [mu] */
	uint64_t ahead_recs_pass, ahead_recs_batch;
	uint32_t ahead_recs_count;
	int ahead_recs_valid;
};

void direct_init(struct loader_core *c);
/* Would most zstd blocks decompress straight into their batch? */
int direct_likely(const struct loader_core *c);
void direct_plan_locked(struct loader_core *c, struct slot *s);
int direct_would_take(struct loader_core *c, uint64_t batch, uint32_t r,
		      uint64_t g);

#endif /* SLUICE_PIPELINE_DIRECT_H */
