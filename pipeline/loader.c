/*
 * loader.c - the public loader API: open (size and allocate everything),
 * next, epochs, stats, close (the resumable state: loader_state.c).
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loader.h"

#define MAX_DECODE_THREADS 64
/* The default's ceiling: past it, more workers mostly contend for memory
 * bandwidth (and each one adds two blocks of read-ahead). */
#define DEFAULT_DECODE_THREADS_MAX 32

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The first failure wins; it stays until the loader is closed. */
__attribute__((format(printf, 3, 0)))
static void vfail_locked(struct loader_core *c, int code, const char *fmt,
			 va_list ap) __attribute__((format(printf, 3, 0)));
static void vfail_locked(struct loader_core *c, int code, const char *fmt,
			 va_list ap)
{
	if (c->failed)
		return;
	c->failed = code ? code : -EIO;
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	pthread_cond_broadcast(&c->ready_cv);
}

void loader_fail_locked(struct loader_core *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_locked(c, code, fmt, ap);
	va_end(ap);
}

void loader_block_failed_locked(struct loader_core *c, int code, int corrupt,
				const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (corrupt && c->cfg.on_error == SLUICE_ON_ERROR_SKIP) {
		if (c->skipped_blocks++ == 0)
			vsnprintf(c->skip_err, sizeof(c->skip_err), fmt, ap);
	} else {
		vfail_locked(c, code, fmt, ap);
	}
	va_end(ap);
}

SLUICE_API int64_t sluice_loader_skipped(const sluice_loader *ld, char *buf,
					 size_t len)
{
	struct loader_core *c;
	int64_t n;

	if (!ld || !ld->core)
		return -EINVAL;
	c = ld->core;
	pthread_mutex_lock(&c->mu);
	n = (int64_t)c->skipped_blocks;
	if (buf && len)
		snprintf(buf, len, "%s", c->skip_err);
	pthread_mutex_unlock(&c->mu);
	return n;
}

SLUICE_API void sluice_loader_config_init(struct sluice_loader_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->batch_size = 256;
	cfg->shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg->window_blocks = 16;
	cfg->rank = -1;
	cfg->world_size = -1;
	cfg->prefetch_depth = 4;
	cfg->queue_depth = 64;
	cfg->device = SLUICE_DEVICE_AUTO;
	cfg->device_id = -1;
	cfg->verify = 1;
	cfg->direct_io = SLUICE_DIRECT_IO_AUTO;
}

uint32_t local_ranks(void)
{
	const char *local = getenv("LOCAL_WORLD_SIZE");
	long ranks = local ? strtol(local, NULL, 10) : 1;

	return ranks > 1 && ranks <= 4096 ? (uint32_t)ranks : 1;
}

/* Every CPU this process may run on, shared with the other ranks of this
 * host.  It was at most 8: on a 16-core host zstd data then reached
 * 0.86x what all of them decompress. */
static uint32_t default_decode_threads(void)
{
	cpu_set_t set;
	long n = sched_getaffinity(0, sizeof(set), &set) == 0
		? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);

	n /= local_ranks();
	return n < 1 ? 1 : n > DEFAULT_DECODE_THREADS_MAX
		? DEFAULT_DECODE_THREADS_MAX : (uint32_t)n;
}

static int env_int(const char *name, int fallback)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !*v)
		return fallback;
	x = strtol(v, &end, 10);
	return (*end || x < 0 || x > 1 << 20) ? fallback : (int)x;
}

static void free_core(struct loader_core *c)
{
	for (uint32_t i = 0; c->slots && i < c->nslots; i++)
		slot_free(c->slots[i]);
	io_ring_destroy(c->ring);
	ranges_close(c);
	cache_destroy(c);
	budget_close(c);
	device_close(c->dev);
	sampler_destroy(&c->sampler);
	free(c->slots);
	free(c->fifo);
	free(c->decode_jobs.ring);
	free(c->batch_jobs.ring);
	free(c->submit);
	free(c->reaped);
	free(c->workers);
	free(c->ahead_recs);
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
			if (sf->blocks[b].codec == DLS_CODEC_ZSTD)
				c->has_zstd = 1;
		}
	}
	c->shard_block_base[ds->nshards] = g;
	c->block_first[g] = ds->record_count;
	return 0;
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

