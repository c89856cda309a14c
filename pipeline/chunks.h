/*
 * chunks.h - batches assembled a few blocks at a time (chunks.c): the
 * state each slot and the loader keep for them.
 */
#ifndef SLUICE_PIPELINE_CHUNKS_H
#define SLUICE_PIPELINE_CHUNKS_H

#include <stdint.h>

struct loader_core;
struct slot;

/* A slot's: gathered a chunk of blocks at a time (chunks.c): its rows
 * sorted by block (block << 24 | row), of which [lo, hi) are the chunk
 * pinned in entries. */
struct slot_chunk {
	uint64_t *rows;         /* allocated only when the loader uses it */
	uint64_t *items;        /* [r * variable fields + k]: row r's items
				   of the k-th variable field, as its chunk
				   found them (without pad_length) */
	int chunked;
	int busy;               /* a chunk is claimed, not yet copied [mu] */
	uint32_t lo, hi;        /* [mu] */
};

/* The loader's: whether batches go a chunk at a time. */
struct loader_chunks {
	int possible;           /* batches could gather a chunk of
				   blocks at a time (chunks.c) */
	int chunked;            /* they do: their blocks do not fit
				   at once */
	uint32_t inflight;      /* chunks pinned [mu] */
};

void chunks_init(struct loader_core *c);
uint64_t chunk_blocks(const struct loader_core *c);
int chunk_values_max(const struct loader_core *c, uint64_t records,
		     uint64_t *bytes);
int chunk_plan_locked(struct loader_core *c, struct slot *s, uint32_t count);
void chunks_claim_locked(struct loader_core *c, unsigned *nsubmit);
void chunk_begin_locked(struct loader_core *c, struct slot *s);
void chunk_ready_locked(struct loader_core *c, struct slot *s);
void chunk_compact(struct loader_core *c, struct slot *s);
/* The batch row at sorted position @p: the record runs.c walks there. */
uint32_t chunk_row(const struct slot *s, uint32_t p);
int chunk_done_locked(struct loader_core *c, struct slot *s);

#endif /* SLUICE_PIPELINE_CHUNKS_H */
