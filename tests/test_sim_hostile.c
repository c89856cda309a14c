/*
 * test_sim_hostile.c - crafted blocks of variable-size fields, their
 * checksums sealed again (shard_patch.h) so that the parsers and planners
 * meet the damage, run through the loader on the simulated device
 * (gpu/sim_device.c) with every batch gathered there: blocks fetched in
 * parts through the staging buffers (only their offsets tables reach the
 * host: fetch.c's copy_tables, decode.c's block_tables_check against the
 * layout read at open), zstd blocks decompressed as their parts land
 * (fetch_decode), full shuffle's record ranges (ranges.c), each shuffle,
 * verify on and off, flat and padded, and on_error=skip.
 *
 * The oracle is the library's one block reader (block_read: checksum,
 * decode, block_view_init), run on the crafted dataset: where it takes a
 * block, the loader must deliver exactly its bytes; where it refuses one,
 * the loader must fail with an error naming the file and an offset (or,
 * with on_error=skip, leave that block's records out), and never deliver
 * a record of it.  Every case also checks every byte of what was
 * delivered before the failure.
 *
 * Blocks of 100 records, about 5 MiB raw (two parts of a 4 MiB staging
 * buffer, or more of a smaller one), in 4 shards of 2 blocks; a budget
 * that holds fewer blocks than the dataset, so that blocks are fetched
 * and read again.  Fields v (int16 x 3, variable), label (int64), w
 * (uint8, variable).  Layouts: normal, w's offsets table across 4 MiB
 * ("straddle"), and every v empty; zstd blocks of 7-bit bytes stay over
 * a part.  Shard 1 holds a longer v value than shard 0, whose header
 * bounds v by its own values, so that a value can be over its shard's
 * max_value_bytes and within the dataset's.
 *
 * The seed is printed on failure; SLUICE_SIM_SEED=N reruns it, and
 * SIM_HOSTILE_CASE=K runs only case K.  About 40 s (ASan 60 s); under
 * TSan (threaded.txt's "sim") one mode a case of the ten, the next case
 * the next mode (about 60 s).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "format_util.h"       /* tu_field */
#include "loader_fixture.h"    /* fx_tmpdir, fx_rmrf */
#include "shard_patch.h"
#include "sim_util.h"
#include "sluice_tools.h"

/* TSan runs every mode in about 8 minutes: there each case runs one, the
 * next case the next one (run_case). */
#if defined(__SANITIZE_THREAD__)
#define QUICK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QUICK 1
#endif
#endif
#ifndef QUICK
#define QUICK 0
#endif

#define PER_BLOCK 100u
#define PER_SHARD 200u          /* two blocks a shard */
#define NSHARDS 4u
#define NREC (PER_SHARD * NSHARDS)
#define B 24u
#define PAD 9u
#define V_UNIT 6u               /* int16 x 3 */
#define PART ((uint64_t)4 << 20)        /* a staging buffer's nominal */

static uint64_t align8(uint64_t v)
{
	return (v + 7) & ~(uint64_t)7;
}

enum layout { L_NORMAL, L_STRADDLE, L_EMPTY, NLAYOUTS };
static const char *const layout_name[NLAYOUTS] = { "normal", "straddle",
						   "empty v" };

/* Bytes of v and w of the j-th record of every block (shard 1's v
 * differs, v_len). */
static uint64_t g_v[PER_BLOCK], g_w[PER_BLOCK];

/* The v items of the j-th record of a block whose offsets table ends at
 * 8 * (PER_BLOCK + 1): those of the straddle layout put w's table across
 * PART. */
static void set_layout(enum layout l)
{
	uint64_t items[PER_BLOCK], sum = 0;

	for (uint32_t j = 0; j < PER_BLOCK; j++) {
		items[j] = l == L_EMPTY || j % 10 == 3
			? 0 : 3000 + (j * 7919u) % 6000;
		g_w[j] = l == L_EMPTY ? (j % 3 ? 80000 : 0)
		       : j % 7 == 2 ? 0 : 10000 + (j * 2731u) % 30000;
		sum += items[j];
	}
	if (l == L_STRADDLE) {
		/* v's section ends at 8 * 101 + V (8-aligned), label's 800
		 * bytes later; w's table of 808 bytes then starts 400 bytes
		 * before PART */
		uint64_t want = (PART - 400 - 800 - 8 * (PER_BLOCK + 1)) /
				V_UNIT, add;

		T_ASSERT(want > sum);
		add = (want - sum) / PER_BLOCK;
		for (uint32_t j = 0; j < PER_BLOCK; j++)
			if (items[j])
				items[j] += add * PER_BLOCK / 90;
		sum = 0;
		for (uint32_t j = 0; j < PER_BLOCK; j++)
			sum += items[j];
		T_ASSERT(want >= sum);
		items[PER_BLOCK - 1] += want - sum;
	}
	for (uint32_t j = 0; j < PER_BLOCK; j++)
		g_v[j] = items[j] * V_UNIT;
}

