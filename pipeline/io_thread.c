/*
 * io_thread.c - the planner and the I/O thread.
 *
 * The I/O thread owns the ring.  Whenever a slot is free it plans the next
 * batch: the sampler names the records, the cache pins the blocks they
 * live in, and every block not already cached or on its way is read, all
 * of a batch's reads in one submission.  Then it sleeps in the ring until
 * a read completes or somebody wakes it (a slot or cache entry freed, an
 * epoch restart, close).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

static uint64_t align_down(uint64_t x, uint64_t a)
{
	return x & ~(a - 1);
}

/* Global block of global record @r: the last block starting at or
 * before it. */
uint64_t loader_block_of(const struct loader_core *c, uint64_t r)
{
	return last_at_or_before(c->block_first, c->nblocks, r);
}

const struct shard_block *loader_block(const struct loader_core *c,
				       uint64_t g, uint32_t *shard)
{
	uint32_t s = c->block_shard[g];

	*shard = s;
	return &c->ds->shards[s].blocks[g - c->shard_block_base[s]];
}

void entry_prepare_read(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	uint64_t a = c->ring_info.alignment ? c->ring_info.alignment : 1;
	uint64_t start = align_down(blk->offset, a);
	uint64_t head = blk->offset - start;

	memset(&e->rd, 0, sizeof(e->rd));
	e->rd.file = shard;
	e->rd.offset = start;
	e->rd.length = align_up(head + blk->stored_size, a);
	e->rd.min_length = head + blk->stored_size;
	e->rd.buf = e->stored;
	e->rd.user = e;
	e->stream = (struct stream_entry){ 0 };
	stage_choose_locked(c, e, blk);
	e->state = ENTRY_READING;
}

static void unpin_all(struct loader_core *c, struct slot *s)
{
	for (uint32_t k = 0; k < s->nentries; k++)
		cache_unpin(c, s->entries[k]);
	s->nentries = 0;
}

static struct slot *free_slot(struct loader_core *c)
{
	for (uint32_t i = 0; i < c->nslots; i++)
		if (c->slots[i]->state == SLOT_FREE)
			return c->slots[i];
	return NULL;
}

/* Slot @s waits for @e, its entries[@k]: last in @e's list of waits. */
static void entry_wait(struct loader_core *c, struct cache_entry *e,
		       struct slot *s, uint32_t k)
{
	uint64_t w = (uint64_t)s->id << 32 | k;

	s->wait_next[k] = WAIT_NONE;
	if (e->nwaiters++ == 0) {
		e->wait_first = w;
	} else {
		struct slot *last = c->slots[e->wait_last >> 32];

		last->wait_next[(uint32_t)e->wait_last] = w;
	}
	e->wait_last = w;
}

/* Slot @s waits for those of its pinned blocks not yet decoded: the
 * ones not read yet join c->submit (after *@nsubmit entries, which it
 * advances), the rest already on their way only count @s as a waiter. */
void slot_await_entries_locked(struct loader_core *c, struct slot *s,
			       unsigned *nsubmit)
{
	uint32_t nread = 0;

	for (uint32_t k = 0; k < s->nentries; k++) {
		struct cache_entry *ce = &c->cache.entries[s->entries[k]];

		switch (ce->state) {
		case ENTRY_EMPTY:
			entry_prepare_read(c, s->entries[k]);
			c->submit[*nsubmit + nread++] = &ce->rd;
			/* fall through */
		case ENTRY_READING:
		case ENTRY_DECODING:
			entry_wait(c, ce, s, k);
			s->pending++;
			break;
		default:
			atomic_fetch_add(&c->cache_hits, 1);
			break;
		}
	}
	*nsubmit += nread;
}

/*
 * Plan the next batch into a free slot.  @return: 1 when planned (its
 * reads appended to c->submit, *nsubmit updated), 0 when it has to wait
 * for a slot or for cache entries, -ENOSPC when its blocks cannot all be
 * in the io memory at once even with nothing else pinned.
 */
