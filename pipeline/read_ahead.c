/*
 * read_ahead.c - blocks read before any batch is planned that needs them,
 * so that the decode workers always have blocks coming, and as many bytes
 * are in flight as the storage's latency asks for.  The open sets a
 * read-ahead that keeps two blocks per decode worker coming, and under a
 * window shuffle of raw blocks the next window's blocks (it sizes the
 * default budget); where reads are slow, the limit rises toward every
 * cache entry a batch does not need, following bandwidth x latency: the
 * blocks read per second times the quickest read's latency, twice over.
 * The quickest, not the average: by Little's law the average latency
 * times the rate is what is in flight already, whatever the device.
 */
#include "loader.h"

/* Read-ahead keeps two blocks per decode worker coming, but no more
 * than AHEAD_BYTES_MAX of them at open (nor fewer than one per worker
 * and two): 1 GiB in flight is about 1 TB/s at 1 ms of latency.  On the
 * H100 host, 16 blocks of 64 MiB ahead (8 workers) gave 25.3 GB/s and 32
 * (16 workers) 24.9, for 2.9 against 5.0 GB of budget and 0.8 against
 * 1.2 s of open. */
#define AHEAD_BYTES_MAX (1ull << 30)
/* The limit follows the reads of windows this long. */
#define AHEAD_WINDOW_NS 100000000ull

void read_ahead_open(struct loader_core *c)
{
	/* the io memory a block takes, as the budget counts it */
	uint64_t per_block = c->nblocks ? cache_dataset_bytes(c) / c->nblocks
					: 0;
	uint32_t n = 2 * c->cfg.decode_threads;
	uint64_t most;

	/* a window shuffle's next window of raw blocks whole, so that it
	 * is read while this one's batches go out: its first batch needs
	 * nearly all of its blocks.  With 2 decode threads, 4 blocks ahead
	 * of a 16-block window left the consumer waiting at every window's
	 * start: 16 gave 5.23 GB/s against 4.58 on the VM, for 520 MiB of
	 * budget against 296 (16 KiB records, 4 MiB blocks, medians of 5).
	 * Not zstd blocks, whose decompression the CPUs are already busy
	 * with: 16 of them gave 4.74 and 5.32 against 5.42 and 5.57 GB/s
	 * (medians of 4), for 781 MiB against 443.  With 8 threads or more,
	 * two blocks a thread cover a 16-block window already. */
	if (c->cfg.shuffle == SLUICE_SHUFFLE_WINDOW && !c->has_zstd &&
	    n < c->need)
		n = (uint32_t)c->need;
	most = per_block ? AHEAD_BYTES_MAX / per_block : n;

	/* but a block for every worker and two coming, whatever their
	 * size: a zstd block is one worker's for its whole decode, and on
	 * the H100 host 1 GiB of them (10) kept 6.9 of 16 workers busy, at
	 * 0.46x the decompression limit (bench/results/
	 * 2026-11-27-h100-fetch.md) */
	if (most < c->cfg.decode_threads + 2)
		most = c->cfg.decode_threads + 2;
	if (most < 4)
		most = 4;
	c->ahead.max = n < most ? n : (uint32_t)most;
	c->ahead.limit = c->ahead.max;
}

void read_ahead_sample_locked(struct loader_core *c, uint64_t latency_ns,
			      uint64_t now)
{
	struct read_ahead_window *w = &c->ahead.window;
	uint64_t span, want, most;

	if (w->reads == 0 || latency_ns < w->fastest_ns)
		w->fastest_ns = latency_ns;
	if (w->reads++ == 0)
		w->start_ns = now;
	span = now - w->start_ns;
	if (span < AHEAD_WINDOW_NS || w->reads < 4)
		return;
	/* blocks in flight that bandwidth x latency asks for, twice: the
	 * reads after the window's first, over the time since it, times
	 * the quickest read's latency */
	want = (2 * (w->reads - 1) * w->fastest_ns + span - 1) / span;
	/* at most every entry a batch does not need */
	most = c->cache.nentries > c->need ? c->cache.nentries - c->need : 0;
	if (want > most)
		want = most;
	c->ahead.limit = want > c->ahead.max ? (uint32_t)want : c->ahead.max;
	w->reads = 0;
}

/* Block @g is cached for this pass, or on its way (a block decoded into
 * its batch is not read again for the read-ahead either). */
static int cached_or_coming(const struct loader_core *c, uint64_t g)
{
	int32_t have = c->cache.block_entry[g];

	return have >= 0 && (c->cache.entries[have].direct ||
			     cache_usable(c, &c->cache.entries[have]));
}

