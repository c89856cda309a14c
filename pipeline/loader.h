/*
 * loader.h - the loader's private state, shared by the files of
 * pipeline/: block cache (cache.c), I/O thread and planner (io_thread.c),
 * decode workers (decode.c), batch assembly (assemble.c), batch export
 * (batch.c), the loader's open and close (loader_open.c) and public API
 * (loader.c).  struct slot and struct loader_core are composed of the
 * stages' own state, each stage's header holding it with the stage's
 * functions: block cache (cache.h), memory budget (budget.h), jobs
 * (jobs.h), read-ahead (read_ahead.h), streamed checks (stream.h),
 * fetches and their staging buffers (fetch.h, stage.h),
 * record-range reads (ranges.h), chunked assembly (chunks.h), device
 * gather (gather.h), views (view.h), direct decodes (direct.h), the
 * placement each batch gets (plan.h) and the runs it moves (runs.h).
 * Those headers forward-declare struct slot and struct loader_core and
 * never include this one.
 *
 * One mutex (mu) guards every field marked [mu], here and in the stage
 * headers; it is taken with core_lock(), which counts the waits.  The
 * blocks' and slots' payload memory is touched without the lock by the
 * one thread that owns the current stage (a decode worker for a
 * DECODING entry, assembly parts for disjoint record ranges of an
 * ASSEMBLING slot, the consumer for a HELD slot).
 */
#ifndef SLUICE_PIPELINE_LOADER_H
#define SLUICE_PIPELINE_LOADER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sluice.h"
#include "../datasets/shard.h"
#include "../io/ring.h"
#include "../gpu/device.h"
#include "sampler.h"
#include "pool.h"
#include "budget.h"
#include "cache.h"
#include "chunks.h"
#include "direct.h"
#include "framed.h"
#include "gather.h"
#include "jobs.h"
#include "plan.h"
#include "ranges.h"
#include "read_ahead.h"
#include "runs.h"
#include "stage.h"
#include "stream.h"
#include "view.h"

#define LOADER_MAX_TENSORS (2 * DLS_MAX_FIELDS)
#define SLOT_ALIGN 256u
#define SLOT_GROWTH_MAX 4096u  /* extra slots for a hoarding consumer */

enum slot_state {
	SLOT_FREE = 0,
	SLOT_WAITING,           /* planned; blocks being read/decoded */
	SLOT_MEMORY,            /* blocks decoded; waiting for batch memory */
	SLOT_ASSEMBLING,
	SLOT_READY,
	SLOT_HELD,              /* handed to the consumer */
};

struct tensor_desc {
	char name[SLUICE_NAME_MAX + 8];
	DLDataType dtype;
	int32_t ndim;
	int64_t shape[SLUICE_MAX_NDIM + 1];
	uint64_t offset;        /* byte offset in the batch's memory */
	uint64_t bytes;         /* what this batch's tensor holds */
};

struct sluice_batch {
	struct loader_core *core;
	uint32_t slot;
};