static int plan_one_locked(struct loader_core *c, unsigned *nsubmit)
{
	uint32_t count;
	struct slot *s;

	if (loader_past_epochs(c, c->plan_epoch))
		return 0;
	if (c->plan_batch >= c->sampler.nbatches) {
		if (c->sampler.nbatches == 0 && c->sampler.nlevels == 0)
			return 0;
		/* the job's last epoch: nothing after it to read */
		if (loader_past_epochs(c, c->plan_epoch + 1))
			return 0;
		/* Everything of this epoch is planned: prefetch the next,
		 * which is a fresh one (no earlier jobs). */
		c->plan_epoch++;
		c->plan_pass++;
		sampler_set_epoch(&c->sampler, c->plan_epoch);
		c->plan_batch = 0;
		c->ahead.batch = 0;
		c->ahead.rec = 0;
		if (c->sampler.nbatches == 0)
			return 0;
	}
	s = free_slot(c);
	if (!s)
		return 0;

	count = sampler_batch(&c->sampler, c->plan_batch, s->indices);
	if (c->chunks.chunked) {
		/* its blocks come a chunk at a time (chunks.c) */
		if (chunk_plan_locked(c, s, count))
			return -ENOSPC;
		goto planned;
	}
	s->nentries = 0;
	s->pending = 0;
	s->ranges.nranged = 0;
	for (uint32_t r = 0; r < count; r++) {
		uint64_t rec = s->indices[r];
		uint64_t g = loader_block_of(c, rec);
		int32_t have = c->cache.block_entry[g];
		uint32_t e;

		s->rec_in_block[r] = (uint32_t)(rec - c->block_first[g]);
		if (range_block(c, g)) {
			/* read by its byte ranges (ranges.c) */
			s->rec_entry[r] = RANGE_ENTRY;
			s->ranges.rec_block[r] = g;
			s->ranges.nranged++;
			continue;
		}
		/* Records of one block are usually neighbours: look at the
		 * entries this slot pinned last first. */
		if (have >= 0) {
			uint32_t k = s->nentries;

			while (k-- > 0)
				if (s->entries[k] == (uint32_t)have)
					break;
			if (k != UINT32_MAX) {
				s->rec_entry[r] = (uint32_t)have;
				continue;
			}
		}
		if (cache_claim(c, g, 0, &e) < 0) {
			/* Not enough free entries or io memory yet: undo and
			 * wait for the batches in flight to unpin theirs. */
			unpin_all(c, s);
			if (c->inflight == 0 && c->ahead.inflight == 0 &&
			    !c->plan_compacted) {
				/* Cached blocks may split the free memory:
				 * drop them all and try once more. */
				cache_evict_all(c);
				c->plan_compacted = 1;
				return plan_one_locked(c, nsubmit);
			}
			if (c->inflight == 0 && c->ahead.inflight == 0) {
				uint32_t shard;
				const struct shard_block *blk =
					loader_block(c, g, &shard);

				loader_fail_locked(c, -ENOSPC,
					"%s: block %llu (records %llu..%llu, %llu bytes to read and decode) does not fit beside the other blocks of batch %llu of epoch %llu in the %llu bytes of io memory memory_bytes leaves: raise memory_bytes (sluice --memory, Python memory_bytes=)",
					c->ds->shards[shard].path,
					(unsigned long long)(g -
						c->shard_block_base[shard]),
					(unsigned long long)c->block_first[g],
					(unsigned long long)(c->block_first[g + 1] - 1),
					(unsigned long long)block_io_bytes(c, blk),
					(unsigned long long)c->plan_batch,
					(unsigned long long)c->plan_epoch,
					(unsigned long long)(c->io_bytes -
						c->stage.pool_bytes));
				return -ENOSPC;
			}
			return 0;
		}
		s->entries[s->nentries++] = e;
		s->rec_entry[r] = e;
	}
	s->count = count;
	/* The ranges' reads go first into c->submit, the blocks' after. */
	switch (ranges_plan_locked(c, s, nsubmit)) {
	case 0:
		unpin_all(c, s);     /* no io memory yet: wait */
		return 0;
	case -EAGAIN:
		/* its blocks split the free memory: as above, once */
		unpin_all(c, s);
		cache_evict_all(c);
		c->plan_compacted = 1;
		return plan_one_locked(c, nsubmit);
	case -ENOSPC:
		unpin_all(c, s);
		return -ENOSPC;
	}
	if (s->ranges.nranged == 0)
		direct_plan_locked(c, s);
	/* Every block is pinned: read the new ones, wait for those on
	 * their way. */
	slot_await_entries_locked(c, s, nsubmit);
	c->plan_compacted = 0;
planned:
	s->state = SLOT_WAITING;
	s->epoch = c->plan_epoch;
	s->pass = c->plan_pass;
	s->batch = c->plan_batch++;
	s->count = count;
	s->error = 0;
	c->fifo[(c->fifo_head + c->fifo_len++) % c->slots_cap] = s->id;
	c->inflight++;
	if (c->chunks.chunked) {
		s->state = SLOT_MEMORY;
		batch_memory_grant_locked(c);
		if (!s->has_mem)    /* only next() may resolve it (budget.c) */
			pthread_cond_broadcast(&c->ready_cv);
	} else if (s->ranges.awaits_memory) {
		/* its reads wait for its memory (ranges.c's defer_locked) */
		s->state = SLOT_MEMORY;
		batch_memory_grant_locked(c);
		if (!s->has_mem)    /* only next() may resolve it (budget.c) */
			pthread_cond_broadcast(&c->ready_cv);
	} else if (s->pending == 0) {
		slot_assemble_locked(c, s);
	}
	return 1;
}

