/*
 * sim_device.c - an asynchronous device simulated with threads, so that
 * the ordering rules of DESIGN.md "GPU stream semantics" run in every
 * `make test`, without a GPU.
 *
 * - Streams are threads.  Each runs its queue in order, every operation
 *   after a random delay drawn from the stream's seed.
 * - Events are counters: recording one on a stream notes how many
 *   operations were queued on it; the event is complete once the stream
 *   has run that many.  A stream made to wait on an event gets a wait
 *   operation in its queue: the stream blocks, the host does not.
 * - Device memory is apart from the arena (its own allocation).  It holds
 *   SIM_POISON at open; a copy poisons its destination, waits a random
 *   while, then lands; a release poisons the slot's bytes once the
 *   consumers' streams have reached the release.  A read at the wrong
 *   moment sees poison or another batch.
 * - Gathers run on the copy stream, uploads on an upload stream that
 *   first waits for the latest gather (as cuda_gather.c orders them).
 *
 * One lock and one condition variable serve every stream and event of
 * the process: simple, and fast enough for tests.  Streams are never
 * freed, only stopped and reused, since events (copied into queued waits
 * and slots) name them; the counters only grow, so an event of a stopped
 * stream stays complete through its reuse.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "device_impl.h"
#include "sim_device.h"

#ifdef SLUICE_TESTING
unsigned sim_test_faults;
uint64_t sim_test_fail_copy;
#endif

/* Distinct consumer streams a slot tracks between two releases; past
 * that a release waits for every consumer stream there is. */
#define SLOT_STREAMS 8

struct sim_stream;

struct sim_event {
	struct sim_stream *s;   /* NULL: never recorded, complete */
	uint64_t at;            /* complete once s->done >= at */
};

/* One contiguous piece an operation writes: from @src, or poison when
 * @src is NULL. */
struct sim_piece {
	uint8_t *dst;
	const uint8_t *src;
	size_t len;
};

enum sim_op_kind { OP_COPY, OP_WAIT, OP_CALL };

struct sim_op {
	struct sim_op *next;
	enum sim_op_kind kind;
	struct sim_event ev;             /* OP_WAIT */
	void (*fn)(void *);              /* OP_CALL */
	void *arg;
	unsigned n;                      /* OP_COPY */
	struct sim_piece piece[];
};

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

struct sim_slot {
	struct sim_event ready;          /* the slot's last copy or gather */
	struct sim_stream *consumer[SLOT_STREAMS];
	int nconsumers, overflow;
	struct sim_piece *last;          /* device bytes it last wrote */
	unsigned nlast, cap;
};

struct sim_device {
	struct device base;              /* first: device.c sees only this */
	uint8_t *mem;                    /* the batch mirror */
	uint8_t *io_mem;                 /* the io mirror (gathers), or NULL */
	struct sim_stream *copy, *upload;
	struct sim_event gathered;       /* after the latest gather */
	struct sim_slot *slot;           /* [sim_mu] */
	unsigned faults;
	uint64_t copies;                 /* copies and gathers [sim_mu] */
	uint64_t fail_copy;
};

static struct sim_device *to_sim(struct device *d)
{
	return (struct sim_device *)d;
}

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

static int event_done_locked(const struct sim_event *e)
{
	return !e->s || e->s->done >= e->at;
}

static void event_wait(const struct sim_event *e)
{
	pthread_mutex_lock(&sim_mu);
	while (!event_done_locked(e))
		pthread_cond_wait(&sim_cv, &sim_mu);
	pthread_mutex_unlock(&sim_mu);
}

static struct sim_event record_locked(struct sim_stream *s)
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
			if (op->piece[k].src)
				memcpy(op->piece[k].dst, op->piece[k].src,
				       op->piece[k].len);
		break;
	case OP_WAIT:
		event_wait(&op->ev);
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

static void enqueue_locked(struct sim_stream *s, struct sim_op *op)
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

static struct sim_op *op_new(enum sim_op_kind kind, unsigned n)
{
	struct sim_op *op = calloc(1, sizeof(*op) + n * sizeof(op->piece[0]));

	if (op) {
		op->kind = kind;
		op->n = n;
	}
	return op;
}

static struct sim_stream *stream_open(uint64_t seed, unsigned delay_us)
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

static void stream_close(struct sim_stream *s)
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
static struct sim_stream *stream_find_locked(int64_t h)
{
	struct sim_stream *s;

	for (s = sim_streams; s; s = s->all_next)
		if ((int64_t)(intptr_t)s == h && s->in_use)
			return s;
	return NULL;
}

