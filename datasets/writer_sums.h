/*
 * writer_sums.h - the record checksums (format v3) of the shard being
 * written, in bounded memory.  The shard's section of them (8 bytes per
 * record, after the index, which ends where the last block does) can only
 * be written once the shard is finished, so the writer used to hold them
 * all: 400 MB for 50 million records in one shard.  Here they go through
 * a buffer of WRITER_SUMS_BUF entries, spilled to an unlinked temporary
 * file in the output folder when it fills, and copied into the shard at
 * its end.  datasets/-internal.
 */
#ifndef SLUICE_DATASETS_WRITER_SUMS_H
#define SLUICE_DATASETS_WRITER_SUMS_H

#include <stddef.h>
#include <stdint.h>

/* 64 Ki checksums: 512 KiB, the writer's whole memory for them. */
#define WRITER_SUMS_BUF (64u * 1024u)

struct writer_sums {
	const char *dir;        /* borrowed: where the spill file goes */
	uint64_t *buf;          /* WRITER_SUMS_BUF entries */
	uint64_t n;             /* in buf, after the spilled ones */
	uint64_t spilled;       /* in the spill file, from its start */
	int fd;                 /* the spill file, -1 until one is needed */
};

/* @return: 0 or -ENOMEM. */
int writer_sums_init(struct writer_sums *s, const char *dir);

/* Append @n checksums.  @return: 0; -errno from the spill file, with
 * @err saying which file. */
int writer_sums_add(struct writer_sums *s, const uint64_t *sums, uint64_t n,
		    char *err, size_t errlen);

/* The checksums held for the current shard. */
static inline uint64_t writer_sums_count(const struct writer_sums *s)
{
	return s->spilled + s->n;
}

/* Write every checksum held, in order, at @off of @fd; *@checksum gets
 * their XXH3-64 (as the header's record_sums_checksum); then start over
 * for the next shard.  @return: 0 or -errno (@err says which file). */
int writer_sums_write(struct writer_sums *s, int fd, uint64_t off,
		      uint64_t *checksum, char *err, size_t errlen);

/* Close the spill file and free the buffer (a zeroed @s: nothing). */
void writer_sums_free(struct writer_sums *s);

#endif /* SLUICE_DATASETS_WRITER_SUMS_H */