static uint64_t v_len(uint64_t i)
{
	uint32_t j = (uint32_t)(i % PER_BLOCK);

	/* shard 1: record 5 of each block takes record 6's bytes too */
	if (i / PER_SHARD == 1 && (j == 5 || j == 6))
		return j == 5 ? g_v[5] + g_v[6] : 0;
	return g_v[j];
}

static uint64_t w_len(uint64_t i)
{
	return g_w[i % PER_BLOCK];
}

/* Random 7-bit bytes: a zstd block keeps about 7/8 of its size, over
 * a part still. */
static uint8_t ref_byte(uint64_t i, uint32_t f, uint64_t k)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)f << 58) ^
		     k * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	return (uint8_t)(x >> 57);
}

/* Every block PER_BLOCK records: the writer fills a block up to
 * block_size, which is a block's size exactly. */
static uint64_t block_bytes(void)
{
	uint64_t v = 0, w = 0, n = PER_BLOCK, off;

	for (uint32_t j = 0; j < PER_BLOCK; j++) {
		v += g_v[j];
		w += g_w[j];
	}
	off = align8(8 * (n + 1) + v);
	off = align8(off + 8 * n);
	return off + 8 * (n + 1) + w;
}

static void write_set(const char *dir, int level)
{
	struct sluice_field f[3];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint64_t cap = 0;
	uint8_t *buf[3];

	for (uint32_t j = 0; j < PER_BLOCK; j++)
		if (2 * (g_v[j] + g_w[j]) > cap)
			cap = 2 * (g_v[j] + g_w[j]);
	tu_field(&f[0], "v", "int16", 2, -1, 3);
	tu_field(&f[1], "label", "int64", 0, 0, 0);
	tu_field(&f[2], "w", "uint8", 1, -1, 0);
	sluice_writer_config_init(&wc);
	wc.block_size = block_bytes();
	wc.records_per_shard = PER_SHARD;
	wc.compression_level = level;
	wc.threads = 2;
	buf[0] = malloc(cap + 8);
	buf[1] = malloc(8);
	buf[2] = malloc(cap + 8);
	T_ASSERT(buf[0] && buf[1] && buf[2]);
	T_OK(sluice_writer_open(dir, f, 3, &wc, &w));
	for (uint64_t i = 0; i < NREC; i++) {
		const void *vals[3] = { buf[0], buf[1], buf[2] };
		uint64_t len[3] = { v_len(i), 8, w_len(i) };

		T_ASSERT(len[0] <= cap && len[2] <= cap);
		for (uint32_t fi = 0; fi < 3; fi++)
			for (uint64_t k = 0; k < len[fi]; k++)
				buf[fi][k] = ref_byte(i, fi, k);
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));
	for (int k = 0; k < 3; k++)
		free(buf[k]);
	/* blocks of PER_BLOCK records, each over a part */
	{
		sluice_dataset *ds = NULL;
		const struct dataset *t;

		T_OK(sluice_dataset_open(dir, &ds));
		t = dataset_table(ds);
		T_EQ(t->nshards, NSHARDS);
		for (uint32_t s = 0; s < t->nshards; s++) {
			T_EQ(t->shards[s].block_count, PER_SHARD / PER_BLOCK);
			for (uint64_t b = 0; b < t->shards[s].block_count; b++) {
				T_EQ(t->shards[s].blocks[b].record_count,
				     PER_BLOCK);
				T_LT(PART, t->shards[s].blocks[b].stored_size);
				T_EQ(t->shards[s].blocks[b].codec,
				     level ? DLS_CODEC_ZSTD : DLS_CODEC_RAW);
			}
		}
		sluice_dataset_close(ds);
	}
}

/* ------------------------------------------------------------------ */
/* Crafts                                                              */
/* ------------------------------------------------------------------ */

enum craft {
	C_CLEAN,        /* as written */
	C_V_SWAP,       /* two of v's middle offsets swapped */
	C_V_FIRST,      /* v's offsets[0] not 0 */
	C_W_SWAP_EDGE,  /* w's offsets out of order on each side of the
			   part boundary its table straddles */
	C_W_PAST,       /* w's last offset past the block */
	C_V_LAST_SHORT, /* v's last offset an item short, absorbed by the
			   section's padding: a valid block */
	C_V_LAST_ODD,   /* v's last offset 2 bytes short (absorbed too):
			   not a whole item */
	C_V_PART_ITEM,  /* a middle value not a whole item */
	C_V_LONG_SHARD, /* a value over its shard's max_value_bytes, within
			   the dataset's */
	C_V_LONG_ALL,   /* a value over every bound: it takes the rest */
	C_COUNT,        /* index: a record moved from block 0 to block 1 */
	C_CUT,          /* index and block: block 0 8 bytes shorter */
	C_TRUNC_OPEN,   /* shard 0 cut inside block 0 before open */
	C_TRUNC_RUN,    /* shard 0 cut inside block 1 after the loader
			   opened */
	C_BOUND_HUGE,   /* shard 0's header: v's values up to 16 GiB (a
			   valid bound, far over any block) */
	NCRAFTS
};
static const char *const craft_name[NCRAFTS] = {
	"clean", "v offsets swapped", "v offsets[0] not 0",
	"w offsets out of order across a part boundary",
	"w's last offset past the block",
	"v's last offset an item short (valid)",
	"v's last offset not a whole item", "a value not a whole item",
	"a value over its shard's max_value_bytes",
	"a value over every bound", "record counts moved between blocks",
	"block 0 cut by 8 bytes (index agrees)",
	"shard cut before open", "shard cut after open",
	"a header bound of 16 GiB (valid)" };

