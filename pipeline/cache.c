/*
 * cache.c - the decoded-block cache.
 *
 * Blocks are the unit of I/O.  A batch pins the entries of every block its
 * records live in; an entry whose pins drop to zero stays valid on an LRU
 * list, so the next batches of a shuffle window (or the next batch of a
 * block split between two batches) find it without a second read.  Entries
 * are only recycled from that list, which is why the planner waits, rather
 * than evicts, when a batch needs more entries than are free.  An entry
 * holds io memory (budget.c's io pool) only while it holds a block, as
 * much as that block needs; taking memory evicts unpinned blocks, least
 * recently used first.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

#define NIL UINT32_MAX

int cache_init(struct loader_core *c, uint32_t nentries)
{
	c->cache.entries = calloc(nentries, sizeof(*c->cache.entries));
	c->cache.block_entry = malloc(c->nblocks *
				      sizeof(*c->cache.block_entry));
	if (!c->cache.entries || !c->cache.block_entry)
		return -ENOMEM;
	c->cache.nentries = nentries;
	for (uint64_t b = 0; b < c->nblocks; b++)
		c->cache.block_entry[b] = -1;
	c->cache.lru_head = c->cache.lru_tail = NIL;
	c->cache.lru_count = 0;
	c->cache.lru_bytes = 0;
	for (uint32_t i = 0; i < nentries; i++) {
		struct cache_entry *e = &c->cache.entries[i];

		e->wait_first = e->wait_last = WAIT_NONE;
		cache_lru_push(c, i);
	}
	return 0;
}

void cache_destroy(struct loader_core *c)
{
	free(c->cache.entries);
	free(c->cache.block_entry);
	c->cache.entries = NULL;
	c->cache.block_entry = NULL;
}

void cache_lru_remove(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];

	if (!e->in_lru)
		return;
	if (e->lru_prev != NIL)
		c->cache.entries[e->lru_prev].lru_next = e->lru_next;
	else
		c->cache.lru_head = e->lru_next;
	if (e->lru_next != NIL)
		c->cache.entries[e->lru_next].lru_prev = e->lru_prev;
	else
		c->cache.lru_tail = e->lru_prev;
	e->in_lru = 0;
	c->cache.lru_count--;
	c->cache.lru_bytes -= e->mem_len;
}

/* Most recently used at the tail; victims come from the head. */
void cache_lru_push(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];

	e->lru_prev = c->cache.lru_tail;
	e->lru_next = NIL;
	if (c->cache.lru_tail != NIL)
		c->cache.entries[c->cache.lru_tail].lru_next = i;
	else
		c->cache.lru_head = i;
	c->cache.lru_tail = i;
	e->in_lru = 1;
	c->cache.lru_count++;
	c->cache.lru_bytes += e->mem_len;
}

/* Entry @i no longer serves its block.  A block viewed by batches may
 * have been given a new entry meanwhile (cache_claim): leave that one. */
static void forget_block(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];

	if (c->cache.block_entry[e->block] == (int32_t)i)
		c->cache.block_entry[e->block] = -1;
}

void cache_unpin(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];

	if (--e->refs > 0)
		return;
	/* A failed block is not worth keeping: forget it so that a later
	 * batch retries the read instead of inheriting the error.  An EMPTY
	 * one was claimed by a plan that was undone. */
	if (e->state == ENTRY_FAILED || e->state == ENTRY_EMPTY) {
		forget_block(c, i);
		e->state = ENTRY_EMPTY;
		e->ahead_unused = 0;
	}
	/* Its decoded bytes were its batch's memory (direct.c). */
	if (e->forget) {
		forget_block(c, i);
		e->state = ENTRY_EMPTY;
		e->forget = 0;
		e->claim_pass = c->plan_pass;
		e->direct = NULL;
		e->direct_slot = NULL;
	}
	cache_lru_push(c, i);
}

/* io memory that free space and unpinned entries could give. */
uint64_t cache_reclaimable(const struct loader_core *c)
{
	return c->io_pool.size - c->io_pool.used + c->cache.lru_bytes;
}

/* Forget entry @i's block and give its memory back (it is unpinned). */
static void cache_evict(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];

	if (e->state != ENTRY_EMPTY)
		forget_block(c, i);
	e->state = ENTRY_EMPTY;
	e->ahead_unused = 0;
	if (e->mem_len) {
		if (e->in_lru)
			c->cache.lru_bytes -= e->mem_len;
		pool_free(&c->io_pool, e->mem_off, e->mem_len);
	}
	e->mem_len = 0;
	e->stored = e->scratch = NULL;
}

