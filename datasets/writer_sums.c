/*
 * writer_sums.c - a shard's record checksums through a bounded buffer and
 * an unlinked spill file (see writer_sums.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard_internal.h"
#include "sluice_xxh3.h"
#include "writer_sums.h"

int writer_sums_init(struct writer_sums *s, const char *dir)
{
	memset(s, 0, sizeof(*s));
	s->dir = dir;
	s->fd = -1;
	s->buf = malloc(WRITER_SUMS_BUF * sizeof(*s->buf));
	return s->buf ? 0 : -ENOMEM;
}

static int pwrite_all(int fd, const void *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t k = pwrite(fd, p, len, (off_t)off);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO;
		p = (const char *)p + k;
		len -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

/* A file nobody can open by name, beside the shards (same filesystem,
 * same space).  Without O_TMPFILE (some filesystems), a hidden .tmp name
 * unlinked at once: a kill in between leaves a file `dlpack-shard clean`
 * removes. */
static int open_spill(struct writer_sums *s, char *err, size_t errlen)
{
	char path[4200];
	int fd, r;

	fd = open(s->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(path, sizeof(path), "%s/.record-sums.XXXXXX.tmp",
			 s->dir);
		fd = mkostemps(path, 4, O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			errf(err, errlen, "%s: a temporary file for record "
			     "checksums: %s", s->dir, sluice_strerror(r));
			return r;
		}
		unlink(path);
	}
	s->fd = fd;
	return 0;
}

static int spill(struct writer_sums *s, char *err, size_t errlen)
{
	int r;

	if (s->n == 0)
		return 0;
	if (s->fd < 0 && (r = open_spill(s, err, errlen)) < 0)
		return r;
	r = pwrite_all(s->fd, s->buf, (size_t)(s->n * sizeof(*s->buf)),
		       s->spilled * sizeof(*s->buf));
	if (r < 0) {
		errf(err, errlen, "%s: writing record checksums to a "
		     "temporary file: %s", s->dir, sluice_strerror(r));
		return r;
	}
	s->spilled += s->n;
	s->n = 0;
	return 0;
}

int writer_sums_add(struct writer_sums *s, const uint64_t *sums, uint64_t n,
		    char *err, size_t errlen)
{
	while (n) {
		uint64_t k = WRITER_SUMS_BUF - s->n;
		int r;

		if (k == 0) {
			if ((r = spill(s, err, errlen)) < 0)
				return r;
			continue;
		}
		if (k > n)
			k = n;
		memcpy(s->buf + s->n, sums, (size_t)(k * sizeof(*sums)));
		s->n += k;
		sums += k;
		n -= k;
	}
	return 0;
}

int writer_sums_write(struct writer_sums *s, int fd, uint64_t off,
		      uint64_t *checksum, char *err, size_t errlen)
{
	XXH3_state_t *st;
	uint64_t done = 0;
	int r = 0;

	if (s->spilled == 0) {
		/* The common case: the shard's checksums fit the buffer. */
		*checksum = XXH3_64bits(s->buf, (size_t)(s->n * 8));
		r = pwrite_all(fd, s->buf, (size_t)(s->n * 8), off);
		s->n = 0;
		return r;
	}
	if ((r = spill(s, err, errlen)) < 0)
		return r;
	st = XXH3_createState();
	if (!st)
		return -ENOMEM;
	XXH3_64bits_reset(st);
	/* Back through the buffer, in order, hashed on the way. */
	while (done < s->spilled) {
		uint64_t k = s->spilled - done;
		ssize_t got;

		if (k > WRITER_SUMS_BUF)
			k = WRITER_SUMS_BUF;
		got = pread(s->fd, s->buf, (size_t)(k * 8), (off_t)(done * 8));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0 || (size_t)got % 8) {
			r = got < 0 ? -errno : -EIO;
			errf(err, errlen, "%s: reading record checksums back "
			     "from a temporary file: %s", s->dir,
			     sluice_strerror(r));
			break;
		}
		k = (uint64_t)got / 8;
		XXH3_64bits_update(st, s->buf, (size_t)got);
		r = pwrite_all(fd, s->buf, (size_t)got, off + done * 8);
		if (r < 0)
			break;
		done += k;
	}
	*checksum = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	s->spilled = 0;
	s->n = 0;
	/* The next shard reuses the file from its start; give back its
	 * blocks now. */
	if (ftruncate(s->fd, 0) != 0 && r == 0)
		r = -errno;
	return r;
}

void writer_sums_free(struct writer_sums *s)
{
	if (s->fd >= 0)
		close(s->fd);
	free(s->buf);
	s->fd = -1;
	s->buf = NULL;
}