struct slot {
	uint32_t id;
	int state;              /* enum slot_state [mu] */
	uint64_t epoch, batch;  /* which batch it holds [mu] */
	uint64_t pass;          /* the planner's pass it belongs to [mu] */
	uint32_t count;         /* records planned */
	uint32_t delivered;     /* records after skips (the rest: skipped) */
	uint64_t truncated;     /* values cut by pad_length */
	uint64_t *indices;      /* dataset index per record (count) */
	uint32_t *rec_entry;    /* cache entry per record */
	uint32_t *rec_in_block; /* record within its block */
	uint32_t *entries;      /* distinct entries pinned (nentries) */
	uint64_t *wait_next;    /* [k]: the wait after this slot's for
				   entries[k] (cache_entry.wait_first) [mu] */
	uint32_t nentries;
	uint32_t pending;       /* entries not READY yet [mu] */
	uint32_t parts_left;    /* assembly parts running [mu] */
	int error;              /* fatal error while filling [mu] */
	uint8_t *host;          /* the batch's memory: batch pool, or own */
	uint64_t own_host;      /* over budget for a hoarding consumer:
				   the bytes mapped for host, unmapped on
				   release (slot_own_host_free); 0: host
				   is in the batch pool */
	int has_mem;            /* host is set (also 0 bytes) [mu] */
	uint64_t mem_off;       /* in the batch pool, unless own_host */
	uint64_t host_bytes;    /* the batch's bytes: sum of its tensors */
	struct tensor_desc tensors[LOADER_MAX_TENSORS]; /* tensors_per_batch */
	_Atomic uint32_t refs;  /* batch handle + exported tensors */
	struct sluice_batch handle;
	int place;              /* enum batch_place: how it is built, once
				   its blocks are decoded (plan.c) [mu] */
	struct slot_view view;  /* a view's tensors (view.c) */
	struct slot_chunk chunk; /* chunked assembly (chunks.c) */
	struct slot_ranges ranges; /* record-range reads (ranges.c) */
	struct slot_gather gather; /* device gather (gather.c) */
};

struct stage_clock {
	_Atomic uint64_t bytes, ops, busy_ns, wait_ns;
};

/* CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), for the
 * stats' CPU per stage: wall time would count waiting and preemption. */
uint64_t thread_cpu_ns(void);

struct loader_core {
	pthread_mutex_t mu;
	pthread_cond_t work_cv;     /* decode workers: jobs or stop */
	pthread_cond_t ready_cv;    /* consumer: head slot ready, drained */
	_Atomic uint32_t refs;      /* the handle + held batches */

	struct sluice_loader_config cfg;
	const struct dataset *ds;
	struct dataset *owned_ds;   /* a mixture's joined dataset, or NULL */
	uint64_t mix_id;            /* 0, or the mixture's fingerprint */
	struct device *dev;
	struct device_info dev_info;
	struct io_ring *ring;
	struct io_ring_info ring_info;

	/* geometry */
	uint64_t nblocks;
	uint64_t *block_first;      /* global record of each block, +1 */
	uint32_t *block_shard;      /* shard of each global block */
	uint64_t *shard_block_base; /* global id of each shard's block 0 */
	int has_zstd;
	uint64_t zstd_blocks;       /* blocks of zstd */
	uint64_t zstd_stored_max;   /* the largest one's stored bytes */
	int zstd_fetched;           /* every zstd block is read and decoded
				       by a worker through a staging buffer,
				       its io memory only its decoded bytes
				       (stage_fetches_zstd, block_io_bytes) */
	int has_variable;           /* a field of variable shape */
	uint32_t nvariable;         /* such fields */
	uint32_t tensors_per_batch;
	struct tensor_desc tensor_layout[LOADER_MAX_TENSORS];

	/* the memory budget (budget.c): one arena, io pool then batch pool */
	uint8_t *arena;
	uint64_t io_bytes, batch_bytes;
	uint64_t io_need_bytes;     /* io memory the next batch may need:
				       read-ahead leaves it reclaimable */
	_Atomic uint64_t over_budget; /* batches given own memory */
	_Atomic uint32_t releasing; /* batches whose last reference is gone
				       and whose memory is not back yet */
	uint64_t waits_for_release; /* next() waited for one rather than
				       take memory or a slot [mu] */
	struct loader_views views;  /* views of blocks (view.c) */
	struct loader_direct direct; /* decodes into batches (direct.c) */
	struct loader_framed framed; /* records' frames decoded into batches
				       (framed.c) */
	struct loader_chunks chunks; /* chunked assembly (chunks.c) */
	uint32_t window_asked;      /* 0, or the window_blocks asked for,
				       halved to fit (cfg has the one used) */
	uint64_t device_memory;     /* the GPU's total memory, 0: the
				       host or not known (budget.c) */
	uint64_t budget_wanted;     /* 0, or what the default budget
				       wanted past its cap (budget.c) */
	int budget_takes_dataset;   /* the default budget holds every
				       block (zstd blocks that fit its
				       cap, under a full shuffle or a job
				       of more than one epoch:
				       loader_open.c) */
	uint64_t io_batch_max;      /* most io memory one batch's blocks
				       take: the need largest blocks' */

