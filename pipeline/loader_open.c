/*
 * loader_open.c - a loader's open and close: size and allocate everything
 * (geometry, sampler, range reads, budget, cache, slots, ring, threads),
 * start its threads; stop them and free it all.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader.h"

static void free_core(struct loader_core *c)
{
	for (uint32_t i = 0; c->slots && i < c->nslots; i++)
		slot_free(c->slots[i]);
	io_ring_destroy(c->ring);
	stream_close(c);
	stage_close(c);
	ranges_close(c);
	cache_destroy(c);
	budget_close(c);
	device_close(c->dev);
	sampler_destroy(&c->sampler);
	free(c->slots);
	free(c->fifo);
	free(c->decode_jobs.ring);
	free(c->batch_jobs.ring);
	free(c->stream_jobs.ring);
	free(c->fetch_jobs.ring);
	free(c->range_fetches.ring);
	free(c->submit);
	free(c->reaped);
	free(c->workers);
	free(c->direct.ahead_recs);
	free(c->block_first);
	free(c->block_shard);
	free(c->shard_block_base);
	mixture_free(c->owned_ds);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->work_cv);
	pthread_cond_destroy(&c->ready_cv);
	free(c);
}

void core_unref(struct loader_core *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		free_core(c);
}

static int build_geometry(struct loader_core *c)
{
	const struct dataset *ds = c->ds;
	uint64_t g = 0;

	c->nblocks = ds->block_count;
	c->block_first = malloc((c->nblocks + 1) * sizeof(uint64_t));
	c->block_shard = malloc((c->nblocks ? c->nblocks : 1) * sizeof(uint32_t));
	c->shard_block_base = malloc((ds->nshards + 1) * sizeof(uint64_t));
	if (!c->block_first || !c->block_shard || !c->shard_block_base)
		return -ENOMEM;
	for (uint32_t s = 0; s < ds->nshards; s++) {
		const struct shard_file *sf = &ds->shards[s];

		c->shard_block_base[s] = g;
		for (uint64_t b = 0; b < sf->block_count; b++, g++) {
			c->block_first[g] = ds->shard_first[s] +
					    sf->blocks[b].first_record;
			c->block_shard[g] = s;
			if (sf->blocks[b].codec != DLS_CODEC_ZSTD)
				continue;
			c->has_zstd = 1;
			c->zstd_blocks++;
			if (sf->blocks[b].stored_size > c->zstd_stored_max)
				c->zstd_stored_max = sf->blocks[b].stored_size;
		}
	}
	c->shard_block_base[ds->nshards] = g;
	c->block_first[g] = ds->record_count;
	for (uint32_t f = 0; f < ds->schema.nfields; f++)
		if (ds->schema.fields[f].variable) {
			c->has_variable = 1;
			c->nvariable++;
		}
	return 0;
}

int shards_open_cached(const struct loader_core *c)
{
	if (!io_files_stay_open(c->ds->nshards))
		return 0;
	for (uint32_t s = 0; s < c->ds->nshards; s++)
		if (!io_path_cached(c->ds->shards[s].path))
			return 0;
	return 1;
}

static int alloc_slots(struct loader_core *c, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct slot *s = calloc(1, sizeof(*s));

		if (!s)
			return -ENOMEM;
		c->slots[c->nslots++] = s;
		if (slot_init(c, s, i))
			return -ENOMEM;
	}
	return 0;
}

static int open_ring(struct loader_core *c, uint8_t *arena, size_t len,
		     char *err, size_t errlen)
{
	const struct dataset *ds = c->ds;
	const char **paths = malloc(ds->nshards * sizeof(*paths));
	struct io_ring_config rc = {
		.queue_depth = c->cfg.queue_depth,
		/* zstd_fetched: auto found every shard cached, and the
		 * workers read only files opened buffered; so did
		 * ranges.budget_in_place, whose reads in place need them
		 * buffered (the arena made resident since may have pushed a
		 * shard out of the page cache) */
		.direct = c->cfg.direct_io == SLUICE_DIRECT_IO_ON ? 1
			  : c->cfg.direct_io == SLUICE_DIRECT_IO_OFF ||
			    c->zstd_fetched || c->ranges.budget_in_place
			  ? 0 : -1,
		.sqpoll = c->cfg.sqpoll,
		.plain_reads = !!(sluice_loader_config_forced(&c->cfg) &
				  SLUICE_FORCE_PLAIN_READS),
		.read_delay_us = (uint32_t)SLUICE_CONFIG_READ_DELAY_WORD(&c->cfg),
		/* blocks checked as their pieces land (stream.c) */
		.on_landed = c->streams.cap ? stream_on_landed : NULL,
		.on_landed_ctx = c,
	};
	int r;

	if (!paths)
		return -ENOMEM;
	for (uint32_t s = 0; s < ds->nshards; s++)
		paths[s] = ds->shards[s].path;
	r = io_ring_create(&c->ring, paths, ds->nshards, arena, len, &rc, err,
			   errlen);
	free(paths);
	if (r)
		return r;
	io_ring_get_info(c->ring, &c->ring_info);
	if (c->ring_info.alignment > 4096) {
		snprintf(err, errlen, "direct I/O alignment %u exceeds 4096",
			 c->ring_info.alignment);
		return -EINVAL;
	}
	return 0;
}

