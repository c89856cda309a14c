/*
 * import_npy.c - one or more .npy files (comma-separated) with the same
 * first dimension n become n records; each file is a fixed field named by
 * its file stem, with the array's dtype and trailing shape.  Record i is
 * row i of every file.  Rows are read in chunks with pread, so memory
 * stays at about a megabyte per file whatever the array's size.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import_common.h"
#include "import_npy_header.h"

#define CHUNK_BYTES (1u << 20)

struct npy_file {
	char *path;
	int fd;
	struct npy_header h;
	uint64_t rows;
	uint64_t row_bytes;
	/* read-ahead of whole rows */
	uint8_t *chunk;
	uint64_t chunk_rows;      /* capacity in rows */
	uint64_t chunk_first;     /* first row held */
	uint64_t chunk_count;     /* rows held */
};

static int npy_fail(char *err, size_t errlen, int code, const char *path,
		    const char *why)
{
	return import_fail(err, errlen, code, "%s: %s", path, why);
}

/* The stem: base name without its last extension. */
static int field_name(const char *path, char *name, char *err, size_t errlen)
{
	const char *base = strrchr(path, '/');
	const char *dot;
	size_t n;

	base = base ? base + 1 : path;
	dot = strrchr(base, '.');
	n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
	if (n == 0 || n >= SLUICE_NAME_MAX)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: the file stem must be 1..%d bytes "
				   "(it names the field)",
				   path, SLUICE_NAME_MAX - 1);
	memcpy(name, base, n);
	name[n] = '\0';
	return 0;
}

static int npy_open(struct npy_file *nf, struct sluice_field *f, char *err,
		    size_t errlen)
{
	uint8_t pre[NPY_PREAMBLE_MAX];
	char msg[256], *text = NULL;
	uint64_t hdr_start, data_bytes, file_size;
	uint32_t hdr_len;
	struct stat st;
	long long n;
	int r;

	nf->fd = open(nf->path, O_RDONLY | O_CLOEXEC);
	if (nf->fd < 0 || fstat(nf->fd, &st) < 0)
		return npy_fail(err, errlen, -errno, nf->path,
				strerror(errno));
	if (!S_ISREG(st.st_mode))
		return npy_fail(err, errlen, -SLUICE_EINPUT, nf->path,
				"not a regular file");
	file_size = (uint64_t)st.st_size;
	n = import_pread_full(nf->fd, pre, sizeof(pre), 0);
	if (n < 0)
		return npy_fail(err, errlen, (int)n, nf->path,
				strerror((int)-n));
	r = npy_preamble(pre, (size_t)n, &hdr_start, &hdr_len, msg,
			 sizeof(msg));
	if (r < 0)
		return npy_fail(err, errlen, r, nf->path, msg);
	if (hdr_start + hdr_len > file_size)
		return npy_fail(err, errlen, -SLUICE_EINPUT, nf->path,
				"truncated .npy header");
	text = malloc(hdr_len);
	if (!text)
		return npy_fail(err, errlen, -ENOMEM, nf->path,
				"out of memory");
	n = import_pread_full(nf->fd, text, hdr_len, hdr_start);
	if (n != (long long)hdr_len) {
		free(text);
		return npy_fail(err, errlen, n < 0 ? (int)n : -SLUICE_EINPUT,
				nf->path, n < 0 ? strerror((int)-n) :
						  "truncated .npy header");
	}
	r = npy_parse_dict(text, hdr_len, &nf->h, msg, sizeof(msg));
	free(text);
	if (r < 0)
		return npy_fail(err, errlen, r, nf->path, msg);
	nf->h.data_offset = hdr_start + hdr_len;

	if (nf->h.ndim == 0)
		return npy_fail(err, errlen, -SLUICE_EINPUT, nf->path,
				"a 0-d array has no rows");
	if (nf->h.ndim - 1 > SLUICE_MAX_NDIM)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: %d trailing dimensions (at most %d)",
				   nf->path, nf->h.ndim - 1, SLUICE_MAX_NDIM);
	nf->rows = nf->h.shape[0];
	nf->row_bytes = nf->h.item_bytes;
	for (int i = 1; i < nf->h.ndim; i++) {
		uint64_t d = nf->h.shape[i];

		if (d == 0)
			return npy_fail(err, errlen, -SLUICE_EINPUT, nf->path,
					"a trailing dimension is 0 (rows "
					"would be empty)");
		if (d > INT64_MAX || nf->row_bytes > UINT64_MAX / d)
			return npy_fail(err, errlen, -SLUICE_EINPUT, nf->path,
					"shape overflows");
		nf->row_bytes *= d;
	}
	if (nf->rows && nf->row_bytes > UINT64_MAX / nf->rows)
		return npy_fail(err, errlen, -SLUICE_EINPUT, nf->path,
				"shape overflows");
	data_bytes = nf->rows * nf->row_bytes;
	if (file_size - nf->h.data_offset != data_bytes)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: the shape needs %llu data bytes, the "
				   "file has %llu",
				   nf->path, (unsigned long long)data_bytes,
				   (unsigned long long)(file_size -
							nf->h.data_offset));
	if (nf->row_bytes > SIZE_MAX / 2)
		return npy_fail(err, errlen, -ENOMEM, nf->path,
				"rows too large");

	memset(f, 0, sizeof(*f));
	r = field_name(nf->path, f->name, err, errlen);
	if (r < 0)
		return r;
	f->dtype = nf->h.dtype;
	f->ndim = nf->h.ndim - 1;
	for (int i = 1; i < nf->h.ndim; i++)
		f->shape[i - 1] = (int64_t)nf->h.shape[i];

	nf->chunk_rows = CHUNK_BYTES / nf->row_bytes;
	if (nf->chunk_rows == 0)
		nf->chunk_rows = 1;
	nf->chunk = malloc((size_t)(nf->chunk_rows * nf->row_bytes));
	if (!nf->chunk)
		return npy_fail(err, errlen, -ENOMEM, nf->path,
				"out of memory");
	return 0;
}

