/*
 * sim_stream.c - the streams and events of the simulated device
 * (sim_device.c): what a CUDA stream and event do, with threads.
 *
 * - Streams are threads.  Each runs its queue in order, every operation
 *   after a random delay drawn from the stream's seed.
 * - Events are counters: recording one on a stream notes how many
 *   operations were queued on it; the event is complete once the stream
 *   has run that many.  A stream made to wait on an event gets a wait
 *   operation in its queue: the stream blocks, the host does not.
 *
 * One lock and one condition variable serve every stream and event of
 * the process: simple, and fast enough for tests.  Streams are never
 * freed, only stopped and reused, since events (copied into queued waits
 * and slots) name them; the counters only grow, so an event of a stopped
 * stream stays complete through its reuse.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_device.h"
#include "sim_stream.h"

struct sim_stream {
	struct sim_stream *all_next;     /* every stream made [sim_mu] */
	pthread_t thread;
	int in_use, stop;                /* [sim_mu] */
	struct sim_op *head, *tail;      /* [sim_mu] */
	uint64_t enqueued, done;         /* [sim_mu] */
	uint64_t rng;                    /* the stream's thread only */
	unsigned delay_us;
};

static pthread_mutex_t sim_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sim_cv = PTHREAD_COND_INITIALIZER;
static struct sim_stream *sim_streams;

/* splitmix64: small, seedable, good enough for delays. */
static uint64_t next_rand(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Half the operations run at once, the rest after up to delay_us: both
 * orders of every race get their turn. */
static void random_delay(struct sim_stream *s)
{
	uint64_t r = next_rand(&s->rng);
	struct timespec ts;
	uint64_t us;

	if (s->delay_us == 0 || (r & 1))
		return;
	us = (r >> 1) % (s->delay_us + 1u);
	ts.tv_sec = (time_t)(us / 1000000u);
	ts.tv_nsec = (long)(us % 1000000u) * 1000;
	nanosleep(&ts, NULL);
}

int sim_event_done_locked(const struct sim_event *e)
{
	return !e->s || e->s->done >= e->at;
}

void sim_event_wait(const struct sim_event *e)
{
	pthread_mutex_lock(&sim_mu);
	while (!sim_event_done_locked(e))
		pthread_cond_wait(&sim_cv, &sim_mu);
	pthread_mutex_unlock(&sim_mu);
}

struct sim_event sim_record_locked(struct sim_stream *s)
{
	return (struct sim_event){ s, s->enqueued };
}

static void run_op(struct sim_stream *s, struct sim_op *op)
{
	switch (op->kind) {
	case OP_COPY:
		/* Poison first and land later: a reader that did not wait
		 * sees poison, not yesterday's bytes that happen to match. */
		for (unsigned k = 0; k < op->n; k++)
			memset(op->piece[k].dst, SIM_POISON, op->piece[k].len);
		random_delay(s);
		for (unsigned k = 0; k < op->n; k++)
			if (op->piece[k].zeros)
				memset(op->piece[k].dst, 0, op->piece[k].len);
			else if (op->piece[k].src)
				memcpy(op->piece[k].dst, op->piece[k].src,
				       op->piece[k].len);
		break;
	case OP_WAIT:
		sim_event_wait(&op->ev);
		break;
	case OP_CALL:
		op->fn(op->arg);
		break;
	}
}

static void *stream_main(void *arg)
{
	struct sim_stream *s = arg;
	struct sim_op *op;

	pthread_mutex_lock(&sim_mu);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&sim_cv, &sim_mu);
		op = s->head;
		if (!op)
			break;          /* stopped, and nothing left */
		pthread_mutex_unlock(&sim_mu);
		random_delay(s);
		run_op(s, op);
		pthread_mutex_lock(&sim_mu);
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->done++;
		pthread_cond_broadcast(&sim_cv);
		free(op);
	}
	pthread_mutex_unlock(&sim_mu);
	return NULL;
}

void sim_enqueue_locked(struct sim_stream *s, struct sim_op *op)
{
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	s->enqueued++;
	pthread_cond_broadcast(&sim_cv);
}