static int start_threads(struct loader_core *c)
{
	c->workers = calloc(c->cfg.decode_threads, sizeof(*c->workers));
	if (!c->workers)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->cfg.decode_threads; i++) {
		if (pthread_create(&c->workers[i], NULL, decode_worker_main, c))
			return -EAGAIN;
		c->nworkers++;
	}
	if (pthread_create(&c->io_thread, NULL, io_thread_main, c))
		return -EAGAIN;
	c->io_started = 1;
	return 0;
}

static void stop_threads(struct loader_core *c)
{
	core_lock(c);
	c->stop = 1;
	pthread_cond_broadcast(&c->work_cv);
	pthread_cond_broadcast(&c->ready_cv);
	pthread_mutex_unlock(&c->mu);
	if (c->io_started) {
		io_ring_wake(c->ring);
		pthread_join(c->io_thread, NULL);
		c->io_started = 0;
	}
	for (uint32_t i = 0; i < c->nworkers; i++)
		pthread_join(c->workers[i], NULL);
	c->nworkers = 0;
}

/* Cache entries for batches that touch @need blocks: two batches' worth
 * and the read-ahead's, or as many as cache_bytes holds (budget_open()
 * adds those an explicit memory_bytes' surplus holds). */
static uint64_t cache_entries(const struct loader_core *c, uint64_t need)
{
	uint64_t entries = 2 * need + 2 * c->ahead.max;

	if (c->budget_takes_dataset)
		entries = c->nblocks;
	if (c->cfg.cache_bytes && c->nblocks) {
		/* as many entries as blocks of the average size fit, in the
		 * io memory a block takes (its stored bytes aligned, and
		 * its decoded bytes when zstd: budget.c), which is what
		 * cache_bytes gives; not its stored bytes, which counted
		 * more entries than the io memory holds */
		uint64_t avg = cache_dataset_bytes(c) / c->nblocks;

		if (avg && c->cfg.cache_bytes / avg > entries)
			entries = c->cfg.cache_bytes / avg;
	}
	if (entries > c->nblocks)
		entries = c->nblocks;
	if (entries < need)
		entries = need;
	if (entries == 0)
		entries = 1;
	return entries;
}

