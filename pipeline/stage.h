/*
 * stage.h - raw blocks that go only to the device, zstd blocks decoded
 * for it, and record ranges gathered there are fetched by the workers
 * through small pinned staging buffers instead of read into their io
 * memory (stage.c, fetch.c): the state the loader keeps for them.
 */
#ifndef SLUICE_PIPELINE_STAGE_H
#define SLUICE_PIPELINE_STAGE_H

#include <stdatomic.h>
#include <stdint.h>

struct loader_core;
struct cache_entry;
struct shard_block;
struct slot;

/* The loader's staging buffers, back to back in the io pool: set at
 * open; the free list [mu]. */
struct stage_pool {
	int on;
	const char *off_why;    /* why not, where the gathers are on */
	uint8_t *base;
	uint64_t off;           /* in the io pool */
	uint64_t pool_bytes;    /* all the buffers' */
	uint64_t buffer_bytes;  /* one's: a fetch's part */
	int overlap;            /* a worker reads its next part while the
				   last one's upload runs (fetch.c) */
	int decode;             /* zstd blocks gathered on the device are
				   fetched and decompressed from the
				   buffers (fetch_decode) */
	int host_decode;        /* so are zstd blocks of host batches (the
				   buffers are for nothing else then) */
	uint32_t *free, nfree;  /* [mu] */
	_Atomic uint64_t bytes; /* stored bytes that came through them */
	_Atomic uint64_t bytes_overlapped; /* of those, uploaded while
					      their worker read its next
					      part */
};

/* At open, once the device and the gathers are set (gather_init): the
 * buffers, where every block a batch uses is gathered on the device from
 * its upload and checksummed there, and for zstd blocks of host batches.
 * 0, -ENOMEM, or where c->zstd_fetched the budget kept no room for them
 * (never: it counts them) -ENOSPC. */
int stage_open(struct loader_core *c);
void stage_close(struct loader_core *c);
/* Before the budget: will every zstd block be read and decompressed by
 * a worker through a staging buffer, as host batches' are where the
 * page cache holds the shards and the ring keeps them open?  Its io
 * memory then holds only its decoded bytes (block_io_bytes; record
 * ranges rule it out: loader_open.c sets c->zstd_fetched). */
int stage_fetches_zstd(const struct loader_core *c);
/* The io memory the buffers of c->zstd_fetched take (the budget's). */
uint64_t stage_fetch_want(const struct loader_core *c);
/* A staging buffer's bytes, unless memory is tight (stage_open): what
 * a record range must fit before the device opens (ranges_device_suits). */
uint64_t stage_buffer_nominal(void);
/* Before the device opens: the staging buffers where every record is
 * read by range and may go to the device (ranges_device_init). */
uint64_t stage_ranges_want(const struct loader_core *c);
/* Before @e's read (entry_prepare_read): whether the workers fetch it
 * (fetch.on), when its block goes only to the device. [mu] */
void stage_choose_locked(struct loader_core *c, struct cache_entry *e,
			 const struct shard_block *blk);
/* Does batch @s use a block whose bytes are only on the device? [mu] */
int stage_slot_uses_locked(const struct loader_core *c,
			   const struct slot *s);

#endif /* SLUICE_PIPELINE_STAGE_H */
