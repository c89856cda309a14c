/*
 * stream.h - a block checked while its read's pieces land (stream.c): the
 * state each cache entry and the loader keep for it.
 */
#ifndef SLUICE_PIPELINE_STREAM_H
#define SLUICE_PIPELINE_STREAM_H

#include <stdint.h>

struct block_hash;
struct io_read;
struct loader_core;
struct cache_entry;
struct shard_block;

/* A cache entry's: set at its read's start.  While a JOB_STREAM runs it
 * owns the bytes below the read's landed, and hashed and uploaded, which
 * it changes under the loader's mu; the decode owns them after it. */
struct stream_entry {
	struct block_hash *hash; /* from the pool once streamed; NULL: not */
	uint64_t hashed;        /* stored bytes taken: fed to it, if any */
	uint64_t uploaded;      /* of those, on the device (gather) */
	int queued;             /* a JOB_STREAM queued or running [mu] */
	int read_back;          /* its read settled meanwhile: the job hands
				   it on when it ends [mu] */
};

/* The loader's: hash states for the blocks being streamed [mu]. */
struct stream_pool {
	struct block_hash **all; /* cap of them, freed at close */
	struct block_hash **free;
	uint32_t nfree, cap;
};

/* At open, after the cache: states for as many reads as may be streamed
 * at once (none when checksums are off).  0 or -ENOMEM. */
int stream_open(struct loader_core *c);
void stream_close(struct loader_core *c);
/* The ring's on_landed (io/ring.h): queue a JOB_STREAM for a block read
 * whose landed bytes are worth one. */
void stream_on_landed(void *ctx, struct io_read *rd);
/* A decode worker's JOB_STREAM: hash (and upload) what has landed. */
void stream_part(struct loader_core *c, uint32_t entry);
/* A read settled: -EBUSY when its JOB_STREAM is still going (it hands
 * the read on when it ends), else 0. [mu] */
int stream_read_back_locked(struct cache_entry *e);
/* The decode's check of a streamed block: hash what is left, compare.
 * @return: 0 or -SLUICE_ECORRUPT. */
int stream_check(struct cache_entry *e, const struct shard_block *blk,
		 const uint8_t *stored);
/* Its state back to the pool, once checked or failed. [mu] */
void stream_release_locked(struct loader_core *c, struct cache_entry *e);

#endif /* SLUICE_PIPELINE_STREAM_H */