struct sim_op *sim_op_new(enum sim_op_kind kind, unsigned n)
{
	struct sim_op *op = calloc(1, sizeof(*op) + n * sizeof(op->piece[0]));

	if (op) {
		op->kind = kind;
		op->n = n;
	}
	return op;
}

struct sim_stream *sim_stream_open(uint64_t seed, unsigned delay_us)
{
	struct sim_stream *s;

	pthread_mutex_lock(&sim_mu);
	for (s = sim_streams; s && s->in_use; s = s->all_next)
		;
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s) {
			pthread_mutex_unlock(&sim_mu);
			return NULL;
		}
		s->all_next = sim_streams;
		sim_streams = s;
	}
	s->in_use = 1;
	s->stop = 0;
	s->rng = seed;
	s->delay_us = delay_us;
	if (pthread_create(&s->thread, NULL, stream_main, s)) {
		s->in_use = 0;
		s = NULL;
	}
	pthread_mutex_unlock(&sim_mu);
	return s;
}

void sim_stream_close(struct sim_stream *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&sim_mu);
	s->stop = 1;
	pthread_cond_broadcast(&sim_cv);
	pthread_mutex_unlock(&sim_mu);
	pthread_join(s->thread, NULL);
	pthread_mutex_lock(&sim_mu);
	s->in_use = 0;
	pthread_mutex_unlock(&sim_mu);
}

/* A consumer's handle, if it names a stream in use. */
struct sim_stream *sim_stream_find_locked(int64_t h)
{
	struct sim_stream *s;

	for (s = sim_streams; s; s = s->all_next)
		if ((int64_t)(intptr_t)s == h && s->in_use)
			return s;
	return NULL;
}

int64_t sim_stream_create(uint64_t seed, unsigned delay_us)
{
	return (int64_t)(intptr_t)sim_stream_open(seed, delay_us);
}

void sim_stream_destroy(int64_t stream)
{
	struct sim_stream *s;

	pthread_mutex_lock(&sim_mu);
	s = sim_stream_find_locked(stream);
	pthread_mutex_unlock(&sim_mu);
	sim_stream_close(s);
}

int sim_stream_call(int64_t stream, void (*fn)(void *), void *arg)
{
	struct sim_op *op = sim_op_new(OP_CALL, 0);
	struct sim_stream *s;

	if (!op)
		return -ENOMEM;
	op->fn = fn;
	op->arg = arg;
	pthread_mutex_lock(&sim_mu);
	s = sim_stream_find_locked(stream);
	if (s)
		sim_enqueue_locked(s, op);
	pthread_mutex_unlock(&sim_mu);
	if (!s) {
		free(op);
		return -EINVAL;
	}
	return 0;
}

int sim_stream_synchronize(int64_t stream)
{
	struct sim_event e;
	struct sim_stream *s;

	pthread_mutex_lock(&sim_mu);
	s = sim_stream_find_locked(stream);
	if (s)
		e = sim_record_locked(s);
	pthread_mutex_unlock(&sim_mu);
	if (!s)
		return -EINVAL;
	sim_event_wait(&e);
	return 0;
}

/* Queue on @waiter a wait for @e. */
int sim_wait_event_locked(struct sim_stream *waiter, struct sim_event e)
{
	struct sim_op *op;

	if (sim_event_done_locked(&e))
		return 0;
	op = sim_op_new(OP_WAIT, 0);
	if (!op)
		return -ENOMEM;
	op->ev = e;
	sim_enqueue_locked(waiter, op);
	return 0;
}

/* Queue on @waiter a wait for every other stream in use but @skip. */
int sim_wait_all_locked(struct sim_stream *waiter, const struct sim_stream *skip)
{
	struct sim_stream *s;
	int r = 0;

	for (s = sim_streams; !r && s; s = s->all_next)
		if (s->in_use && s != waiter && s != skip)
			r = sim_wait_event_locked(waiter, sim_record_locked(s));
	return r;
}

void sim_lock(void)
{
	pthread_mutex_lock(&sim_mu);
}

void sim_unlock(void)
{
	pthread_mutex_unlock(&sim_mu);
}
