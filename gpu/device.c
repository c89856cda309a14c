/*
 * device.c - choose the device implementation (cuda when a GPU is usable,
 * else host; sim when SLUICE_DEVICE_SIM asks) and dispatch the device.h
 * calls to it.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_generateSecret_fromSeed */
#include <xxhash.h>

#include "sluice.h"
#include "device_impl.h"
#include "sim_device.h"

void device_set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

void device_note_fallback(struct device_info *info, const char *fmt, ...)
{
	size_t used = strnlen(info->fallbacks, sizeof(info->fallbacks));
	size_t room = sizeof(info->fallbacks) - used;
	va_list ap;
	int n;

	if (used > 0) {
		n = snprintf(info->fallbacks + used, room, "; ");
		if (n < 0 || (size_t)n >= room)
			return;
		used += (size_t)n;
		room -= (size_t)n;
	}
	va_start(ap, fmt);
	vsnprintf(info->fallbacks + used, room, fmt, ap);
	va_end(ap);
}

void device_base_init(struct device *d, const struct device_ops *ops,
		      const struct device_config *cfg)
{
	d->ops = ops;
	d->slots = cfg->slots;
	d->mirror_offset = cfg->mirror_offset;
	d->mirror_bytes = cfg->mirror_bytes;
	d->io_mirror_bytes = cfg->io_mirror_bytes;
	d->gather_runs_max = cfg->gather_runs_max;
	/* seed 0 leaves the default secret as it is */
	XXH3_generateSecret_fromSeed(d->checksum_secret.w, 0);
	pthread_mutex_init(&d->error_lock, NULL);
}

void device_base_fini(struct device *d)
{
	pthread_mutex_destroy(&d->error_lock);
}

void device_record_error(struct device *d, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&d->error_lock);
	va_start(ap, fmt);
	vsnprintf(d->last_error, sizeof(d->last_error), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&d->error_lock);
}

int device_last_error(struct device *d, char *buf, size_t len)
{
	int n;

	pthread_mutex_lock(&d->error_lock);
	n = snprintf(buf, len, "%s", d->last_error);
	pthread_mutex_unlock(&d->error_lock);
	return n;
}

int device_check_copy(const struct device *d, uint32_t i, const void *host,
		      size_t len)
{
	uintptr_t lo = (uintptr_t)d->arena.base + d->mirror_offset;
	uintptr_t p = (uintptr_t)host;

	if (i >= d->slots)
		return -EINVAL;
	if (len == 0)
		return 0;
	/* Written so that no sum can wrap. */
	if (!host || p < lo || p - lo > d->mirror_bytes ||
	    len > d->mirror_bytes - (p - lo))
		return -EINVAL;
	return 0;
}

/* -1 means $LOCAL_RANK (set by torchrun and friends), 0 when unset. */
static int resolve_device_id(int requested, int *id, char *err,
			     size_t errlen);

int device_offloads(int kind, int device_id)
{
	const char *sim = getenv("SLUICE_DEVICE_SIM");
	int id;

	if (kind == SLUICE_DEVICE_HOST)
		return 0;
	if (sim && *sim)
		return 1;
	if (resolve_device_id(device_id, &id, NULL, 0))
		return 0;
#ifdef SLUICE_HAVE_CUDA
	{
		char why[160];

		return cuda_device_probe(id, why, sizeof(why)) == 0;
	}
#else
	return 0;
#endif
}

uint64_t device_memory_total(int kind, int device_id)
{
	const char *sim = getenv("SLUICE_DEVICE_SIM");
	const char *sim_memory = getenv("SLUICE_SIM_DEVICE_MEMORY");
	int id;

	if (!device_offloads(kind, device_id))
		return 0;
	if (sim && *sim)
		return sim_memory ? strtoull(sim_memory, NULL, 10) : 0;
	if (resolve_device_id(device_id, &id, NULL, 0))
		return 0;
#ifdef SLUICE_HAVE_CUDA
	return cuda_device_memory_total(id);
#else
	return 0;
#endif
}

static int resolve_device_id(int requested, int *id, char *err,
			     size_t errlen)
{
	const char *env;
	char *end;
	long v;
	int saved_errno, bad;

	if (requested >= 0) {
		*id = requested;
		return 0;
	}
	if (requested != -1) {
		device_set_err(err, errlen, "device_id %d: expected -1 or >= 0",
			       requested);
		return -EINVAL;
	}
	env = getenv("LOCAL_RANK");
	if (!env || !*env) {
		*id = 0;
		return 0;
	}
	saved_errno = errno;    /* strtol reports through errno; keep the caller's */
	errno = 0;
	v = strtol(env, &end, 10);
	bad = errno != 0 || end == env || *end || v < 0 || v > INT_MAX;
	errno = saved_errno;
	if (bad) {
		device_set_err(err, errlen,
			       "LOCAL_RANK=\"%s\" is not a device number", env);
		return -EINVAL;
	}
	*id = (int)v;
	return 0;
}

