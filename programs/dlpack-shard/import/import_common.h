/*
 * import_common.h - what the importers share: the record sink (a writer
 * plus progress reporting), the --part slice arithmetic and small file
 * helpers.  Private to the importers (programs/dlpack-shard/import/).
 */
#ifndef SLUICE_DATASETS_IMPORT_COMMON_H
#define SLUICE_DATASETS_IMPORT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "import.h"
#include "sluice.h"

/* The writer an importer feeds, with the progress bookkeeping. */
struct import_sink {
	const struct import_options *o;
	sluice_writer *w;
	uint64_t done;   /* records added */
	uint64_t total;  /* records this run will add; 0: unknown */
	uint64_t first;  /* source index of the first record (messages) */
	int nfields;
	uint64_t bytes_since;  /* raw bytes since the last progress call */
};

/* Records [*lo, *hi) of @n that part @o->part_index of @o->part_count
 * converts: contiguous, deterministic, covering [0, n) over all parts. */
void import_part_range(const struct import_options *o, uint64_t n,
		       uint64_t *lo, uint64_t *hi);

/* Check the part options: 1 <= part_count, part_index < part_count. */
int import_check_part(const struct import_options *o, char *err,
		      size_t errlen);

/* Open the writer over @fields into o->out_dir; the message names the
 * output directory. */
int import_sink_open(struct import_sink *s, const struct import_options *o,
		     const struct sluice_field *fields, int nfields,
		     uint64_t total, char *err, size_t errlen);

/* Append one record; @what names it in a message (file, key), or NULL
 * for "record N" (N = first + records added so far). */
int import_sink_add(struct import_sink *s, const void *const *values,
		    const uint64_t *lengths, const char *what, char *err,
		    size_t errlen);

/* Finish (dataset.json written) and fill @sum; on failure the writer's
 * temporary files are removed. */
int import_sink_close(struct import_sink *s,
		      struct sluice_writer_summary *sum, char *err,
		      size_t errlen);

/* Give up: remove temporary files, write no dataset.json (NULL-safe). */
void import_sink_abort(struct import_sink *s);

/* A growable byte buffer for one value. */
struct import_buf {
	uint8_t *p;
	size_t len, cap;
};

/* Make room for @need bytes (contents kept); -ENOMEM. */
int import_buf_reserve(struct import_buf *b, size_t need);
void import_buf_free(struct import_buf *b);

/* Read a whole regular file into @b (bounded by what the file holds). */
int import_read_file(const char *path, struct import_buf *b);

/* read()/pread() until @len bytes or end of file; returns bytes read or
 * -errno.  EINTR is retried. */
long long import_read_full(int fd, void *buf, size_t len);
long long import_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* Pass over @path, of kind @k: counted in o->skips (the first few paths
 * kept), or, with o->strict, an error (-SLUICE_EINPUT) naming it. */
int import_skip(const struct import_options *o, enum import_skip_kind k,
		const char *path, char *err, size_t errlen);

/* snprintf into @err (NULL-safe); returns @code so callers can
 * `return import_fail(...)`. */
int import_fail(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif /* SLUICE_DATASETS_IMPORT_COMMON_H */