/* The ring, the job queues and the threads, once the memory is set. */
static int open_rest(struct loader_core *c, char *err, size_t errlen)
{
	int r;

	r = stream_open(c);
	if (r)
		return r;
	/* Reads land only in the io pool: register just that. */
	r = open_ring(c, c->arena, c->io_bytes, err, errlen);
	if (r)
		return r;
	ranges_device_init(c);
	ranges_in_place_init(c);

	c->decode_jobs.cap = c->cache.nentries + 16;
	c->batch_jobs.cap = c->slots_cap * (c->cfg.decode_threads + 1) + 16;
	/* One per entry being read at most (stream.queued): an upload-only
	 * job (gather_checks) holds no hash state. */
	c->stream_jobs.cap = c->cache.nentries + 16;
	c->fetch_jobs.cap = c->cache.nentries + 16;   /* one per entry */
	c->decode_jobs.ring = calloc(c->decode_jobs.cap, sizeof(struct job));
	c->batch_jobs.ring = calloc(c->batch_jobs.cap, sizeof(struct job));
	c->stream_jobs.ring = calloc(c->stream_jobs.cap, sizeof(struct job));
	c->fetch_jobs.ring = calloc(c->fetch_jobs.cap, sizeof(struct job));
	/* every slot's range reads in flight at once, at most */
	if (c->ranges.on) {
		c->range_fetches.cap = c->slots_cap * c->ranges.max_reads;
		c->range_fetches.ring = calloc(c->range_fetches.cap,
					       sizeof(*c->range_fetches.ring));
		if (!c->range_fetches.ring)
			return -ENOMEM;
	}
	/* One batch's block and range reads, or the read-ahead's. */
	c->reads_max = c->cache.nentries + c->ranges.max_reads;
	c->submit = calloc(c->reads_max, sizeof(*c->submit));
	c->reaped = calloc(c->reads_max, sizeof(*c->reaped));
	if (!c->decode_jobs.ring || !c->batch_jobs.ring ||
	    !c->stream_jobs.ring || !c->fetch_jobs.ring || !c->submit ||
	    !c->reaped)
		return -ENOMEM;
	return start_threads(c);
}

static int open_sampler(struct loader_core *c,
			const struct sampler_stream_spec *specs,
			uint32_t nspecs, char *err, size_t errlen)
{
	struct sampler_config sc = {
		.shuffle = c->cfg.shuffle,
		.window_blocks = c->cfg.window_blocks,
		.seed = c->cfg.seed,
		.batch_size = c->cfg.batch_size,
		.drop_last = c->cfg.drop_last,
		.rank = (uint32_t)c->cfg.rank,
		.world_size = (uint32_t)c->cfg.world_size,
	};
	int r = specs ? sampler_init_streams(&c->sampler, &sc, c->block_first,
					     c->nblocks, specs, nspecs)
		      : sampler_init(&c->sampler, &sc, c->block_first,
				     c->nblocks);

	if (r) {
		snprintf(err, errlen, "sampler: invalid configuration");
		return r;
	}
	c->fresh_batches = c->sampler.nbatches;
	c->epoch_batches = c->sampler.nbatches;
	return 0;
}

/* The sampler over windows of @window blocks, and what a batch then
 * needs: its blocks and the read-ahead's. */
static int set_window(struct loader_core *c, uint32_t window,
		      const struct sampler_stream_spec *specs, uint32_t nspecs,
		      uint64_t *entries, char *err, size_t errlen)
{
	int r;

	c->cfg.window_blocks = window;
	sampler_destroy(&c->sampler);
	r = open_sampler(c, specs, nspecs, err, errlen);
	if (r)
		return r;
	c->need = cache_needed(c, c->cfg.batch_size);
	read_ahead_open(c);
	*entries = cache_entries(c, c->need);
	return 0;
}

static int cmp_u64_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x > y ? -1 : x < y;
}

/*
 * The window an explicit memory_bytes leaves: halved until two windows of
 * the largest blocks take at most three quarters of memory_bytes (one
 * window being read while the last one's batches go out: a batch that
 * spans two windows takes both windows' blocks at once), the rest being
 * the batches' and the staging buffers'.  Two windows within the whole
 * memory_bytes left none: 16 KiB zstd records in 1 MiB blocks, batch
 * 256, window 16 under --memory 32M to 36M were gathered by chunks,
 * each block decoded 2 to 3 times an epoch (3.9 GB/s, against 8.9 for
 * the window of 8 that 30M left).  It depends on memory_bytes, the
 * blocks and the window asked only, never on batch_size, world_size or
 * prefetch_depth, so that a job resumed elastically with the same
 * memory_bytes keeps its order (a rule that asked budget_open() instead
 * gave batch 16 of 8 ranks another window than batch 256 of one).
 * @return: the window, or 0 when out of memory.
 */
