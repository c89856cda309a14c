/*
 * block_layout.c - where each record's bytes lie in a block, read
 * without its values: the sections' starts and the variable fields'
 * offsets tables, so that a reader can fetch one record's bytes alone
 * (the loader's record-range reads of variable-size fields).  A raw
 * block's are read where they lie; a zstd block's (format v4) through
 * the frames that hold them (block_frames.c), each table a frame of its
 * own.
 *
 * A section after a variable field starts where that field's values end
 * (offsets[n] past its table), so the tables are read in field order, one
 * pread each, and checked as block_view_init() checks a decoded block.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <zstd.h>

#include "shard_internal.h"

/* Where a block's decoded bytes are read from: @fd, through @frames
 * when it is a zstd block's (NULL: raw). */
struct block_source {
	int fd;
	const struct shard_block *blk;
	const struct block_frames *frames;
	ZSTD_DCtx *dctx;
};

/* Decoded bytes [@off, @off + @len) of the source's block into @out. */
static int read_decoded(const struct block_source *src, void *out,
			uint64_t len, uint64_t off)
{
	if (src->frames)
		return block_frames_read_range(src->fd, src->dctx, src->blk,
					       src->frames, off, len, out);
	return pread_full(src->fd, out, (size_t)len, src->blk->offset + off);
}

/* Block @blk's layout from @fd into @sec (nfields entries) and the tables
 * @offs[f] (n + 1 entries, variable fields).  @return: 0, -SLUICE_ECORRUPT
 * (a layout block_view_init() would refuse, or the file cut short), or
 * -errno. */
static int read_block_layout(const struct block_source *src,
			     const struct shard_schema *s,
			     const uint64_t *max_value_bytes, uint64_t *sec,
			     uint64_t *const *offs)
{
	const struct shard_block *blk = src->blk;
	uint32_t n = blk->record_count;
	uint64_t off = 0, len;

	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct shard_field *sf = &s->fields[f];

		off = align_up_u64(off, 8);
		if (off > blk->raw_size)
			return -SLUICE_ECORRUPT;
		if (!sf->variable) {
			if (__builtin_mul_overflow((uint64_t)n, sf->record_bytes,
						   &len) ||
			    len > blk->raw_size - off)
				return -SLUICE_ECORRUPT;
			sec[f] = off;
			off += len;
			continue;
		}
		uint64_t table = ((uint64_t)n + 1) * 8u, *o = offs[f], end;
		int r;

		if (table > blk->raw_size - off)
			return -SLUICE_ECORRUPT;
		/* without a table to fill, its last entry only: where the
		 * values end (the reader checks the rest, block_view_init) */
		r = o ? read_decoded(src, o, table, off)
		      : read_decoded(src, &end, 8, off + table - 8);
		if (r < 0)
			return r;
		if (o && o[0] != 0)
			return -SLUICE_ECORRUPT;
		for (uint32_t i = 0; o && i < n; i++)
			if (o[i + 1] < o[i] ||
			    (o[i + 1] - o[i]) % sf->unit_bytes ||
			    o[i + 1] - o[i] > max_value_bytes[f])
				return -SLUICE_ECORRUPT;
		if (o)
			end = o[n];
		off += table;
		if (end > blk->raw_size - off)
			return -SLUICE_ECORRUPT;
		sec[f] = off;
		off += end;
	}
	/* The last section ends the block, as in a decoded one. */
	return off == blk->raw_size ? 0 : -SLUICE_ECORRUPT;
}

int shard_read_layout(const struct shard_schema *s,
		      const struct shard_file *sf,
		      const struct block_frames *frames, uint64_t *sec,
		      uint64_t *const *offs, char *err, size_t errlen)
{
	uint64_t *tab[DLS_MAX_FIELDS] = { 0 };
	struct block_source src = { 0 };
	int r = 0;

	src.fd = file_open_regular(sf->path, O_RDONLY, NULL, err, errlen);
	if (src.fd < 0)
		return src.fd;
	for (uint64_t b = 0; b < sf->block_count; b++) {
		const struct shard_block *blk = &sf->blocks[b];
		uint64_t *bsec = sec + b * s->nfields;

		for (uint32_t f = 0; offs && f < s->nfields; f++)
			if (s->fields[f].variable)
				tab[f] = offs[f] + blk->first_record + b;
		src.blk = blk;
		src.frames = frames && frames[b].n ? &frames[b] : NULL;
		if (src.frames && !src.dctx) {
			src.dctx = ZSTD_createDCtx();
			if (!src.dctx) {
				errf(err, errlen, "%s: out of memory", sf->path);
				r = -ENOMEM;
				break;
			}
		}
		r = blk->codec == DLS_CODEC_RAW || src.frames
			? read_block_layout(&src, s, sf->max_value_bytes,
					    bsec, tab)
			: -SLUICE_ECORRUPT;
		if (r == -SLUICE_ECORRUPT || r == -SLUICE_EZSTD) {
			bsec[0] = UINT64_MAX;   /* read whole */
			r = 0;
		} else if (r < 0) {
			errf(err, errlen, "%s: block %llu: offset %llu: %s",
			     sf->path, (unsigned long long)b,
			     (unsigned long long)blk->offset,
			     sluice_strerror(r));
			break;
		}
	}
	ZSTD_freeDCtx(src.dctx);
	close(src.fd);
	return r;
}
