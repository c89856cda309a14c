/*
 * writer_commit.c - committing a written dataset's shards: until now
 * every shard sat under a temporary name, its header marked uncommitted
 * (shard count 0), so that nothing of an unfinished write is ever read
 * as data.  Headers first (count, checksum, synced), then the renames.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard_internal.h"
#include "writer_commit.h"

int shard_names_path(const struct shard_names *n, uint32_t k, int tmp,
		     char *buf, size_t cap)
{
	if (tmp) {
		if ((size_t)snprintf(buf, cap, "%s/.%s-%05u%s.%s.tmp", n->dir,
				     n->prefix, k, DLS_SHARD_SUFFIX,
				     n->tag) >= cap)
			return -ENAMETOOLONG;
	} else if ((size_t)snprintf(buf, cap, "%s/%s-%05u%s", n->dir,
				    n->prefix, k, DLS_SHARD_SUFFIX) >= cap) {
		return -ENAMETOOLONG;
	}
	return 0;
}

static int pwrite_page(int fd, const uint8_t *page)
{
	size_t done = 0;

	while (done < DLS_HEADER_SIZE) {
		ssize_t w = pwrite(fd, page + done, DLS_HEADER_SIZE - done,
				   (off_t)done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

/* Shard @k's header gets the shard count (the commit mark) and its new
 * checksum.  The page's writeback is only started here: syncing each in
 * turn would wait on the disk once per shard; sync_headers() then waits
 * for them all. */
static int commit_header(const struct shard_names *n, struct manifest *m,
			 uint32_t k, uint8_t *page, char *err, size_t errlen)
{
	struct dls_header_disk h;
	char path[SHARD_PATH_CAP];
	uint64_t sum = 0;
	int fd, r;

	shard_names_path(n, k, 1, path, sizeof(path));
	fd = file_open_regular(path, O_RDWR, NULL, err, errlen);
	if (fd < 0)
		return fd;
	r = pread_full(fd, page, DLS_HEADER_SIZE, 0);
	if (r == 0) {
		memcpy(&h, page, sizeof(h));
		h.shard_count = m->nshards;
		memcpy(page, &h, sizeof(h));
		sum = header_checksum(page);
		memcpy(page + DLS_HEADER_CHECKSUM_OFFSET, &sum, 8);
		r = pwrite_page(fd, page);
	}
	if (r == 0)
		(void)sync_file_range(fd, 0, DLS_HEADER_SIZE,
				      SYNC_FILE_RANGE_WRITE);
	if (close(fd) != 0 && r == 0)
		r = -errno;
	if (r < 0) {
		errf(err, errlen, "%s: committing the header: %s", path,
		     r == -SLUICE_ECORRUPT ? "file shrank" : sluice_strerror(r));
		return r;
	}
	m->shards[k].id.checksum = sum;
	return 0;
}

/* One fdatasync per shard, in turn, waits on a disk cache flush each time
 * (1.7x the time of a 1000-shard conversion, measured); from a few
 * threads at once the filesystem joins them into few flushes. */
#define SYNC_THREADS 8u

struct header_sync {
	const struct shard_names *n;
	uint32_t count;
	uint32_t first;         /* this thread's shards: first, +stride... */
	uint32_t stride;
	int error;
	uint32_t bad;           /* the shard that failed */
};

static void *sync_some_headers(void *arg)
{
	struct header_sync *hs = arg;
	char path[SHARD_PATH_CAP];

	for (uint32_t k = hs->first; k < hs->count && !hs->error;
	     k += hs->stride) {
		int fd;

		shard_names_path(hs->n, k, 1, path, sizeof(path));
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0 || fdatasync(fd) != 0) {
			hs->error = -errno;
			hs->bad = k;
		}
		if (fd >= 0)
			close(fd);
	}
	return NULL;
}

/* Wait until every committed header is on disk. */
static int sync_headers(const struct shard_names *n, uint32_t count,
			char *err, size_t errlen)
{
	struct header_sync hs[SYNC_THREADS];
	pthread_t tid[SYNC_THREADS];
	uint32_t nt = count < SYNC_THREADS ? count : SYNC_THREADS;
	uint32_t started = 0;
	char path[SHARD_PATH_CAP];

	for (uint32_t t = 0; t < nt; t++) {
		hs[t] = (struct header_sync){ n, count, t, nt, 0, 0 };
		/* Without a thread, this one does that share itself. */
		if (t == 0 || pthread_create(&tid[t], NULL, sync_some_headers,
					     &hs[t]) != 0)
			continue;
		started |= 1u << t;
	}
	for (uint32_t t = 0; t < nt; t++)
		if (!(started & (1u << t)))
			sync_some_headers(&hs[t]);
	for (uint32_t t = 0; t < nt; t++)
		if (started & (1u << t))
			pthread_join(tid[t], NULL);
	for (uint32_t t = 0; t < nt; t++) {
		if (!hs[t].error)
			continue;
		shard_names_path(n, hs[t].bad, 1, path, sizeof(path));
		errf(err, errlen, "%s: fdatasync: %s", path,
		     sluice_strerror(hs[t].error));
		return hs[t].error;
	}
	return 0;
}

/* A run killed before the renames leaves only temporary names; one
 * killed during them leaves an incomplete set of shards, which readers
 * refuse (each header knows the count). */
int shards_commit(const struct shard_names *n, struct manifest *m,
		  uint32_t *renamed, char *err, size_t errlen)
{
	char from[SHARD_PATH_CAP], to[SHARD_PATH_CAP];
	uint8_t *page;
	int r = 0;

	*renamed = 0;
	page = malloc(DLS_HEADER_SIZE);
	if (!page) {
		errf(err, errlen, "%s: out of memory", n->dir);
		return -ENOMEM;
	}
	for (uint32_t k = 0; k < m->nshards && r == 0; k++)
		r = commit_header(n, m, k, page, err, errlen);
	free(page);
	if (r == 0)
		r = sync_headers(n, m->nshards, err, errlen);
	for (uint32_t k = 0; k < m->nshards && r == 0; k++) {
		shard_names_path(n, k, 1, from, sizeof(from));
		shard_names_path(n, k, 0, to, sizeof(to));
		if (rename(from, to) != 0) {
			r = -errno;
			errf(err, errlen, "%s: rename: %s", from,
			     sluice_strerror(r));
			break;
		}
		*renamed = k + 1;
	}
	return r;
}

void shards_remove(const struct shard_names *n, uint32_t count,
		   uint32_t renamed)
{
	char path[SHARD_PATH_CAP];

	for (uint32_t k = 0; k < count; k++)
		if (shard_names_path(n, k, k >= renamed, path,
				     sizeof(path)) == 0)
			unlink(path);
}
