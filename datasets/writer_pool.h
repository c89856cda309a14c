/*
 * writer_pool.h - the writer's compression workers.  Blocks are submitted
 * in order into a ring of a few slots per worker, compressed in parallel,
 * and handed back in the same order: the ring bounds memory and makes the
 * caller wait when the disk or the workers fall behind.
 */
#ifndef SLUICE_DATASETS_WRITER_POOL_H
#define SLUICE_DATASETS_WRITER_POOL_H

#include <pthread.h>
#include <stdint.h>

#include "shard.h"

enum wslot_state { WSLOT_FREE, WSLOT_QUEUED, WSLOT_BUSY, WSLOT_DONE };

struct wslot {
	enum wslot_state state;
	/* filled by the submitter */
	uint8_t *raw;
	uint64_t raw_cap, raw_size;
	uint32_t records;
	int ends_shard;
	uint64_t longest[DLS_MAX_FIELDS]; /* per variable field, in bytes */
	/* filled by the worker */
	uint64_t *sums;         /* the records' checksums (format v3) */
	uint64_t sums_cap;
	uint8_t *comp;
	uint64_t comp_cap;
	const uint8_t *stored;  /* raw or comp */
	uint64_t stored_size;
	uint32_t codec;
	uint64_t checksum;
	int error;
};

struct wpool {
	int level;
	struct shard_schema schema; /* the fields' layout (record checksums) */
	uint32_t nthreads, nslots;
	pthread_t *threads;
	uint32_t started;
	struct wslot *slots;
	pthread_mutex_t lock;
	pthread_cond_t work_cv, done_cv;
	uint64_t submitted, taken, retired;
	int stopping;
};

int wpool_start(struct wpool *p, uint32_t nthreads, int level,
		const struct shard_schema *schema);
/* SLUICE_WRITER_DEFAULT_THREADS, or the CPUs this process may run on when
 * fewer (at least 1). */
uint32_t wpool_default_threads(void);
/* A free slot for the next block, or NULL when the ring is full (retire
 * the oldest first).  Only the submitting thread calls these. */
struct wslot *wpool_free_slot(struct wpool *p);
void wpool_submit(struct wpool *p);
/* The oldest submitted block; waits for it when @wait, else NULL when it
 * is not done yet or none is pending. */
struct wslot *wpool_oldest(struct wpool *p, int wait);
void wpool_retire(struct wpool *p);
uint64_t wpool_pending(struct wpool *p);
void wpool_stop(struct wpool *p);

#endif /* SLUICE_DATASETS_WRITER_POOL_H */
