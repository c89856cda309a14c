/*
 * import_tar_reader.c - streaming tar parsing: 512-byte headers with
 * validated checksums, octal or base-256 sizes, GNU long names ('L') and
 * pax extended headers ('x': path= and size=).  Every length from the
 * archive is bounds-checked; running out of bytes anywhere is reported as
 * a truncated archive with the byte offset.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import_tar_reader.h"

/* The fuzz build mode (datasets/fuzzing.h) accepts any header checksum,
 * so mutations reach the parser behind it. */
#ifdef SLUICE_FUZZING
#define FUZZING_SKIPS_CHECKSUMS 1
#else
#define FUZZING_SKIPS_CHECKSUMS 0
#endif

#define TAR_BLOCK 512u
/* Sizes beyond this are nonsense for one member (and keep the padding
 * arithmetic far from overflow). */
#define TAR_MAX_MEMBER (1ull << 50)
/* A long name or pax header larger than this is not a name. */
#define TAR_MAX_META (1u << 20)

/* ustar header field offsets and lengths. */
#define H_NAME 0
#define H_NAME_LEN 100
#define H_SIZE 124
#define H_SIZE_LEN 12
#define H_CHKSUM 148
#define H_CHKSUM_LEN 8
#define H_TYPE 156
#define H_LINKNAME 157
#define H_LINKNAME_LEN 100
#define H_MAGIC 257
#define H_PREFIX 345
#define H_PREFIX_LEN 155

/* From a pipe a member's size is only a claim: its buffer grows by at most
 * this much beyond the bytes that have arrived. */
#define TAR_PIPE_STEP (1u << 20)

int tar_open(struct tar_reader *r, const char *path, size_t buf_size,
	     char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		memset(r, 0, sizeof(*r));
		r->fd = -1;
		return import_fail(err, errlen, -errno, "%s: %s", path,
				   strerror(errno));
	}
	return tar_open_fd(r, fd, path, buf_size, err, errlen);
}

int tar_open_fd(struct tar_reader *r, int fd, const char *path,
		size_t buf_size, char *err, size_t errlen)
{
	struct stat st;

	memset(r, 0, sizeof(*r));
	r->path = path;
	r->fd = fd;
	if (fstat(r->fd, &st) < 0)
		return import_fail(err, errlen, -errno, "%s: %s", path,
				   strerror(errno));
	if (S_ISREG(st.st_mode)) {
		r->seekable = 1;
		r->file_size = (uint64_t)st.st_size;
	}
	r->cap = buf_size < TAR_BLOCK ? TAR_BLOCK : buf_size;
	r->buf = malloc(r->cap);
	if (!r->buf)
		return import_fail(err, errlen, -ENOMEM, "%s: out of memory",
				   path);
	return 0;
}

void tar_close(struct tar_reader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	free(r->buf);
	r->buf = NULL;
	free(r->next_path);
	r->next_path = NULL;
	free(r->next_link);
	r->next_link = NULL;
	for (size_t i = 0; i < r->nseen; i++)
		free(r->seen[i].name);
	free(r->seen);
	r->seen = NULL;
	r->nseen = r->seen_cap = 0;
	import_buf_free(&r->name);
	import_buf_free(&r->meta);
}

static int truncated(const struct tar_reader *r, uint64_t at, const char *what,
		     char *err, size_t errlen)
{
	return import_fail(err, errlen, -SLUICE_EINPUT,
			   "%s: truncated tar at offset %llu: %s", r->path,
			   (unsigned long long)at, what);
}

/* Copy up to @len bytes; returns bytes copied (less only at end of file)
 * or -errno. */
static long long rd_read(struct tar_reader *r, void *dst, size_t len)
{
	size_t got = 0;

	while (got < len) {
		size_t avail = r->end - r->pos;
		long long n;

		if (avail) {
			size_t k = avail < len - got ? avail : len - got;

			memcpy((char *)dst + got, r->buf + r->pos, k);
			r->pos += k;
			got += k;
			continue;
		}
		/* Large reads bypass the buffer: one copy fewer. */
		if (len - got >= r->cap) {
			n = import_read_full(r->fd, (char *)dst + got,
					     len - got);
			if (n < 0)
				return n;
			got += (size_t)n;
			break;
		}
		n = import_read_full(r->fd, r->buf, r->cap);
		if (n < 0)
			return n;
		if (n == 0)
			break;
		r->pos = 0;
		r->end = (size_t)n;
	}
	r->off += got;
	return (long long)got;
}