/* Row @i's bytes, reading the next chunk when it is not held. */
static int npy_row(struct npy_file *nf, uint64_t i, const void **row,
		   char *err, size_t errlen)
{
	if (i < nf->chunk_first || i >= nf->chunk_first + nf->chunk_count) {
		uint64_t count = nf->rows - i < nf->chunk_rows ?
					 nf->rows - i : nf->chunk_rows;
		size_t bytes = (size_t)(count * nf->row_bytes);
		long long n = import_pread_full(
			nf->fd, nf->chunk, bytes,
			nf->h.data_offset + i * nf->row_bytes);

		if (n != (long long)bytes)
			return import_fail(err, errlen,
					   n < 0 ? (int)n : -SLUICE_EINPUT,
					   "%s: row %llu: %s", nf->path,
					   (unsigned long long)i,
					   n < 0 ? strerror((int)-n) :
						   "file shrank while reading");
		nf->chunk_first = i;
		nf->chunk_count = count;
	}
	*row = nf->chunk + (i - nf->chunk_first) * nf->row_bytes;
	return 0;
}

/* Split the comma-separated list into @files (paths owned). */
static int split_paths(const char *src, struct npy_file *files, int *nfiles,
		       char *err, size_t errlen)
{
	const char *p = src;

	*nfiles = 0;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		if (n == 0)
			return import_fail(err, errlen, -EINVAL,
					   "%s: empty path in the list", src);
		if (*nfiles == SLUICE_MAX_FIELDS)
			return import_fail(err, errlen, -EINVAL,
					   "more than %d .npy files",
					   SLUICE_MAX_FIELDS);
		files[*nfiles].fd = -1;
		files[*nfiles].path = strndup(p, n);
		if (!files[*nfiles].path)
			return import_fail(err, errlen, -ENOMEM,
					   "out of memory");
		(*nfiles)++;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

int import_npy(const struct import_options *o,
	       struct sluice_writer_summary *sum, char *err, size_t errlen)
{
	struct npy_file files[SLUICE_MAX_FIELDS];
	struct sluice_field fields[SLUICE_MAX_FIELDS];
	struct import_sink sink = { 0 };
	int nfiles = 0, r;
	uint64_t lo, hi;

	memset(files, 0, sizeof(files));
	r = import_check_part(o, err, errlen);
	if (r < 0)
		return r;
	r = split_paths(o->src, files, &nfiles, err, errlen);
	if (r < 0)
		goto out;
	for (int i = 0; i < nfiles; i++) {
		r = npy_open(&files[i], &fields[i], err, errlen);
		if (r < 0)
			goto out;
		for (int j = 0; j < i; j++)
			if (strcmp(fields[i].name, fields[j].name) == 0) {
				r = import_fail(err, errlen, -SLUICE_EINPUT,
						"%s: field '%s' already comes "
						"from %s",
						files[i].path, fields[i].name,
						files[j].path);
				goto out;
			}
		if (files[i].rows != files[0].rows) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: %llu rows, but %s has %llu",
					files[i].path,
					(unsigned long long)files[i].rows,
					files[0].path,
					(unsigned long long)files[0].rows);
			goto out;
		}
	}
	import_part_range(o, files[0].rows, &lo, &hi);
	r = import_sink_open(&sink, o, fields, nfiles, hi - lo, err, errlen);
	if (r < 0)
		goto out;
	sink.first = lo;
	for (uint64_t i = lo; i < hi; i++) {
		const void *values[SLUICE_MAX_FIELDS];
		uint64_t lengths[SLUICE_MAX_FIELDS];
		for (int f = 0; f < nfiles; f++) {
			r = npy_row(&files[f], i, &values[f], err, errlen);
			if (r < 0)
				goto out;
			lengths[f] = files[f].row_bytes;
		}
		r = import_sink_add(&sink, values, lengths, NULL, err, errlen);
		if (r < 0)
			goto out;
	}
	r = import_sink_close(&sink, sum, err, errlen);
out:
	import_sink_abort(&sink);
	for (int i = 0; i < nfiles; i++) {
		if (files[i].fd >= 0)
			close(files[i].fd);
		free(files[i].chunk);
		free(files[i].path);
	}
	return r;
}
