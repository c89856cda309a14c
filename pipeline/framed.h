/*
 * framed.h - zstd records decoded from their own frames straight into
 * their batch (framed.c): the loader's state for it and its functions.
 * A cache entry's (frame_at) is in struct cache_entry.
 */
#ifndef SLUICE_PIPELINE_FRAMED_H
#define SLUICE_PIPELINE_FRAMED_H

#include <stdatomic.h>
#include <stdint.h>
#include <zstd.h>

struct loader_core;
struct cache_entry;
struct shard_block;
struct block_hash;

/* The loader's [set at open] */
struct loader_framed {
	int sized;                  /* zstd blocks a worker fetches: their
				       io memory has room for their stored
				       bytes, the other fields and the
				       frame table (framed_io_bytes) */
	int on;                     /* their main field is decoded at
				       assembly (cleared where the cache
				       holds the dataset, by chunks, or
				       where batches are gathered on the
				       device) */
	uint32_t field;             /* the main field: a frame per record */
	_Atomic uint64_t records;   /* records decoded into their batch */
};

/* Before the budget: may batches decode their records' frames? (sets
 * sized, on and field) */
void framed_open(struct loader_core *c);
/* Once the cache and chunks are known: on stays where it pays. */
void framed_init(struct loader_core *c);
/* The io memory a zstd block @blk takes where framed.sized. */
uint64_t framed_io_bytes(const struct loader_core *c,
			 const struct shard_block *blk);

/* framed_fetch()'s answer for a block not cut a frame per record. */
#define FRAMED_NOT_CUT 1

/*
 * A worker's fetch of zstd block @blk into entry @e (unlocked): its
 * stored bytes read into its io memory (hashed as they land, with
 * @hash), its seek table parsed, its other fields decoded after them
 * (@dctx), and where each record's frame lies (e->frame_at, counted from
 * e->frames, e->view).
 * read a part of c->stage.buffer_bytes at a time.  @return: 0 with
 * *@decode_err set when the bytes were bad; the read's error (*@bad_part:
 * the part that failed);
 * FRAMED_NOT_CUT when its main field is not a frame per record (the
 * caller decodes it whole).
 */
int framed_fetch(struct loader_core *c, struct cache_entry *e,
		 const struct shard_block *blk, ZSTD_DCtx *dctx,
		 struct block_hash *hash, uint32_t *bad_part, int *decode_err,
		 uint64_t *read_end);

/*
 * Entry @e's zstd block @blk, read by the ring to @stored and checked
 * (decode.c): its seek table parsed, its other fields decoded into the
 * entry's decode buffer with @dctx, and where each record's frame lies
 * (e->frame_at, e->frames, e->view).  @return: 0, FRAMED_NOT_CUT (the
 * caller decodes it whole), or a decode error.
 */
int framed_lay_out_read(struct loader_core *c, struct cache_entry *e,
			const struct shard_block *blk, const uint8_t *stored,
			ZSTD_DCtx *dctx);

#endif /* SLUICE_PIPELINE_FRAMED_H */