/* Block 0's tables in its decoded bytes @raw. */
struct tables {
	uint64_t *v, *w;
	uint32_t n;
};

static struct tables find_tables(uint8_t *raw, uint64_t raw_size, uint32_t n)
{
	struct tables t = { (uint64_t *)(void *)raw, NULL, n };
	uint64_t off = align8(8 * ((uint64_t)n + 1) + t.v[n]);

	off = align8(off + 8 * (uint64_t)n);
	T_ASSERT(off + 8 * ((uint64_t)n + 1) <= raw_size);
	t.w = (uint64_t *)(void *)(raw + off);
	return t;
}

/* The largest v value of shard 0 (its header's bound). */
static uint64_t shard0_v_max(void)
{
	uint64_t most = 0;

	for (uint64_t i = 0; i < PER_SHARD; i++)
		if (v_len(i) > most)
			most = v_len(i);
	return most;
}

/* Damage block 0's decoded bytes in place (its size kept). */
static void damage_tables(enum craft c, uint8_t *raw, uint64_t raw_size,
			  uint32_t n)
{
	struct tables t = find_tables(raw, raw_size, n);
	uint64_t tmp, k;

	switch (c) {
	case C_V_SWAP:
		T_ASSERT(t.v[11] != t.v[12]);
		tmp = t.v[11];
		t.v[11] = t.v[12];
		t.v[12] = tmp;
		break;
	case C_V_FIRST:
		t.v[0] = V_UNIT;
		break;
	case C_W_SWAP_EDGE: {
		/* entries at both sides of PART (the straddle layout) */
		uint64_t at = (uint64_t)((uint8_t *)t.w - raw);

		T_ASSERT(at < PART && at + 8 * ((uint64_t)n + 1) > PART);
		k = (PART - at) / 8;
		T_ASSERT(k > 1 && k + 1 < n);
		T_ASSERT(t.w[k - 1] != t.w[k + 1]);
		tmp = t.w[k - 1];
		t.w[k - 1] = t.w[k + 1];
		t.w[k + 1] = tmp;
		break;
	}
	case C_W_PAST:
		t.w[n] += (uint64_t)1 << 20;
		break;
	case C_V_LAST_SHORT:
	case C_V_LAST_ODD:
		/* the section ends 8-aligned: up to 7 bytes less align
		 * back to the same end */
		T_EQ((8 * ((uint64_t)n + 1) + t.v[n]) % 8, 0);
		T_ASSERT(t.v[n] - t.v[n - 1] >= V_UNIT);
		t.v[n] -= c == C_V_LAST_SHORT ? V_UNIT : 2;
		break;
	case C_V_PART_ITEM:
		T_ASSERT(t.v[7] - t.v[6] >= V_UNIT);
		t.v[7] += 2;
		break;
	case C_V_LONG_SHARD: {
		/* record 5 longer by what record 6 gives up */
		uint64_t grow = shard0_v_max() + V_UNIT - (t.v[6] - t.v[5]);

		T_ASSERT(t.v[7] - t.v[6] >= grow);
		t.v[6] += grow;
		break;
	}
	case C_V_LONG_ALL:
		for (k = 6; k < n; k++)
			t.v[k] = t.v[n];
		break;
	default:
		T_FAIL_AT("not a table craft: %d", (int)c);
	}
}

/* The room block 0 has on disk: up to block 1. */
static uint64_t block0_room(const char *dir)
{
	const struct dataset *t;
	sluice_dataset *ds = NULL;
	uint64_t room;

	T_OK(sluice_dataset_open(dir, &ds));
	t = dataset_table(ds);
	room = t->shards[0].blocks[1].offset - t->shards[0].blocks[0].offset;
	sluice_dataset_close(ds);
	return room;
}

/* Block 0's tables damaged, the block sealed again. */
static void craft_tables(const char *dir, enum craft c)
{
	struct dls_index_entry_disk e;
	uint8_t *stored = sp_block(dir, 0, &e), *raw = stored, *out;
	uint64_t room = block0_room(dir);
	size_t n;

	if (e.codec == DLS_CODEC_RAW) {
		damage_tables(c, raw, e.raw_size, e.record_count);
		sp_rewrite_block(dir, 0, raw, e.stored_size, room);
		free(stored);
		return;
	}
	raw = malloc(e.raw_size);
	out = malloc(ZSTD_compressBound(e.raw_size));
	T_ASSERT(raw && out);
	T_EQ(ZSTD_decompress(raw, e.raw_size, stored, e.stored_size),
	     e.raw_size);
	damage_tables(c, raw, e.raw_size, e.record_count);
	n = ZSTD_compress(out, ZSTD_compressBound(e.raw_size), raw,
			  e.raw_size, 1);
	T_ASSERT(!ZSTD_isError(n));
	/* parts of the staging buffers: a frame over several */
	T_LT(PART, n);
	sp_rewrite_block(dir, 0, out, n, room);
	free(raw);
	free(out);
	free(stored);
}

