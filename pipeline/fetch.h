/*
 * fetch.h - reads the decode workers make themselves (fetch.c): raw
 * blocks that go only to the device, part by part, uploaded from their
 * staging buffers; and full shuffle's record ranges.  The state an entry
 * and the loader keep for them, and the workers' calls.
 */
#ifndef SLUICE_PIPELINE_FETCH_H
#define SLUICE_PIPELINE_FETCH_H

#include <stdint.h>
#include <zstd.h>

#include "../gpu/device.h"
#include "jobs.h"

struct loader_core;
struct cache_entry;
struct block_hash;

/* A cache entry's: set when its read is prepared (stage_choose_locked). */
struct fetch_entry {
	int on;                 /* its block is fetched, not read by the
				   ring: its bytes are only on the device
				   [mu]; set before its read, then read
				   only by the threads that job it */
	uint32_t left;          /* parts not finished yet [mu] */
	int err;                /* the first failed part's read error [mu] */
	uint64_t err_at;        /* and its file offset [mu] */
	int upload_err;         /* the first part's upload error, which the
				   decode reports (decode.c) [mu] */
	int decoded;            /* a zstd block: one worker reads it part
				   by part, hashes and decompresses each
				   part into its scratch (fetch_decode);
				   set with on [mu] */
	int decode_err;         /* its checksum or frame was bad [mu] */
};

/* Record-range reads (ranges.c) that the workers make instead of the
 * ring: a ring of them [mu]. */
struct fetch_range_queue {
	struct io_read **ring;
	uint32_t cap, head, len;
};

/* Most range reads a worker takes at once (fetch_ranges_pop_locked). */
#define FETCH_RANGES_MAX 16u

/* A worker's fetched part whose upload is in flight while it reads its
 * next part (fetch_part), or its staged range reads' (fetch_ranges): it
 * settles it (fetch_settle) before it takes any other job, sleeps or
 * stops, so a block or a batch never waits on a worker with nothing to
 * do. */
struct fetch_pending {
	int on;
	struct job job;         /* the block's part, unless nranges */
	uint32_t buffer;
	struct device_upload upload;
	unsigned nranges;       /* range reads, completed once it lands */
	struct io_read *ranges[FETCH_RANGES_MAX];
};

/* @e's read, instead of the ring's: its parts queued for the workers.
 * [mu] */
void fetch_queue_locked(struct loader_core *c, struct cache_entry *e);
/* The next part to fetch, with a staging buffer taken for it (the oldest
 * block's next part first, so that blocks finish in order): 1, or 0 when
 * there is none or no buffer is free. [mu] */
int fetch_pop_locked(struct loader_core *c, struct job *j, uint32_t *buffer);
/* A worker's JOB_FETCH: read part j.part of entry j.id into staging
 * buffer @buffer, then settle @pending (its copy ran meanwhile; before
 * the read when it is its block's last part) and start this part's
 * upload, which becomes @pending (or is waited for at once, without
 * overlap; no upload after a failed or skipped read); the block's last
 * part hands the read on (entry_read_done_locked).  A zstd block
 * (fetch.decoded) is one job: its parts read through @buffer in turn and
 * decompressed by @dctx (fetch_decode). */
void fetch_part(struct loader_core *c, struct job j, uint32_t buffer,
		struct fetch_pending *pending, ZSTD_DCtx *dctx,
		struct block_hash *hash);
/* A part of a block that a worker reads itself (unlocked): @len bytes at
 * file offset @at of shard @shard into @to, unless the loader stops or
 * failed (-ECANCELED).  Adds its wall and CPU time to *@read_ns and
 * *@cpu_ns; *@end: when it ended.  @return: 0, the read's error, or
 * -ENODATA where the file ends before its index says. */
int fetch_read_part(struct loader_core *c, uint32_t shard, uint8_t *to,
		    uint64_t len, uint64_t at, uint64_t *read_ns,
		    uint64_t *cpu_ns, uint64_t *end);
/* Wait for @pending's upload, if any, and finish its part. */
void fetch_settle(struct loader_core *c, struct fetch_pending *pending);
/* fetch_ranges' buffer where the reads land in io memory */
#define FETCH_NO_BUFFER UINT32_MAX
/* Range read @rd (its user NULL), instead of the ring's. [mu] */
void fetch_range_queue_locked(struct loader_core *c, struct io_read *rd);
/* Up to FETCH_RANGES_MAX queued range reads into @rds, oldest first:
 * how many.  Where they go to the device (ranges.device): reads back to
 * back in one batch's io memory, no more than a staging buffer holds,
 * and that buffer taken into *@buffer (0 when no buffer is free); else
 * *@buffer is FETCH_NO_BUFFER. [mu] */
unsigned fetch_ranges_pop_locked(struct loader_core *c, struct io_read **rds,
				 uint32_t *buffer);
/* A worker's: read @rds[0, @n) and hand each to range_read_done_locked,
 * as the ring would: into io memory (after settling @pending), each
 * read's zstd frames decoded there with @dctx (ranges_decode_read), or
 * through staging buffer @buffer, checked there (ranges_check_fetched)
 * and uploaded as one span, while @pending's upload runs; this upload
 * becomes @pending, and the reads complete when it is settled. */
void fetch_ranges(struct loader_core *c, struct io_read **rds, unsigned n,
		  uint32_t buffer, struct fetch_pending *pending,
		  ZSTD_DCtx *dctx);

#endif /* SLUICE_PIPELINE_FETCH_H */
