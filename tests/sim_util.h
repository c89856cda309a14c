/*
 * sim_util.h - what the sim tests share (gpu/sim_device.c: the simulated
 * asynchronous device): the seed, printed when a test fails; the stress
 * mode; and a consumer that behaves as a CUDA one does: it queues its
 * reads of a batch on its own stream, releases the batch at once, and
 * looks at what the reads saw only later.
 *
 * SLUICE_SIM_SEED=N    run with seed N (default: from the clock and pid)
 * SLUICE_SIM_STRESS=K  run every case for K seeds (N, N+1, ...)
 *
 * Include after loader_fixture.h or gather_fixture.h, which give the
 * dataset and its expected bytes (SIM_CHECK_FIXTURE picks which).
 */
#ifndef SLUICE_TESTS_SIM_UTIL_H
#define SLUICE_TESTS_SIM_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"
#include "sim_device.h"
#include "t.h"

static uint64_t sim_seed;
static int sim_finished;

static void sim_print_seed_on_failure(void)
{
	if (!sim_finished)
		fprintf(stderr, "sim: FAILED with seed %llu (rerun: "
				"SLUICE_SIM_SEED=%llu)\n",
			(unsigned long long)sim_seed,
			(unsigned long long)sim_seed);
}

/* The first seed, from SLUICE_SIM_SEED or the clock; and arrange for a
 * failure (any exit before sim_done()) to print the one in use. */
static inline uint64_t sim_first_seed(void)
{
	const char *e = getenv("SLUICE_SIM_SEED");
	struct timespec ts;

	if (e && *e) {
		sim_seed = strtoull(e, NULL, 10);
	} else {
		clock_gettime(CLOCK_REALTIME, &ts);
		sim_seed = ((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 20)) %
			   1000000007u;
	}
	atexit(sim_print_seed_on_failure);
	return sim_seed;
}

/* How many seeds to run: SLUICE_SIM_STRESS, else @dflt. */
static inline unsigned sim_rounds(unsigned dflt)
{
	const char *e = getenv("SLUICE_SIM_STRESS");
	long n = e && *e ? strtol(e, NULL, 10) : 0;

	return n > 0 ? (unsigned)n : dflt;
}

/* Loaders opened from now on get the simulated device with @seed. */
static inline void sim_use_seed(uint64_t seed)
{
	char buf[32];

	sim_seed = seed;
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)seed);
	T_OK(setenv("SLUICE_DEVICE_SIM", buf, 1) ? -1 : 0);
}

static inline void sim_done(void)
{
	sim_finished = 1;
}

/* A consumer's "kernel": a sleep of up to @arg microseconds (as an
 * integer), on the stream it is queued on. */
static inline void sim_sleep_fn(void *arg)
{
	uintptr_t us = (uintptr_t)arg;
	struct timespec ts = { 0, (long)(us * 1000) };

	nanosleep(&ts, NULL);
}

/*
 * One batch's reads, queued on the consumer's stream: the tensors'
 * pointers and the batch's indices are taken at next(), the bytes
 * looked at when the stream gets there (after the export's wait).
 */
#define SIM_MAX_TENSORS 8
struct sim_pending;
/* The test's check of one batch's bytes: 0, or 1 with @p->why said. */
typedef int (*sim_check_fn)(struct sim_pending *p);

struct sim_pending {
	struct sim_pending *next;
	sim_check_fn check;
	uint64_t batch;                 /* its place in the consumer's run */
	uint32_t n;
	uint64_t *idx;
	const void *data[SIM_MAX_TENSORS];
	int64_t shape0[SIM_MAX_TENSORS];
	int bad;                        /* set by the check */
	char why[200];
};

struct sim_consumer {
	/* set by the test */
	const char *const *names;       /* tensors to read */
	int ntensors;
	sim_check_fn check;
	int64_t stream;                 /* a sim stream, or 0: this thread */
	int64_t stream2;                /* or 0: every other batch read on
					   this one (a release orders the
					   reads of its own stream only) */
	unsigned kernel_us;             /* up to this queued before a read */
	unsigned hold;                  /* batches held before a release */
	uint32_t *seen;                 /* deliveries per record, or NULL */
	uint64_t records;               /* the size of seen */
	uint64_t rng;
	/* results */
	uint64_t batches, bad;
	char first_bad[240];
	/* state */
	struct sim_pending *pending, **tail;
	sluice_batch *held[64];
	unsigned nheld;
};

