/*
 * stage.h - raw blocks that go only to the device land in small rings of
 * pinned pieces instead of their io memory (stage.c): the state the
 * loader keeps for them.
 */
#ifndef SLUICE_PIPELINE_STAGE_H
#define SLUICE_PIPELINE_STAGE_H

#include <stdatomic.h>
#include <stdint.h>

struct loader_core;
struct cache_entry;
struct shard_block;
struct slot;

/* The loader's rings, back to back in the io pool: set at open; the
 * free list [mu]. */
struct stage_pool {
	int on;
	int fetch;              /* blocks fetched by the workers (fetch.c),
				   one buffer per part at a time; else a
				   ring per staged read (io/ring.h) */
	uint8_t *base;
	uint64_t buffer_bytes;  /* a ring's, or a fetch buffer's */
	uint64_t off;           /* in the io pool */
	uint64_t pool_bytes;    /* all the rings' */
	uint32_t pieces;        /* per ring, of IO_PIECE_BYTES */
	uint64_t upload_max;    /* bytes one upload takes from a ring */
	uint32_t *free, nfree;  /* [mu] */
	_Atomic uint64_t bytes; /* stored bytes that came through a ring */
};

/* At open, once the device and the gathers are set (gather_init): the
 * rings, where every block a batch uses is gathered on the device from
 * its upload and checksummed there.  0 or -ENOMEM. */
int stage_open(struct loader_core *c);
void stage_close(struct loader_core *c);
/* Before @e's read (entry_prepare_read): a ring for it, when its block
 * goes only to the device and one is free. [mu] */
void stage_take_locked(struct loader_core *c, struct cache_entry *e,
		       const struct shard_block *blk);
/* Its ring back, once its bytes are all uploaded or it failed. [mu] */
void stage_give_locked(struct loader_core *c, struct cache_entry *e);
/* Does batch @s use a block whose bytes are only on the device? [mu] */
int stage_slot_uses_locked(const struct loader_core *c,
			   const struct slot *s);

#endif /* SLUICE_PIPELINE_STAGE_H */