static void read_done_locked(struct loader_core *c, struct io_read *rd)
{
	struct cache_entry *e = rd->user;

	if (!e) {
		(void)range_read_done_locked(c, rd);
		return;
	}
	e->read_back_ns = now_ns();
	if (stream_read_back_locked(e) == 0)
		entry_read_done_locked(c, e);
}

void entry_read_done_locked(struct loader_core *c, struct cache_entry *e)
{
	const struct io_read *rd = &e->rd;
	uint32_t i = (uint32_t)(e - c->cache.entries);

	if (rd->result >= 0) {
		/* when the ring handed it back, not when a JOB_STREAM
		 * handed it on (stream.c) */
		uint64_t t = e->read_back_ns;

		loader_span(c, SLUICE_STAGE_READ, e->submit_ns, t,
			    (uint64_t)rd->result);
		read_ahead_sample_locked(c, t - e->submit_ns, t);
		atomic_fetch_add(&c->st_read.bytes, (uint64_t)rd->result);
		atomic_fetch_add(&c->st_read.ops, 1);
		atomic_fetch_add(&c->blocks_read, 1);
		e->state = ENTRY_DECODING;
		jobs_push_locked(c, (struct job){ JOB_DECODE, i, 0, 1 });
		return;
	}
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	int err = (int)rd->result;

	/* A file shorter than its index says is damaged data; everything
	 * else (-EIO, ...) is a failing device and always fatal. */
	stream_release_locked(c, e);
	e->state = ENTRY_FAILED;
	e->error = err == -ENODATA ? -SLUICE_ECORRUPT : err;
	e->corrupt = err == -ENODATA;
	loader_block_failed_locked(c, e->error, e->corrupt,
				   "%s: block %llu: offset %llu: read failed: %s",
				   c->ds->shards[shard].path,
				   (unsigned long long)(e->block -
							c->shard_block_base[shard]),
				   /* a fetch knows which part failed */
				   (unsigned long long)(e->fetch.on ?
					e->fetch.err_at : blk->offset),
				   err == -ENODATA ? "file truncated"
						   : strerror(-err));
	entry_ready_locked(c, i);
}

/* Submit c->submit[0, n) with one io_uring_enter, outside the lock; the
 * blocks the workers fetch go to them instead (fetch.c). */