	/* block cache [mu] */
	struct block_cache cache;   /* its entries (cache.c) */
	struct pool io_pool;

	/* slots [mu]: prefetch_depth at open; more only while the consumer
	 * holds every one of them (host device), up to slots_cap.  Batch
	 * memory comes from batch_pool in batch order (budget.c). */
	struct pool batch_pool;
	struct slot **slots;
	uint32_t nslots, slots_cap;
	uint32_t *fifo;             /* planned slots in batch order (ring of
				       slots_cap) */
	uint32_t fifo_head, fifo_len;
	uint32_t inflight;          /* WAITING + ASSEMBLING */

	/* planner [mu] */
	struct sampler sampler;
	uint64_t plan_epoch, plan_batch;
	/* Counts every start of planning an epoch, restarts included: an
	 * epoch number can come back (set_epoch, state_set), a pass cannot,
	 * so views and direct decodes tell passes apart by it. */
	uint64_t plan_pass;
	int planning_paused;
	uint64_t need;              /* most blocks one batch can touch */
	int plan_compacted;         /* this batch's plan emptied the cache */

	struct read_ahead ahead;    /* read-ahead (read_ahead.c) [mu] */

	/* consumer [consumer thread; read by planner under mu] */
	uint64_t epoch;             /* the consumer's epoch */
	uint64_t consumed;          /* batches consumed in it */
	uint64_t epoch_batches;     /* batches in it (fewer after an
				       elastic resume) */
	uint32_t nearlier;          /* earlier jobs of it (elastic resume) */
	struct sampler_level earlier[SAMPLER_MAX_LEVELS];
	uint64_t fresh_batches;     /* batches of an epoch started afresh */

	/* jobs [mu]: block decodes, and the jobs that finish batches
	 * (assembly parts, range checks), which workers take first, then
	 * the pieces of blocks landing (stream.c), hashed while in cache: each
	 * hands the consumer a batch and the planner a slot and memory,
	 * where a decode may only fill the cache ahead.  (Behind the
	 * read-ahead's decodes, a batch whose blocks were ready waited for
	 * all of them: batches then finished together and the workers went
	 * idle together while the planner refilled the slots.) */
	struct job_queue decode_jobs, batch_jobs, stream_jobs;
	/* blocks whose parts the workers fetch (fetch.c), taken when no
	 * other job waits */
	struct job_queue fetch_jobs;
	struct fetch_range_queue range_fetches; /* fetch.c; cap 0: none */
	struct stream_pool streams;
	struct stage_pool stage;    /* fetches' staging buffers (stage.c) */
	_Atomic uint64_t bytes_verified_landing; /* checked as they landed */

	/* threads */
	pthread_t io_thread;
	pthread_t *workers;
	uint32_t nworkers;
	int io_started;
	int stop;                   /* [mu] */
	int failed;                 /* [mu] first fatal error code */

	struct loader_ranges ranges; /* record-range reads (ranges.c) */

	struct loader_gather gather; /* device gather (gather.c) */

	/* reads the I/O thread collects outside the lock */
	struct io_read **submit;
	struct io_read **reaped;
	uint32_t reads_max;         /* their capacity */

	/* stats */
	struct stage_clock st_read, st_decode, st_assemble, st_copy;
	_Atomic uint64_t cpu_read_ns, cpu_verify_ns, cpu_decompress_ns,
		cpu_assemble_ns;
	_Atomic uint64_t lock_wait_ns; /* core_lock() found mu held */
	_Atomic uint64_t consumer_wait_ns, batches, records, skipped,
		batches_viewed, blocks_direct, truncated,
		blocks_read, cache_hits, occupancy_sum;

	char err[512];              /* [mu] */
	uint64_t skipped_blocks;    /* [mu] corrupt block reads skipped */
	char skip_err[512];         /* [mu] the first one's message */
};