/* Forget every unpinned block: a batch that does not fit between the
 * cached ones may fit in one piece of the pool. */
void cache_evict_all(struct loader_core *c)
{
	for (uint32_t v = c->cache.lru_head; v != NIL;
	     v = c->cache.entries[v].lru_next)
		cache_evict(c, v);
}

/* @e holds a block the read-ahead read for a batch of this pass that
 * has not claimed it yet, or one the planner's span needs again. */
static int waits_for_batch(const struct loader_core *c,
			   const struct cache_entry *e)
{
	return e->mem_len &&
	       ((e->ahead_unused && e->claim_pass == c->plan_pass) ||
		e->plan_mark == c->cache.plan_mark);
}

/* The least recently used entry from @v on that holds memory, and
 * with @spare none waiting for its batch: NIL when none. */
static uint32_t lru_victim(const struct loader_core *c, uint32_t v,
			   int spare)
{
	while (v != NIL && (c->cache.entries[v].mem_len == 0 ||
			    (spare && waits_for_batch(
					c, &c->cache.entries[v]))))
		v = c->cache.entries[v].lru_next;
	return v;
}

/* @len bytes of io memory, evicting the least recently used blocks
 * until a range is free: first those not waiting for their batch, then
 * (unless @spare) those too.  The planner's claims took the least
 * recently used whatever it was, often a block read ahead for the next
 * batches, which then read it again: a capped window shuffle read 249
 * blocks of 236 in an epoch.  0 or -EAGAIN. */
static int alloc_io(struct loader_core *c, uint64_t len, uint64_t *off,
		    int spare)
{
	uint32_t v = c->cache.lru_head, w = c->cache.lru_head;

	while (pool_alloc(&c->io_pool, len, off)) {
		uint32_t victim;

		v = lru_victim(c, v, 1);
		victim = v;
		if (victim == NIL && !spare)
			victim = w = lru_victim(c, w, 0);
		if (victim == NIL)
			return -EAGAIN;
		cache_evict(c, victim);
	}
	return 0;
}

int cache_alloc_io(struct loader_core *c, uint64_t len, uint64_t *off)
{
	return alloc_io(c, len, off, 0);
}

/* io memory for @blk in entry @i.  0 or -EAGAIN. */
static int cache_take_memory(struct loader_core *c, uint32_t i,
			     const struct shard_block *blk, int spare)
{
	struct cache_entry *e = &c->cache.entries[i];
	uint64_t len = block_io_bytes(c, blk), off;

	if (alloc_io(c, len, &off, spare))
		return -EAGAIN;
	e->mem_off = off;
	e->mem_len = len;
	e->stored = c->arena + off;
	e->frame_at = NULL;
	e->scratch = blk->codec == DLS_CODEC_ZSTD
		? e->stored + len - ((blk->raw_size + 4095) & ~4095ull) : NULL;
	return 0;
}

/*
 * Whether this pass may use entry @e's block.  Batches of another pass
 * viewed it and may have written their records (view.c), or it was
 * decoded into a batch's memory (direct.c): this pass reads the block
 * again, into another entry.  Batches of one pass deliver each record
 * once, so within the pass a viewed block serves its other records.
 */
int cache_usable(const struct loader_core *c, const struct cache_entry *e)
{
	return !e->direct && !(e->exposed && e->view_pass != c->plan_pass);
}

/*
 * Pin the entry of @block, taking a free one (and setting it EMPTY, with
 * io memory for the block) when the block is not cached.  @keep: io
 * memory that must stay reclaimable afterwards (read-ahead leaves the
 * next batch its room).  @spare: evict no block waiting for its batch
 * (the read-ahead's own claims).  @return: 1 when the block must be
 * read, 0 when it is cached or on its way, -EAGAIN when no entry or
 * memory is free.
 */