/* Pass over @len bytes; returns bytes skipped or -errno. */
static long long rd_skip(struct tar_reader *r, uint64_t len)
{
	uint64_t done = 0;
	size_t avail = r->end - r->pos;

	if (avail) {
		size_t k = (uint64_t)avail < len ? avail : (size_t)len;

		r->pos += k;
		done = k;
	}
	if (done < len && r->seekable) {
		uint64_t want = len - done;
		uint64_t left = r->off + done < r->file_size ?
				r->file_size - (r->off + done) : 0;

		if (want > left)
			want = left;
		if (lseek(r->fd, (off_t)want, SEEK_CUR) < 0)
			return -errno;
		done += want;
	}
	while (done < len && !r->seekable) {
		uint64_t want = len - done;
		long long n = import_read_full(r->fd, r->buf,
					       want < r->cap ? (size_t)want :
							       r->cap);
		if (n < 0)
			return n;
		if (n == 0)
			break;
		done += (uint64_t)n;
	}
	r->off += done;
	return (long long)done;
}

static int is_zero_block(const uint8_t *h)
{
	for (unsigned i = 0; i < TAR_BLOCK; i++)
		if (h[i])
			return 0;
	return 1;
}

/* An octal number in @len bytes: optional leading spaces, digits, then
 * only spaces/NULs.  Base-256 (GNU) when the top bit is set. */
static int parse_number(const uint8_t *p, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (p[0] & 0x80) {
		if (p[0] != 0x80)  /* negative or a sign bit we reject */
			return -1;
		for (i = 1; i < len; i++) {
			if (v >> 55)
				return -1;
			v = (v << 8) | p[i];
		}
		*out = v;
		return 0;
	}
	while (i < len && p[i] == ' ')
		i++;
	if (i == len || p[i] < '0' || p[i] > '7')
		return -1;
	for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
		if (v >> 60)
			return -1;
		v = (v << 3) | (uint64_t)(p[i] - '0');
	}
	for (; i < len; i++)
		if (p[i] != ' ' && p[i] != '\0')
			return -1;
	*out = v;
	return 0;
}

/* Old tars summed signed chars; accept either convention. */
static int checksum_ok(const uint8_t *h)
{
	uint64_t want;
	long usum = 0, ssum = 0;

	if (parse_number(h + H_CHKSUM, H_CHKSUM_LEN, &want) < 0)
		return 0;
	if (FUZZING_SKIPS_CHECKSUMS)
		return 1;
	for (unsigned i = 0; i < TAR_BLOCK; i++) {
		int in_field = i >= H_CHKSUM && i < H_CHKSUM + H_CHKSUM_LEN;
		uint8_t c = in_field ? ' ' : h[i];

		usum += c;
		ssum += (signed char)c;
	}
	return (long)want == usum || (long)want == ssum;
}

static size_t bounded_len(const uint8_t *p, size_t max)
{
	const void *z = memchr(p, '\0', max);

	return z ? (size_t)((const uint8_t *)z - p) : max;
}

static int set_name(struct tar_reader *r, const char *a, size_t alen,
		    const char *b, size_t blen)
{
	size_t need = alen + (alen ? 1 : 0) + blen + 1;
	int rc = import_buf_reserve(&r->name, need);
	char *p;

	if (rc < 0)
		return rc;
	p = (char *)r->name.p;
	memcpy(p, a, alen);
	if (alen)
		p[alen++] = '/';
	memcpy(p + alen, b, blen);
	p[alen + blen] = '\0';
	r->name.len = alen + blen;
	return 0;
}

/* Read a metadata member's payload (long name, pax records). */
static int read_meta(struct tar_reader *r, uint64_t size, uint64_t at,
		     char *err, size_t errlen)
{
	long long n;
	int rc;

	if (size > TAR_MAX_META)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: offset %llu: extended header of %llu "
				   "bytes is too large",
				   r->path, (unsigned long long)at,
				   (unsigned long long)size);
	rc = import_buf_reserve(&r->meta, (size_t)size + 1);
	if (rc < 0)
		return import_fail(err, errlen, rc, "%s: out of memory",
				   r->path);
	n = rd_read(r, r->meta.p, (size_t)size);
	if (n < 0)
		return import_fail(err, errlen, (int)n, "%s: %s", r->path,
				   strerror((int)-n));
	if ((uint64_t)n < size)
		return truncated(r, r->off, "extended header data", err,
				 errlen);
	r->meta.p[size] = '\0';
	r->meta.len = (size_t)size;
	return 0;
}

/* @p[0, @len) as the string *@slot (the next member's path or link
 * target from an extended header).  -1: it holds a NUL; -ENOMEM. */