struct sluice_loader {
	struct loader_core *core;   /* NULL when open failed early */
	char err[512];
};

/* Report a finished unit of work to the user's trace hook, if any. */
static inline void loader_span(const struct loader_core *c, int stage,
			       uint64_t start_ns, uint64_t end_ns,
			       uint64_t bytes)
{
	if (c->cfg.on_span)
		c->cfg.on_span(c->cfg.on_span_ctx, stage, start_ns, end_ns,
			       bytes);
}

/* @epoch is at or past the epochs the job runs (cfg.epochs; 0: no end):
 * nothing of it is planned or delivered. */
static inline int loader_past_epochs(const struct loader_core *c,
				     uint64_t epoch)
{
	return c->cfg.epochs && epoch >= c->cfg.epochs;
}

/* Round @x up to a multiple of the power of two @a. */
static inline uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

/* Sizes that saturate: @a x @b, @a + @b, or UINT64_MAX past it. */
static inline uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* loader_config.c */
/* The loaders of this host that share its CPUs and memory: torchrun's
 * $LOCAL_WORLD_SIZE, else 1. */
uint32_t local_ranks(void);
/* Fill @cfg's unset values (environment, CPUs); -EINVAL with @err when a
 * value is out of range. */
int loader_config_check(struct sluice_loader_config *cfg, char *err,
			size_t errlen);
/* Is @name "0" in the environment: a path turned off, for benchmarks'
 * A/B runs (SLUICE_STAGING=0 and the like)? */
int env_off(const char *name);

/* loader_open.c, before the ring opens: does it keep every shard open
 * for its life, and does the page cache hold each one, as the workers'
 * own reads need (io_ring_pread_fd: not on demand, not O_DIRECT)? */
int shards_open_cached(const struct loader_core *c);

/* loader_open.c */
sluice_loader *loader_failed(int code, const char *msg);
/* Open over @d (owned when @owned: freed by mixture_free, also on
 * failure), a mixture when @specs is not NULL. */
int loader_open_common(struct dataset *d, int owned,
		       const struct sampler_stream_spec *specs,
		       uint32_t nspecs, uint64_t mix_id,
		       const struct sluice_loader_config *cfg,
		       sluice_loader **out);
void core_unref(struct loader_core *c);

/* loader.c */
/* Stop planning, drop prefetched batches, go on from batch @batch of
 * @epoch after @nearlier earlier jobs (validated by the caller). */
int loader_restart_at(struct loader_core *c, uint64_t epoch, uint64_t batch,
		      const struct sampler_level *earlier, uint32_t nearlier);

void loader_fail_locked(struct loader_core *c, int code, const char *fmt,
			...) __attribute__((format(printf, 3, 4)));
/* A block is unusable: with on_error=skip and @corrupt set it is counted
 * and its message kept (the first one) for sluice_loader_skipped(); else
 * the loader fails as loader_fail_locked(). */