/* Shard 0's header and index edited for craft @c, sealed again (index,
 * header, manifest). */
static void craft_index(const char *dir, enum craft c)
{
	struct dls_index_entry_disk e[2];
	struct dls_header_disk h;
	uint8_t page[DLS_HEADER_SIZE], *index;
	char path[1024];
	int fd;

	sp_shard0(dir, path, sizeof(path));
	fd = open(path, O_RDWR);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	memcpy(&h, page, sizeof(h));
	index = malloc(h.index_length);
	T_ASSERT(index != NULL && h.index_length >= sizeof(e));
	T_EQ(pread(fd, index, h.index_length, (off_t)h.index_offset),
	     (ssize_t)h.index_length);
	memcpy(e, index, sizeof(e));
	if (c == C_BOUND_HUGE) {
		h.fields[0].max_value_bytes = DLS_MAX_BLOCK_BYTES;
	} else if (c == C_V_LONG_SHARD) {
		/* the writer bounds each shard by its own values */
		T_EQ(h.fields[0].max_value_bytes, shard0_v_max());
	} else if (c == C_COUNT) {
		/* block 0's last record counted in block 1: each block's
		 * tables then have the wrong size */
		e[0].record_count--;
		e[1].record_count++;
		e[1].first_record--;
	} else {
		/* raw: the stored size is the raw size (shard_parse) */
		e[0].stored_size -= 8;
		e[0].raw_size -= 8;
		T_ASSERT(e[0].codec == DLS_CODEC_RAW);
		{
			uint8_t *blk = malloc(e[0].stored_size);

			T_ASSERT(blk != NULL);
			T_EQ(pread(fd, blk, e[0].stored_size,
				   (off_t)e[0].offset),
			     (ssize_t)e[0].stored_size);
			e[0].checksum = XXH3_64bits(blk, e[0].stored_size);
			free(blk);
		}
		h.raw_bytes -= 8;
	}
	memcpy(index, e, sizeof(e));
	sp_write_sealed(dir, fd, &h, page, index, c == C_CUT ? -8 : 0);
	close(fd);
	free(index);
	if (c == C_CUT)
		sp_manifest_edit(dir, 0, 0, "raw_bytes", -8);
}

/*
 * Shard 0's record checksums (format v3) taken again from the blocks as
 * block_read takes them, so that a crafted block it accepts is valid to
 * the range reads too; a block it refuses keeps its old ones.
 */