static uint32_t window_for_memory(const struct loader_core *c)
{
	uint64_t *io, sum;
	uint32_t w = c->cfg.window_blocks;

	if (c->nblocks == 0)
		return w;
	io = malloc(c->nblocks * sizeof(*io));
	if (!io)
		return 0;
	for (uint64_t g = 0; g < c->nblocks; g++) {
		uint32_t shard;

		io[g] = block_io_bytes(c, loader_block(c, g, &shard));
	}
	qsort(io, c->nblocks, sizeof(*io), cmp_u64_desc);
	for (; w > 1; w /= 2) {
		sum = 0;
		for (uint64_t k = 0; k < 2ull * w && k < c->nblocks; k++)
			sum += io[k];
		if (sum <= c->cfg.memory_bytes / 4 * 3)
			break;
	}
	free(io);
	return w;
}

/*
 * Under an explicit memory_bytes, the window window_for_memory() leaves,
 * chosen before the budget is split, so that no batch shape sees
 * another (budget_open's refusal at the window asked for depends on it):
 * said in stats.fallbacks.  Chunks in the window asked for read a block
 * again for every batch it served: window 3 of 5 MB blocks under
 * memory_bytes 12M read 375 blocks for 25, 5.8M 476 (now 26 and 47).
 * An explicit cache_bytes keeps its window.  @return: 0 or -ENOMEM.
 */
static int fit_window_to_memory(struct loader_core *c,
				const struct sampler_stream_spec *specs,
				uint32_t nspecs, char *err, size_t errlen)
{
	uint32_t asked = c->cfg.window_blocks, w;
	uint64_t entries;

	if (c->cfg.shuffle != SLUICE_SHUFFLE_WINDOW || !c->cfg.memory_bytes ||
	    c->cfg.cache_bytes || asked <= 1)
		return 0;
	w = window_for_memory(c);
	if (w == 0)
		return -ENOMEM;
	if (w == asked)
		return 0;
	c->window_asked = asked;
	return set_window(c, w, specs, nspecs, &entries, err, errlen);
}

/*
 * The default budget's cap binds and a window batch's blocks do not fit
 * the io memory it leaves, or a batch does not fit beside them
 * (budget_open's -E2BIG): halve the window until they do, and say so
 * (stats.fallbacks).  The window is part of the order: a run resumed on
 * a machine whose cap differs has another order.  Where no window fits,
 * the caller gathers batches by chunks in the smallest.
 * @return: budget_open's.
 */
static int shrink_window(struct loader_core *c,
			 const struct sampler_stream_spec *specs,
			 uint32_t nspecs, uint64_t batch_fixed,
			 uint64_t *entries, char *err, size_t errlen)
{
	int r = -E2BIG;

	if (c->cfg.shuffle != SLUICE_SHUFFLE_WINDOW || c->cfg.memory_bytes ||
	    c->cfg.cache_bytes || c->ranges.all || c->cfg.window_blocks <= 1)
		return r;
	c->window_asked = c->cfg.window_blocks;
	while (r == -E2BIG && c->cfg.window_blocks > 1) {
		r = set_window(c, c->cfg.window_blocks / 2, specs, nspecs,
			       entries, err, errlen);
		if (r)
			return r;
		r = budget_open(c, entries, batch_fixed, err, errlen);
	}
	return r;
}

/*
 * Whether the default budget takes every block, where its cap holds them
 * all: zstd blocks that would otherwise be decoded again every epoch.  A
 * full shuffle decodes its records' frames each epoch (zstd records of 4
 * KB on average, 82 MB, its cap 192 MiB: 2.56 GB/s cached, against 0.35
 * decoding frames; bench/full_shuffle_zstd.sh's var4k row), the other
 * shuffles their blocks, in a job of more than one epoch (16 KiB
 * records, 0.33 GB, window shuffle, 6 epochs: 14.6 against 8.2 GB/s;
 * bench/results/2026-11-29-default-cache-zstd.md), both on the VM.  Not
 * where the record ranges asked for are read every epoch anyway, nor,
 * but for a full shuffle: for a GPU, whose gathers mirror the io memory,
 * so the cache would take as much GPU memory, up to the cap (16 GiB on
 * a 128 GiB host), where a window of blocks takes a few; for one of
 * several ranks, which reads a different 1/world_size of the blocks
 * each epoch (a full shuffle's rank reads records of every block), so
 * that most of the memory would hold blocks of other ranks.  Raw data keeps
 * the small budget: a page-cache copy each epoch and little memory,
 * where caching would take up to the cap.
 */
