/*
 * import_tar_reader.h - a streaming reader of ustar/GNU/pax tar archives
 * that trusts nothing in them.  Private to import_tar.c.
 */
#ifndef SLUICE_DATASETS_IMPORT_TAR_READER_H
#define SLUICE_DATASETS_IMPORT_TAR_READER_H

#include <stddef.h>
#include <stdint.h>

#include "import_common.h"

struct tar_reader {
	const char *path;
	int fd;
	int seekable;            /* a regular file: skips use lseek */
	uint64_t file_size;      /* when seekable */
	uint64_t off;            /* archive offset of the next unread byte */
	uint8_t *buf;            /* read-ahead buffer */
	size_t cap, pos, end;
	uint64_t pending;        /* unread data + padding of the member */
	struct import_buf name;  /* the current member's path, NUL-ended */
	struct import_buf meta;  /* GNU 'L' and pax 'x' payloads */
	char *next_path;         /* from 'L' or pax path=, for the next header */
	char *next_link;         /* from 'K' or pax linkpath= */
	/* Regular members so far (seekable archives only), so that a hard
	 * link reads its target's bytes; names held, data not. */
	struct tar_seen *seen;
	size_t nseen, seen_cap;
	uint64_t next_size;      /* from pax size= */
	int has_next_size;
};

struct tar_seen {
	char *name;
	uint64_t data_offset, size;
};

/* One member with data: a regular file, or a hard link to an earlier
 * one (@link: its data is the target's, at @data_offset), or an entry
 * that has none (@special: its tar type, '2' symlink, '3'/'4' device,
 * '6' FIFO; the importer counts it as skipped).  @path is owned by the
 * reader and valid until the next tar_next(). */
struct tar_member {
	const char *path;
	uint64_t size;
	uint64_t header_offset;
	uint64_t data_offset;
	int link;
	char special;
};

/* Open @path with a read-ahead buffer of @buf_size bytes. */
int tar_open(struct tar_reader *r, const char *path, size_t buf_size,
	     char *err, size_t errlen);
/* The same over an open descriptor (owned by the reader from now on, even
 * on failure); @path names it in messages. */
int tar_open_fd(struct tar_reader *r, int fd, const char *path,
		size_t buf_size, char *err, size_t errlen);
void tar_close(struct tar_reader *r);

/*
 * tar_next - the next regular-file member, hard link (resolved to an
 * earlier member: an error from a pipe, whose bytes are gone), or
 * special entry (symlink, device, FIFO: m->special); directories and
 * metadata entries are passed over (GNU long names and long link names,
 * pax path=/linkpath=/size= apply to the header that follows them).
 * Unread data of the previous member is skipped first.
 * @return: 1 with *@m filled; 0 at the end-of-archive marker; negative
 *	with a message naming the archive and byte offset.
 */
int tar_next(struct tar_reader *r, struct tar_member *m, char *err,
	     size_t errlen);

/* Read the current member's data (all of it) into @b. */
int tar_read_data(struct tar_reader *r, const struct tar_member *m,
		  struct import_buf *b, char *err, size_t errlen);

#endif /* SLUICE_DATASETS_IMPORT_TAR_READER_H */