static int take_string(char **slot, const char *p, size_t len)
{
	char *s;

	if (memchr(p, '\0', len))
		return -1;
	s = strndup(p, len);
	if (!s)
		return -ENOMEM;
	free(*slot);
	*slot = s;
	return 0;
}

/* Remember a regular member (seekable archives) for hard links to it. */
static int remember(struct tar_reader *r, const char *name, uint64_t off,
		    uint64_t size)
{
	if (!r->seekable)
		return 0;
	if (r->nseen == r->seen_cap) {
		size_t cap = r->seen_cap ? 2 * r->seen_cap : 64;
		struct tar_seen *v = realloc(r->seen, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->seen = v;
		r->seen_cap = cap;
	}
	r->seen[r->nseen].name = strdup(name);
	if (!r->seen[r->nseen].name)
		return -ENOMEM;
	r->seen[r->nseen].data_offset = off;
	r->seen[r->nseen].size = size;
	r->nseen++;
	return 0;
}

/* The latest earlier member named @name (a later one of the same name
 * replaces it, as tar extracts), or NULL. */
static const struct tar_seen *find_seen(const struct tar_reader *r,
					const char *name)
{
	for (size_t i = r->nseen; i-- > 0;)
		if (strcmp(r->seen[i].name, name) == 0)
			return &r->seen[i];
	return NULL;
}

/* pax records: "LEN KEY=VALUE\n", LEN counting the whole record. */
static int parse_pax(struct tar_reader *r, uint64_t at, char *err,
		     size_t errlen)
{
	const char *p = (const char *)r->meta.p;
	size_t left = r->meta.len;

	while (left > 0) {
		size_t len = 0, i = 0;
		const char *rec = p, *eq, *key, *val;

		while (i < left && p[i] >= '0' && p[i] <= '9' && len < left) {
			len = len * 10 + (size_t)(p[i] - '0');
			i++;
		}
		if (i == 0 || i >= left || p[i] != ' ' || len <= i + 1 ||
		    len > left || rec[len - 1] != '\n')
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: offset %llu: malformed pax "
					   "record",
					   r->path, (unsigned long long)at);
		key = rec + i + 1;
		eq = memchr(key, '=', (size_t)(rec + len - 1 - key));
		if (!eq)
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: offset %llu: pax record "
					   "without '='",
					   r->path, (unsigned long long)at);
		val = eq + 1;
		if (eq - key == 4 && memcmp(key, "path", 4) == 0) {
			int rc = take_string(&r->next_path, val,
						(size_t)(rec + len - 1 - val));
			if (rc < 0)
				return import_fail(err, errlen,
						   -SLUICE_EINPUT,
						   "%s: offset %llu: bad pax "
						   "path",
						   r->path,
						   (unsigned long long)at);
		} else if (eq - key == 8 && memcmp(key, "linkpath", 8) == 0) {
			if (take_string(&r->next_link, val,
					   (size_t)(rec + len - 1 - val)) < 0)
				return import_fail(err, errlen,
						   -SLUICE_EINPUT,
						   "%s: offset %llu: bad pax "
						   "linkpath",
						   r->path,
						   (unsigned long long)at);
		} else if (eq - key == 4 && memcmp(key, "size", 4) == 0) {
			uint64_t v = 0;
			const char *q = val;

			for (; q < rec + len - 1; q++) {
				if (*q < '0' || *q > '9' || v > TAR_MAX_MEMBER)
					break;
				v = v * 10 + (uint64_t)(*q - '0');
			}
			if (q != rec + len - 1 || q == val ||
			    v > TAR_MAX_MEMBER)
				return import_fail(err, errlen,
						   -SLUICE_EINPUT,
						   "%s: offset %llu: bad pax "
						   "size",
						   r->path,
						   (unsigned long long)at);
			r->next_size = v;
			r->has_next_size = 1;
		}
		p += len;
		left -= len;
	}
	return 0;
}

static uint64_t padded(uint64_t size)
{
	return (size + TAR_BLOCK - 1) & ~(uint64_t)(TAR_BLOCK - 1);
}

/* Skip what is left of the current member's data and padding. */
static int skip_pending(struct tar_reader *r, char *err, size_t errlen)
{
	uint64_t at = r->off, want = r->pending;
	long long n;

	if (!want)
		return 0;
	r->pending = 0;
	n = rd_skip(r, want);
	if (n < 0)
		return import_fail(err, errlen, (int)n, "%s: %s", r->path,
				   strerror((int)-n));
	if ((uint64_t)n < want)
		return truncated(r, at + (uint64_t)n, "member data", err,
				 errlen);
	return 0;
}

