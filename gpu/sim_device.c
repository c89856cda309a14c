/*
 * sim_device.c - an asynchronous device simulated with threads, so that
 * the ordering rules of DESIGN.md "GPU stream semantics" run in every
 * `make test`, without a GPU.
 *
 * - Streams are threads running queued work after seeded random delays,
 *   events are counters (sim_stream.c).
 * - Device memory is apart from the arena (its own allocation).  It holds
 *   SIM_POISON at open; a copy poisons its destination, waits a random
 *   while, then lands; a release poisons the slot's bytes once the
 *   consumers' streams have reached the release.  A read at the wrong
 *   moment sees poison or another batch.
 * - Gathers run on the copy stream, uploads on an upload stream that
 *   first waits for the latest gather (as cuda_gather.c orders them).
 * - Checksums run on the upload stream, over the io mirror as the
 *   uploads left it, with the kernel's cut of XXH3 (xxh3_steps.h).
 * - A thread that holds a started upload and asks for another, or for a
 *   checksum, gets an error: on a GPU each holds a lane, and that can
 *   deadlock.
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
#include "sim_stream.h"

#ifdef SLUICE_TESTING
unsigned sim_test_faults;
uint64_t sim_test_fail_copy;
#endif

/* Distinct consumer streams a slot tracks between two releases; past
 * that a release waits for every consumer stream there is. */
#define SLOT_STREAMS 8

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
	uint64_t uploads;                /* [sim_mu] */
	uint64_t fail_copy;              /* the copy or upload to fail */
	uint64_t fail_finish_at;         /* the upload stream's point whose
					    finish fails; 0: none [sim_mu] */
};

/* Started uploads the calling thread has not finished.  On a GPU each
 * holds an upload lane (cuda_gather.c), and a thread that waits for a
 * second lane while holding one can deadlock with others doing the
 * same: here that is an error, so the tests see it at once. */
static _Thread_local unsigned uploads_held;

/* A lane for an upload or a checksum, unless the thread holds one. */
static int lane_rule(struct device *d, const char *what)
{
	if (!uploads_held)
		return 0;
	device_record_error(d, "%s by a thread that holds a started upload: "
			    "on a GPU, with every lane held so, that "
			    "deadlocks (gpu/device.h)", what);
	return -SLUICE_ECUDA;
}

static struct sim_device *to_sim(struct device *d)
{
	return (struct sim_device *)d;
}

/* Remember which device bytes slot @s wrote since its last release
 * (poisoned on the next): a gathered batch with variable fields is a
 * gather and a copy of their offsets or lengths. */