static int check_config(const struct device_config *cfg, char *err,
			size_t errlen)
{
	if (cfg->kind != SLUICE_DEVICE_AUTO && cfg->kind != SLUICE_DEVICE_HOST &&
	    cfg->kind != SLUICE_DEVICE_CUDA) {
		device_set_err(err, errlen, "unknown device kind %d", cfg->kind);
		return -EINVAL;
	}
	if (cfg->arena_bytes == 0 || cfg->slots == 0 ||
	    cfg->mirror_bytes == 0) {
		device_set_err(err, errlen,
			       "device arena (%zu bytes), slots (%u) and mirror "
			       "(%zu bytes) must all be > 0",
			       cfg->arena_bytes, cfg->slots, cfg->mirror_bytes);
		return -EINVAL;
	}
	if (cfg->mirror_offset > cfg->arena_bytes ||
	    cfg->mirror_bytes > cfg->arena_bytes - cfg->mirror_offset) {
		device_set_err(err, errlen,
			       "device mirror (offset %zu, %zu bytes) overflows the %zu-byte arena",
			       cfg->mirror_offset, cfg->mirror_bytes,
			       cfg->arena_bytes);
		return -EINVAL;
	}
	/* The io mirror holds blocks, the batch mirror batches: a gather
	 * reads one and writes the other, never both. */
	if (cfg->io_mirror_bytes > cfg->mirror_offset ||
	    (cfg->io_mirror_bytes && cfg->gather_runs_max == 0)) {
		device_set_err(err, errlen,
			       "device io mirror (%zu bytes, %u runs a gather) overlaps the batch mirror at %zu or takes no runs",
			       cfg->io_mirror_bytes, cfg->gather_runs_max,
			       cfg->mirror_offset);
		return -EINVAL;
	}
	return 0;
}

/* An environment variable's unsigned number; @dflt when unset. */
static int env_number(const char *name, unsigned long long dflt,
		      unsigned long long max, unsigned long long *v, char *err,
		      size_t errlen)
{
	const char *env = getenv(name);
	int saved_errno = errno, bad;
	char *end;

	*v = dflt;
	if (!env || !*env)
		return 0;
	errno = 0;
	*v = strtoull(env, &end, 10);
	bad = errno != 0 || end == env || *end || *env == '-' || *v > max;
	errno = saved_errno;
	if (bad) {
		device_set_err(err, errlen, "%s=\"%s\" is not a number up to %llu",
			       name, env, max);
		return -EINVAL;
	}
	return 0;
}

/* SLUICE_DEVICE_SIM=SEED: the simulated device (sim_device.h), for
 * tests, in place of a GPU. */
static int open_sim(const struct device_config *cfg, struct device **out,
		    char *err, size_t errlen)
{
	unsigned long long seed, delay;
	int r;

	r = env_number("SLUICE_DEVICE_SIM", 0, UINT64_MAX, &seed, err, errlen);
	if (!r)
		r = env_number("SLUICE_SIM_DELAY_US", 300, 1000000, &delay,
			       err, errlen);
	if (r)
		return r;
	return sim_device_open(cfg, seed, (unsigned)delay, out, err, errlen);
}

int device_open(const struct device_config *cfg, struct device **out,
		char *err, size_t errlen)
{
	const char *sim = getenv("SLUICE_DEVICE_SIM");
	char reason[200];
	int id, r;

	*out = NULL;
	r = check_config(cfg, err, errlen);
	if (r)
		return r;
	if (cfg->kind == SLUICE_DEVICE_HOST)
		return host_device_open(cfg, NULL, out, err, errlen);
	if (sim && *sim)
		return open_sim(cfg, out, err, errlen);
	r = resolve_device_id(cfg->device_id, &id, err, errlen);
	if (r)
		return r;
#ifdef SLUICE_HAVE_CUDA
	{
		char why[160];

		if (cuda_device_probe(id, why, sizeof(why)) == 0)
			return cuda_device_open(cfg, id, out, err, errlen);
		if (cfg->kind == SLUICE_DEVICE_CUDA) {
			device_set_err(err, errlen, "no CUDA GPU found: %s",
				       why);
			return -SLUICE_ENODEVICE;
		}
		snprintf(reason, sizeof(reason),
			 "no CUDA GPU found: %s; host batches", why);
	}
#else
	if (cfg->kind == SLUICE_DEVICE_CUDA) {
		device_set_err(err, errlen,
			       "no CUDA GPU found: built without CUDA (CUDA=0)");
		return -SLUICE_ENODEVICE;
	}
	snprintf(reason, sizeof(reason),
		 "no CUDA GPU found: built without CUDA; host batches");
#endif
	return host_device_open(cfg, reason, out, err, errlen);
}

void device_close(struct device *d)
{
	if (d)
		d->ops->close(d);
}

void device_get_info(const struct device *d, struct device_info *info)
{
	*info = d->info;
}

