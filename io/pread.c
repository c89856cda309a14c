/*
 * pread.c - a buffered read made by the calling thread, beside the ring:
 * for readers that copy from the page cache on their own threads (the
 * loader's fetches, pipeline/fetch.c).  It reads through the ring's own
 * descriptors, opened and checked with the others at create, where the
 * ring keeps them open for its life; and the ring's test faults and
 * slow-device delay apply to it as to the ring's reads, so a test or a
 * latency proxy sees both paths alike.
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "ring_private.h"

/* One pread(2) at most this long (Linux caps a read at about 2 GiB). */
#define PREAD_CALL_MAX ((uint64_t)1 << 30)

int io_ring_pread_fd(const struct io_ring *r, uint32_t file)
{
	/* files opened on demand may be closed by the ring at any time */
	if (file >= r->nfiles || r->max_open < r->nfiles ||
	    r->file_direct[file])
		return -1;
	return r->fds[file];
}

int64_t io_ring_pread(const struct io_ring *r, uint32_t file, void *buf,
		      uint64_t len, uint64_t offset)
{
	struct timespec delay = { (time_t)r->read_delay.tv_sec,
				  (long)r->read_delay.tv_nsec };
	int fd = io_ring_pread_fd(r, file);
	uint64_t got = 0;
	unsigned attempts = 0;

	if (fd < 0)
		return -EBADF;
	if (delay.tv_sec || delay.tv_nsec)
		while (nanosleep(&delay, &delay) != 0 && errno == EINTR)
			;
	while (got < len) {
		uint64_t want = len - got < PREAD_CALL_MAX ? len - got
							   : PREAD_CALL_MAX;
		ssize_t n = pread(fd, (char *)buf + got, want,
				  (off_t)(offset + got));
		int res = n < 0 ? -errno : (int)n;

#ifdef SLUICE_TESTING
		ring_fault_apply(file, offset + got, want, &res);
#endif
		if (res == -EAGAIN || res == -EINTR) {
			if (++attempts > RING_RETRY_MAX)
				return res;
			continue;
		}
		if (res < 0)
			return res;
		if ((uint64_t)res > want)       /* cannot happen; never trust */
			return -EIO;
		if (res == 0)
			break;          /* end of file */
		got += (uint64_t)res;
	}
	return (int64_t)got;
}
