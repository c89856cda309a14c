/*
 * cache.h - the decoded-block cache (cache.c): its entries, the state the
 * loader keeps for them, and its functions.
 */
#ifndef SLUICE_PIPELINE_CACHE_H
#define SLUICE_PIPELINE_CACHE_H

#include <stdint.h>

#include "sluice_tools.h"
#include "../io/ring.h"
#include "fetch.h"
#include "stream.h"

struct loader_core;
struct slot;

enum entry_state {
	ENTRY_EMPTY = 0,
	ENTRY_READING,
	ENTRY_DECODING,
	ENTRY_READY,
	ENTRY_FAILED,
};

/* No wait (cache_entry.wait_first, slot.wait_next). */
#define WAIT_NONE UINT64_MAX

/* One decoded-block cache entry: while it holds a block, an io buffer
 * carved from the arena's io pool, followed by a decode buffer when the
 * block is zstd (sized for that block, not the largest; only the decode
 * buffer where c->zstd_fetched). */
struct cache_entry {
	uint64_t block;         /* global block id [mu] */
	int state;              /* enum entry_state [mu] */
	uint32_t refs;          /* planned slots that need it [mu] */
	uint32_t nwaiters;      /* slots waiting for it to be READY [mu] */
	/* They are a list through the slots (slot.wait_next), first and
	 * last: a wait is a slot id << 32 | the entry's place in its
	 * entries.  An array per entry sized for every slot a hoarding
	 * consumer may grow (16 KiB) took 56 MB beside the budget for a
	 * cache of 3,411 blocks. [mu] */
	uint64_t wait_first, wait_last;
	uint32_t lru_prev, lru_next; /* free list (refs == 0) [mu] */
	int in_lru;
	uint64_t mem_off, mem_len; /* in the io pool; mem_len 0: none [mu] */
	uint8_t *stored;        /* io buffer (arena) */
	uint8_t *scratch;       /* decode buffer (zstd), after stored */
	const uint8_t *raw;     /* decoded bytes (stored or scratch) */
	struct block_view view;
	const uint64_t *frame_at; /* its main field's record i is the zstd
				   frame [frame_at[i], frame_at[i + 1]) of
				   frames, decoded at assembly (framed.c);
				   NULL: decoded whole */
	const uint8_t *frames;  /* the block's stored bytes, in stored */
	int error;              /* negative code when FAILED */
	int corrupt;            /* FAILED for bad data (skippable) */
	int ahead;              /* read ahead of any batch: pinned by the
				   read-ahead until decoded */
	int ahead_unused;       /* read ahead, and no batch of its pass
				   (claim_pass) has claimed it yet [mu] */
	uint64_t plan_mark;     /* = block_cache.plan_mark: in the span the
				   planner is in (read_ahead.c) [mu] */
	uint32_t view_refs;     /* batches viewing its bytes (view.c) [mu] */
	uint64_t view_pass;     /* their pass (plan_pass) [mu] */
	uint64_t claim_pass;    /* pass of its latest claim [mu] */
	struct slot *direct_slot; /* decode into this batch (direct.c) [mu] */
	uint32_t direct_row;    /* at this row of its tensor [mu] */
	uint8_t *direct;        /* there; NULL: into scratch [mu] */
	int forget;             /* decoded into a batch (direct.c): drop
				   the block once unpinned [mu] */
	int exposed;            /* viewed by batches of view_pass, whose
				   consumers may write into it [mu] */
	uint64_t submit_ns;     /* when its read was submitted (tracing) */
	uint64_t read_back_ns;  /* when the ring handed it back [mu] */
	struct stream_entry stream; /* checked as it lands (stream.c) */
	struct fetch_entry fetch; /* read by the workers (fetch.c) */
	struct io_read rd;
};

/* The loader's block cache [mu] (cache.c) */
struct block_cache {
	int all;                    /* it holds every block at once: no
				       views, no direct decodes (cache.c) */
	struct cache_entry *entries;
	uint32_t nentries;
	int32_t *block_entry;       /* global block -> entry, -1 */
	uint32_t lru_head, lru_tail, lru_count;
	uint64_t lru_bytes;         /* io memory held by entries on the LRU */
	uint64_t plan_mark;         /* entries marked with it the read-ahead
				       does not evict */
};

int cache_init(struct loader_core *c, uint32_t nentries);
void cache_destroy(struct loader_core *c);
void cache_lru_remove(struct loader_core *c, uint32_t e);
void cache_lru_push(struct loader_core *c, uint32_t e);
void cache_unpin(struct loader_core *c, uint32_t e);
int cache_claim(struct loader_core *c, uint64_t block, uint64_t keep,
		uint32_t *entry);
/* The read-ahead's claim: as cache_claim, but it evicts no block read
 * ahead for a batch of this pass that has not claimed it yet, nor one
 * marked with plan_mark. */
int cache_claim_ahead(struct loader_core *c, uint64_t block, uint64_t keep,
		      uint32_t *entry);
uint64_t cache_reclaimable(const struct loader_core *c);
int cache_usable(const struct loader_core *c, const struct cache_entry *e);
void cache_evict_all(struct loader_core *c);
uint64_t cache_needed(const struct loader_core *c, uint32_t batch_size);
uint64_t cache_dataset_bytes(const struct loader_core *c);
int cache_holds_dataset(const struct loader_core *c);

/* io memory for something else than a block, evicting unpinned
 * blocks as needed.  0 or -EAGAIN. */
int cache_alloc_io(struct loader_core *c, uint64_t len, uint64_t *off);

#endif /* SLUICE_PIPELINE_CACHE_H */
