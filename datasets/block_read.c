/*
 * block_read.c - the one way to read a block: pread its stored bytes,
 * check the XXH3, decompress, build the view (sluice_tools.h).  Used by
 * sluice_dataset_read, dataset_verify and the programs; the loader reads
 * through io_uring and calls block_decode itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_findDecompressedSize */
#include <zstd.h>

#include "shard_internal.h"
#include "sluice_xxh3.h"

/* Grow a 64-byte aligned buffer (raw blocks are viewed in place and their
 * offset tables read as uint64) to @need bytes; contents are not kept. */
static int ensure(void **buf, uint64_t *cap, uint64_t need)
{
	uint64_t size = align_up_u64(need ? need : 1, 64);
	void *nb;

	if (need <= *cap && *buf)
		return 0;
	if (size == UINT64_MAX || size > SIZE_MAX)
		return -ENOMEM;
	nb = aligned_alloc(64, (size_t)size);
	if (!nb)
		return -ENOMEM;
	free(*buf);
	*buf = nb;
	*cap = need;
	return 0;
}

static int fail(const struct shard_file *sf, uint64_t b, int r, const char *what,
		char *err, size_t errlen)
{
	errf(err, errlen, "%s: block %llu: offset %llu: %s", sf->path,
	     (unsigned long long)b,
	     (unsigned long long)sf->blocks[b].offset, what);
	return r;
}

/* A v4 zstd block of several frames ends with a seek table that tells
 * them as they are: the loader reads records through it alone
 * (block_frames.c).  One frame alone is a block as v3 wrote them. */
static int check_frames(const struct shard_file *sf,
			const struct shard_block *blk, const uint8_t *stored)
{
	struct block_frames fr;
	uint64_t need;
	int r;

	if (sf->version <= DLS_VERSION_SINGLE_FRAME ||
	    ZSTD_findFrameCompressedSize(stored, blk->stored_size) ==
		    blk->stored_size)
		return 0;
	r = block_frames_parse(blk, stored, blk->stored_size, &fr, &need);
	if (r == 0)
		r = block_frames_check(stored, &fr);
	block_frames_free(&fr);
	return r;
}

int block_read(struct block_reader *br, int fd, const struct shard_schema *s,
	       const struct shard_file *sf, uint64_t b, struct block_view *view,
	       char *err, size_t errlen)
{
	const struct shard_block *blk;
	const void *raw;
	int r;

	if (b >= sf->block_count)
		return -EINVAL;
	blk = &sf->blocks[b];
	/* The parser checked stored_size against the file size, so this
	 * allocation is bounded by the file. */
	if (ensure(&br->stored, &br->stored_cap, blk->stored_size) < 0)
		return fail(sf, b, -ENOMEM, "out of memory", err, errlen);
	r = pread_full(fd, br->stored, blk->stored_size, blk->offset);
	if (r < 0)
		return fail(sf, b, r, r == -SLUICE_ECORRUPT
				      ? "short read (file truncated?)"
				      : sluice_strerror(r), err, errlen);
	if (XXH3_64bits(br->stored, blk->stored_size) != blk->checksum)
		return fail(sf, b, -SLUICE_ECORRUPT, "checksum mismatch", err,
			    errlen);
	if (blk->codec == DLS_CODEC_ZSTD) {
		/* raw_size sizes an allocation only once the frames agree. */
		if (ZSTD_findDecompressedSize(br->stored, blk->stored_size) !=
		    blk->raw_size)
			return fail(sf, b, -SLUICE_ECORRUPT, "zstd frame size "
				    "does not match the index", err, errlen);
		r = check_frames(sf, blk, br->stored);
		if (r < 0)
			return fail(sf, b, r, r == -ENOMEM ? "out of memory"
				    : "bad seek table (the frames a record is "
				      "read from alone)", err, errlen);
		if (ensure(&br->raw, &br->raw_cap, blk->raw_size) < 0)
			return fail(sf, b, -ENOMEM, "out of memory", err,
				    errlen);
		if (!br->dctx) {
			br->dctx = ZSTD_createDCtx();
			if (!br->dctx)
				return fail(sf, b, -ENOMEM, "out of memory",
					    err, errlen);
		}
	}
	r = block_decode(br->dctx, blk, br->stored, 0, br->raw, br->raw_cap,
			 &raw);
	if (r < 0)
		return fail(sf, b, r, r == -SLUICE_EZSTD ? "zstd decode failed"
				      : r == -SLUICE_ECORRUPT
					      ? "decoded size mismatch"
					      : sluice_strerror(r), err, errlen);
	r = block_view_init(s, sf->max_value_bytes, raw, blk->raw_size,
			    blk->record_count, view);
	if (r < 0)
		return fail(sf, b, -SLUICE_ECORRUPT, "bad block layout (offset "
			    "tables or section sizes)", err, errlen);
	return 0;
}

void block_reader_free(struct block_reader *br)
{
	if (!br)
		return;
	ZSTD_freeDCtx(br->dctx);
	free(br->stored);
	free(br->raw);
	*br = (struct block_reader){ 0 };
}

int shard_read_field(const struct shard_schema *s,
		     const struct shard_file *sf, uint32_t f,
		     const struct block_frames *frames, const uint64_t *sec,
		     uint8_t *out, char *err, size_t errlen)
{
	uint64_t rb = s->fields[f].record_bytes;
	ZSTD_DCtx *dctx = NULL;
	int fd, r = 0;

	fd = file_open_regular(sf->path, O_RDONLY, NULL, err, errlen);
	if (fd < 0)
		return fd;
	for (uint64_t b = 0; b < sf->block_count && r == 0; b++) {
		const struct shard_block *blk = &sf->blocks[b];
		const struct block_frames *fr = frames && frames[b].n
			? &frames[b] : NULL;
		const uint64_t *bsec = sec ? sec + b * s->nfields : NULL;
		uint64_t off, len = blk->record_count * rb;
		uint8_t *to = out + blk->first_record * rb;

		if ((blk->codec != DLS_CODEC_RAW && !fr) ||
		    (bsec && bsec[0] == UINT64_MAX))
			continue;
		off = bsec ? bsec[f] : block_field_offset(s, blk->record_count,
							  f);
		if (!fr) {
			r = pread_full(fd, to, (size_t)len, blk->offset + off);
		} else {
			if (!dctx)
				dctx = ZSTD_createDCtx();
			r = dctx ? block_frames_read_range(fd, dctx, blk, fr,
							   off, len, to)
				 : -ENOMEM;
		}
		if (r < 0)
			fail(sf, b, r, r == -SLUICE_ECORRUPT ? "file truncated"
				       : r == -SLUICE_EZSTD ? "zstd decode failed"
				       : sluice_strerror(r),
			     err, errlen);
	}
	ZSTD_freeDCtx(dctx);
	close(fd);
	return r;
}
