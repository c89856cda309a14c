/*
 * writer_pool.c - compression workers for the writer (see writer_pool.h).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "shard_internal.h"
#include "sluice_xxh3.h"
#include "writer_pool.h"

uint32_t wpool_default_threads(void)
{
	cpu_set_t set;
	int n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n < 1)
		n = 1;
	return n < SLUICE_WRITER_DEFAULT_THREADS
		       ? (uint32_t)n
		       : SLUICE_WRITER_DEFAULT_THREADS;
}

/* Store raw when zstd saves less than 3%: decoding raw costs nothing. */
static int worth_compressing(uint64_t comp, uint64_t raw)
{
	return comp * 100u < raw * 97u;
}

/* Each record's checksum, over the block's raw layout @v
 * (dlpack_shard.h). */
static int record_sums(const struct shard_schema *schema,
		       const struct block_view *v, struct wslot *s)
{
	if (s->records > s->sums_cap) {
		free(s->sums);
		s->sums = malloc(s->records * sizeof(*s->sums));
		s->sums_cap = s->sums ? s->records : 0;
		if (!s->sums)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < s->records; i++)
		s->sums[i] = record_checksum_view(schema, v, i);
	return 0;
}

static void compress_slot(ZSTD_CCtx *cctx, int level,
			  const struct shard_schema *schema, struct wslot *s)
{
	struct block_view v;
	uint64_t got;

	/* The writer laid the block out itself (no bound on its values: it
	 * grows as records come): a failure is a bug. */
	if (block_view_init(schema, NULL, s->raw, s->raw_size, s->records,
			    &v) < 0) {
		s->error = -EINVAL;
		return;
	}
	s->error = record_sums(schema, &v, s);
	if (s->error)
		return;
	s->codec = DLS_CODEC_RAW;
	s->stored = s->raw;
	s->stored_size = s->raw_size;
	if (level > 0) {
		/* frames a record can be read from alone (block_frames.c) */
		s->error = block_frames_compress(cctx, level, schema, &v,
						 s->raw, s->raw_size, &s->comp,
						 &s->comp_cap, &got);
		if (s->error)
			return;
		if (worth_compressing(got, s->raw_size)) {
			s->codec = DLS_CODEC_ZSTD;
			s->stored = s->comp;
			s->stored_size = got;
		}
	}
	s->checksum = XXH3_64bits(s->stored, s->stored_size);
}

static void *worker_main(void *arg)
{
	struct wpool *p = arg;
	ZSTD_CCtx *cctx = p->level > 0 ? ZSTD_createCCtx() : NULL;
	struct wslot *s;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stopping && p->taken == p->submitted)
			pthread_cond_wait(&p->work_cv, &p->lock);
		if (p->stopping)
			break;
		s = &p->slots[p->taken % p->nslots];
		p->taken++;
		s->state = WSLOT_BUSY;
		pthread_mutex_unlock(&p->lock);
		if (p->level > 0 && !cctx)
			s->error = -ENOMEM;
		else
			compress_slot(cctx, p->level, &p->schema, s);
		pthread_mutex_lock(&p->lock);
		s->state = WSLOT_DONE;
		pthread_cond_broadcast(&p->done_cv);
	}
	pthread_mutex_unlock(&p->lock);
	ZSTD_freeCCtx(cctx);
	return NULL;
}

int wpool_start(struct wpool *p, uint32_t nthreads, int level,
		const struct shard_schema *schema)
{
	memset(p, 0, sizeof(*p));
	p->level = level;
	p->schema = *schema;
	p->nthreads = nthreads;
	/* Two blocks per worker keep them busy while the oldest is written. */
	p->nslots = 2 * nthreads + 2;
	p->slots = calloc(p->nslots, sizeof(*p->slots));
	p->threads = calloc(nthreads, sizeof(*p->threads));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	if (!p->slots || !p->threads)
		return -ENOMEM;
	for (uint32_t i = 0; i < nthreads; i++) {
		int r = pthread_create(&p->threads[i], NULL, worker_main, p);

		if (r != 0)
			return -r;
		p->started++;
	}
	return 0;
}

struct wslot *wpool_free_slot(struct wpool *p)
{
	if (p->submitted - p->retired >= p->nslots)
		return NULL;
	return &p->slots[p->submitted % p->nslots];
}

void wpool_submit(struct wpool *p)
{
	pthread_mutex_lock(&p->lock);
	p->slots[p->submitted % p->nslots].state = WSLOT_QUEUED;
	p->submitted++;
	pthread_cond_signal(&p->work_cv);
	pthread_mutex_unlock(&p->lock);
}

struct wslot *wpool_oldest(struct wpool *p, int wait)
{
	struct wslot *s;

	pthread_mutex_lock(&p->lock);
	if (p->retired == p->submitted) {
		pthread_mutex_unlock(&p->lock);
		return NULL;
	}
	s = &p->slots[p->retired % p->nslots];
	while (wait && s->state != WSLOT_DONE)
		pthread_cond_wait(&p->done_cv, &p->lock);
	if (s->state != WSLOT_DONE)
		s = NULL;
	pthread_mutex_unlock(&p->lock);
	return s;
}

void wpool_retire(struct wpool *p)
{
	pthread_mutex_lock(&p->lock);
	p->slots[p->retired % p->nslots].state = WSLOT_FREE;
	p->retired++;
	pthread_mutex_unlock(&p->lock);
}

uint64_t wpool_pending(struct wpool *p)
{
	return p->submitted - p->retired;
}

void wpool_stop(struct wpool *p)
{
	if (p->nslots == 0)
		return; /* never started */
	if (p->threads) {
		pthread_mutex_lock(&p->lock);
		p->stopping = 1;
		pthread_cond_broadcast(&p->work_cv);
		pthread_mutex_unlock(&p->lock);
		for (uint32_t i = 0; i < p->started; i++)
			pthread_join(p->threads[i], NULL);
	}
	for (uint32_t i = 0; p->slots && i < p->nslots; i++) {
		free(p->slots[i].raw);
		free(p->slots[i].comp);
		free(p->slots[i].sums);
	}
	free(p->slots);
	free(p->threads);
	pthread_cond_destroy(&p->work_cv);
	pthread_cond_destroy(&p->done_cv);
	pthread_mutex_destroy(&p->lock);
	memset(p, 0, sizeof(*p));
}