static inline uint64_t sim_rand(struct sim_consumer *c)
{
	c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
	return c->rng >> 33;
}

static inline void sim_run_check(void *arg)
{
	struct sim_pending *p = arg;

	p->bad = p->check(p);
}

/* Look at what the queued reads saw (after the stream ran them). */
static inline void sim_collect(struct sim_consumer *c)
{
	struct sim_pending *p, *nx;

	if (c->stream)
		T_OK(sim_stream_synchronize(c->stream));
	if (c->stream2)
		T_OK(sim_stream_synchronize(c->stream2));
	for (p = c->pending; p; p = nx) {
		nx = p->next;
		if (p->bad && c->bad++ == 0)
			snprintf(c->first_bad, sizeof(c->first_bad),
				 "batch %llu: %s",
				 (unsigned long long)p->batch, p->why);
		for (uint32_t r = 0; c->seen && r < p->n; r++) {
			T_LT(p->idx[r], c->records);
			c->seen[p->idx[r]]++;
		}
		free(p->idx);
		free(p);
	}
	c->pending = NULL;
	c->tail = &c->pending;
}

/* Release one held batch, picked at random: releases come in any
 * order. */
static inline void sim_release_one(struct sim_consumer *c)
{
	unsigned k = (unsigned)(sim_rand(c) % c->nheld);

	sluice_batch_release(c->held[k]);
	c->held[k] = c->held[--c->nheld];
}

/*
 * Take up to @max batches (0: to the end) from @ld, queue each one's
 * reads and release it (or hold it, up to c->hold).  @return: what
 * next() last returned (SLUICE_EOF at the end), or 0 after @max.
 */
static inline int sim_consume(sluice_loader *ld, struct sim_consumer *c,
			      uint64_t max)
{
	sluice_batch *b;
	uint64_t taken = 0;
	int r = 0;

	if (!c->tail)
		c->tail = &c->pending;
	T_ASSERT(c->ntensors <= SIM_MAX_TENSORS && c->hold < 64);
	while ((max == 0 || taken < max) &&
	       (r = sluice_loader_next(ld, &b)) == 0) {
		struct sim_pending *p = calloc(1, sizeof(*p));
		DLManagedTensor *t[SIM_MAX_TENSORS];
		int64_t cs = c->stream2 && (c->batches & 1) ? c->stream2
							    : c->stream;

		T_ASSERT(p != NULL);
		p->n = sluice_batch_size(b);
		p->check = c->check;
		p->batch = c->batches;
		p->idx = malloc(((size_t)p->n + 1) * sizeof(uint64_t));
		T_ASSERT(p->idx != NULL);
		memcpy(p->idx, sluice_batch_indices(b), p->n * sizeof(uint64_t));
		for (int k = 0; k < c->ntensors; k++) {
			T_OK(sluice_batch_tensor(b, c->names[k], cs, &t[k]));
			T_EQ(t[k]->dl_tensor.device.device_type, kDLCPU);
			p->data[k] = t[k]->dl_tensor.data;
			p->shape0[k] = t[k]->dl_tensor.shape[0];
		}
		if (cs) {
			if (c->kernel_us)
				T_OK(sim_stream_call(cs, sim_sleep_fn,
					(void *)(uintptr_t)(sim_rand(c) %
							    c->kernel_us)));
			T_OK(sim_stream_call(cs, sim_run_check, p));
		} else {
			sim_run_check(p);
		}
		*c->tail = p;
		c->tail = &p->next;
		/* The reads may not have run: the release must order the
		 * memory's reuse after them. */
		for (int k = 0; k < c->ntensors; k++)
			t[k]->deleter(t[k]);
		c->held[c->nheld++] = b;
		while (c->nheld > c->hold)
			sim_release_one(c);
		c->batches++;
		taken++;
		if (c->batches % 4 == 0)
			sim_collect(c);
	}
	return max && taken == max ? 0 : r;
}

/* Release what is held (any order) and look at every read. */
static inline void sim_finish(struct sim_consumer *c)
{
	while (c->nheld)
		sim_release_one(c);
	sim_collect(c);
}

#endif /* SLUICE_TESTS_SIM_UTIL_H */