int64_t sim_stream_create(uint64_t seed, unsigned delay_us)
{
	return (int64_t)(intptr_t)stream_open(seed, delay_us);
}

void sim_stream_destroy(int64_t stream)
{
	struct sim_stream *s;

	pthread_mutex_lock(&sim_mu);
	s = stream_find_locked(stream);
	pthread_mutex_unlock(&sim_mu);
	stream_close(s);
}

int sim_stream_call(int64_t stream, void (*fn)(void *), void *arg)
{
	struct sim_op *op = op_new(OP_CALL, 0);
	struct sim_stream *s;

	if (!op)
		return -ENOMEM;
	op->fn = fn;
	op->arg = arg;
	pthread_mutex_lock(&sim_mu);
	s = stream_find_locked(stream);
	if (s)
		enqueue_locked(s, op);
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
	s = stream_find_locked(stream);
	if (s)
		e = record_locked(s);
	pthread_mutex_unlock(&sim_mu);
	if (!s)
		return -EINVAL;
	event_wait(&e);
	return 0;
}

/* Queue on @waiter a wait for @e. */
static int wait_event_locked(struct sim_stream *waiter, struct sim_event e)
{
	struct sim_op *op;

	if (event_done_locked(&e))
		return 0;
	op = op_new(OP_WAIT, 0);
	if (!op)
		return -ENOMEM;
	op->ev = e;
	enqueue_locked(waiter, op);
	return 0;
}