void loader_block_failed_locked(struct loader_core *c, int code, int corrupt,
				const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
uint64_t now_ns(void);

/* Take mu, counting how long a thread waits when another holds it
 * (stats.lock_wait_ns; not the re-take inside a condition wait): every
 * stage shares this one lock, and with 16 workers a queue on it would
 * leave them neither busy nor idle. */
static inline void core_lock(struct loader_core *c)
{
	uint64_t t0;

	if (pthread_mutex_trylock(&c->mu) == 0)
		return;
	t0 = now_ns();
	pthread_mutex_lock(&c->mu);
	atomic_fetch_add_explicit(&c->lock_wait_ns, now_ns() - t0,
				  memory_order_relaxed);
}

/* mixture.c */
void mixture_free(struct dataset *d);

/* io_thread.c */
void *io_thread_main(void *arg);
uint64_t loader_block_of(const struct loader_core *c, uint64_t r);
void entry_prepare_read(struct loader_core *c, uint32_t i);
/* @e's read is back (from the ring, or from its JOB_STREAM): decode it,
 * or fail it. */
void entry_read_done_locked(struct loader_core *c, struct cache_entry *e);
void slot_await_entries_locked(struct loader_core *c, struct slot *s,
			       unsigned *nsubmit);
const struct shard_block *loader_block(const struct loader_core *c,
				       uint64_t g, uint32_t *shard);

/* decode.c */
void *decode_worker_main(void *arg);
void entry_ready_locked(struct loader_core *c, uint32_t e);

/* assemble.c */
void slot_assemble_locked(struct loader_core *c, struct slot *s);
void slot_continue_assembly_locked(struct loader_core *c, struct slot *s);
void assemble_jobs_push_locked(struct loader_core *c, struct slot *s,
			       uint32_t parts);
/* A decode worker's assembly job: a part of a batch's copy (or a chunk's,
 * or its gather's run table), records' frames decoded with @dctx; the
 * last part finishes the batch. */
void run_assemble(struct loader_core *c, struct job j, ZSTD_DCtx *dctx);
int value_over_bound_locked(struct loader_core *c, uint64_t g, uint64_t index,
			    uint32_t f, uint64_t len, uint64_t bound, int moved);

/* Bytes a tensor of this batch holds: its shape times its item size. */
static inline uint64_t tensor_bytes(const struct tensor_desc *t)
{
	uint64_t n = (uint64_t)t->dtype.bits / 8u * t->dtype.lanes;

	for (int32_t k = 0; k < t->ndim; k++)
		n *= (uint64_t)t->shape[k];
	return n;
}

/* batch.c */
int slot_layout(struct loader_core *c, uint64_t *fixed_bytes);
uint32_t batch_records_max(const struct loader_core *c);
uint64_t slot_place_tensors(const struct loader_core *c, struct slot *s);
int slot_init(struct loader_core *c, struct slot *s, uint32_t id);
void slot_free(struct slot *s);
void slot_release_ref(struct loader_core *c, struct slot *s);

/* ranges.c's helpers for the runs (runs.c), inline: here, since they
 * read struct slot and struct loader_core. */

/* Field @f of range record @r of @s: in the slot's range buffer, in its
 * row of the batch where it was read in place, or kept since open for a
 * small field (ranges.c; copied into the buffer where the device gathers
 * the batch: ranges.device). */
static inline const uint8_t *range_src(const struct loader_core *c,
				       const struct slot *s, uint32_t r,
				       uint32_t f)
{
	const struct shard_schema *sc = &c->ds->schema;

	if (c->ranges.resident[f] && !c->ranges.device)
		return c->ranges.resident[f] +
		       s->indices[r] * sc->fields[f].record_bytes;
	return (s->ranges.in_place ? s->host : s->ranges.buf) +
	       s->ranges.rec_src[(uint64_t)r * sc->nfields + f];
}

/* The length of field @f of range record @r of @s (a variable field's
 * from its block's offsets table, kept since open). */
static inline uint64_t range_len(const struct loader_core *c,
				 const struct slot *s, uint32_t r, uint32_t f)
{
	const struct shard_field *fd = &c->ds->schema.fields[f];
	uint64_t g = s->ranges.rec_block[r];
	const uint64_t *o;

	if (!fd->variable)
		return fd->record_bytes;
	o = c->ranges.offs[f] + c->block_first[g] + g + s->rec_in_block[r];
	return o[1] - o[0];
}

/* Field @f of range record @r of @s: its bytes and their length. */
static inline void range_field(const struct loader_core *c,
			       const struct slot *s, uint32_t r, uint32_t f,
			       const uint8_t **ptr, uint64_t *len)
{
	*len = range_len(c, s, r, f);
	/* an empty value was not read: no place in ranges.buf (which may
	 * be NULL); any valid pointer for 0 bytes */
	*ptr = *len ? range_src(c, s, r, f) : (const uint8_t *)(const void *)s;
}

#endif /* SLUICE_PIPELINE_LOADER_H */