static int default_takes_dataset(const struct loader_core *c,
				 uint64_t batch_fixed)
{
	int decoded_again = c->cfg.shuffle == SLUICE_SHUFFLE_FULL
		? c->cfg.range_reads == SLUICE_RANGE_READS_AUTO
		: c->cfg.range_reads != SLUICE_RANGE_READS_ON &&
		  c->cfg.epochs != 1 && c->cfg.world_size <= 1 &&
		  !device_offloads(c->cfg.device, c->cfg.device_id);

	return c->has_zstd && decoded_again && !c->cfg.memory_bytes &&
	       !c->cfg.cache_bytes && budget_caches_dataset(c, batch_fixed);
}

static int open_core(struct loader_core *c,
		     const struct sampler_stream_spec *specs, uint32_t nspecs,
		     char *err, size_t errlen)
{
	uint64_t need, entries, batch_fixed;
	int r;

	c->device_memory = device_memory_total(c->cfg.device,
					       c->cfg.device_id);
	r = build_geometry(c);
	if (r)
		return r;
	r = open_sampler(c, specs, nspecs, err, errlen);
	if (r)
		return r;

	r = slot_layout(c, &batch_fixed);
	if (r) {
		snprintf(err, errlen, "batch of %u records is too large",
			 c->cfg.batch_size);
		return r;
	}
	/* zstd blocks read through staging buffers take no io memory for
	 * their stored bytes: known before any block is sized */
	c->zstd_fetched = stage_fetches_zstd(c);
	framed_open(c);
	r = fit_window_to_memory(c, specs, nspecs, err, errlen);
	if (r)
		return r;
	/* Range reads read a full shuffle's records again every epoch; a
	 * cache that holds every block (a cache_bytes, or a memory_bytes or
	 * the default budget's cap that large) reads each block once, so it
	 * takes them off unless asked for: 14.26 against 6.74 GB/s over 3
	 * epochs of 16 KiB records in tmpfs with memory_bytes 2G. */
	if (c->cfg.range_reads == SLUICE_RANGE_READS_AUTO &&
	    ((c->cfg.cache_bytes &&
	      c->cfg.cache_bytes >= cache_dataset_bytes(c)) ||
	     (c->cfg.memory_bytes && budget_caches_dataset(c, batch_fixed))))
		c->cfg.range_reads = SLUICE_RANGE_READS_OFF;
	if (default_takes_dataset(c, batch_fixed)) {
		c->cfg.range_reads = SLUICE_RANGE_READS_OFF;
		c->budget_takes_dataset = 1;
	}
	/* Room for the blocks of two batches at once, so that reading the
	 * next overlaps assembling this one; more when the user asks. */
	r = ranges_open(c, batch_fixed, err, errlen);
	if (r)
		return r;
	if (c->ranges.on) { /* their blocks read whole go through the ring */
		c->zstd_fetched = 0;
		framed_open(c);     /* not fetched: their frames go to
				       batches from the ring's reads */
	}
	need = cache_needed(c, c->cfg.batch_size);
	if (c->ranges.on) {
		/* A batch reads whole only the blocks not read by range
		 * (range_block): none where all are; else zstd blocks,
		 * those without record checksums, and those whose layout
		 * load_layout refused (their decode then names them as
		 * corrupt).  Counting every block asked for memory no
		 * batch takes: one corrupt block failed the open with
		 * "raise memory_bytes" instead. */
		uint64_t whole = 0;

		for (uint64_t g = 0; g < c->nblocks; g++)
			whole += !range_block(c, g);
		if (need > whole)
			need = whole ? whole : 1;
	}
	chunks_init(c);
	c->need = need;
	read_ahead_open(c);
	entries = cache_entries(c, need);

	c->slots_cap = c->cfg.prefetch_depth + SLOT_GROWTH_MAX;
	c->slots = calloc(c->slots_cap, sizeof(*c->slots));
	c->fifo = calloc(c->slots_cap, sizeof(*c->fifo));
	if (!c->slots || !c->fifo)
		return -ENOMEM;
	r = budget_open(c, &entries, batch_fixed, err, errlen);
	if (r == -E2BIG)
		r = shrink_window(c, specs, nspecs, batch_fixed, &entries,
				  err, errlen);
	if ((r == -ENOSPC || r == -E2BIG) && c->chunks.possible &&
	    c->need > 1) {
		/* A batch's blocks do not fit at once (nor in a smaller
		 * window): gather it a chunk of blocks at a time (chunks.c). */
		c->chunks.chunked = 1;
		if (c->need > chunk_blocks(c))
			c->need = chunk_blocks(c);
		entries = cache_entries(c, c->need);
		r = budget_open(c, &entries, batch_fixed, err, errlen);
	}
	if (r == -E2BIG)
		r = -ENOSPC;
	if (!r)
		r = cache_init(c, (uint32_t)entries);
	if (!r)
		c->cache.all = cache_holds_dataset(c);
	ranges_whole_note(c);
	framed_init(c);
	views_init(c);
	direct_init(c);
	gather_init(c);
	if (!r)
		r = stage_open(c);
	if (!r)
		r = alloc_slots(c, c->cfg.prefetch_depth);
	if (r)
		return r;
	return open_rest(c, err, errlen);
}

