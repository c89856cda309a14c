/*
 * test_block_frames.c - format v4's zstd frames (datasets/block_frames.c):
 * where the writer cuts them (each section's start, the first record
 * boundary past 16 KiB: a value of 16 KiB or more is a frame of its own),
 * a decoded range read through them equals the block decoded whole, and
 * a seek table is untrusted: each way of lying about it is refused by the
 * parser or by the check of its frames, and a table longer than the
 * bytes given asks for them.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include "format_util.h"
#include "shard.h"
#include "shard_patch.h"

#define NREC 10u
#define BIG 20000u      /* a frame each */
#define SMALL 5000u     /* four to a frame: 20000 >= 16 KiB */

static char root[1024];

static uint8_t ref_byte(uint64_t i, uint32_t f, uint64_t k)
{
	return (uint8_t)((i * 31 + k * 7 + f * 13 + 1) % 61);
}

/* "big" uint8[20000], "small" uint8[-1] of 5000 bytes, "label" int64:
 * one zstd block of NREC records. */
static void write_one_block(const char *dir)
{
	struct sluice_field f[3];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	static uint8_t buf[3][BIG];
	uint64_t len[3] = { BIG, SMALL, 8 };

	tu_field(&f[0], "big", "uint8", 1, BIG, 0);
	tu_field(&f[1], "small", "uint8", 1, -1, 0);
	tu_field(&f[2], "label", "int64", 0, 0, 0);
	sluice_writer_config_init(&wc);
	wc.block_size = 1 << 20;
	wc.compression_level = 3;
	wc.threads = 1;
	T_OK(sluice_writer_open(dir, f, 3, &wc, &w));
	for (uint64_t i = 0; i < NREC; i++) {
		const void *vals[3] = { buf[0], buf[1], buf[2] };

		for (uint32_t fi = 0; fi < 3; fi++)
			for (uint64_t k = 0; k < len[fi]; k++)
				buf[fi][k] = ref_byte(i, fi, k);
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));
}

static struct shard_block as_block(const struct dls_index_entry_disk *e)
{
	return (struct shard_block){
		.offset = e->offset, .stored_size = e->stored_size,
		.raw_size = e->raw_size, .record_count = e->record_count,
		.codec = e->codec,
	};
}

/* The frames start where the writer says: big's records one each,
 * small's table, its values four records a frame (the last two alone),
 * label's section. */
static void check_cuts(const struct block_frames *fr)
{
	uint64_t table = NREC * BIG, values = table + (NREC + 1) * 8;
	uint64_t label = values + NREC * SMALL;
	uint64_t want[17];
	uint32_t k = 0;

	for (uint32_t i = 0; i < NREC; i++)
		want[k++] = (uint64_t)i * BIG;
	want[k++] = table;
	want[k++] = values;
	want[k++] = values + 4 * SMALL;
	want[k++] = values + 8 * SMALL;
	want[k++] = label;
	want[k++] = label + NREC * 8;   /* the block's end */
	T_EQ(fr->n + 1, k);
	for (uint32_t i = 0; i < k; i++)
		if (fr->raw[i] != want[i])
			T_FAIL_AT("frame %u starts at %llu, not %llu", i,
				  (unsigned long long)fr->raw[i],
				  (unsigned long long)want[i]);
}

/* Each decoded range read through the frames equals the block decoded
 * whole. */