static void reseal_record_sums(const char *dir)
{
	struct block_reader br = { 0 };
	struct dataset ds;
	const struct shard_file *sf;
	uint8_t page[DLS_HEADER_SIZE], *sums;
	struct dls_header_disk h;
	uint64_t sum, old;
	char err[512];
	int fd;

	if (dataset_load(dir, &ds, err, sizeof(err)))
		T_FAIL_AT("reseal: %s", err);
	sf = &ds.shards[0];
	T_ASSERT(sf->record_sums_length == sf->record_count * 8);
	fd = open(sf->path, O_RDWR);
	T_ASSERT(fd >= 0);
	sums = malloc(sf->record_sums_length);
	T_ASSERT(sums != NULL);
	T_EQ(pread(fd, sums, sf->record_sums_length,
		   (off_t)sf->record_sums_offset),
	     (ssize_t)sf->record_sums_length);
	for (uint64_t b = 0; b < sf->block_count; b++) {
		struct block_view v;

		if (block_read(&br, fd, &ds.schema, sf, b, &v, err,
			       sizeof(err)) < 0)
			continue;
		for (uint32_t i = 0; i < v.n; i++) {
			uint64_t hsum = 0;

			for (uint32_t f = 0; f < ds.schema.nfields; f++) {
				const uint8_t *p;
				uint64_t len;

				block_view_get(&ds.schema, &v, f, i, &p, &len);
				hsum = XXH3_64bits_withSeed(p, len, hsum);
			}
			memcpy(sums + 8 * (sf->blocks[b].first_record + i),
			       &hsum, 8);
		}
	}
	T_EQ(pwrite(fd, sums, sf->record_sums_length,
		    (off_t)sf->record_sums_offset),
	     (ssize_t)sf->record_sums_length);
	T_EQ(pread(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	memcpy(&h, page, sizeof(h));
	h.record_sums_checksum = XXH3_64bits(sums, sf->record_sums_length);
	memcpy(page, &h, sizeof(h));
	memcpy(&old, page + DLS_HEADER_CHECKSUM_OFFSET, sizeof(old));
	sum = XXH3_64bits(page, DLS_HEADER_CHECKSUM_OFFSET);
	memcpy(page + DLS_HEADER_CHECKSUM_OFFSET, &sum, sizeof(sum));
	T_EQ(pwrite(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	close(fd);
	free(sums);
	block_reader_free(&br);
	dataset_free(&ds);
	sp_relist(dir, old, sum, 0);
}

/* Shard 0 cut @at bytes into its block @b. */
static void cut_shard0(const char *dir, uint32_t b, uint64_t at)
{
	const struct dataset *t;
	sluice_dataset *ds = NULL;
	char path[1024];

	T_OK(sluice_dataset_open(dir, &ds));
	t = dataset_table(ds);
	sp_shard0(dir, path, sizeof(path));
	T_EQ(truncate(path, (off_t)(t->shards[0].blocks[b].offset + at)), 0);
	sluice_dataset_close(ds);
}

/* ------------------------------------------------------------------ */
/* The oracle: every record as block_read gives it                     */
/* ------------------------------------------------------------------ */

struct ref_record {
	int bad;                /* its block refused by block_read */
	int64_t label;
	uint8_t *v, *w;
	uint64_t vlen, wlen;
};
static struct ref_record g_ref[NREC];
static int g_any_bad;

static void ref_free(void)
{
	for (uint32_t i = 0; i < NREC; i++) {
		free(g_ref[i].v);
		free(g_ref[i].w);
	}
	memset(g_ref, 0, sizeof(g_ref));
}

static uint8_t *dup_bytes(const uint8_t *p, uint64_t len)
{
	uint8_t *d = malloc(len ? len : 1);

	T_ASSERT(d != NULL);
	memcpy(d, p, len);
	return d;
}

static void ref_load(const char *dir)
{
	struct block_reader br = { 0 };
	struct dataset ds;
	char err[512];

	ref_free();
	g_any_bad = 0;
	T_OK(dataset_load(dir, &ds, err, sizeof(err)));
	T_EQ(ds.record_count, NREC);
	for (uint32_t s = 0; s < ds.nshards; s++) {
		const struct shard_file *sf = &ds.shards[s];
		int fd = open(sf->path, O_RDONLY);

		T_ASSERT(fd >= 0);
		for (uint64_t b = 0; b < sf->block_count; b++) {
			uint64_t first = ds.shard_first[s] +
					 sf->blocks[b].first_record;
			struct block_view v;

			if (block_read(&br, fd, &ds.schema, sf, b, &v, err,
				       sizeof(err)) < 0) {
				printf("  block_read refuses: %s\n", err);
				for (uint32_t i = 0;
				     i < sf->blocks[b].record_count; i++)
					g_ref[first + i].bad = 1;
				g_any_bad = 1;
				continue;
			}
			for (uint32_t i = 0; i < v.n; i++) {
				struct ref_record *r = &g_ref[first + i];
				const uint8_t *p;
				uint64_t len;

				block_view_get(&ds.schema, &v, 0, i, &p, &len);
				r->v = dup_bytes(p, len);
				r->vlen = len;
				block_view_get(&ds.schema, &v, 1, i, &p, &len);
				T_EQ(len, 8);
				memcpy(&r->label, p, 8);
				block_view_get(&ds.schema, &v, 2, i, &p, &len);
				r->w = dup_bytes(p, len);
				r->wlen = len;
			}
		}
		close(fd);
	}
	block_reader_free(&br);
	dataset_free(&ds);
}

/* ------------------------------------------------------------------ */
/* The loader, on the sim device                                       */
/* ------------------------------------------------------------------ */

static uint32_t g_pad;

static const char *const flat_names[] = { "v", "v.offsets", "label", "w",
					  "w.offsets" };
static const char *const pad_names[] = { "v", "v.lengths", "label", "w",
					 "w.lengths" };

/* Variable field tensor @t (0: v, 3: w) of row @r: 0, or 1 with p->why
 * said. */
static int check_values(struct sim_pending *p, uint32_t t, uint64_t unit,
			uint32_t r, uint64_t *flat_at)
{
	const struct ref_record *ref = &g_ref[p->idx[r]];
	const uint8_t *want = t == 0 ? ref->v : ref->w;
	uint64_t len = (t == 0 ? ref->vlen : ref->wlen) / unit;
	const int64_t *index = p->data[t + 1];
	const uint8_t *got;
	uint64_t keep = len, room;

	if (g_pad) {
		if (index[r] != (int64_t)len) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu %s length %lld, want %llu",
				 (unsigned long long)p->idx[r], flat_names[t],
				 (long long)index[r], (unsigned long long)len);
			return 1;
		}
		keep = len < g_pad ? len : g_pad;
		room = (uint64_t)g_pad * unit;
		got = (const uint8_t *)p->data[t] + r * room;
	} else {
		if ((r == 0 && index[0] != 0) ||
		    index[r + 1] - index[r] != (int64_t)len ||
		    (uint64_t)index[r] != *flat_at) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu %s offsets %lld..%lld, want %llu items from %llu",
				 (unsigned long long)p->idx[r],
				 flat_names[t + 1], (long long)index[r],
				 (long long)index[r + 1],
				 (unsigned long long)len,
				 (unsigned long long)*flat_at);
			return 1;
		}
		room = len * unit;
		got = (const uint8_t *)p->data[t] + *flat_at * unit;
		*flat_at += len;
	}
	for (uint64_t k = 0; k < room; k++) {
		uint8_t w = k < keep * unit ? want[k] : 0;

		if (got[k] != w) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu %s byte %llu is %#x, want %#x",
				 (unsigned long long)p->idx[r], flat_names[t],
				 (unsigned long long)k, got[k], w);
			return 1;
		}
	}
	return 0;
}

