/*
 * fuzz_shard_parse.c - the input is a whole shard file image.  The header
 * is its first 4096 bytes (zero padded), the index the range the header
 * claims when that lies inside the image.  Everything the parser accepts
 * is then exercised: each block fully inside the image is checksummed,
 * decoded (small zstd frames only) and viewed, and every field of every
 * record is touched, so that ASan sees any out-of-bounds access.  A
 * format v3 image's record checksums (the section the parser bounds) are
 * compared with each record's, as verify does.  A zstd block's seek
 * table (format v4) is parsed and checked, and its frames decoded one
 * run at a time, as the loader's range reads take them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "shard.h"

#define FUZZ_MAX_RAW (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* @stored's frames (a zstd block's, @blk), each decoded alone into
 * @scratch (raw_size bytes) where the table says. */
static void touch_frames(const struct shard_block *blk, const uint8_t *stored,
			 ZSTD_DCtx *dctx, uint8_t *scratch)
{
	struct block_frames fr;
	uint64_t need;

	if (block_frames_parse(blk, stored, blk->stored_size, &fr, &need))
		return;
	(void)block_frames_check(stored, &fr);
	for (uint32_t k = 0; k < fr.n; k++)
		(void)block_frames_decode(dctx, &fr, k, k, stored + fr.at[k],
					  scratch + fr.raw[k]);
	(void)block_frame_of(&fr, blk->raw_size / 2);
	block_frames_free(&fr);
}

static void touch_block(const struct shard_schema *s,
			const struct shard_file *sf,
			const struct shard_block *blk, const uint8_t *image,
			ZSTD_DCtx *dctx, const uint64_t *sums)
{
	struct block_view view;
	uint8_t *stored, *scratch = NULL;
	const void *raw;
	volatile uint8_t sink = 0;

	/* Aligned copies: offset tables are read as uint64. */
	stored = aligned_alloc(64, (blk->stored_size + 63) & ~63ull);
	if (!stored)
		return;
	memcpy(stored, image + blk->offset, blk->stored_size);
	if (blk->codec == DLS_CODEC_ZSTD) {
		if (blk->raw_size > FUZZ_MAX_RAW)
			goto out;
		scratch = aligned_alloc(64, (blk->raw_size + 63) & ~63ull);
		if (!scratch)
			goto out;
	}
	if (scratch)
		touch_frames(blk, stored, dctx, scratch);
	/* Both with and without the checksum, so the fuzzer gets past it. */
	(void)block_decode(dctx, blk, stored, 1, scratch,
			   scratch ? blk->raw_size : 0, &raw);
	if (block_decode(dctx, blk, stored, 0, scratch,
			 scratch ? blk->raw_size : 0, &raw) != 0)
		goto out;
	if (block_view_init(s, sf->max_value_bytes, raw, blk->raw_size,
			    blk->record_count, &view) != 0)
		goto out;
	for (uint32_t f = 0; f < s->nfields; f++) {
		for (uint32_t i = 0; i < blk->record_count; i++) {
			const uint8_t *p;
			uint64_t len;

			block_view_get(s, &view, f, i, &p, &len);
			if (len) {
				sink ^= p[0];
				sink ^= p[len - 1];
			}
		}
	}
	for (uint32_t i = 0; sums && i < blk->record_count; i++)
		sink ^= (uint8_t)(record_checksum_view(s, &view, i) ==
				  sums[blk->first_record + i]);
out:
	(void)sink;
	free(scratch);
	free(stored);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dls_header_disk h;
	struct shard_schema schema;
	struct shard_file sf;
	uint8_t *header, *index = NULL;
	uint64_t *sums = NULL;
	size_t index_len = 0;
	char err[512];
	ZSTD_DCtx *dctx;

	header = calloc(1, DLS_HEADER_SIZE);
	if (!header)
		return 0;
	memcpy(header, data, size < DLS_HEADER_SIZE ? size : DLS_HEADER_SIZE);
	memcpy(&h, header, sizeof(h));
	(void)shard_parse("fuzz", header, NULL, 0, size, &sf, &schema, err,
			  sizeof(err));
	shard_file_free(&sf);
	if (h.index_offset <= size && h.index_length <= size - h.index_offset) {
		index_len = (size_t)h.index_length;
		index = malloc(index_len ? index_len : 1);
		if (!index)
			goto out;
		memcpy(index, data + h.index_offset, index_len);
	}
	if (!index || shard_parse("fuzz", header, index, index_len, size, &sf,
				  &schema, err, sizeof(err)) != 0)
		goto out;
	/* Bounded by the parser: record_count * 8 bytes ending the image. */
	if (sf.record_sums_length) {
		sums = malloc((size_t)sf.record_sums_length);
		if (sums)
			memcpy(sums, data + sf.record_sums_offset,
			       (size_t)sf.record_sums_length);
	}
	dctx = ZSTD_createDCtx();
	for (uint64_t b = 0; dctx && b < sf.block_count; b++) {
		const struct shard_block *blk = &sf.blocks[b];

		if (blk->offset <= size && blk->stored_size <= size - blk->offset)
			touch_block(&schema, &sf, blk, data, dctx, sums);
	}
	ZSTD_freeDCtx(dctx);
	free(sums);
	shard_file_free(&sf);
out:
	free(index);
	free(header);
	return 0;
}