/* Remember which device bytes slot @s last wrote (poisoned on release). */
static int slot_note_locked(struct sim_slot *s, const struct sim_op *op)
{
	if (op->n > s->cap) {
		struct sim_piece *p = realloc(s->last, op->n * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->last = p;
		s->cap = op->n;
	}
	for (unsigned k = 0; k < op->n; k++)
		s->last[k] = (struct sim_piece){ op->piece[k].dst, NULL,
						 op->piece[k].len };
	s->nlast = op->n;
	return 0;
}

/* Queue a copy or gather for slot @i; records its ready event. */
static int slot_enqueue(struct sim_device *sd, uint32_t i, struct sim_op *op,
			int gather)
{
	struct sim_slot *s = &sd->slot[i];
	int r;

	pthread_mutex_lock(&sim_mu);
	sd->copies++;
	if ((sd->faults & SIM_FAULT_COPY_ERROR) && sd->copies == sd->fail_copy) {
		pthread_mutex_unlock(&sim_mu);
		free(op);
		device_record_error(&sd->base,
				    "simulated %s %llu (slot %u) failed (asked)",
				    gather ? "gather" : "copy",
				    (unsigned long long)sd->copies, i);
		return -SLUICE_ECUDA;
	}
	r = slot_note_locked(s, op);
	if (!r) {
		enqueue_locked(sd->copy, op);
		s->ready = record_locked(sd->copy);
		if (gather)
			sd->gathered = s->ready;
	}
	pthread_mutex_unlock(&sim_mu);
	if (r) {
		free(op);
		device_record_error(&sd->base, "out of memory (slot %u)", i);
	}
	return r;
}

static int sim_copy_slot(struct device *d, uint32_t i, const void *host,
			 const struct slot_range *ranges, unsigned n)
{
	struct sim_device *sd = to_sim(d);
	/* device_check_copy() put every range inside the mirrored part */
	size_t base = (size_t)((const uint8_t *)host -
			       (const uint8_t *)d->arena.base) - d->mirror_offset;
	struct sim_op *op = op_new(OP_COPY, n);

	if (!op) {
		device_record_error(d, "out of memory for a copy (slot %u)", i);
		return -ENOMEM;
	}
	for (unsigned k = 0; k < n; k++)
		op->piece[k] = (struct sim_piece){
			sd->mem + base + ranges[k].offset,
			(const uint8_t *)host + ranges[k].offset, ranges[k].len };
	return slot_enqueue(sd, i, op, 0);
}

static int sim_gather(struct device *d, uint32_t i,
		      const struct gather_run *runs, unsigned n)
{
	struct sim_device *sd = to_sim(d);
	struct sim_op *op = op_new(OP_COPY, n);

	if (!op) {
		device_record_error(d, "out of memory for a gather (slot %u)", i);
		return -ENOMEM;
	}
	/* device_gather_slot() put each run inside its two mirrors */
	for (unsigned k = 0; k < n; k++)
		op->piece[k] = (struct sim_piece){
			sd->mem + (runs[k].dst - d->mirror_offset),
			sd->io_mem + runs[k].src, runs[k].len };
	return slot_enqueue(sd, i, op, 1);
}

static int sim_upload(struct device *d, size_t offset, const void *host,
		      size_t len)
{
	struct sim_device *sd = to_sim(d);
	struct sim_op *op = op_new(OP_COPY, 1);
	struct sim_event done;
	int r = 0;

	if (!op) {
		device_record_error(d, "out of memory for an upload");
		return -ENOMEM;
	}
	op->piece[0] = (struct sim_piece){ sd->io_mem + offset, host, len };
	pthread_mutex_lock(&sim_mu);
	/* After every gather queued so far: they may still read the bytes
	 * this overwrites. */
	if (!(sd->faults & SIM_FAULT_EARLY_UPLOAD))
		r = wait_event_locked(sd->upload, sd->gathered);
	if (!r) {
		enqueue_locked(sd->upload, op);
		done = record_locked(sd->upload);
	}
	pthread_mutex_unlock(&sim_mu);
	if (r) {
		free(op);
		device_record_error(d, "out of memory for an upload");
		return r;
	}
	event_wait(&done);
	return 0;
}

static int sim_wait_copied(struct device *d, uint32_t i)
{
	struct sim_device *sd = to_sim(d);
	struct sim_event e;

	if (sd->faults & SIM_FAULT_EARLY_RELEASE)
		return 0;
	pthread_mutex_lock(&sim_mu);
	e = sd->slot[i].ready;
	pthread_mutex_unlock(&sim_mu);
	event_wait(&e);
	return 0;
}

static int sim_slot_export(struct device *d, uint32_t i, int64_t stream)
{
	struct sim_device *sd = to_sim(d);
	struct sim_slot *s = &sd->slot[i];
	struct sim_stream *cs;
	struct sim_event e;
	int k, r = 0;

	if (stream == -1 || (sd->faults & SIM_FAULT_NO_CONSUMER_WAIT))
		return 0;
	pthread_mutex_lock(&sim_mu);
	e = s->ready;
	if (stream == 0) {
		/* The calling thread is the consumer: it reads once this
		 * returns, and its release comes after its reads. */
		pthread_mutex_unlock(&sim_mu);
		event_wait(&e);
		return 0;
	}
	cs = stream_find_locked(stream);
	if (!cs) {
		pthread_mutex_unlock(&sim_mu);
		device_record_error(d, "stream %lld is not a simulated stream "
				       "(slot %u)", (long long)stream, i);
		return -EINVAL;
	}
	r = wait_event_locked(cs, e);
	for (k = 0; !r && k < s->nconsumers && s->consumer[k] != cs; k++)
		;
	if (!r && k == s->nconsumers) {
		if (k < SLOT_STREAMS)
			s->consumer[s->nconsumers++] = cs;
		else
			s->overflow = 1;
	}
	pthread_mutex_unlock(&sim_mu);
	if (r)
		device_record_error(d, "out of memory (slot %u)", i);
	return r;
}

static int sim_slot_release(struct device *d, uint32_t i)
{
	struct sim_device *sd = to_sim(d);
	struct sim_slot *s = &sd->slot[i];
	struct sim_stream *cs;
	struct sim_op *poison = NULL;
	int k, r = 0;

	pthread_mutex_lock(&sim_mu);
	if (!(sd->faults & SIM_FAULT_EARLY_REUSE)) {
		for (k = 0; !r && k < s->nconsumers; k++)
			r = wait_event_locked(sd->copy,
					      record_locked(s->consumer[k]));
		/* Streams it could not track: wait for every one. */
		for (cs = sim_streams; !r && s->overflow && cs; cs = cs->all_next)
			if (cs->in_use && cs != sd->copy && cs != sd->upload)
				r = wait_event_locked(sd->copy, record_locked(cs));
	}
	if (!r && s->nlast) {
		poison = op_new(OP_COPY, s->nlast);
		if (poison) {
			memcpy(poison->piece, s->last,
			       s->nlast * sizeof(s->last[0]));
			enqueue_locked(sd->copy, poison);
		} else {
			r = -ENOMEM;
		}
	}
	s->nlast = 0;
	s->nconsumers = 0;
	s->overflow = 0;
	pthread_mutex_unlock(&sim_mu);
	if (r)
		device_record_error(d, "out of memory releasing slot %u", i);
	return r;
}

static void *sim_mirror_ptr(const struct device *d, size_t offset)
{
	const struct sim_device *sd = (const struct sim_device *)d;

	return sd->mem + offset;
}

static int sim_measure_h2d(struct device *d, size_t bytes, int iters,
			   double *bps)
{
	(void)bytes;
	(void)iters;
	*bps = 0;
	device_record_error(d, "no host-to-device link to measure: the "
			       "device is simulated");
	return -SLUICE_ENODEVICE;
}

/* A training step: the host spins, then @stream's queue drains. */
static int sim_compute(struct device *d, int64_t stream, double ms)
{
	host_busy_wait(ms);
	if (stream != 0 && sim_stream_synchronize(stream)) {
		device_record_error(d, "stream %lld is not a simulated stream",
				    (long long)stream);
		return -EINVAL;
	}
	return 0;
}

static void sim_close(struct device *d)
{
	struct sim_device *sd = to_sim(d);

	/* The copy stream's waits on the consumers' releases end only when
	 * the consumers' queued reads have run: then the memory may go. */
	stream_close(sd->copy);
	stream_close(sd->upload);
	if (sd->slot)
		for (uint32_t i = 0; i < d->slots; i++)
			free(sd->slot[i].last);
	free(sd->slot);
	free(sd->mem);
	free(sd->io_mem);
	arena_unmap(&d->arena);
	device_base_fini(d);
	free(sd);
}

static const struct device_ops sim_ops = {
	.close = sim_close,
	.mirror_ptr = sim_mirror_ptr,
	.copy_slot = sim_copy_slot,
	.wait_copied = sim_wait_copied,
	.upload = sim_upload,
	.gather = sim_gather,
	.slot_export = sim_slot_export,
	.slot_release = sim_slot_release,
	.measure_h2d = sim_measure_h2d,
	.compute = sim_compute,
};

/* Device memory: its own allocation, poisoned. */
static uint8_t *device_alloc(size_t bytes)
{
	uint8_t *p;

	if (bytes == 0)
		return NULL;
	p = malloc(bytes);
	if (p)
		memset(p, SIM_POISON, bytes);
	return p;
}

int sim_device_open(const struct device_config *cfg, uint64_t seed,
		    unsigned delay_us, struct device **out, char *err,
		    size_t errlen)
{
	struct sim_device *sd;
	char msg[96];
	int r;

	*out = NULL;
	sd = calloc(1, sizeof(*sd));
	if (!sd) {
		device_set_err(err, errlen, "out of memory for the simulated device");
		return -ENOMEM;
	}
	device_base_init(&sd->base, &sim_ops, cfg);
	sd->base.info.dl.device_type = kDLCPU;    /* its memory is host memory */
	sd->base.info.dl.device_id = 0;
	sd->base.info.caps = DEVICE_CAP_MIRROR | DEVICE_CAP_GATHER |
			     DEVICE_CAP_STREAMS;
	device_note_fallback(&sd->base.info,
			     "simulated device (SLUICE_DEVICE_SIM=%llu, delays up to %u us)",
			     (unsigned long long)seed, delay_us);
#ifdef SLUICE_TESTING
	sd->faults = sim_test_faults;
	sd->fail_copy = sim_test_fail_copy;
#endif
	r = arena_map(&sd->base.arena, cfg->arena_bytes);
	if (r) {
		device_set_err(err, errlen, "mmap of a %zu-byte arena: %s",
			       cfg->arena_bytes, strerror_r(-r, msg, sizeof(msg)));
		device_base_fini(&sd->base);
		free(sd);
		return r;
	}
	sd->base.info.huge_pages = sd->base.arena.huge_pages;
	r = -ENOMEM;
	sd->mem = device_alloc(cfg->mirror_bytes);
	sd->slot = calloc(cfg->slots, sizeof(*sd->slot));
	if (!sd->mem || !sd->slot)
		goto fail;
	sd->base.info.device_bytes = cfg->mirror_bytes;
	if (cfg->io_mirror_bytes) {
		sd->io_mem = device_alloc(cfg->io_mirror_bytes);
		if (!sd->io_mem)
			goto fail;
		sd->base.info.device_bytes += cfg->io_mirror_bytes;
	}
	r = -EAGAIN;
	sd->copy = stream_open(seed * 2 + 1, delay_us);
	if (!sd->copy)
		goto fail;
	sd->upload = stream_open(seed * 2 + 2, delay_us);
	if (!sd->upload)
		goto fail;
	*out = &sd->base;
	return 0;
fail:
	device_set_err(err, errlen, "simulated device: %s",
		       strerror_r(-r, msg, sizeof(msg)));
	sim_close(&sd->base);
	return r;
}
