/*
 * residency.c - how much of a file the page cache holds, for
 * direct_io=auto: O_DIRECT bypasses the cache, so on a dataset that is
 * already cached it reads from the device what memory holds (measured:
 * slower than buffered reads).  Linux 6.5+ answers with cachestat(2) in
 * one call; older kernels with mincore(2) over a read-only mapping.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ring_private.h"
#include "sluice_tools.h"

/* A file the page cache holds at least this share of is "mostly cached":
 * the device would then serve at most the other half. */
#define CACHED_SHARE_NUM 1u
#define CACHED_SHARE_DEN 2u

#ifndef __NR_cachestat
#define __NR_cachestat 451   /* the same on every architecture */
#endif

/* The kernel's uapi structs (linux/mman.h), spelled out for old headers. */
struct cachestat_range_v1 {
	uint64_t off;
	uint64_t len;           /* 0: to the end of the file */
};

struct cachestat_v1 {
	uint64_t nr_cache;
	uint64_t nr_dirty;
	uint64_t nr_writeback;
	uint64_t nr_evicted;
	uint64_t nr_recently_evicted;
};

static int cached_by_cachestat(int fd, uint64_t *pages)
{
	struct cachestat_range_v1 range = { 0, 0 };
	struct cachestat_v1 cs;

	if (syscall(__NR_cachestat, fd, &range, &cs, 0) != 0)
		return -errno;
	*pages = cs.nr_cache;
	return 0;
}

/* mincore() over windows of the file: bounded memory for any size. */
static int cached_by_mincore(int fd, uint64_t size, uint64_t *pages)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t window = (uint64_t)1 << 30;
	unsigned char *vec = malloc(window / page);
	uint64_t n = 0;

	if (!vec)
		return -ENOMEM;
	for (uint64_t at = 0; at < size; at += window) {
		uint64_t len = size - at < window ? size - at : window;
		void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd,
				 (off_t)at);
		int r;

		if (map == MAP_FAILED) {
			free(vec);
			return -errno;
		}
		r = mincore(map, len, vec);
		if (r == 0)
			for (uint64_t i = 0; i < (len + page - 1) / page; i++)
				n += vec[i] & 1;
		munmap(map, len);
		if (r != 0) {
			free(vec);
			return -errno;
		}
	}
	free(vec);
	*pages = n;
	return 0;
}

int file_cached_pages(int fd, uint64_t *cached, uint64_t *total)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct stat st;
	int r;

	if (fstat(fd, &st) != 0)
		return -errno;
	*total = ((uint64_t)st.st_size + page - 1) / page;
	*cached = 0;
	if (*total == 0)
		return 0;
	r = cached_by_cachestat(fd, cached);
#ifdef SLUICE_TESTING
	if (ring_test_no_cachestat())
		r = -ENOSYS;
#endif
	if (r == -ENOSYS || r == -EPERM)   /* old kernel, or seccomp */
		r = cached_by_mincore(fd, (uint64_t)st.st_size, cached);
	if (r == 0 && *cached > *total)
		*cached = *total;
	return r;
}

int io_path_cached(const char *path)
{
	int fd = ring_open_regular(path, O_RDONLY);
	int cached;

	if (fd < 0)
		return 0;
	cached = file_mostly_cached(fd);
	close(fd);
	return cached;
}

int file_mostly_cached(int fd)
{
	uint64_t cached, total;

	return file_cached_pages(fd, &cached, &total) == 0 && total > 0 &&
	       cached * CACHED_SHARE_DEN >= total * CACHED_SHARE_NUM;
}