static int check_batch(struct sim_pending *p)
{
	const int64_t *label = p->data[2];
	uint64_t v_at = 0, w_at = 0;

	for (uint32_t r = 0; r < p->n; r++) {
		const struct ref_record *ref = &g_ref[p->idx[r]];

		if (ref->bad) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu of a block block_read refuses delivered",
				 (unsigned long long)p->idx[r]);
			return 1;
		}
		if (label[r] != ref->label) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu label %lld, want %lld",
				 (unsigned long long)p->idx[r],
				 (long long)label[r], (long long)ref->label);
			return 1;
		}
		if (check_values(p, 0, V_UNIT, r, &v_at) ||
		    check_values(p, 3, 1, r, &w_at))
			return 1;
	}
	if (!g_pad && (p->shape0[0] != (int64_t)v_at ||
		       p->shape0[3] != (int64_t)w_at)) {
		snprintf(p->why, sizeof(p->why),
			 "v has %lld items, w %lld: want %llu, %llu",
			 (long long)p->shape0[0], (long long)p->shape0[3],
			 (unsigned long long)v_at, (unsigned long long)w_at);
		return 1;
	}
	return 0;
}

/* How a loader runs: its shuffle, record-range reads, checks. */
struct mode {
	const char *name;
	int shuffle;
	int range_reads;
	int verify;
	uint32_t pad;
	int skip;               /* on_error=skip */
};

static const struct mode modes[] = {
	{ "none", SLUICE_SHUFFLE_NONE, SLUICE_RANGE_READS_OFF, 1, 0, 0 },
	{ "none, padded", SLUICE_SHUFFLE_NONE, SLUICE_RANGE_READS_OFF, 1, PAD,
	  0 },
	{ "none, verify off", SLUICE_SHUFFLE_NONE, SLUICE_RANGE_READS_OFF, 0,
	  0, 0 },
	{ "window", SLUICE_SHUFFLE_WINDOW, SLUICE_RANGE_READS_OFF, 1, 0, 0 },
	{ "window, verify off", SLUICE_SHUFFLE_WINDOW, SLUICE_RANGE_READS_OFF,
	  0, 0, 0 },
	{ "window, skip", SLUICE_SHUFFLE_WINDOW, SLUICE_RANGE_READS_OFF, 1, 0,
	  1 },
	{ "full, ranges", SLUICE_SHUFFLE_FULL, SLUICE_RANGE_READS_ON, 1, 0,
	  0 },
	{ "full, ranges, verify off", SLUICE_SHUFFLE_FULL,
	  SLUICE_RANGE_READS_ON, 0, 0, 0 },
	{ "full, ranges, padded, verify off", SLUICE_SHUFFLE_FULL,
	  SLUICE_RANGE_READS_ON, 0, PAD, 0 },
	{ "full, ranges, skip", SLUICE_SHUFFLE_FULL, SLUICE_RANGE_READS_ON, 1,
	  0, 1 },
};
#define NMODES (sizeof(modes) / sizeof(modes[0]))

struct outcome {
	int r;
	char msg[512];
	struct sluice_stats st;
	uint64_t batches;
};

static int64_t g_stream;
static int g_zstd;      /* the case's blocks are zstd (each takes its
			   stored and decoded bytes of io memory) */