/* A hard link (type '1') becomes its target's data: the latest earlier
 * member of that name.  From a pipe the target's bytes are gone. */
static int resolve_link(struct tar_reader *r, const uint8_t *h,
			struct tar_member *m, uint64_t at, char *err,
			size_t errlen)
{
	const struct tar_seen *t;
	char *target = r->next_link;
	char own[H_LINKNAME_LEN + 1];
	int rc = 1;

	r->next_link = NULL;
	if (!target) {
		size_t n = bounded_len(h + H_LINKNAME, H_LINKNAME_LEN);

		memcpy(own, h + H_LINKNAME, n);
		own[n] = '\0';
	}
	if (!r->seekable) {
		rc = import_fail(err, errlen, -SLUICE_EINPUT,
				 "%s: offset %llu: %s is a hard link to %s, "
				 "whose bytes a pipe cannot read again "
				 "(convert from the tar file)",
				 r->path, (unsigned long long)at, m->path,
				 target ? target : own);
		goto out;
	}
	t = find_seen(r, target ? target : own);
	if (!t) {
		rc = import_fail(err, errlen, -SLUICE_EINPUT,
				 "%s: offset %llu: %s is a hard link to %s, "
				 "which is not an earlier file of the archive",
				 r->path, (unsigned long long)at, m->path,
				 target ? target : own);
		goto out;
	}
	m->link = 1;
	m->size = t->size;
	m->data_offset = t->data_offset;
	if (remember(r, m->path, m->data_offset, m->size) < 0)
		rc = import_fail(err, errlen, -ENOMEM, "%s: out of memory",
				 r->path);
out:
	free(target);
	return rc;
}

int tar_next(struct tar_reader *r, struct tar_member *m, char *err,
	     size_t errlen)
{
	uint8_t h[TAR_BLOCK];
	int rc;

	for (;;) {
		uint64_t at, size;
		long long n;
		char type;

		rc = skip_pending(r, err, errlen);
		if (rc < 0)
			return rc;
		at = r->off;
		n = rd_read(r, h, TAR_BLOCK);
		if (n < 0)
			return import_fail(err, errlen, (int)n, "%s: %s",
					   r->path, strerror((int)-n));
		if (n == 0)
			return truncated(r, at, "no end-of-archive marker",
					 err, errlen);
		if (n < TAR_BLOCK)
			return truncated(r, at, "partial header", err, errlen);
		if (is_zero_block(h))
			return 0;
		if (!checksum_ok(h))
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: offset %llu: bad tar header "
					   "checksum",
					   r->path, (unsigned long long)at);
		if (parse_number(h + H_SIZE, H_SIZE_LEN, &size) < 0)
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: offset %llu: bad size field",
					   r->path, (unsigned long long)at);
		type = (char)h[H_TYPE];
		if (r->has_next_size && type != 'L' && type != 'x' &&
		    type != 'g' && type != 'K') {
			size = r->next_size;
			r->has_next_size = 0;
		}
		if (size > TAR_MAX_MEMBER)
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: offset %llu: member size %llu "
					   "is implausible",
					   r->path, (unsigned long long)at,
					   (unsigned long long)size);
		/* A regular file tells us early when data is missing. */
		if (r->seekable && r->off + size > r->file_size)
			return truncated(r, r->file_size,
					 "member data runs past the end",
					 err, errlen);
		switch (type) {
		case 'L':
			rc = read_meta(r, size, at, err, errlen);
			if (rc < 0)
				return rc;
			r->pending = padded(size) - size;
			if (take_string(&r->next_path, (const char *)r->meta.p,
					   bounded_len(r->meta.p,
						       r->meta.len)) < 0)
				return import_fail(err, errlen, -ENOMEM,
						   "%s: out of memory",
						   r->path);
			continue;
		case 'K':
			rc = read_meta(r, size, at, err, errlen);
			if (rc < 0)
				return rc;
			r->pending = padded(size) - size;
			if (take_string(&r->next_link, (const char *)r->meta.p,
					   bounded_len(r->meta.p,
						       r->meta.len)) < 0)
				return import_fail(err, errlen, -ENOMEM,
						   "%s: out of memory",
						   r->path);
			continue;
		case 'x':
			rc = read_meta(r, size, at, err, errlen);
			if (rc < 0)
				return rc;
			r->pending = padded(size) - size;
			rc = parse_pax(r, at, err, errlen);
			if (rc < 0)
				return rc;
			continue;
		case 'S':
		case 'M':
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: offset %llu: GNU sparse or "
					   "multi-volume members are not "
					   "supported",
					   r->path, (unsigned long long)at);
		case '0':
		case '\0':
		case '7':
		case '1':
		case '2':
		case '3':
		case '4':
		case '6':
			break;
		default:
			/* Directories, 'g' and unknown types: not data.  A
			 * name meant for this entry is used up. */
			r->pending = padded(size);
			if (type != 'g') {
				free(r->next_path);
				r->next_path = NULL;
				free(r->next_link);
				r->next_link = NULL;
			}
			continue;
		}
		if (r->next_path) {
			rc = set_name(r, "", 0, r->next_path,
				      strlen(r->next_path));
			free(r->next_path);
			r->next_path = NULL;
		} else {
			size_t nlen = bounded_len(h + H_NAME, H_NAME_LEN);
			size_t plen = 0;

			/* POSIX ustar only: GNU tar uses this area for
			 * times. */
			if (memcmp(h + H_MAGIC, "ustar\0" "00", 8) == 0)
				plen = bounded_len(h + H_PREFIX, H_PREFIX_LEN);
			rc = set_name(r, (const char *)h + H_PREFIX, plen,
				      (const char *)h + H_NAME, nlen);
		}
		if (rc < 0)
			return import_fail(err, errlen, rc, "%s: out of memory",
					   r->path);
		r->pending = padded(size);
		m->path = (const char *)r->name.p;
		m->size = size;
		m->header_offset = at;
		m->data_offset = r->off;
		m->link = 0;
		m->special = 0;
		if (type == '1')
			return resolve_link(r, h, m, at, err, errlen);
		free(r->next_link);
		r->next_link = NULL;
		if (type == '2' || type == '3' || type == '4' || type == '6') {
			m->special = type;
			return 1;
		}
		if (remember(r, m->path, m->data_offset, size) < 0)
			return import_fail(err, errlen, -ENOMEM,
					   "%s: out of memory", r->path);
		return 1;
	}
}