static int slot_note_locked(struct sim_slot *s, const struct sim_op *op)
{
	if (s->nlast + op->n > s->cap) {
		unsigned cap = s->nlast + op->n;
		struct sim_piece *p = realloc(s->last, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->last = p;
		s->cap = cap;
	}
	for (unsigned k = 0; k < op->n; k++)
		s->last[s->nlast + k] = (struct sim_piece){
			.dst = op->piece[k].dst, .len = op->piece[k].len };
	s->nlast += op->n;
	return 0;
}

/* Queue a copy or gather for slot @i; records its ready event. */
static int slot_enqueue(struct sim_device *sd, uint32_t i, struct sim_op *op,
			int gather)
{
	struct sim_slot *s = &sd->slot[i];
	uint64_t nth;
	int r;

	sim_lock();
	nth = ++sd->copies;     /* other threads count too: read it here */
	if ((sd->faults & SIM_FAULT_COPY_ERROR) && nth == sd->fail_copy) {
		sim_unlock();
		free(op);
		device_record_error(&sd->base,
				    "simulated %s %llu (slot %u) failed (asked)",
				    gather ? "gather" : "copy",
				    (unsigned long long)nth, i);
		return -SLUICE_ECUDA;
	}
	r = slot_note_locked(s, op);
	if (!r) {
		sim_enqueue_locked(sd->copy, op);
		s->ready = sim_record_locked(sd->copy);
		if (gather)
			sd->gathered = s->ready;
	}
	sim_unlock();
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
	struct sim_op *op = sim_op_new(OP_COPY, n);

	if (!op) {
		device_record_error(d, "out of memory for a copy (slot %u)", i);
		return -ENOMEM;
	}
	for (unsigned k = 0; k < n; k++)
		op->piece[k] = (struct sim_piece){
			.dst = sd->mem + base + ranges[k].offset,
			.src = (const uint8_t *)host + ranges[k].offset,
			.len = ranges[k].len };
	return slot_enqueue(sd, i, op, 0);
}

static int sim_gather(struct device *d, uint32_t i,
		      const struct gather_run *runs, unsigned n)
{
	struct sim_device *sd = to_sim(d);
	struct sim_op *op = sim_op_new(OP_COPY, n);

	if (!op) {
		device_record_error(d, "out of memory for a gather (slot %u)", i);
		return -ENOMEM;
	}
	/* device_gather_slot() put each run inside its two mirrors */
	for (unsigned k = 0; k < n; k++) {
		int zeros = runs[k].src == GATHER_ZEROS;

		op->piece[k] = (struct sim_piece){
			.dst = sd->mem + (runs[k].dst - d->mirror_offset),
			.src = zeros ? NULL : sd->io_mem + runs[k].src,
			.len = runs[k].len, .zeros = zeros };
	}
	return slot_enqueue(sd, i, op, 1);
}

static int sim_upload_start(struct device *d, const void *host,
			    struct device_upload *u)
{
	struct sim_device *sd = to_sim(d);
	struct sim_op *op;
	struct sim_event done;
	int r = lane_rule(d, "an upload started"), fail_this = 0;

	if (r)
		return r;
	op = sim_op_new(OP_COPY, 1);
	if (!op) {
		device_record_error(d, "out of memory for an upload");
		return -ENOMEM;
	}
	op->piece[0] = (struct sim_piece){ .dst = sd->io_mem + u->offset,
					   .src = host, .len = u->len };
	sim_lock();
	if (sd->faults & (SIM_FAULT_UPLOAD_ERROR | SIM_FAULT_FINISH_ERROR))
		fail_this = ++sd->uploads == sd->fail_copy;
	if (fail_this && (sd->faults & SIM_FAULT_UPLOAD_ERROR)) {
		sim_unlock();
		free(op);
		device_record_error(d, "simulated upload %llu failed (asked)",
				    (unsigned long long)sd->fail_copy);
		return -SLUICE_ECUDA;
	}
	/* After every gather queued so far: they may still read the bytes
	 * this overwrites. */
	if (!(sd->faults & SIM_FAULT_EARLY_UPLOAD))
		r = sim_wait_event_locked(sd->upload, sd->gathered);
	if (!r) {
		sim_enqueue_locked(sd->upload, op);
		done = sim_record_locked(sd->upload);
		if (fail_this)
			sd->fail_finish_at = done.at;
	}
	sim_unlock();
	if (r) {
		free(op);
		device_record_error(d, "out of memory for an upload");
		return r;
	}
	u->handle = done.s;
	u->at = done.at;
	uploads_held++;
	return 0;
}

static int sim_upload_finish(struct device *d, struct device_upload *u)
{
	struct sim_device *sd = to_sim(d);
	struct sim_event done = { u->handle, u->at };
	int failed;

	sim_event_wait(&done);
	uploads_held--;
	sim_lock();
	failed = sd->fail_finish_at && sd->fail_finish_at == u->at;
	sim_unlock();
	if (failed) {
		device_record_error(d, "simulated upload %llu failed in flight (asked)",
				    (unsigned long long)sd->fail_copy);
		return -SLUICE_ECUDA;
	}
	return 0;
}

struct sim_checksum {
	const uint8_t *bytes;   /* in the io mirror */
	size_t len;
	const struct xxh3s_secret *secret;
	uint64_t sum;
};

static void sim_checksum_run(void *arg)
{
	struct sim_checksum *k = arg;

	k->sum = xxh3s_hash_host(k->bytes, k->len, k->secret);
}

/* On the upload stream, after the uploads queued before it: what the
 * device holds, poison where an upload has not landed. */
static int sim_checksum(struct device *d, size_t offset, size_t len,
			uint64_t *sum)
{
	struct sim_device *sd = to_sim(d);
	struct sim_op *op;
	struct sim_checksum k = { sd->io_mem + offset, len,
				  &d->checksum_secret, 0 };
	struct sim_event done;
	int r = lane_rule(d, "a checksum taken");

	if (r)
		return r;
	op = sim_op_new(OP_CALL, 0);
	if (sd->faults & SIM_FAULT_CHECKSUM_ERROR) {
		free(op);
		device_record_error(d, "simulated checksum failure (%zu bytes at io offset %zu)",
				    len, offset);
		return -SLUICE_ECUDA;
	}
	if (!op) {
		device_record_error(d, "out of memory for a checksum");
		return -ENOMEM;
	}
	op->fn = sim_checksum_run;
	op->arg = &k;
	sim_lock();
	sim_enqueue_locked(sd->upload, op);
	done = sim_record_locked(sd->upload);
	sim_unlock();
	sim_event_wait(&done);
	*sum = k.sum;
	return 0;
}

static int sim_wait_copied(struct device *d, uint32_t i)
{
	struct sim_device *sd = to_sim(d);
	struct sim_event e;

	if (sd->faults & SIM_FAULT_EARLY_RELEASE)
		return 0;
	sim_lock();
	e = sd->slot[i].ready;
	sim_unlock();
	sim_event_wait(&e);
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
	sim_lock();
	e = s->ready;
	if (stream == 0) {
		/* The calling thread is the consumer: it reads once this
		 * returns, and its release comes after its reads. */
		sim_unlock();
		sim_event_wait(&e);
		return 0;
	}
	cs = sim_stream_find_locked(stream);
	if (!cs) {
		sim_unlock();
		device_record_error(d, "stream %lld is not a simulated stream "
				       "(slot %u)", (long long)stream, i);
		return -EINVAL;
	}
	r = sim_wait_event_locked(cs, e);
	for (k = 0; !r && k < s->nconsumers && s->consumer[k] != cs; k++)
		;
	if (!r && k == s->nconsumers) {
		if (k < SLOT_STREAMS)
			s->consumer[s->nconsumers++] = cs;
		else
			s->overflow = 1;
	}
	sim_unlock();
	if (r)
		device_record_error(d, "out of memory (slot %u)", i);
	return r;
}

static int sim_slot_release(struct device *d, uint32_t i)
{
	struct sim_device *sd = to_sim(d);
	struct sim_slot *s = &sd->slot[i];
	struct sim_op *poison = NULL;
	int k, r = 0;

	sim_lock();
	if (!(sd->faults & SIM_FAULT_EARLY_REUSE)) {
		for (k = 0; !r && k < s->nconsumers; k++)
			r = sim_wait_event_locked(sd->copy,
					      sim_record_locked(s->consumer[k]));
		/* Streams it could not track: wait for every one. */
		if (!r && s->overflow)
			r = sim_wait_all_locked(sd->copy, sd->upload);
	}
	if (!r && s->nlast) {
		poison = sim_op_new(OP_COPY, s->nlast);
		if (poison) {
			memcpy(poison->piece, s->last,
			       s->nlast * sizeof(s->last[0]));
			sim_enqueue_locked(sd->copy, poison);
		} else {
			r = -ENOMEM;
		}
	}
	s->nlast = 0;
	s->nconsumers = 0;
	s->overflow = 0;
	sim_unlock();
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
	sim_stream_close(sd->copy);
	sim_stream_close(sd->upload);
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
	.upload_start = sim_upload_start,
	.upload_finish = sim_upload_finish,
	.checksum = sim_checksum,
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
		sd->base.info.caps |= DEVICE_CAP_CHECKSUM;
	}
	r = -EAGAIN;
	sd->copy = sim_stream_open(seed * 2 + 1, delay_us);
	if (!sd->copy)
		goto fail;
	sd->upload = sim_stream_open(seed * 2 + 2, delay_us);
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
