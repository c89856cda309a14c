/*
 * stream.c - a block checked while its read's pieces land.  The ring cuts
 * a buffered read into pieces that the kernel's workers copy from the page
 * cache (io/submit.c); each piece is in the CPU's cache right after.
 * Hashing it then, rather than the whole block once its last piece is in,
 * spares the checksum a pass over memory, and where batches are gathered
 * on the device the piece is uploaded from the cache too.  The pieces are
 * hashed in order (one XXH3 state per block): a JOB_STREAM takes what has
 * landed, and the decode hashes what is left and compares.  A block
 * that the device checksums from its upload (gather_check) is only
 * uploaded here: the CPU never hashes it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

/* Landed bytes worth a job: a lock and a wake-up per 4 MiB is noise
 * beside hashing them; blocks shorter than two steps are hashed whole. */
#define STREAM_STEP ((uint64_t)4 << 20)
/* Blocks streamed at once, at most: a state each. */
#define STREAM_STATES_MAX 256u

int stream_open(struct loader_core *c)
{
	struct stream_pool *p = &c->streams;
	uint32_t n = c->cache.nentries < STREAM_STATES_MAX
		? c->cache.nentries : STREAM_STATES_MAX;

	if (!c->cfg.verify || (sluice_loader_config_forced(&c->cfg) &
				SLUICE_FORCE_WHOLE_BLOCK_CHECKS))
		return 0;
	p->all = calloc(n, sizeof(*p->all));
	p->free = calloc(n, sizeof(*p->free));
	if (!p->all || !p->free)
		return -ENOMEM;
	for (uint32_t k = 0; k < n; k++) {
		p->all[k] = block_hash_new();
		if (!p->all[k])
			return -ENOMEM;
		p->cap = k + 1;
		p->free[p->nfree++] = p->all[k];
	}
	return 0;
}

void stream_close(struct loader_core *c)
{
	struct stream_pool *p = &c->streams;

	for (uint32_t k = 0; k < p->cap; k++)
		block_hash_free(p->all[k]);
	free(p->all);
	free(p->free);
	memset(p, 0, sizeof(*p));
}

/* Bytes of @blk's stored bytes landed in @e's buffer (its read starts at
 * an aligned offset before the block's). */
static uint64_t stored_landed(const struct cache_entry *e,
			      const struct shard_block *blk)
{
	uint64_t landed = atomic_load_explicit(&e->rd.landed,
					       memory_order_acquire);
	uint64_t head = blk->offset - e->rd.offset;

	if (landed <= head)
		return 0;
	landed -= head;
	return landed < blk->stored_size ? landed : blk->stored_size;
}

/* Uploaded as they land: raw blocks are their batches' bytes where
 * batches are gathered, and blocks checked on the device are checked
 * there. */
static int stream_uploads(const struct loader_core *c,
			  const struct shard_block *blk)
{
	return (c->gather.on && blk->codec == DLS_CODEC_RAW &&
		blk->stored_size == blk->raw_size) ||
	       gather_checks(c, blk);
}

/* Hashed as they land: checked on the CPU (none without a pool). */
static int stream_hashes(const struct loader_core *c,
			 const struct shard_block *blk)
{
	return c->streams.cap && !gather_checks(c, blk);
}

void stream_on_landed(void *ctx, struct io_read *rd)
{
	struct loader_core *c = ctx;
	struct cache_entry *e = rd->user;
	const struct shard_block *blk;
	uint32_t shard;

	if (!e)
		return;         /* a record-range read (ranges.c) */
	core_lock(c);
	blk = loader_block(c, e->block, &shard);
	if (c->stop || e->stream.queued || e->state != ENTRY_READING ||
	    blk->stored_size < 2 * STREAM_STEP ||
	    stored_landed(e, blk) < e->stream.hashed + STREAM_STEP)
		goto out;
	if (!stream_hashes(c, blk)) {
		/* only an upload to do, and only while every byte before
		 * went up (a failed upload leaves the rest to the decode) */
		if (!stream_uploads(c, blk) ||
		    e->stream.uploaded != e->stream.hashed)
			goto out;
	} else if (!e->stream.hash) {
		if (c->streams.nfree == 0)
			goto out;       /* hashed whole when decoded */
		e->stream.hash = c->streams.free[--c->streams.nfree];
		block_hash_reset(e->stream.hash);
	}
	e->stream.queued = 1;
	jobs_push_locked(c, (struct job){ JOB_STREAM,
					  (uint32_t)(e - c->cache.entries),
					  0, 1 });
out:
	pthread_mutex_unlock(&c->mu);
}

void stream_part(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	const uint8_t *stored = e->stored + (blk->offset - e->rd.offset);
	int upload = stream_uploads(c, blk);
	uint64_t hashed = e->stream.hashed, t0 = now_ns();
	uint64_t cpu0 = thread_cpu_ns(), upload_cpu = 0;
	int handed_on = 0;

	core_lock(c);
	for (;;) {
		uint64_t to = stored_landed(e, blk), up_cpu0;

		if (to > hashed) {
			pthread_mutex_unlock(&c->mu);
			if (e->stream.hash)
				block_hash_feed(e->stream.hash, stored + hashed,
						to - hashed);
			/* a failed upload leaves the rest to the decode,
			 * which says why */
			if (upload && e->stream.uploaded == hashed) {
				up_cpu0 = thread_cpu_ns();
				upload = gather_upload(c, stored + hashed,
						       stored + hashed,
						       to - hashed) == 0;
				upload_cpu += thread_cpu_ns() - up_cpu0;
			} else {
				upload = 0;
			}
			if (e->stream.hash)
				atomic_fetch_add(&c->bytes_verified_landing,
						 to - hashed);
			core_lock(c);
			if (upload)
				e->stream.uploaded = to;
			e->stream.hashed = hashed = to;
			continue;
		}
		e->stream.queued = 0;
		if (e->stream.read_back) {
			e->stream.read_back = 0;
			entry_read_done_locked(c, e);
			handed_on = 1;
		}
		break;
	}
	pthread_mutex_unlock(&c->mu);
	/* The I/O thread may sleep in the ring for a read that only this
	 * hand-on settled: a failed read-ahead block's pin given back, a
	 * read-ahead limit raised. */
	if (handed_on)
		io_ring_wake(c->ring);
	/* gather_upload counted its own CPU as assembly's */
	atomic_fetch_add(&c->cpu_verify_ns,
			 thread_cpu_ns() - cpu0 - upload_cpu);
	atomic_fetch_add(&c->st_decode.busy_ns, now_ns() - t0);
}

int stream_read_back_locked(struct cache_entry *e)
{
	if (!e->stream.queued)
		return 0;
	e->stream.read_back = 1;
	return -EBUSY;
}

int stream_check(struct cache_entry *e, const struct shard_block *blk,
		 const uint8_t *stored)
{
	/* a read that settled short has no more bytes: the check fails */
	uint64_t to = stored_landed(e, blk);

	if (to > e->stream.hashed)
		block_hash_feed(e->stream.hash, stored + e->stream.hashed,
				to - e->stream.hashed);
	e->stream.hashed = to;
	return block_hash_check(blk, e->stream.hash);
}

void stream_release_locked(struct loader_core *c, struct cache_entry *e)
{
	if (!e->stream.hash)
		return;
	c->streams.free[c->streams.nfree++] = e->stream.hash;
	e->stream.hash = NULL;
}