void *device_arena(const struct device *d, size_t *len)
{
	if (len)
		*len = d->arena.bytes;
	return d->arena.base;
}

void *device_mirror_ptr(const struct device *d, const void *host)
{
	uintptr_t lo = (uintptr_t)d->arena.base + d->mirror_offset;
	uintptr_t p = (uintptr_t)host;

	if (!host || p < lo || p - lo >= d->mirror_bytes)
		return NULL;
	return d->ops->mirror_ptr(d, p - lo);
}

int device_copy_slot(struct device *d, uint32_t i, const void *host,
		     size_t len)
{
	struct slot_range all = { 0, len };

	return device_copy_slot_ranges(d, i, host, &all, 1);
}

int device_copy_slot_ranges(struct device *d, uint32_t i, const void *host,
			    const struct slot_range *ranges, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		const struct slot_range *g = &ranges[k];
		int r;

		if (g->offset > d->mirror_bytes)
			return -EINVAL;
		r = device_check_copy(d, i, (const uint8_t *)host + g->offset,
				      g->len);
		if (r)
			return r;
	}
	return d->ops->copy_slot(d, i, host, ranges, n);
}

/* [off, off + len) inside [lo, lo + size), written so no sum can wrap. */
static int inside(uint64_t off, uint64_t len, uint64_t lo, uint64_t size)
{
	return off >= lo && off - lo <= size && len <= size - (off - lo);
}

int device_upload_start(struct device *d, const void *io, const void *src,
			size_t len, struct device_upload *u)
{
	uintptr_t base = (uintptr_t)d->arena.base, p = (uintptr_t)io;
	uintptr_t q = (uintptr_t)src;

	*u = (struct device_upload){ 0 };
	if (len == 0)
		return 0;
	if (!io || !src || p < base || q < base ||
	    !inside(p - base, len, 0, d->io_mirror_bytes) ||
	    !inside(q - base, len, 0, d->arena.bytes))
		return -EINVAL;
	u->offset = p - base;
	u->len = len;
	return d->ops->upload_start(d, src, u);
}

int device_upload_finish(struct device *d, struct device_upload *u)
{
	/* an empty upload started nothing */
	return u->len ? d->ops->upload_finish(d, u) : 0;
}

int device_upload(struct device *d, const void *host, size_t len)
{
	struct device_upload u;
	int r = device_upload_start(d, host, host, len, &u);

	return r ? r : device_upload_finish(d, &u);
}

int device_checksum(struct device *d, const void *host, size_t len,
		    uint64_t *sum)
{
	uintptr_t base = (uintptr_t)d->arena.base, p = (uintptr_t)host;

	if (!(d->info.caps & DEVICE_CAP_CHECKSUM) || !d->ops->checksum)
		return -ENOTSUP;
	/* XXH3's short inputs take other paths: the device has only the
	 * long one (xxh3_steps.h) */
	if (len <= XXH3S_MIDSIZE_MAX || !host || p < base ||
	    !inside(p - base, len, 0, d->io_mirror_bytes))
		return -EINVAL;
	return d->ops->checksum(d, p - base, len, sum);
}

int device_gather_slot(struct device *d, uint32_t i,
		       const struct gather_run *runs, unsigned n)
{
	if (i >= d->slots || n > d->gather_runs_max || d->io_mirror_bytes == 0)
		return -EINVAL;
	for (unsigned k = 0; k < n; k++)
		if ((runs[k].src != GATHER_ZEROS &&
		     !inside(runs[k].src, runs[k].len, 0,
			     d->io_mirror_bytes)) ||
		    !inside(runs[k].dst, runs[k].len, d->mirror_offset,
			    d->mirror_bytes))
			return -EINVAL;
	return d->ops->gather(d, i, runs, n);
}

int device_slot_wait_copied(struct device *d, uint32_t i)
{
	if (i >= d->slots)
		return -EINVAL;
	return d->ops->wait_copied(d, i);
}

int device_slot_export(struct device *d, uint32_t i, int64_t stream)
{
	/* Below -1 is no stream handle nor the "no sync" marker. */
	if (i >= d->slots || stream < -1)
		return -EINVAL;
	return d->ops->slot_export(d, i, stream);
}

int device_slot_release(struct device *d, uint32_t i)
{
	if (i >= d->slots)
		return -EINVAL;
	return d->ops->slot_release(d, i);
}

int device_measure_h2d(struct device *d, size_t bytes, int iters,
		       double *bps)
{
	*bps = 0;
	if (bytes == 0 || iters < 1)
		return -EINVAL;
	return d->ops->measure_h2d(d, bytes, iters, bps);
}

int device_compute(struct device *d, int64_t stream, double ms)
{
	/* An hour bounds a step; NaN and negatives are caller bugs. */
	if (!(ms >= 0) || ms > 3.6e6 || stream < 0)
		return -EINVAL;
	return d->ops->compute(d, stream, ms);
}