/* One epoch of @ds in mode @m; @cut: shard 0 cut after open (in @dir). */
static void run_loader(sluice_dataset *ds, const struct mode *m,
		       const char *dir, int cut, struct outcome *o,
		       const char *what)
{
	struct sluice_loader_config cfg;
	struct sim_consumer c;
	sluice_loader *ld = NULL;
	uint32_t seen[NREC] = { 0 };
	int r;

	memset(o, 0, sizeof(*o));
	o->st.size = sizeof(o->st);
	g_pad = m->pad;
	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.seed = sim_seed;
	cfg.shuffle = m->shuffle;
	cfg.window_blocks = 2;
	cfg.prefetch_depth = 3;
	cfg.decode_threads = 2;
	cfg.epochs = 1;
	cfg.pad_length = m->pad;
	cfg.range_reads = m->range_reads;
	cfg.verify = m->verify;
	cfg.on_error = m->skip ? SLUICE_ON_ERROR_SKIP : SLUICE_ON_ERROR_FAIL;
	cfg.device_gather = SLUICE_DEVICE_GATHER_ON;
	/* fewer blocks than the dataset's: read again, not cached whole */
	cfg.memory_bytes = g_zstd ? 72u << 20 : 40u << 20;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		o->r = r;
		sluice_loader_error(ld, o->msg, sizeof(o->msg));
		sluice_loader_close(ld);
		printf("  %-34s open: %s: %s\n", m->name, sluice_strerror(r),
		       o->msg);
		return;
	}
	if (cut)
		cut_shard0(dir, 1, 1u << 20);
	memset(&c, 0, sizeof(c));
	c.names = m->pad ? pad_names : flat_names;
	c.ntensors = 5;
	c.check = check_batch;
	c.stream = g_stream;
	c.rng = sim_seed * 3 + 1;
	c.kernel_us = 200;
	c.hold = 2;
	c.seen = seen;
	c.records = NREC;
	o->r = sim_consume(ld, &c, 0);
	sim_finish(&c);
	o->batches = c.batches;
	sluice_loader_error(ld, o->msg, sizeof(o->msg));
	T_OK(sluice_loader_stats(ld, &o->st));
	sluice_loader_close(ld);
	printf("  %-34s %s after %llu batches (gathered %llu, staged %llu, ranged %llu)%s%s\n",
	       m->name, o->r == SLUICE_EOF ? "whole" : sluice_strerror(o->r),
	       (unsigned long long)o->batches,
	       (unsigned long long)o->st.batches_gathered,
	       (unsigned long long)o->st.bytes_staged,
	       (unsigned long long)o->st.range_records,
	       o->r == SLUICE_EOF ? "" : ": ", o->r == SLUICE_EOF ? ""
								 : o->msg);
	if (c.bad)
		T_FAIL_AT("%s, %s: %llu of %llu batches wrong; first: %s",
			  what, m->name, (unsigned long long)c.bad,
			  (unsigned long long)c.batches, c.first_bad);
	for (uint32_t i = 0; i < NREC; i++) {
		/* what is delivered is whole: once, or not at all where it
		 * failed (or skipped) */
		if (seen[i] > 1 ||
		    (o->r == SLUICE_EOF && seen[i] != !g_ref[i].bad &&
		     !(cut && m->skip && i >= PER_BLOCK &&
		       i < 2 * PER_BLOCK)))
			T_FAIL_AT("%s, %s: record %llu delivered %u times%s",
				  what, m->name, (unsigned long long)i,
				  seen[i], g_ref[i].bad
				  ? " (its block refused by block_read)" : "");
	}
}

/* Which cases: a pristine set and a craft. */
struct hcase {
	enum layout layout;
	int zstd;
	enum craft craft;
};