int tar_read_data(struct tar_reader *r, const struct tar_member *m,
		  struct import_buf *b, char *err, size_t errlen)
{
	long long n = 0;
	uint64_t got;
	int rc;

	if (m->link) {
		/* The target's bytes, checked against the file when it
		 * was read past (tar_next). */
		if (m->size > SIZE_MAX - 1)
			return import_fail(err, errlen, -ENOMEM,
					   "%s: out of memory", r->path);
		rc = import_buf_reserve(b, (size_t)m->size);
		if (rc < 0)
			return import_fail(err, errlen, rc, "%s: %s: out of "
					   "memory for %llu bytes", r->path,
					   m->path,
					   (unsigned long long)m->size);
		n = import_pread_full(r->fd, b->p, (size_t)m->size,
				      m->data_offset);
		if (n < 0)
			return import_fail(err, errlen, (int)n, "%s: %s",
					   r->path, strerror((int)-n));
		if ((uint64_t)n < m->size)
			return truncated(r, m->data_offset + (uint64_t)n,
					 m->path, err, errlen);
		b->len = (size_t)m->size;
		return 0;
	}
	if (r->off != m->data_offset || r->pending != padded(m->size))
		return import_fail(err, errlen, -EINVAL,
				   "%s: member data already consumed", r->path);
	if (m->size > SIZE_MAX - 1)
		return import_fail(err, errlen, -ENOMEM, "%s: out of memory",
				   r->path);
	/* A regular file's size was checked against the file in tar_next();
	 * a pipe's is only believed as far as its bytes arrive. */
	for (got = 0; got < m->size; got += (uint64_t)n) {
		uint64_t room = m->size;

		if (!r->seekable && room - got > got + TAR_PIPE_STEP)
			room = 2 * got + TAR_PIPE_STEP;
		rc = import_buf_reserve(b, (size_t)room);
		if (rc < 0)
			return import_fail(err, errlen, rc,
					   "%s: %s: out of memory for %llu "
					   "bytes",
					   r->path, m->path,
					   (unsigned long long)m->size);
		n = rd_read(r, b->p + got, (size_t)(room - got));
		if (n < 0)
			return import_fail(err, errlen, (int)n, "%s: %s",
					   r->path, strerror((int)-n));
		if ((uint64_t)n < room - got)
			return truncated(r, r->off, m->path, err, errlen);
	}
	b->len = (size_t)m->size;
	r->pending = padded(m->size) - m->size;
	return 0;
}
