/*
 * host_device.c - the device without a GPU: batches stay in the host
 * slots, copies are no-ops, a training step is a busy loop.  Also the
 * arena mapping that the cuda implementation builds on.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"
#include "device_impl.h"

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

int arena_map(struct arena *a, size_t bytes)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len;
	void *p;

	memset(a, 0, sizeof(*a));
	if (page <= 0)
		page = 4096;
	if (bytes == 0 || bytes > SIZE_MAX - HUGE_PAGE_BYTES)
		return -ENOMEM;
	/* MAP_HUGETLB needs pages the admin reserved; most machines have
	 * none, so failure here is the common case and not worth a word. */
	if (bytes >= HUGE_PAGE_BYTES) {
		len = round_up(bytes, HUGE_PAGE_BYTES);
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p != MAP_FAILED) {
			a->base = p;
			a->bytes = bytes;
			a->map_len = len;
			a->huge_pages = 1;
			return 0;
		}
	}
	len = round_up(bytes, (size_t)page);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	/* Transparent huge pages, when the kernel allows them, still cut
	 * TLB misses; not reported as huge_pages since nothing is promised. */
	if (len >= HUGE_PAGE_BYTES)
		(void)madvise(p, len, MADV_HUGEPAGE);
	a->base = p;
	a->bytes = bytes;
	a->map_len = len;
	return 0;
}

/*
 * Make every page of the arena resident now, at open, so that the first
 * touch of each (zeroing a 4 KiB or, with transparent huge pages, 2 MiB
 * page) is paid here and not by the reads and copies of the steady state
 * (issue 12).  MADV_POPULATE_WRITE (Linux 5.14) faults the pages in
 * writable without locking them; older kernels get a write per page.
 */
void arena_populate(struct arena *a)
{
	long page = sysconf(_SC_PAGESIZE);

	if (!a->base || madvise(a->base, a->map_len, MADV_POPULATE_WRITE) == 0)
		return;
	if (page <= 0)
		page = 4096;
	for (size_t off = 0; off < a->map_len; off += (size_t)page)
		((volatile uint8_t *)a->base)[off] = 0;
}

void arena_unmap(struct arena *a)
{
	if (a->base)
		munmap(a->base, a->map_len);
	memset(a, 0, sizeof(*a));
}

uint64_t device_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void host_busy_wait(double ms)
{
	uint64_t end;

	if (!(ms > 0))
		return;
	end = device_now_ns() + (uint64_t)(ms * 1e6);
	/* Busy on purpose: it stands in for a training step that keeps a
	 * core (the GPU, elsewhere) occupied, unlike a sleep. */
	while (device_now_ns() < end)
		;
}

static void host_close(struct device *d)
{
	if (d->info.arena_pinned)
		munlock(d->arena.base, d->arena.map_len);
	arena_unmap(&d->arena);
	device_base_fini(d);
	free(d);
}

/* The batch memory is its own mirror. */
static void *host_mirror_ptr(const struct device *d, size_t offset)
{
	return (uint8_t *)d->arena.base + d->mirror_offset + offset;
}

static int host_copy_slot(struct device *d, uint32_t i, const void *host,
			  const struct slot_range *ranges, unsigned n)
{
	(void)d;
	(void)i;
	(void)host;
	(void)ranges;
	(void)n;
	return 0;
}

/* The io memory is its own mirror: only bytes from elsewhere move
 * (device_upload_start; the loader fetches nothing here, as this device
 * takes no checksums, but the call means the same on every device). */
static int host_upload_start(struct device *d, const void *host,
			     struct device_upload *u)
{
	uint8_t *to = (uint8_t *)d->arena.base + u->offset;

	if (to != host)
		memmove(to, host, u->len);
	return 0;
}

static int host_upload_finish(struct device *d, struct device_upload *u)
{
	(void)d;
	(void)u;
	return 0;
}

/* The gather the GPU would run, as memcpy: the test and diagnostic mode
 * of device_gather (its pipeline side then runs everywhere). */
static int host_gather(struct device *d, uint32_t i,
		       const struct gather_run *runs, unsigned n)
{
	uint8_t *arena = d->arena.base;

	(void)i;
	for (unsigned k = 0; k < n; k++)
		if (runs[k].src == GATHER_ZEROS)
			memset(arena + runs[k].dst, 0, runs[k].len);
		else
			memcpy(arena + runs[k].dst, arena + runs[k].src,
			       runs[k].len);
	return 0;
}

static int host_slot_op(struct device *d, uint32_t i)
{
	(void)d;
	(void)i;
	return 0;
}

static int host_slot_export(struct device *d, uint32_t i, int64_t stream)
{
	(void)d;
	(void)i;
	(void)stream;
	return 0;
}

static int host_measure_h2d(struct device *d, size_t bytes, int iters,
			    double *bps)
{
	(void)bytes;
	(void)iters;
	*bps = 0;
	device_record_error(d, "no host-to-device link to measure: batches "
			       "stay on the host");
	return -SLUICE_ENODEVICE;
}

static int host_compute(struct device *d, int64_t stream, double ms)
{
	(void)d;
	(void)stream;
	host_busy_wait(ms);
	return 0;
}

static const struct device_ops host_ops = {
	.close = host_close,
	.mirror_ptr = host_mirror_ptr,
	.copy_slot = host_copy_slot,
	.wait_copied = host_slot_op,
	.upload_start = host_upload_start,
	.upload_finish = host_upload_finish,
	.gather = host_gather,
	.slot_export = host_slot_export,
	.slot_release = host_slot_op,
	.measure_h2d = host_measure_h2d,
	.compute = host_compute,
};

int host_device_open(const struct device_config *cfg, const char *reason,
		     struct device **out, char *err, size_t errlen)
{
	struct device *d;
	char msg[96];
	uint64_t t0;
	int r;

	*out = NULL;
	d = calloc(1, sizeof(*d));
	if (!d) {
		device_set_err(err, errlen, "out of memory for the host device");
		return -ENOMEM;
	}
	device_base_init(d, &host_ops, cfg);
	d->info.dl.device_type = kDLCPU;
	d->info.dl.device_id = 0;
	d->info.caps = 0;       /* batches are read where they are built */
	if (reason && *reason)
		device_note_fallback(&d->info, "%s", reason);

	r = arena_map(&d->arena, cfg->arena_bytes);
	if (r) {
		device_set_err(err, errlen, "mmap of a %zu-byte arena: %s",
			       cfg->arena_bytes, strerror_r(-r, msg, sizeof(msg)));
		device_base_fini(d);
		free(d);
		return r;
	}
	d->info.huge_pages = d->arena.huge_pages;
	/* Pinning keeps the arena out of swap and faults it in; RLIMIT_MEMLOCK
	 * usually forbids it for ordinary users, which costs a note, and the
	 * pages are faulted in all the same (after a pinning mlock that is a
	 * quick walk; it also covers an mlock that did nothing, as ASan's). */
	t0 = device_now_ns();
	if (mlock(d->arena.base, d->arena.map_len) == 0)
		d->info.arena_pinned = 1;
	else
		device_note_fallback(&d->info, "mlock failed: %s; arena not pinned",
				     strerror_r(errno, msg, sizeof(msg)));
	arena_populate(&d->arena);
	d->info.arena_resident_ns = device_now_ns() - t0;
	*out = d;
	return 0;
}