static void check_read_range(const char *path, const struct shard_block *blk,
			     const struct block_frames *fr,
			     const uint8_t *stored)
{
	uint8_t *whole = malloc(blk->raw_size), *part = malloc(blk->raw_size);
	static const uint64_t ranges[][2] = {
		{ 0, 1 }, { 19999, 2 }, { 100, 60000 }, { 200000, 88 },
	};
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	int fd = open(path, O_RDONLY);

	T_ASSERT(whole && part && dctx && fd >= 0);
	T_EQ(ZSTD_decompress(whole, blk->raw_size, stored, blk->stored_size),
	     blk->raw_size);
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		T_OK(block_frames_read_range(fd, dctx, blk, fr, ranges[i][0],
					     ranges[i][1], part));
		T_MEMEQ(part, whole + ranges[i][0], ranges[i][1]);
	}
	T_EQ(block_frames_read_range(fd, dctx, blk, fr, blk->raw_size - 4, 5,
				     part), -SLUICE_ECORRUPT);
	T_OK(block_frames_read_range(fd, dctx, blk, fr, 0, blk->raw_size,
				     part));
	T_MEMEQ(part, whole, blk->raw_size);
	close(fd);
	ZSTD_freeDCtx(dctx);
	free(whole);
	free(part);
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/* @stored with one lie told, parsed (and, when parsed, checked). */
static int parse_lie(const struct shard_block *blk, const uint8_t *stored,
		     int lie)
{
	uint8_t *s = malloc(blk->stored_size);
	uint64_t len = blk->stored_size, need;
	uint8_t *foot = s + len - 9;
	struct block_frames fr;
	uint32_t n;
	uint8_t *table;
	int r;

	T_ASSERT(s != NULL);
	memcpy(s, stored, len);
	n = get32(foot);
	table = foot - (uint64_t)n * 8;
	switch (lie) {
	case 0: break;
	case 1: foot[5] ^= 1; break;                    /* seekable magic */
	case 2: put32(foot, 0); break;                  /* no frames */
	case 3: put32(foot, 1u << 30); break;           /* past the block */
	case 4: foot[4] = 0x04; break;                  /* a reserved bit */
	case 5: put32(table - 8, 0x184D2A50); break;    /* skippable magic */
	case 6: put32(table - 4, get32(table - 4) + 1); break; /* its size */
	case 7:                                          /* an empty frame */
		put32(table + 8, get32(table + 8) + get32(table));
		put32(table, 0);
		break;
	case 8: put32(table, get32(table) + 1); break;  /* stored sum */
	case 9: put32(table + 4, get32(table + 4) + 1); break; /* raw sum */
	case 10:        /* sums kept, sizes moved: only the check sees it */
		put32(table + 4, get32(table + 4) + 1);
		put32(table + 12, get32(table + 12) - 1);
		break;
	case 11: put32(foot, n - 1); break;     /* one frame less */
	}
	r = block_frames_parse(blk, s, len, &fr, &need);
	if (r == 0) {
		r = block_frames_check(s, &fr);
		block_frames_free(&fr);
	}
	free(s);
	return r;
}

int main(void)
{
	char dir[1100], shard[1200];
	struct dls_index_entry_disk e;
	struct shard_block blk;
	struct block_frames fr;
	uint8_t *stored;
	uint64_t need;

	snprintf(root, sizeof(root), "%s", tu_scratch("block_frames"));
	TU_FMT(dir, "%s/one", root);
	write_one_block(dir);
	stored = sp_block(dir, 0, &e);
	blk = as_block(&e);
	T_EQ(blk.codec, DLS_CODEC_ZSTD);
	T_OK(block_frames_parse(&blk, stored, blk.stored_size, &fr, &need));
	T_OK(block_frames_check(stored, &fr));
	check_cuts(&fr);
	for (uint32_t k = 0; k < fr.n; k++)
		T_EQ(block_frame_of(&fr, fr.raw[k]), k);
	T_EQ(block_frame_of(&fr, fr.raw[fr.n] - 1), fr.n - 1);
	sp_shard0(dir, shard, sizeof(shard));
	check_read_range(shard, &blk, &fr, stored);
	block_frames_free(&fr);

	/* the last bytes alone: the table is longer, so they ask for it */
	T_EQ(block_frames_parse(&blk, stored + blk.stored_size - 64, 64, &fr,
				&need), -EAGAIN);
	T_ASSERT(need > 64 && need < blk.stored_size);
	T_OK(block_frames_parse(&blk, stored + blk.stored_size - need, need,
				&fr, &need));
	block_frames_free(&fr);
	T_EQ(block_frames_parse(&blk, stored + blk.stored_size - 5, 5, &fr,
				&need), -EAGAIN);
	T_EQ(need, 17);

	/* each lie refused, and the truth taken */
	T_OK(parse_lie(&blk, stored, 0));
	for (int lie = 1; lie <= 11; lie++)
		if (parse_lie(&blk, stored, lie) != -SLUICE_ECORRUPT)
			T_FAIL_AT("lie %d taken", lie);
	/* a raw block has no frames */
	blk.codec = DLS_CODEC_RAW;
	T_EQ(block_frames_parse(&blk, stored, blk.stored_size, &fr, &need),
	     -SLUICE_ECORRUPT);
	free(stored);
	return 0;
}