static int claim(struct loader_core *c, uint64_t block, uint64_t keep,
		 int spare, uint32_t *entry)
{
	int32_t have = c->cache.block_entry[block];
	const struct shard_block *blk;
	struct cache_entry *e;
	uint32_t i, shard;

	if (have >= 0 && !cache_usable(c, &c->cache.entries[have])) {
		c->cache.block_entry[block] = -1;
		have = -1;
	}
	if (have >= 0) {
		i = (uint32_t)have;
		cache_lru_remove(c, i);
		c->cache.entries[i].refs++;
		c->cache.entries[i].ahead_unused = 0;
		c->cache.entries[i].claim_pass = c->plan_pass;
		*entry = i;
		return 0;
	}
	if (c->cache.lru_head == NIL)
		return -EAGAIN;
	blk = loader_block(c, block, &shard);
	if (keep && cache_reclaimable(c) < block_io_bytes(c, blk) + keep)
		return -EAGAIN;
	i = c->cache.lru_head;
	while (spare && i != NIL && waits_for_batch(c, &c->cache.entries[i]))
		i = c->cache.entries[i].lru_next;
	if (i == NIL)
		return -EAGAIN;
	cache_lru_remove(c, i);
	cache_evict(c, i);
	if (cache_take_memory(c, i, blk, spare)) {
		cache_lru_push(c, i);
		return -EAGAIN;
	}
	e = &c->cache.entries[i];
	e->block = block;
	e->state = ENTRY_EMPTY;
	e->refs = 1;
	e->nwaiters = 0;
	e->wait_first = e->wait_last = WAIT_NONE;
	e->error = 0;
	e->corrupt = 0;
	e->forget = 0;
	e->exposed = 0;
	e->ahead_unused = 0;
	e->claim_pass = c->plan_pass;
	c->cache.block_entry[block] = (int32_t)i;
	*entry = i;
	return 1;
}

int cache_claim(struct loader_core *c, uint64_t block, uint64_t keep,
		uint32_t *entry)
{
	return claim(c, block, keep, 0, entry);
}

int cache_claim_ahead(struct loader_core *c, uint64_t block, uint64_t keep,
		      uint32_t *entry)
{
	int r = claim(c, block, keep, 1, entry);

	if (r == 1)
		c->cache.entries[*entry].ahead_unused = 1;
	return r;
}

/* io memory every block of the dataset takes at once (budget.c's
 * block_io_bytes, summed). */
uint64_t cache_dataset_bytes(const struct loader_core *c)
{
	uint64_t sum = 0;

	for (uint64_t g = 0; g < c->nblocks; g++) {
		uint32_t shard;

		sum += block_io_bytes(c, loader_block(c, g, &shard));
	}
	return sum;
}

/*
 * Whether the cache holds every block at once (budget and entries set):
 * then each block is read once in the loader's life, and every later
 * epoch is served from the cache, as long as nothing makes a block
 * unusable for a later pass.  Views and direct decodes do (a consumer
 * may write into a viewed block; a block decoded into its batch leaves
 * with it): they save a copy per batch but cost a read (and a
 * decompression) of their block every epoch, so such a loader makes
 * neither (view.c, direct.c).
 */
int cache_holds_dataset(const struct loader_core *c)
{
	return c->cache.nentries >= c->nblocks &&
	       c->io_bytes >= cache_dataset_bytes(c) + c->ranges.io_want;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The most distinct blocks one batch can touch under the shuffle mode: the
 * cache must hold at least that many entries or a batch could never be
 * planned.  Consecutive records (none, block) span at most the fewest
 * smallest blocks that add up to a batch, plus one for the misaligned
 * start; a window batch spans that many windows of W blocks; a full
 * shuffle may touch a different block per record.
 */
uint64_t cache_needed(const struct loader_core *c, uint32_t batch_size)
{
	uint64_t n = c->nblocks, need, k = 0, sum = 0;
	uint64_t *sizes = malloc(n * sizeof(*sizes));
	uint32_t w = c->cfg.window_blocks ? c->cfg.window_blocks : 1;

	if (!sizes) {
		need = n;
	} else {
		for (uint64_t b = 0; b < n; b++)
			sizes[b] = c->block_first[b + 1] - c->block_first[b];
		qsort(sizes, n, sizeof(*sizes), cmp_u64);
		if (c->cfg.shuffle == SLUICE_SHUFFLE_WINDOW) {
			/* records of the smallest possible windows */
			uint64_t wsum = 0, windows = 0;

			for (uint64_t b = 0; b < w && b < n; b++)
				wsum += sizes[b];
			windows = wsum ? (batch_size + wsum - 1) / wsum : n;
			need = (windows + 1) * w;
		} else {
			while (k < n && sum < batch_size)
				sum += sizes[k++];
			need = k + 1;
		}
		free(sizes);
	}
	/* a mixture's batch holds a run of each stream */
	if (c->sampler.nstreams > 1 && need <= UINT64_MAX / c->sampler.nstreams)
		need *= c->sampler.nstreams;
	if (c->cfg.shuffle == SLUICE_SHUFFLE_FULL)
		need = batch_size;
	if (need > n)
		need = n;
	return need;
}