/* A handle that carries only an error message (NULL without memory). */
sluice_loader *loader_failed(int code, const char *msg)
{
	struct sluice_loader *ld = calloc(1, sizeof(*ld));

	if (ld)
		snprintf(ld->err, sizeof(ld->err), "%s",
			 msg && msg[0] ? msg : sluice_strerror(code));
	return ld;
}

int loader_open_common(struct dataset *d, int owned,
		       const struct sampler_stream_spec *specs,
		       uint32_t nspecs, uint64_t mix_id,
		       const struct sluice_loader_config *cfg,
		       sluice_loader **out)
{
	struct sluice_loader *ld = calloc(1, sizeof(*ld));
	struct loader_core *c;
	int r;

	*out = ld;
	if (!ld || !(c = calloc(1, sizeof(*c)))) {
		if (ld)
			snprintf(ld->err, sizeof(ld->err), "out of memory");
		if (owned)
			mixture_free(d);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work_cv, NULL);
	pthread_cond_init(&c->ready_cv, NULL);
	atomic_init(&c->refs, 1);
	c->ds = d;
	c->owned_ds = owned ? d : NULL;
	c->mix_id = mix_id;
	if (cfg)
		c->cfg = *cfg;
	else
		sluice_loader_config_init(&c->cfg);
	r = loader_config_check(&c->cfg, ld->err, sizeof(ld->err));
	if (!r)
		r = open_core(c, specs, nspecs, ld->err, sizeof(ld->err));
	if (r) {
		/* Threads stopped first: then nothing writes c->err. */
		stop_threads(c);
		if (!ld->err[0])
			snprintf(ld->err, sizeof(ld->err), "%s",
				 c->err[0] ? c->err : sluice_strerror(r));
		free_core(c);
		return r;
	}
	ld->core = c;
	return 0;
}

SLUICE_API int sluice_loader_open(sluice_dataset *ds,
				  const struct sluice_loader_config *cfg,
				  sluice_loader **out)
{
	if (!out)
		return -EINVAL;
	if (!ds || !ds->loaded) {
		*out = loader_failed(-EINVAL, "no dataset");
		return *out ? -EINVAL : -ENOMEM;
	}
	return loader_open_common(&ds->d, 0, NULL, 0, 0, cfg, out);
}

SLUICE_API void sluice_loader_close(sluice_loader *ld)
{
	if (!ld)
		return;
	if (ld->core) {
		stop_threads(ld->core);
		core_unref(ld->core);
	}
	free(ld);
}