static const struct hcase cases[] = {
	{ L_NORMAL, 0, C_CLEAN },
	{ L_STRADDLE, 0, C_CLEAN },
	{ L_EMPTY, 0, C_CLEAN },
	{ L_NORMAL, 1, C_CLEAN },
	{ L_STRADDLE, 1, C_CLEAN },
	{ L_NORMAL, 0, C_V_SWAP },
	{ L_NORMAL, 0, C_V_FIRST },
	{ L_NORMAL, 0, C_W_PAST },
	{ L_NORMAL, 0, C_V_PART_ITEM },
	{ L_NORMAL, 0, C_V_LONG_SHARD },
	{ L_NORMAL, 0, C_V_LONG_ALL },
	{ L_NORMAL, 0, C_COUNT },
	{ L_NORMAL, 0, C_CUT },
	{ L_NORMAL, 0, C_TRUNC_OPEN },
	{ L_NORMAL, 0, C_TRUNC_RUN },
	{ L_NORMAL, 0, C_BOUND_HUGE },
	{ L_STRADDLE, 0, C_W_SWAP_EDGE },
	{ L_STRADDLE, 0, C_V_LAST_SHORT },
	{ L_STRADDLE, 0, C_V_LAST_ODD },
	{ L_EMPTY, 0, C_V_FIRST },
	{ L_NORMAL, 1, C_V_SWAP },
	{ L_NORMAL, 1, C_W_PAST },
	{ L_NORMAL, 1, C_V_LONG_SHARD },
	{ L_NORMAL, 1, C_V_PART_ITEM },
	{ L_STRADDLE, 1, C_W_SWAP_EDGE },
	{ L_STRADDLE, 1, C_V_LAST_SHORT },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* The pristine set's directory. */
static void pristine_dir(const char *root, enum layout l, int zstd,
			 char *out, size_t len)
{
	T_ASSERT((size_t)snprintf(out, len, "%s/pristine-%d-%d", root, (int)l,
				  zstd) < len);
}

static void run_case(const char *root, const struct hcase *hc, unsigned k)
{
	char dir[256], pristine[256], cmd[2048], shard[1024], what[200];
	sluice_dataset *ds = NULL;

	set_layout(hc->layout);
	g_zstd = hc->zstd;
	pristine_dir(root, hc->layout, hc->zstd, pristine, sizeof(pristine));
	snprintf(dir, sizeof(dir), "%s/case-%u", root, k);
	snprintf(what, sizeof(what), "%s %s, %s", layout_name[hc->layout],
		 hc->zstd ? "zstd" : "raw", craft_name[hc->craft]);
	printf("%s\n", what);
	/* shard 0 and the manifest are rewritten: copies; the rest
	 * links */
	snprintf(cmd, sizeof(cmd),
		 "cp -rl '%s' '%s' && rm '%s/data-00000.dls' '%s/dataset.json' && cp '%s/data-00000.dls' '%s/dataset.json' '%s/'",
		 pristine, dir, dir, dir, pristine, pristine, dir);
	T_EQ(system(cmd), 0);
	sp_shard0(dir, shard, sizeof(shard));
	switch (hc->craft) {
	case C_CLEAN:
	case C_TRUNC_RUN:
		break;
	case C_COUNT:
	case C_CUT:
	case C_BOUND_HUGE:
		craft_index(dir, hc->craft);
		break;
	case C_TRUNC_OPEN: {
		char msg[1024];
		int r;

		cut_shard0(dir, 0, 5u << 20);
		r = sluice_dataset_open(dir, &ds);
		sluice_dataset_error(ds, msg, sizeof(msg));
		printf("  open: %s: %s\n", sluice_strerror(r), msg);
		T_ASSERT(r < 0);
		T_CONTAINS(msg, shard);
		T_CONTAINS(msg, "offset");
		sluice_dataset_close(ds);
		fx_rmrf(dir);
		return;
	}
	case C_V_LONG_SHARD:
		craft_index(dir, hc->craft);
		craft_tables(dir, hc->craft);
		break;
	default:
		craft_tables(dir, hc->craft);
		break;
	}
	reseal_record_sums(dir);
	ref_load(dir);
	/* the crafts that are damage: refused by block_read */
	T_EQ(g_any_bad, hc->craft != C_CLEAN && hc->craft != C_TRUNC_RUN &&
			hc->craft != C_V_LAST_SHORT &&
			hc->craft != C_BOUND_HUGE);
	T_OK(sluice_dataset_open(dir, &ds));
	/* under TSan one mode: the first that applies from the k-th on */
	for (unsigned j = 0, ran = 0; j < NMODES && !(QUICK && ran); j++) {
		unsigned m = QUICK ? (k + j) % NMODES : j;
		struct outcome o;
		int cut = hc->craft == C_TRUNC_RUN;

		/* zstd blocks are never read by range: a full shuffle's
		 * batch would need every block in memory */
		if (hc->zstd && modes[m].range_reads == SLUICE_RANGE_READS_ON)
			continue;
		ran = 1;
		if (cut) {
			/* a fresh cut each run, and a fresh open */
			sluice_dataset_close(ds);
			snprintf(cmd, sizeof(cmd), "cp '%s/data-00000.dls' '%s/'",
				 pristine, dir);
			T_EQ(system(cmd), 0);
			T_OK(sluice_dataset_open(dir, &ds));
		}
		run_loader(ds, &modes[m], dir, cut, &o, what);
		if (cut) {
			/* the cut lands before or after the loader read
			 * what it cuts: whole, or a failure that says so */
			if (o.r != SLUICE_EOF) {
				T_EQ(o.r, -SLUICE_ECORRUPT);
				T_CONTAINS(o.msg, shard);
				T_CONTAINS(o.msg, "read failed");
			}
			continue;
		}
		if (!g_any_bad || modes[m].skip) {
			if (o.r != SLUICE_EOF)
				T_FAIL_AT("%s, %s: %s: %s", what,
					  modes[m].name, sluice_strerror(o.r),
					  o.msg);
			continue;
		}
		if (o.r != -SLUICE_ECORRUPT && o.r != -SLUICE_EZSTD)
			T_FAIL_AT("%s, %s: %s (%d), want corrupt data: %s",
				  what, modes[m].name, sluice_strerror(o.r),
				  o.r, o.msg);
		T_CONTAINS(o.msg, shard);
		T_CONTAINS(o.msg, "offset");
	}
	sluice_dataset_close(ds);
	ref_free();
	fx_rmrf(dir);
}

int main(void)
{
	char *root = fx_tmpdir();
	char pristine[256];
	const char *only = getenv("SIM_HOSTILE_CASE");

	sim_use_seed(sim_first_seed());
	printf("seed %llu\n", (unsigned long long)sim_seed);
	for (int l = 0; l < NLAYOUTS; l++)
		for (int z = 0; z < 2; z++) {
			if (l == L_EMPTY && z)
				continue;
			set_layout((enum layout)l);
			pristine_dir(root, (enum layout)l, z, pristine,
				     sizeof(pristine));
			write_set(pristine, z);
		}
	g_stream = sim_stream_create(sim_seed * 5 + 2, 300);
	T_ASSERT(g_stream != 0);
	for (unsigned k = 0; k < NCASES; k++)
		if (!only || (unsigned)atoi(only) == k)
			run_case(root, &cases[k], k);
	sim_stream_destroy(g_stream);
	fx_rmrf(root);
	free(root);
	sim_done();
	return 0;
}