static int submit_locked(struct loader_core *c, unsigned n)
{
	uint64_t t0 = now_ns();
	unsigned ring_reads = 0;
	int r;

	for (unsigned k = 0; k < n; k++) {
		struct io_read *rd = c->submit[k];
		struct cache_entry *e = rd->user;

		if (!e) {       /* a range read (ranges.c) */
			((struct range_read *)(void *)rd)->submit_ns = t0;
			if (c->range_fetches.cap &&
			    io_ring_pread_fd(c->ring, rd->file) >= 0) {
				fetch_range_queue_locked(c, rd);
				continue;
			}
		} else {
			e->submit_ns = t0;
			if (e->fetch.on) {
				fetch_queue_locked(c, e);
				continue;
			}
		}
		c->submit[ring_reads++] = rd;
	}
	n = ring_reads;
	if (n == 0)
		return 0;
	pthread_mutex_unlock(&c->mu);
	r = io_ring_submit(c->ring, c->submit, n);
	atomic_fetch_add(&c->st_read.busy_ns, now_ns() - t0);
	core_lock(c);
	if (r < 0)
		loader_fail_locked(c, r, "io_uring submit failed: %s",
				   strerror(-r));
	return r;
}

/* Every so often: the page-cache copies of this thread's reads, made on
 * io_uring's workers, are the read stage's CPU too. */
#define WORKERS_SAMPLE_NS 100000000ull

void *io_thread_main(void *arg)
{
	struct loader_core *c = arg;
	unsigned max_reap = c->reads_max;
	uint64_t cpu = thread_cpu_ns(), sampled = now_ns();
	struct io_workers_clock *workers = malloc(sizeof(*workers));

	/* without it the read stage's CPU leaves the copies out */
	if (workers)
		io_workers_clock_start(workers);

	core_lock(c);
	while (!c->stop) {
		unsigned nsubmit = 0;
		uint64_t cpu_now = thread_cpu_ns();

		/* Planning, submitting and reaping: all this thread does. */
		atomic_fetch_add(&c->cpu_read_ns, cpu_now - cpu);
		cpu = cpu_now;

		while (!c->stop && !c->planning_paused && !c->failed) {
			int planned = plan_one_locked(c, &nsubmit);

			if (nsubmit) {
				/* one submission per batch */
				if (submit_locked(c, nsubmit) < 0)
					break;
				nsubmit = 0;
			}
			if (planned <= 0)
				break;
		}
		/* Chunks of batches in flight, and the reads of deferred
		 * ones that have their memory, go on while planning is
		 * paused: a restart waits for those batches. */
		while (!c->stop && !c->failed &&
		       ranges_read_granted_locked(c, &nsubmit)) {
			submit_locked(c, nsubmit);
			nsubmit = 0;
		}
		if (!c->stop && !c->failed && c->chunks.chunked) {
			chunks_claim_locked(c, &nsubmit);
			if (nsubmit)
				submit_locked(c, nsubmit);
			nsubmit = 0;
		}
		if (!c->stop && !c->planning_paused && !c->failed) {
			read_ahead_locked(c, &nsubmit);
			if (nsubmit)
				submit_locked(c, nsubmit);
		}
		pthread_mutex_unlock(&c->mu);

		uint64_t t0 = now_ns();
		int n = io_ring_reap(c->ring, c->reaped, max_reap, 1);
		uint64_t t1 = now_ns();

		atomic_fetch_add(&c->st_read.wait_ns, t1 - t0);
		if (workers && t1 - sampled >= WORKERS_SAMPLE_NS) {
			atomic_fetch_add(&c->cpu_read_ns,
					 io_workers_clock_sample(workers));
			sampled = t1;
		}
		core_lock(c);
		if (n < 0 && n != -EINTR && n != -EAGAIN) {
			loader_fail_locked(c, n, "io_uring wait failed: %s",
					   strerror(-n));
			break;
		}
		for (int k = 0; k < n; k++)
			read_done_locked(c, c->reaped[k]);
	}
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&c->cpu_read_ns, thread_cpu_ns() - cpu);
	if (workers)
		atomic_fetch_add(&c->cpu_read_ns,
				 io_workers_clock_sample(workers));
	free(workers);
	return NULL;
}
