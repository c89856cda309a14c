/*
 * block.c - the decoded block layout (field-major sections, each 8-byte
 * aligned from the block start) and block decoding.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "fuzzing.h"
#include "shard_internal.h"
#include "sluice_xxh3.h"

uint64_t block_layout_size(const struct shard_schema *s, uint32_t n,
			   const uint64_t *var_bytes)
{
	uint64_t off = 0, len;

	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct shard_field *sf = &s->fields[f];

		off = align_up_u64(off, 8);
		if (off == UINT64_MAX)
			return UINT64_MAX;
		if (sf->variable) {
			len = ((uint64_t)n + 1) * 8u;
			if (var_bytes &&
			    __builtin_add_overflow(len, var_bytes[f], &len))
				return UINT64_MAX;
		} else if (__builtin_mul_overflow((uint64_t)n, sf->record_bytes,
						  &len)) {
			return UINT64_MAX;
		}
		if (__builtin_add_overflow(off, len, &off))
			return UINT64_MAX;
	}
	return off;
}

uint64_t block_field_offset(const struct shard_schema *s, uint32_t n,
			    uint32_t field)
{
	uint64_t off = 0;

	/* Fixed fields only before @field (the caller's): no overflow, the
	 * block's raw size (< 2^34) holds them. */
	for (uint32_t f = 0; f < field; f++)
		off = align_up_u64(off, 8) + (uint64_t)n * s->fields[f].record_bytes;
	return align_up_u64(off, 8);
}

int block_view_init(const struct shard_schema *s,
		    const uint64_t *max_value_bytes, const void *raw,
		    uint64_t raw_size, uint32_t n, struct block_view *out)
{
	const uint8_t *base = raw;
	uint64_t off = 0, len;

	memset(out, 0, sizeof(*out));
	/* Offset tables are read as uint64: the block must be 8-aligned. */
	if (((uintptr_t)raw & 7u) != 0)
		return -EINVAL;
	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct shard_field *sf = &s->fields[f];

		off = align_up_u64(off, 8);
		if (off > raw_size)
			return -SLUICE_ECORRUPT;
		if (sf->variable) {
			const uint64_t *offs;
			uint64_t table = ((uint64_t)n + 1) * 8u, data_len;
			uint64_t bound = max_value_bytes ? max_value_bytes[f]
							 : UINT64_MAX;

			if (table > raw_size - off)
				return -SLUICE_ECORRUPT;
			offs = (const uint64_t *)(const void *)(base + off);
			if (offs[0] != 0)
				return -SLUICE_ECORRUPT;
			/* Readers size batch buffers by max_value_bytes:
			 * a larger value is as corrupt as a bad offset. */
			for (uint32_t i = 0; i < n; i++) {
				if (offs[i + 1] < offs[i] ||
				    (offs[i + 1] - offs[i]) % sf->unit_bytes ||
				    offs[i + 1] - offs[i] > bound)
					return -SLUICE_ECORRUPT;
			}
			data_len = offs[n];
			off += table;
			if (data_len > raw_size - off)
				return -SLUICE_ECORRUPT;
			out->offsets[f] = offs;
			out->data[f] = base + off;
			off += data_len;
		} else {
			if (__builtin_mul_overflow((uint64_t)n, sf->record_bytes,
						   &len) ||
			    len > raw_size - off)
				return -SLUICE_ECORRUPT;
			out->data[f] = base + off;
			off += len;
		}
	}
	/* The last section ends the block: no trailing bytes. */
	if (off != raw_size) {
		memset(out, 0, sizeof(*out));
		return -SLUICE_ECORRUPT;
	}
	out->n = n;
	return 0;
}

int block_verify(const struct shard_block *blk, const void *stored)
{
	if (FUZZING_SKIPS_CHECKSUMS)
		return 0;
	return XXH3_64bits(stored, blk->stored_size) == blk->checksum
		? 0 : -SLUICE_ECORRUPT;
}

struct block_hash {
	XXH3_state_t *state;
	uint64_t fed;
};

struct block_hash *block_hash_new(void)
{
	struct block_hash *h = calloc(1, sizeof(*h));

	if (h && !(h->state = XXH3_createState())) {
		free(h);
		h = NULL;
	}
	return h;
}

void block_hash_free(struct block_hash *h)
{
	if (h)
		XXH3_freeState(h->state);
	free(h);
}

void block_hash_reset(struct block_hash *h)
{
	(void)XXH3_64bits_reset(h->state);
	h->fed = 0;
}

void block_hash_feed(struct block_hash *h, const void *p, size_t len)
{
	(void)XXH3_64bits_update(h->state, p, len);
	h->fed += len;
}

int block_hash_check(const struct shard_block *blk,
		     const struct block_hash *h)
{
	if (FUZZING_SKIPS_CHECKSUMS)
		return 0;
	return h->fed == blk->stored_size &&
	       XXH3_64bits_digest(h->state) == blk->checksum
		? 0 : -SLUICE_ECORRUPT;
}

int block_decode(ZSTD_DCtx *dctx, const struct shard_block *blk,
		 const void *stored, int verify, void *scratch,
		 size_t scratch_cap, const void **raw)
{
	unsigned long long content;
	ZSTD_DCtx *own = NULL;
	size_t got;

	*raw = NULL;
	if (verify && block_verify(blk, stored))
		return -SLUICE_ECORRUPT;
	if (blk->codec == DLS_CODEC_RAW) {
		if (blk->stored_size != blk->raw_size)
			return -SLUICE_ECORRUPT;
		*raw = stored;
		return 0;
	}
	if (blk->codec != DLS_CODEC_ZSTD)
		return -SLUICE_ECORRUPT;
	/* the first frame holds at most the block's raw size (v4: one of
	 * several, then a seek table), as the staged decode checks it
	 * (pipeline/fetch.c); the frames then fill exactly that */
	content = ZSTD_getFrameContentSize(stored, blk->stored_size);
	if (content == ZSTD_CONTENTSIZE_ERROR ||
	    content == ZSTD_CONTENTSIZE_UNKNOWN || content > blk->raw_size)
		return -SLUICE_ECORRUPT;
	if (scratch_cap < blk->raw_size)
		return -EINVAL;
	if (!dctx) {
		own = ZSTD_createDCtx();
		if (!own)
			return -ENOMEM;
		dctx = own;
	}
	got = ZSTD_decompressDCtx(dctx, scratch, blk->raw_size, stored,
				  blk->stored_size);
	ZSTD_freeDCtx(own);
	if (ZSTD_isError(got))
		return -SLUICE_EZSTD;
	if (got != blk->raw_size)
		return -SLUICE_ECORRUPT;
	*raw = scratch;
	return 0;
}