/*
 * The consumer holds every slot and asks for more: hand the planner one
 * more slot rather than deadlock.  Only then is memory allocated after
 * open; it stays for reuse until close (its batches' memory comes from
 * the budget, see budget.c for when the consumer holds all of that).
 * CUDA slots have device events made at open, so there the consumer gets
 * -EDEADLK instead.
 */
static int grow_slots_locked(struct loader_core *c)
{
	struct slot *s;

	if ((c->dev_info.caps & DEVICE_CAP_MIRROR) || c->nslots >= c->slots_cap)
		return -EDEADLK;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (slot_init(c, s, c->nslots)) {
		slot_free(s);
		return -ENOMEM;
	}
	c->slots[c->nslots++] = s;
	return 0;
}

static int open_ring(struct loader_core *c, uint8_t *arena, size_t len,
		     char *err, size_t errlen)
{
	const struct dataset *ds = c->ds;
	const char **paths = malloc(ds->nshards * sizeof(*paths));
	struct io_ring_config rc = {
		.queue_depth = c->cfg.queue_depth,
		.direct = c->cfg.direct_io == SLUICE_DIRECT_IO_ON ? 1
			  : c->cfg.direct_io == SLUICE_DIRECT_IO_OFF ? 0 : -1,
		.sqpoll = c->cfg.sqpoll,
		.plain_reads = !!(sluice_loader_config_forced(&c->cfg) &
				  SLUICE_FORCE_PLAIN_READS),
		.read_delay_us = (uint32_t)SLUICE_CONFIG_READ_DELAY_WORD(&c->cfg),
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

static int check_config(struct sluice_loader_config *cfg, char *err,
			size_t errlen)
{
	if (cfg->rank < 0)
		cfg->rank = env_int("RANK", 0);
	if (cfg->world_size <= 0)
		cfg->world_size = env_int("WORLD_SIZE", 1);
	if (cfg->world_size < 1)
		cfg->world_size = 1;
	if (cfg->device_id < 0)
		cfg->device_id = env_int("LOCAL_RANK", 0);
	if ((int)cfg->direct_io == -1)   /* AUTO before 0.2 */
		cfg->direct_io = SLUICE_DIRECT_IO_AUTO;
	if (cfg->decode_threads == 0)
		cfg->decode_threads = default_decode_threads();
	if (cfg->batch_size == 0 || cfg->batch_size > (1u << 24) ||
	    cfg->prefetch_depth == 0 || cfg->prefetch_depth > 1024 ||
	    cfg->decode_threads > MAX_DECODE_THREADS ||
	    cfg->shuffle < SLUICE_SHUFFLE_NONE ||
	    cfg->shuffle > SLUICE_SHUFFLE_FULL ||
	    (cfg->shuffle == SLUICE_SHUFFLE_WINDOW && cfg->window_blocks == 0) ||
	    cfg->rank >= cfg->world_size ||
	    cfg->device_gather < SLUICE_DEVICE_GATHER_AUTO ||
	    cfg->device_gather > SLUICE_DEVICE_GATHER_OFF ||
	    cfg->range_reads < SLUICE_RANGE_READS_AUTO ||
	    cfg->range_reads > SLUICE_RANGE_READS_OFF ||
	    cfg->direct_io < SLUICE_DIRECT_IO_AUTO ||
	    cfg->direct_io > SLUICE_DIRECT_IO_OFF) {
		snprintf(err, errlen, "invalid loader configuration (batch_size %u, prefetch %u, decode_threads %u, shuffle %d, rank %d of %d, device_gather %d, range_reads %d, direct_io %d)",
			 cfg->batch_size, cfg->prefetch_depth,
			 cfg->decode_threads, cfg->shuffle, cfg->rank,
			 cfg->world_size, (int)cfg->device_gather,
			 (int)cfg->range_reads, (int)cfg->direct_io);
		return -EINVAL;
	}
	if (cfg->queue_depth == 0)
		cfg->queue_depth = 64;
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
	pthread_mutex_lock(&c->mu);
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
 * and the read-ahead's, or as many as cache_bytes holds. */
static uint64_t cache_entries(const struct loader_core *c, uint64_t need)
{
	uint64_t entries = 2 * need + 2 * c->ahead_max;

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

	/* Reads land only in the io pool: register just that. */
	r = open_ring(c, c->arena, c->io_bytes, err, errlen);
	if (r)
		return r;

	c->decode_jobs.cap = c->nentries + 16;
	c->batch_jobs.cap = c->slots_cap * (c->cfg.decode_threads + 1) + 16;
	c->decode_jobs.ring = calloc(c->decode_jobs.cap, sizeof(struct job));
	c->batch_jobs.ring = calloc(c->batch_jobs.cap, sizeof(struct job));
	/* One batch's block and range reads, or the read-ahead's. */
	c->reads_max = c->nentries + c->ranges_max_reads;
	c->submit = calloc(c->reads_max, sizeof(*c->submit));
	c->reaped = calloc(c->reads_max, sizeof(*c->reaped));
	if (!c->decode_jobs.ring || !c->batch_jobs.ring || !c->submit ||
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

/*
 * The default budget's cap binds and a window batch's blocks do not fit
 * the io memory it leaves (budget_open's -E2BIG): halve the window until
 * they do, and say so (stats.fallbacks).  The window is part of the
 * order: a run resumed with another memory_bytes, or on a machine whose
 * cap differs, has another order.  @return: budget_open's.
 */
static int shrink_window(struct loader_core *c,
			 const struct sampler_stream_spec *specs,
			 uint32_t nspecs, uint64_t batch_fixed,
			 uint64_t *entries, char *err, size_t errlen)
{
	int r = -E2BIG;

	if (c->cfg.shuffle != SLUICE_SHUFFLE_WINDOW || c->cfg.memory_bytes ||
	    c->cfg.cache_bytes || c->ranges_all)
		return r;
	c->window_asked = c->cfg.window_blocks;
	while (r == -E2BIG && c->cfg.window_blocks > 1) {
		c->cfg.window_blocks /= 2;
		sampler_destroy(&c->sampler);
		r = open_sampler(c, specs, nspecs, err, errlen);
		if (r)
			return r;
		c->need = cache_needed(c, c->cfg.batch_size);
		*entries = cache_entries(c, c->need);
		r = budget_open(c, *entries, batch_fixed, err, errlen);
	}
	return r;
}

static int open_core(struct loader_core *c,
		     const struct sampler_stream_spec *specs, uint32_t nspecs,
		     char *err, size_t errlen)
{
	uint64_t need, entries, batch_fixed;
	int r;

	r = build_geometry(c);
	if (r)
		return r;
	r = open_sampler(c, specs, nspecs, err, errlen);
	if (r)
		return r;

	/* Range reads read a full shuffle's records again every epoch; a
	 * cache_bytes that holds every block reads each block once, so
	 * it takes them off unless asked for (issue 22). */
	if (c->cfg.range_reads == SLUICE_RANGE_READS_AUTO &&
	    c->cfg.cache_bytes && c->cfg.cache_bytes >= cache_dataset_bytes(c))
		c->cfg.range_reads = SLUICE_RANGE_READS_OFF;
	/* Room for the blocks of two batches at once, so that reading the
	 * next overlaps assembling this one; more when the user asks. */
	r = ranges_open(c, err, errlen);
	if (r)
		return r;
	need = cache_needed(c, c->cfg.batch_size);
	if (c->ranges_all)
		need = 1;       /* no block is read whole (ranges.c) */
	chunks_init(c);
	c->need = need;
	/* Read-ahead keeps two blocks per decode worker coming, looking no
	 * further ahead than that many blocks' worth of records. */
	c->ahead_max = 2 * c->cfg.decode_threads;
	c->ahead_records = c->nblocks
		? c->ahead_max * (c->ds->record_count / c->nblocks + 1) : 0;
	entries = cache_entries(c, need);

	c->slots_cap = c->cfg.prefetch_depth + SLOT_GROWTH_MAX;
	c->slots = calloc(c->slots_cap, sizeof(*c->slots));
	c->fifo = calloc(c->slots_cap, sizeof(*c->fifo));
	if (!c->slots || !c->fifo)
		return -ENOMEM;
	r = slot_layout(c, &batch_fixed);
	if (r) {
		snprintf(err, errlen, "batch of %u records is too large",
			 c->cfg.batch_size);
		return r;
	}
	r = budget_open(c, entries, batch_fixed, err, errlen);
	if (r == -ENOSPC && c->chunks_possible && need > chunk_blocks(c)) {
		/* A batch's blocks do not fit at once: gather it a chunk of
		 * blocks at a time (chunks.c). */
		c->chunked = 1;
		c->need = need = chunk_blocks(c);
		entries = cache_entries(c, need);
		r = budget_open(c, entries, batch_fixed, err, errlen);
	}
	if (r == -E2BIG)
		r = shrink_window(c, specs, nspecs, batch_fixed, &entries,
				  err, errlen);
	if (r == -E2BIG)
		r = -ENOSPC;
	if (!r)
		r = cache_init(c, (uint32_t)entries);
	if (!r)
		c->cache_all = cache_holds_dataset(c);
	views_init(c);
	direct_init(c);
	gather_init(c);
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
	r = check_config(&c->cfg, ld->err, sizeof(ld->err));
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

SLUICE_API int sluice_loader_error(const sluice_loader *ld, char *buf,
				   size_t len)
{
	struct loader_core *c;
	int n;

	if (!ld)
		return snprintf(buf, len, "no loader");
	/* ld->err holds why open failed (no core); after a good open every
	 * message is the core's, written and read under its lock. */
	c = ld->core;
	if (!c)
		return snprintf(buf, len, "%s", ld->err);
	pthread_mutex_lock(&c->mu);
	n = snprintf(buf, len, "%s", c->err);
	pthread_mutex_unlock(&c->mu);
	return n;
}

/*
 * Stop planning, let the batches in flight finish, drop the prefetched
 * ones, and continue planning from batch @batch of @epoch, which follows
 * the @nearlier jobs @earlier (validated by the caller).  Slots the
 * consumer holds are untouched.
 */
int loader_restart_at(struct loader_core *c, uint64_t epoch, uint64_t batch,
		      const struct sampler_level *earlier, uint32_t nearlier)
{
	int r;

	pthread_mutex_lock(&c->mu);
	c->planning_paused = 1;
	pthread_mutex_unlock(&c->mu);
	io_ring_wake(c->ring);
	pthread_mutex_lock(&c->mu);
	for (;;) {
		/* Batches waiting for memory the consumer holds would wait
		 * for ever: they are dropped anyway. */
		batch_memory_drop_waiting_locked(c);
		if (c->inflight == 0 || c->failed)
			break;
		pthread_cond_wait(&c->ready_cv, &c->mu);
	}
	r = c->failed;
	if (!r) {
		for (uint32_t k = 0; k < c->fifo_len; k++) {
			struct slot *s = c->slots[c->fifo[(c->fifo_head + k) %
							  c->slots_cap]];

			/* Its copy may still read the memory. */
			if (c->dev_info.caps & DEVICE_CAP_MIRROR)
				device_slot_wait_copied(c->dev, s->id);
			batch_memory_free_locked(c, s);
			s->state = SLOT_FREE;
		}
		c->fifo_len = 0;
		r = sampler_resume(&c->sampler, epoch, earlier, nearlier);
	}
	if (!r) {
		c->plan_epoch = epoch;
		c->plan_pass++;
		c->plan_batch = batch;
		c->ahead_batch = batch;
		c->ahead_rec = 0;
		c->epoch = epoch;
		c->consumed = batch;
		c->epoch_batches = c->sampler.nbatches;
		c->nearlier = nearlier;
		if (nearlier)
			memcpy(c->earlier, earlier, nearlier * sizeof(*earlier));
	}
	c->planning_paused = 0;
	pthread_mutex_unlock(&c->mu);
	io_ring_wake(c->ring);
	return r;
}

SLUICE_API int sluice_loader_set_epoch(sluice_loader *ld, uint64_t epoch)
{
	struct loader_core *c = ld ? ld->core : NULL;

	if (!c)
		return -EINVAL;
	if (epoch == c->epoch && c->consumed == 0)
		return 0;    /* already prefetching it */
	return loader_restart_at(c, epoch, 0, NULL, 0);
}

SLUICE_API uint64_t sluice_loader_batches(const sluice_loader *ld)
{
	return ld && ld->core ? ld->core->epoch_batches : 0;
}

SLUICE_API DLDevice sluice_loader_device(const sluice_loader *ld)
{
	if (!ld || !ld->core)
		return (DLDevice){ kDLCPU, 0 };
	return ld->core->dev_info.dl;
}

static int all_slots_held(const struct loader_core *c)
{
	for (uint32_t i = 0; i < c->nslots; i++)
		if (c->slots[i]->state != SLOT_HELD)
			return 0;
	return 1;
}

SLUICE_API int sluice_loader_next(sluice_loader *ld, sluice_batch **out)
{
	struct loader_core *c = ld ? ld->core : NULL;
	uint64_t t0 = now_ns();
	int r = 0;

	if (!c || !out)
		return -EINVAL;
	*out = NULL;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		if (c->failed) {
			r = c->failed;
			break;
		}
		if (c->consumed >= c->epoch_batches) {
			c->epoch++;
			c->consumed = 0;
			c->nearlier = 0;
			c->epoch_batches = c->fresh_batches;
			r = SLUICE_EOF;
			break;
		}
		if (c->fifo_len > 0) {
			struct slot *s = c->slots[c->fifo[c->fifo_head]];

			if (s->state == SLOT_MEMORY) {
				int h = batch_memory_hoarded_locked(c);

				if (h < 0)
					loader_fail_locked(c, h,
						"the consumer holds all %llu bytes of batch memory and asks for more: release batches (or their tensors) or raise memory_bytes (sluice --memory, Python memory_bytes=)",
						(unsigned long long)c->batch_pool.size);
				if (h <= 0)
					continue;
				/* h > 0: a release brings the memory */
			}
			if (s->state == SLOT_READY) {
				uint32_t ready = 0;

				for (uint32_t k = 0; k < c->fifo_len; k++)
					ready += c->slots[c->fifo[(c->fifo_head + k) %
							c->slots_cap]]->state == SLOT_READY;
				atomic_fetch_add(&c->occupancy_sum, ready);
				c->fifo_head = (c->fifo_head + 1) % c->slots_cap;
				c->fifo_len--;
				s->state = SLOT_HELD;
				atomic_store(&s->refs, 1);
				atomic_fetch_add(&c->refs, 1);
				c->consumed++;
				atomic_fetch_add(&c->batches, 1);
				atomic_fetch_add(&c->records, s->delivered);
				if (s->viewed)
					atomic_fetch_add(&c->batches_viewed, 1);
				if (s->gathering) {
					atomic_fetch_add(&c->batches_gathered, 1);
					atomic_fetch_add(&c->gather_runs, s->nruns);
				}
				/* counted on delivery, not when prefetched */
				atomic_fetch_add(&c->skipped,
						 s->count - s->delivered);
				atomic_fetch_add(&c->truncated, s->truncated);
				*out = &s->handle;
				break;
			}
		} else if (all_slots_held(c)) {
			int g;

			if (atomic_load(&c->releasing)) {
				/* a slot is on its way back: wait for it */
				c->waits_for_release++;
				pthread_cond_wait(&c->ready_cv, &c->mu);
				continue;
			}
			g = grow_slots_locked(c);
			if (g)
				loader_fail_locked(c, g,
					"all %u batch slots are held by the consumer: release batches (or their tensors) or raise prefetch_depth",
					c->nslots);
			pthread_mutex_unlock(&c->mu);
			io_ring_wake(c->ring);
			pthread_mutex_lock(&c->mu);
			continue;
		}
		pthread_cond_wait(&c->ready_cv, &c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&c->consumer_wait_ns, now_ns() - t0);
	return r;
}

static void stage_get(const struct stage_clock *in,
		      struct sluice_stage_stats *out)
{
	out->bytes = atomic_load(&in->bytes);
	out->ops = atomic_load(&in->ops);
	out->busy_ns = atomic_load(&in->busy_ns);
	out->wait_ns = atomic_load(&in->wait_ns);
}

/* Append @what to the "; "-separated list @dst (cut at @cap). */
static void fallbacks_append(char *dst, size_t cap, const char *what)
{
	size_t n = strlen(dst);

	if (what[0] && n + 1 < cap)
		snprintf(dst + n, cap - n, "%s%s", n ? "; " : "", what);
}

SLUICE_API int sluice_loader_stats(const sluice_loader *ld,
				   struct sluice_stats *out)
{
	const struct loader_core *c = ld ? ld->core : NULL;
	struct sluice_stats all, *st = &all;
	size_t n;

	if (!c || !out || out->size == 0)
		return -EINVAL;
	/* Fill all we know, then give the caller the part its struct has
	 * room for: a caller built against an older header passes a
	 * smaller size (sluice.h: statistics grow at the end). */
	n = out->size < sizeof(all) ? out->size : sizeof(all);
	memset(st, 0, sizeof(*st));
	stage_get(&c->st_read, &st->read);
	stage_get(&c->st_decode, &st->decode);
	stage_get(&c->st_assemble, &st->assemble);
	stage_get(&c->st_copy, &st->copy);
	st->consumer_wait_ns = atomic_load(&c->consumer_wait_ns);
	st->batches = atomic_load(&c->batches);
	st->records = atomic_load(&c->records);
	st->records_skipped = atomic_load(&c->skipped);
	st->values_truncated = atomic_load(&c->truncated);
	st->blocks_read = atomic_load(&c->blocks_read);
	st->block_cache_hits = atomic_load(&c->cache_hits);
	st->slot_occupancy_sum = atomic_load(&c->occupancy_sum);
	st->prefetch_depth = c->nslots;
	st->memory_bytes = c->io_bytes + c->batch_bytes;
	st->io_memory_bytes = c->io_bytes;
	st->batches_over_budget = atomic_load(&c->over_budget);
	st->direct_io = c->ring_info.direct;
	st->cached_shards = c->ring_info.cached_files;
	st->registered_buffers = c->ring_info.fixed_buffers;
	st->registered_files = c->ring_info.fixed_files;
	st->sqpoll = c->ring_info.sqpoll;
	st->device_pinned = c->dev_info.arena_pinned;
	st->arena_resident_ns = c->dev_info.arena_resident_ns;
	st->batches_viewed = atomic_load(&c->batches_viewed);
	st->blocks_direct = atomic_load(&c->blocks_direct);
	st->cpu_read_ns = atomic_load(&c->cpu_read_ns);
	st->cpu_verify_ns = atomic_load(&c->cpu_verify_ns);
	st->cpu_decompress_ns = atomic_load(&c->cpu_decompress_ns);
	st->cpu_assemble_ns = atomic_load(&c->cpu_assemble_ns);
	st->range_reads = atomic_load(&c->range_reads);
	st->range_records = atomic_load(&c->range_records);
	st->batches_gathered = atomic_load(&c->batches_gathered);
	st->gather_runs = atomic_load(&c->gather_runs);
	st->device_upload_bytes = atomic_load(&c->device_upload_bytes);
	st->device_memory_bytes = c->dev_info.device_bytes;
	st->fallbacks[0] = '\0';
	fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
			 c->ring_info.fallbacks);
	fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
			 c->dev_info.fallbacks);
	if (c->window_asked) {
		char note[192];

		snprintf(note, sizeof(note),
			 "memory binds: shuffle window of %u blocks, not %u (a batch's blocks fit the io memory the default memory_bytes leaves; set memory_bytes for the whole window)",
			 c->cfg.window_blocks, c->window_asked);
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks), note);
	}
	if (c->chunked)
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
				 c->gather_lost_to_chunks
				 ? "a batch's blocks do not fit memory_bytes at once: batches assembled a chunk of blocks at a time on the CPU, not gathered on the device"
				 : "a batch's blocks do not fit memory_bytes at once: batches assembled a chunk of blocks at a time");
	all.size = (uint32_t)n;
	if (out->size > n)   /* a newer caller: fields we do not know */
		memset((char *)out + n, 0, out->size - n);
	memcpy(out, &all, n);
	return 0;
}
