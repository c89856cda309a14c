/*
 * buffers.c - the arena registered with the ring as fixed buffers, so
 * READ_FIXED skips pinning pages on every read.  Registration is charged
 * to RLIMIT_MEMLOCK (without CAP_IPC_LOCK); when the limit refuses it the
 * ring reads with plain READ and says so.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/uio.h>

#include "ring_private.h"

static size_t iovec_max(void)
{
#ifdef SLUICE_TESTING
	size_t t = ring_test_iovec_max();

	if (t)
		return t;
#endif
	return RING_IOVEC_MAX;
}

static int register_iovecs(struct io_ring *r, char *arena, size_t len,
			   size_t chunk, unsigned n)
{
	struct iovec *iov = calloc(n, sizeof(*iov));
	int ret;

	if (!iov)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		size_t at = (size_t)i * chunk;

		iov[i].iov_base = arena + at;
		iov[i].iov_len = len - at < chunk ? len - at : chunk;
	}
	ret = io_uring_register_buffers(&r->uring, iov, n);
	free(iov);
	return ret;
}

static void limit_text(char *buf, size_t len)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		snprintf(buf, len, "?");
	else if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%llu KiB",
			 (unsigned long long)rl.rlim_cur / 1024);
}

void ring_register_buffers(struct io_ring *r, void *arena, size_t len)
{
	size_t chunk = iovec_max();
	size_t n = len / chunk + (len % chunk != 0);
	char eb[64], lim[32];
	int ret;

	if (!arena || len == 0)
		return;
	if (n > UINT16_MAX) {  /* far beyond the kernel's table */
		ring_note(r, "buffer registration skipped (%zu iovecs): "
			     "plain reads", n);
		return;
	}
	ret = register_iovecs(r, arena, len, chunk, (unsigned)n);
	if (ret == -ENOMEM || ret == -EPERM) {
		/* The soft limit may be below what we are allowed. */
		struct rlimit rl;

		if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
		    rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			if (setrlimit(RLIMIT_MEMLOCK, &rl) == 0)
				ret = register_iovecs(r, arena, len, chunk,
						      (unsigned)n);
		}
	}
	if (ret < 0) {
		limit_text(lim, sizeof(lim));
		ring_note(r, "buffer registration refused (RLIMIT_MEMLOCK=%s, "
			     "%s): plain reads", lim,
			  ring_errname(ret, eb, sizeof(eb)));
		return;
	}
	r->arena = arena;
	r->arena_len = len;
	r->iovec_len = chunk;
	r->niovecs = (unsigned)n;
	r->info.fixed_buffers = 1;
}

/*
 * The registered iovec holding all of [@buf, @buf + @len), or -1 when the
 * range is outside the arena or crosses from one iovec into the next.
 */
int ring_buffer_index(const struct io_ring *r, const void *buf, uint64_t len)
{
	uintptr_t base = (uintptr_t)r->arena, p = (uintptr_t)buf;
	size_t off, idx;

	if (!r->info.fixed_buffers || p < base || p - base >= r->arena_len)
		return -1;
	off = p - base;
	if (len > r->arena_len - off)
		return -1;
	idx = off / r->iovec_len;
	if (len > 0 && (off + len - 1) / r->iovec_len != idx)
		return -1;
	return (int)idx;
}
