/*
 * loader.c - the running loader's public API: next, epochs and restarts,
 * errors and skipped blocks.  Open and close: loader_open.c; the config:
 * loader_config.c; stats: loader_stats.c; the resumable state:
 * loader_state.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loader.h"

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
	core_lock(c);
	n = (int64_t)c->skipped_blocks;
	if (buf && len)
		snprintf(buf, len, "%s", c->skip_err);
	pthread_mutex_unlock(&c->mu);
	return n;
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
	core_lock(c);
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

	core_lock(c);
	c->planning_paused = 1;
	pthread_mutex_unlock(&c->mu);
	io_ring_wake(c->ring);
	core_lock(c);
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
		int dropped = 0;  /* a dropped batch's release failed */

		for (uint32_t k = 0; k < c->fifo_len; k++) {
			struct slot *s = c->slots[c->fifo[(c->fifo_head + k) %
							  c->slots_cap]];

			/* Never delivered, it is released as a consumer's
			 * batch is (the device forgets what it wrote: the
			 * sim's poison would land on the next batch's), and
			 * its copy may still read the memory. */
			if (c->dev_info.caps & DEVICE_CAP_MIRROR) {
				int rel = device_slot_release(c->dev, s->id);

				device_slot_wait_copied(c->dev, s->id);
				if (rel && !dropped) {
					dropped = rel;
					loader_fail_locked(c, rel,
						"a prefetched batch dropped at a restart: its release on the device failed");
				}
			}
			batch_memory_free_locked(c, s);
			s->state = SLOT_FREE;
		}
		c->fifo_len = 0;
		r = dropped ? dropped
			    : sampler_resume(&c->sampler, epoch, earlier,
					     nearlier);
	}
	if (!r) {
		c->plan_epoch = epoch;
		c->plan_pass++;
		c->plan_batch = batch;
		c->ahead.batch = batch;
		c->ahead.rec = 0;
		c->epoch = epoch;
		c->consumed = batch;
		c->epoch_batches = loader_past_epochs(c, epoch)
					   ? 0 : c->sampler.nbatches;
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
	core_lock(c);
	for (;;) {
		if (c->failed) {
			r = c->failed;
			break;
		}
		if (loader_past_epochs(c, c->epoch)) {
			r = SLUICE_EOF;    /* the job's epochs are over */
			break;
		}
		if (c->consumed >= c->epoch_batches) {
			c->epoch++;
			c->consumed = 0;
			c->nearlier = 0;
			c->epoch_batches = loader_past_epochs(c, c->epoch)
						   ? 0 : c->fresh_batches;
			r = SLUICE_EOF;
			break;
		}
		if (c->fifo_len > 0) {
			struct slot *s = c->slots[c->fifo[c->fifo_head]];

			if (s->state == SLOT_MEMORY) {
				int h = batch_memory_hoarded_locked(c);

				if (h < 0)
					loader_fail_locked(c, h,
						"the consumer holds all batch memory (%llu of %llu bytes) and asks for a batch of %llu more: release batches (or their tensors) or raise memory_bytes (sluice --memory, Python memory_bytes=)",
						(unsigned long long)c->batch_pool.used,
						(unsigned long long)c->batch_pool.size,
						(unsigned long long)s->host_bytes);
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
				if (s->place == PLACE_VIEW)
					atomic_fetch_add(&c->batches_viewed, 1);
				if (s->place == PLACE_GATHER) {
					atomic_fetch_add(
						&c->gather.batches_gathered, 1);
					atomic_fetch_add(&c->gather.runs,
							 s->gather.nruns);
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
			core_lock(c);
			continue;
		}
		pthread_cond_wait(&c->ready_cv, &c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&c->consumer_wait_ns, now_ns() - t0);
	return r;
}
