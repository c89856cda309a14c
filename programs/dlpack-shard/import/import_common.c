/*
 * import_common.c - the record sink shared by the importers, --part
 * slicing and small I/O helpers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import_common.h"

/* The caller rate-limits by time; calling it per tiny record would still
 * cost more than the record, so call every so many records or bytes. */
#define PROGRESS_EVERY 64u
#define PROGRESS_BYTES (1u << 20)

int import_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

void import_part_range(const struct import_options *o, uint64_t n,
		       uint64_t *lo, uint64_t *hi)
{
	uint64_t parts = o->part_count ? o->part_count : 1;
	uint64_t i = o->part_index;

	/* i * n / parts without overflowing for huge n: split n. */
	*lo = (n / parts) * i + (n % parts) * i / parts;
	*hi = (n / parts) * (i + 1) + (n % parts) * (i + 1) / parts;
}

int import_check_part(const struct import_options *o, char *err,
		      size_t errlen)
{
	if (o->part_count == 0 || o->part_index >= o->part_count)
		return import_fail(err, errlen, -EINVAL,
				   "bad part %u/%u: need 0 <= I < N",
				   o->part_index, o->part_count);
	return 0;
}

static void sink_progress(struct import_sink *s)
{
	if (s->o->progress)
		s->o->progress(s->o->progress_ctx, s->w, s->done, s->total);
}

int import_sink_open(struct import_sink *s, const struct import_options *o,
		     const struct sluice_field *fields, int nfields,
		     uint64_t total, char *err, size_t errlen)
{
	char msg[512];
	sluice_writer *w = NULL;
	int r;

	memset(s, 0, sizeof(*s));
	s->o = o;
	s->total = total;
	s->nfields = nfields;
	r = sluice_writer_open(o->out_dir, fields, nfields, &o->wcfg, &w);
	if (r < 0) {
		msg[0] = '\0';
		if (w)
			sluice_writer_error(w, msg, sizeof(msg));
		sluice_writer_abort(w);
		return import_fail(err, errlen, r, "%s: %s", o->out_dir,
				   msg[0] ? msg : sluice_strerror(r));
	}
	s->w = w;
	sink_progress(s);
	return 0;
}

int import_sink_add(struct import_sink *s, const void *const *values,
		    const uint64_t *lengths, const char *what, char *err,
		    size_t errlen)
{
	char msg[512];
	int r = sluice_writer_add(s->w, values, lengths);

	if (r < 0) {
		msg[0] = '\0';
		sluice_writer_error(s->w, msg, sizeof(msg));
		if (!what)
			return import_fail(err, errlen, r, "record %llu: %s",
					   (unsigned long long)(s->first +
								s->done),
					   msg[0] ? msg : sluice_strerror(r));
		return import_fail(err, errlen, r, "%s: %s", what,
				   msg[0] ? msg : sluice_strerror(r));
	}
	s->done++;
	for (int i = 0; i < s->nfields; i++)
		s->bytes_since += lengths[i];
	if (s->done % PROGRESS_EVERY == 0 || s->bytes_since >= PROGRESS_BYTES) {
		s->bytes_since = 0;
		sink_progress(s);
	}
	return 0;
}

int import_sink_close(struct import_sink *s,
		      struct sluice_writer_summary *sum, char *err,
		      size_t errlen)
{
	sluice_writer *w = s->w;
	int r;

	sink_progress(s);
	s->w = NULL;
	/* close frees the writer, so only its code survives a failure. */
	r = sluice_writer_close(w, sum);
	if (r < 0)
		return import_fail(err, errlen, r, "%s: finishing: %s",
				   s->o->out_dir, sluice_strerror(r));
	return 0;
}

void import_sink_abort(struct import_sink *s)
{
	if (s && s->w) {
		sluice_writer_abort(s->w);
		s->w = NULL;
	}
}

int import_buf_reserve(struct import_buf *b, size_t need)
{
	size_t cap;
	uint8_t *p;

	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < need) {
		if (cap > SIZE_MAX / 2) {
			cap = need;
			break;
		}
		cap *= 2;
	}
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

void import_buf_free(struct import_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

long long import_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (long long)got;
}

long long import_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got,
				  (off_t)(off + got));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (long long)got;
}

int import_read_file(const char *path, struct import_buf *b)
{
	struct stat st;
	int fd, r = 0;

	b->len = 0;
	/* O_NONBLOCK: a FIFO put where a file was is refused, not waited on
	 * (regular files ignore the flag). */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -SLUICE_EINPUT;
		goto out;
	}
	/* The size is a hint: the file may grow or shrink while we read, so
	 * read until end of file, growing the buffer as data arrives. */
	if (st.st_size > 0 && (uint64_t)st.st_size < SIZE_MAX - 1) {
		r = import_buf_reserve(b, (size_t)st.st_size + 1);
		if (r < 0)
			goto out;
	}
	for (;;) {
		long long n;

		if (b->len == b->cap) {
			r = import_buf_reserve(b, b->len + 1);
			if (r < 0)
				goto out;
		}
		n = import_read_full(fd, b->p + b->len, b->cap - b->len);
		if (n < 0) {
			r = (int)n;
			goto out;
		}
		if (n == 0)
			break;
		b->len += (size_t)n;
	}
out:
	close(fd);
	return r;
}

static const char *const skip_names[IMPORT_SKIP_KINDS][2] = {
	[IMPORT_SKIP_HIDDEN] = { "hidden entry", "hidden entries" },
	[IMPORT_SKIP_OUTSIDE] = { "symlink out of the source tree",
				  "symlinks out of the source tree" },
	[IMPORT_SKIP_DANGLING] = { "dangling symlink", "dangling symlinks" },
	[IMPORT_SKIP_LOOP] = { "folder loop", "folder loops" },
	[IMPORT_SKIP_FIFO] = { "FIFO", "FIFOs" },
	[IMPORT_SKIP_SOCKET] = { "socket", "sockets" },
	[IMPORT_SKIP_DEVICE] = { "device", "devices" },
	[IMPORT_SKIP_NOT_IN_CLASS] = { "file outside the class folders",
				       "files outside the class folders" },
	[IMPORT_SKIP_TAR_ENTRY] = { "tar entry that is not a file",
				    "tar entries that are not files" },
};

const char *import_skip_name(enum import_skip_kind k, uint64_t n)
{
	return skip_names[k][n != 1];
}

int import_skip(const struct import_options *o, enum import_skip_kind k,
		const char *path, char *err, size_t errlen)
{
	struct import_skips *s = o->skips;

	if (o->strict)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: a %s (--strict: nothing is skipped)",
				   path, import_skip_name(k, 1));
	if (!s)
		return 0;
	if (s->total < IMPORT_SKIP_SHOWN)
		snprintf(s->first[s->total], sizeof(s->first[0]), "%s (%s)",
			 path, import_skip_name(k, 1));
	s->count[k]++;
	s->total++;
	return 0;
}