/*
 * Mark the cached blocks of the span the planner is in (a window's,
 * under a window shuffle) so that the read-ahead leaves them: its next
 * batches need them again, yet their last use makes them the least
 * recently used, the first the read-ahead would take.  A window of 3
 * blocks of 5 MB under memory_bytes 40M read 42 to 49 blocks of 25 so;
 * marked, 25.
 */
static void mark_plan_span(struct loader_core *c)
{
	struct sampler_span sp;

	c->cache.plan_mark++;
	if (c->plan_batch >= c->sampler.nbatches)
		return;
	sampler_span(&c->sampler, c->plan_batch * c->cfg.batch_size,
		     &c->ahead.plan_memo, &sp);
	if (sp.nblocks == 0) {
		sp.one = loader_block_of(c, sp.record);
		sp.blocks = &sp.one;
		sp.nblocks = 1;
	}
	for (uint64_t k = 0; k < sp.nblocks; k++) {
		int32_t have = c->cache.block_entry[sp.blocks[k]];

		if (have >= 0)
			c->cache.entries[have].plan_mark = c->cache.plan_mark;
	}
}

/*
 * Read blocks that batches not yet planned will need, in the order they
 * will need them, while the cache has entries to spare beyond what the
 * next batch needs.  They stay pinned until decoded, then wait on the LRU
 * list for their batches, which only the planner may evict: the
 * read-ahead stops when nothing else is left to take.  Reads are
 * appended to c->submit.
 */
void read_ahead_locked(struct loader_core *c, unsigned *nsubmit)
{
	uint64_t batch = c->cfg.batch_size;

	/* looking no further ahead than that many blocks' worth of
	 * records */
	uint64_t horizon = c->nblocks ? (uint64_t)c->ahead.limit *
		(c->ds->record_count / c->nblocks + 1) : 0;

	/* a restart at or past the job's last epoch (cfg.epochs): nothing
	 * of it is planned, so nothing is read for it; nor is anything
	 * where nothing can be claimed (the io thread calls at every turn) */
	if (loader_past_epochs(c, c->plan_epoch) ||
	    c->ahead.inflight >= c->ahead.limit ||
	    c->cache.lru_count <= c->need)
		return;
	mark_plan_span(c);

	while (c->ahead.inflight < c->ahead.limit &&
	       c->cache.lru_count > c->need) {
		struct sampler_span sp;
		uint64_t i, pos;
		int full = 0;

		if (c->ahead.batch < c->plan_batch) {
			c->ahead.batch = c->plan_batch;
			c->ahead.rec = 0;
		}
		pos = (c->ahead.batch - c->plan_batch) * batch + c->ahead.rec;
		if (c->ahead.batch >= c->sampler.nbatches ||
		    pos > horizon ||
		    c->ahead.rec >= sampler_batch_count(&c->sampler,
							c->ahead.batch))
			return;
		/* A run of positions and the blocks it needs (a whole
		 * window's), not record by record: a window of tiny records
		 * holds millions. */
		i = c->ahead.batch * batch + c->ahead.rec;
		sampler_span(&c->sampler, i, &c->ahead.memo, &sp);
		if (sp.nblocks == 0) {
			sp.one = loader_block_of(c, sp.record);
			sp.blocks = &sp.one;
			sp.nblocks = 1;
		}
		for (uint64_t k = 0; k < sp.nblocks; k++) {
			uint64_t g = sp.blocks[k];
			uint32_t e;
			int r;

			if (c->ahead.inflight >= c->ahead.limit ||
			    c->cache.lru_count <= c->need) {
				full = 1; /* come back to this span */
				break;
			}
			if (cached_or_coming(c, g) || range_block(c, g) ||
			    (sp.nblocks == 1 &&
			     direct_would_take(c, c->ahead.batch, c->ahead.rec,
					       g)))
				continue;
			r = cache_claim_ahead(c, g, c->io_need_bytes, &e);
			if (r < 0) {
				full = 1;
				break;
			}
			if (r == 0)
				continue;
			c->cache.entries[e].ahead = 1;
			c->ahead.inflight++;
			entry_prepare_read(c, e);
			c->submit[(*nsubmit)++] = &c->cache.entries[e].rd;
		}
		if (full)
			return;
		i += sp.positions;
		c->ahead.batch = i / batch;
		c->ahead.rec = (uint32_t)(i % batch);
	}
}
