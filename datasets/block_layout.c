/*
 * block_layout.c - where each record's bytes lie in a raw block, read
 * without its values: the sections' starts and the variable fields'
 * offsets tables, so that a reader can fetch one record's bytes alone
 * (the loader's record-range reads of variable-size fields).
 *
 * A section after a variable field starts where that field's values end
 * (offsets[n] past its table), so the tables are read in field order, one
 * pread each, and checked as block_view_init() checks a decoded block.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "shard_internal.h"

/* Block @blk's layout from @fd into @sec (nfields entries) and the tables
 * @offs[f] (n + 1 entries, variable fields).  @return: 0, -SLUICE_ECORRUPT
 * (a layout block_view_init() would refuse, or the file cut short), or
 * -errno. */
static int read_block_layout(int fd, const struct shard_schema *s,
			     const uint64_t *max_value_bytes,
			     const struct shard_block *blk, uint64_t *sec,
			     uint64_t *const *offs)
{
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
		r = o ? pread_full(fd, o, (size_t)table, blk->offset + off)
		      : pread_full(fd, &end, 8, blk->offset + off + table - 8);
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
		      const struct shard_file *sf, uint64_t *sec,
		      uint64_t *const *offs, char *err, size_t errlen)
{
	uint64_t *tab[DLS_MAX_FIELDS] = { 0 };
	int fd, r = 0;

	fd = file_open_regular(sf->path, O_RDONLY, NULL, err, errlen);
	if (fd < 0)
		return fd;
	for (uint64_t b = 0; b < sf->block_count; b++) {
		const struct shard_block *blk = &sf->blocks[b];
		uint64_t *bsec = sec + b * s->nfields;

		for (uint32_t f = 0; offs && f < s->nfields; f++)
			if (s->fields[f].variable)
				tab[f] = offs[f] + blk->first_record + b;
		r = blk->codec == DLS_CODEC_RAW
			? read_block_layout(fd, s, sf->max_value_bytes, blk,
					    bsec, tab)
			: -SLUICE_ECORRUPT;
		if (r == -SLUICE_ECORRUPT) {
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
	close(fd);
	return r;
}
