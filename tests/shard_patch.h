/*
 * shard_patch.h - a block of a dataset's first shard rewritten so that
 * it verifies again: its stored bytes (in its own place, no longer than
 * the room before the next block), its size and XXH3 in the index, the
 * index's XXH3 in the header, the header's, and the manifest's records
 * of it (the shard's checksum, the dataset's stored bytes).  Record
 * checksums (format v3) are left as they were: only record-range reads
 * check them, and those read raw blocks.  For the tests that hand the
 * loader crafted blocks: checksums right, content hostile.
 */
#ifndef SLUICE_TESTS_SHARD_PATCH_H
#define SLUICE_TESTS_SHARD_PATCH_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "dlpack_shard.h"
#include "t.h"

/* In @dir's dataset.json, the shard checksum @old becomes @new (unless
 * they are equal) and the number after "@name": changes by @delta (the
 * file rewritten). */
static inline void sp_manifest_edit(const char *dir, uint64_t old,
				    uint64_t new, const char *name,
				    int64_t delta)
{
	char path[1024], want[17], key[64], text[8192], out[8300], *at, *end;
	unsigned long long v;
	FILE *f;
	size_t n;

	T_ASSERT((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
				  DLS_MANIFEST_NAME) < sizeof(path));
	T_ASSERT((size_t)snprintf(key, sizeof(key), "\"%s\":", name) <
		 sizeof(key));
	f = fopen(path, "r");
	T_ASSERT(f != NULL);
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	T_ASSERT(n > 0 && n < sizeof(text) - 1);
	text[n] = '\0';
	if (old != new) {
		snprintf(want, sizeof(want), "%016llx", (unsigned long long)old);
		at = strstr(text, want);
		T_ASSERT(at != NULL);
		snprintf(want, sizeof(want), "%016llx", (unsigned long long)new);
		memcpy(at, want, 16);
	}
	at = strstr(text, key);
	T_ASSERT(at != NULL);
	at += strlen(key);
	v = strtoull(at, &end, 10);
	T_ASSERT(end > at);
	n = (size_t)snprintf(out, sizeof(out), "%.*s%llu%s", (int)(at - text),
			     text, v + (unsigned long long)delta, end);
	T_ASSERT(n < sizeof(out));
	f = fopen(path, "w");
	T_ASSERT(f != NULL);
	T_EQ(fwrite(out, 1, n, f), n);
	T_EQ(fclose(f), 0);
}

/* The shard checksum @old becomes @new and the dataset's stored_bytes
 * change by @stored_delta. */
static inline void sp_relist(const char *dir, uint64_t old, uint64_t new,
			     int64_t stored_delta)
{
	sp_manifest_edit(dir, old, new, "stored_bytes", stored_delta);
}

/* @dir's first shard (the writer's name for it). */
static inline void sp_shard0(const char *dir, char *path, size_t len)
{
	T_ASSERT((size_t)snprintf(path, len, "%s/data-00000.dls", dir) < len);
	T_EQ(access(path, R_OK), 0);
}

/* Block @k's stored bytes, malloc'd; its index entry in *@e. */
static inline uint8_t *sp_block(const char *dir, uint32_t k,
				struct dls_index_entry_disk *e)
{
	struct dls_header_disk h;
	char path[1024];
	uint8_t *blk;
	int fd;

	sp_shard0(dir, path, sizeof(path));
	fd = open(path, O_RDONLY);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	T_LT(k, h.block_count);
	T_EQ(pread(fd, e, sizeof(*e),
		   (off_t)(h.index_offset + (uint64_t)k * sizeof(*e))),
	     (ssize_t)sizeof(*e));
	blk = malloc(e->stored_size ? e->stored_size : 1);
	T_ASSERT(blk != NULL);
	T_EQ(pread(fd, blk, e->stored_size, (off_t)e->offset),
	     (ssize_t)e->stored_size);
	close(fd);
	return blk;
}

/* Shard file @fd's header @h (in its page @page) and index @index written
 * back, sealed: the index's XXH3 in the header, the header's, and the
 * manifest's record of the shard, whose stored bytes change by
 * @stored_delta. */
static inline void sp_write_sealed(const char *dir, int fd,
				   struct dls_header_disk *h, uint8_t *page,
				   const uint8_t *index, int64_t stored_delta)
{
	uint64_t sum, old;

	h->index_checksum = XXH3_64bits(index, h->index_length);
	memcpy(page, h, sizeof(*h));
	memcpy(&old, page + DLS_HEADER_CHECKSUM_OFFSET, sizeof(old));
	sum = XXH3_64bits(page, DLS_HEADER_CHECKSUM_OFFSET);
	memcpy(page + DLS_HEADER_CHECKSUM_OFFSET, &sum, sizeof(sum));
	T_EQ(pwrite(fd, index, h->index_length, (off_t)h->index_offset),
	     (ssize_t)h->index_length);
	T_EQ(pwrite(fd, page, DLS_HEADER_SIZE, 0), (ssize_t)DLS_HEADER_SIZE);
	sp_relist(dir, old, sum, stored_delta);
}

/* Block @k becomes @stored (@len bytes, at most @room: the bytes
 * before the next block), sealed. */
static inline void sp_rewrite_block(const char *dir, uint32_t k,
				    const void *stored, uint64_t len,
				    uint64_t room)
{
	struct dls_index_entry_disk e;
	struct dls_header_disk h;
	uint8_t page[DLS_HEADER_SIZE], *index;
	int64_t delta;
	char path[1024];
	int fd;

	T_ASSERT(len <= room);
	sp_shard0(dir, path, sizeof(path));
	fd = open(path, O_RDWR);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	memcpy(&h, page, sizeof(h));
	index = malloc(h.index_length);
	T_ASSERT(index != NULL);
	T_EQ(pread(fd, index, h.index_length, (off_t)h.index_offset),
	     (ssize_t)h.index_length);
	T_LT(k, h.block_count);
	memcpy(&e, index + (uint64_t)k * sizeof(e), sizeof(e));
	T_EQ(pwrite(fd, stored, len, (off_t)e.offset), (ssize_t)len);
	delta = (int64_t)len - (int64_t)e.stored_size;
	e.stored_size = len;
	e.checksum = XXH3_64bits(stored, len);
	memcpy(index + (uint64_t)k * sizeof(e), &e, sizeof(e));
	sp_write_sealed(dir, fd, &h, page, index, delta);
	close(fd);
	free(index);
}

/* Block @k sealed again after its bytes were patched in place. */
static inline void sp_reseal_block(const char *dir, uint32_t k)
{
	struct dls_index_entry_disk e;
	uint8_t *blk = sp_block(dir, k, &e);

	sp_rewrite_block(dir, k, blk, e.stored_size, e.stored_size);
	free(blk);
}

#endif /* SLUICE_TESTS_SHARD_PATCH_H */
