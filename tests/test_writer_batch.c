/*
 * test_writer_batch.c - sluice_writer_add_columns: the same records given
 * column-wise (in uneven batches, from sliced offsets, equal-length
 * variable values without offsets, mixed with single records, with
 * records_per_shard, with records larger than a block) make the same
 * blocks and index, byte for byte, as one sluice_writer_add per record,
 * and every block keeps the writer's rule, checked here on its own: it
 * holds the records that fit in block_size, a lone larger record, or a
 * shard's last ones.  Bad columns fail with a message naming the field
 * and leave no dataset behind.  Also the writer's default thread count.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack_shard.h"
#include "format_util.h"
#include "sluice.h"
#include "sluice_tools.h"
#include "t.h"
#include "writer_pool.h"

#define NREC 1000u
#define NFIELDS 3

/* label int64 scalar, vec float32 [4], tok int32 [-1] (i % (1 + i / 150)
 * tokens: 0 to 6). */
static void schema(struct sluice_field *f)
{
	tu_field(&f[0], "label", "int64", 0, 0, 0);
	tu_field(&f[1], "vec", "float32", 1, 4, 0);
	tu_field(&f[2], "tok", "int32", 1, -1, 0);
}

struct columns {
	int64_t label[NREC];
	float vec[NREC * 4];
	int32_t tok[NREC * 7];
	uint64_t offs[NREC + 1];  /* byte offsets into tok */
};

static void fill(struct columns *c)
{
	uint64_t pos = 0;

	for (uint32_t i = 0; i < NREC; i++) {
		c->label[i] = (int64_t)i * 3 - 7;
		for (int k = 0; k < 4; k++)
			c->vec[i * 4 + k] = (float)i + 0.25f * (float)k;
		c->offs[i] = pos * 4;
		/* none in shard 0 of 150 records, up to 1 in the next, ...,
		 * up to 6 in the last: every shard its own longest */
		for (uint32_t k = 0; k < i % (1 + i / 150); k++)
			c->tok[pos++] = (int32_t)(i * 100 + k);
	}
	c->offs[NREC] = pos * 4;
}

#define BLOCK_SIZE 4096u  /* many blocks, so boundaries are compared */

static void config(struct sluice_writer_config *cfg, uint64_t per_shard)
{
	sluice_writer_config_init(cfg);
	cfg->block_size = BLOCK_SIZE;
	cfg->records_per_shard = per_shard;
	cfg->threads = 2;
}

static void add_one(sluice_writer *w, const struct columns *c, uint32_t i)
{
	const uint8_t *tok = (const uint8_t *)c->tok + c->offs[i];
	const void *v[NFIELDS] = { &c->label[i], &c->vec[i * 4], tok };
	uint64_t len[NFIELDS] = { 8, 16, c->offs[i + 1] - c->offs[i] };

	T_OK(sluice_writer_add(w, v, len));
}

/* Records [first, first + n) in one call; the variable column a slice of
 * the whole offsets array (offsets[0] != 0 but for the first). */
static void add_batch(sluice_writer *w, const struct columns *c,
		      uint32_t first, uint32_t n)
{
	struct sluice_column col[NFIELDS];

	memset(col, 0, sizeof(col));
	col[0].values = &c->label[first];
	col[0].values_len = 8ull * n;
	col[1].values = &c->vec[first * 4];
	col[1].values_len = 16ull * n;
	col[2].values = c->tok;
	col[2].values_len = sizeof(c->tok);
	col[2].offsets = &c->offs[first];
	T_OK(sluice_writer_add_columns(w, n, col, NFIELDS));
}

/* The records in pieces: sizes[k] > 0 a batch of that many, < 0 that
 * many single records, 0 an empty batch; the rest one batch. */
static void write_pieces(const char *dir, const struct columns *c,
			 uint64_t per_shard, const int *sizes, int npieces)
{
	struct sluice_field f[NFIELDS];
	struct sluice_writer_config cfg;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	sluice_writer *w;
	uint32_t first = 0;

	schema(f);
	config(&cfg, per_shard);
	T_OK(sluice_writer_open(dir, f, NFIELDS, &cfg, &w));
	for (int k = 0; k < npieces; k++) {
		if (sizes[k] < 0) {
			for (int j = 0; j < -sizes[k]; j++)
				add_one(w, c, first++);
			continue;
		}
		add_batch(w, c, first, (uint32_t)sizes[k]);
		first += (uint32_t)sizes[k];
	}
	add_batch(w, c, first, NREC - first);
	T_OK(sluice_writer_close(w, &sum));
	T_EQ(sum.records, NREC);
}

static void write_per_record(const char *dir, const struct columns *c,
			     uint64_t per_shard)
{
	int all = -(int)NREC;

	write_pieces(dir, c, per_shard, &all, 1);
}

/* This test's own layout size of records [a, b): label, vec, then tok's
 * offsets and values (each field 8-aligned: here they all end so). */
static uint64_t layout_size(const struct columns *c, uint64_t a, uint64_t b)
{
	uint64_t n = b - a;

	return 8 * n + 16 * n + 8 * (n + 1) + (c->offs[b] - c->offs[a]);
}

/* Every block of @dir keeps the rule: a block that is not its shard's
 * last is full (the next record would not have fit); none is larger than
 * BLOCK_SIZE but a lone record; shards hold @per_shard records (0: any)
 * but the last; its raw size is the layout's.  Each shard's header bounds
 * tok by its own longest value, whenever the writer's threads wrote it
 * and however the records came (a batch's later ones are not its). */
static void check_blocks(const char *dir, const struct columns *c,
			 uint64_t per_shard)
{
	struct dataset ds;
	char err[512];
	uint64_t rec = 0;

	T_OK(dataset_load(dir, &ds, err, sizeof(err)));
	for (uint32_t s = 0; s < ds.nshards; s++) {
		const struct shard_file *sf = &ds.shards[s];
		uint64_t longest = 0;

		if (per_shard && s + 1 < ds.nshards)
			T_EQ(sf->record_count, per_shard);
		for (uint64_t r = rec; r < rec + sf->record_count; r++)
			if (c->offs[r + 1] - c->offs[r] > longest)
				longest = c->offs[r + 1] - c->offs[r];
		T_EQ(sf->max_value_bytes[2], longest);
		for (uint64_t b = 0; b < sf->block_count; b++) {
			const struct shard_block *blk = &sf->blocks[b];
			uint64_t end = rec + blk->record_count;

			T_LT(0, blk->record_count);
			T_EQ(blk->raw_size, layout_size(c, rec, end));
			if (blk->record_count > 1)
				T_ASSERT(blk->raw_size <= BLOCK_SIZE);
			if (b + 1 < sf->block_count)
				T_LT(BLOCK_SIZE, layout_size(c, rec, end + 1));
			rec = end;
		}
	}
	T_EQ(rec, NREC);
	dataset_free(&ds);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	T_ASSERT(f);
	T_OK(fseek(f, 0, SEEK_END));
	n = ftell(f);
	T_ASSERT(n > 0);
	rewind(f);
	buf = malloc((size_t)n);
	T_ASSERT(buf);
	T_EQ(fread(buf, 1, (size_t)n, f), n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* The same blocks and index: every byte after the header page.  (The
 * header may differ: a v2 header carries the dataset's random id.) */
static void same_body(const char *a, const char *b)
{
	size_t na, nb;
	uint8_t *x = slurp(a, &na), *y = slurp(b, &nb);

	T_EQ(na, nb);
	T_LT(DLS_HEADER_SIZE, na);
	T_MEMEQ(x + DLS_HEADER_SIZE, y + DLS_HEADER_SIZE,
		na - DLS_HEADER_SIZE);
	free(x);
	free(y);
}

/* Shard by shard, as same_body. */
static void same_shards(const char *a, const char *b)
{
	char fa[1100], fb[1100];

	for (uint32_t k = 0;; k++) {
		int in_a, in_b;

		TU_FMT(fa, "%s/data-%05u.dls", a, k);
		TU_FMT(fb, "%s/data-%05u.dls", b, k);
		in_a = access(fa, F_OK) == 0;
		in_b = access(fb, F_OK) == 0;
		T_EQ(in_a, in_b);
		if (!in_a) {
			T_LT(0, k);
			return;
		}
		same_body(fa, fb);
	}
}

static void check_values(const char *dir, const struct columns *c)
{
	sluice_dataset *ds;
	uint8_t buf[64];
	size_t len;

	T_OK(sluice_dataset_open(dir, &ds));
	T_EQ(sluice_dataset_records(ds), NREC);
	for (uint32_t i = 0; i < NREC; i += 37) {
		T_OK(sluice_dataset_read(ds, i, "label", buf, sizeof(buf),
					 &len));
		T_EQ(len, 8);
		T_MEMEQ(buf, &c->label[i], 8);
		T_OK(sluice_dataset_read(ds, i, "tok", buf, sizeof(buf), &len));
		T_EQ(len, c->offs[i + 1] - c->offs[i]);
		T_MEMEQ(buf, (const uint8_t *)c->tok + c->offs[i], len);
	}
	sluice_dataset_close(ds);
}

/* A variable field without offsets: every record the same length. */
static void equal_length_variable(const char *dir)
{
	struct sluice_field f[1];
	struct sluice_column col;
	sluice_writer *w;
	sluice_dataset *ds;
	int32_t v[12] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 }, got[3];
	size_t len;

	tu_field(&f[0], "tok", "int32", 1, -1, 0);
	T_OK(sluice_writer_open(dir, f, 1, NULL, &w));
	memset(&col, 0, sizeof(col));
	col.values = v;
	col.values_len = sizeof(v);
	T_OK(sluice_writer_add_columns(w, 4, &col, 1));
	T_OK(sluice_writer_close(w, NULL));
	T_OK(sluice_dataset_open(dir, &ds));
	T_EQ(sluice_dataset_records(ds), 4);
	T_OK(sluice_dataset_read(ds, 2, "tok", got, sizeof(got), &len));
	T_EQ(len, 12);
	T_EQ(got[0], 6);
	T_EQ(got[2], 8);
	sluice_dataset_close(ds);
}

/* One bad column: the code, a message naming the field, no dataset. */
static void expect_failure(const char *dir, struct sluice_column *col,
			   int ncols, uint64_t n, int code, const char *what)
{
	struct sluice_field f[NFIELDS];
	sluice_writer *w;
	char msg[512], path[1024];

	schema(f);
	T_OK(sluice_writer_open(dir, f, NFIELDS, NULL, &w));
	T_EQ(sluice_writer_add_columns(w, n, col, ncols), code);
	sluice_writer_error(w, msg, sizeof(msg));
	T_CONTAINS(msg, what);
	sluice_writer_abort(w);
	TU_FMT(path, "%s/dataset.json", dir);
	T_ASSERT(access(path, F_OK) != 0);
}

static void bad_columns(const char *root, const struct columns *c)
{
	struct sluice_column col[NFIELDS];
	uint64_t offs[4] = { 0, 8, 4, 12 };  /* decreasing at record 1 */
	uint64_t odd[3] = { 0, 4, 7 };       /* 3 bytes: not int32s */
	char dir[1024];

	memset(col, 0, sizeof(col));
	col[0].values = c->label;
	col[0].values_len = 8 * 3;
	col[1].values = c->vec;
	col[1].values_len = 16 * 3;
	col[2].values = c->tok;
	col[2].values_len = 12;
	col[2].offsets = offs;
	TU_FMT(dir, "%s/bad1", root);
	expect_failure(dir, col, NFIELDS, 3, -EINVAL,
		       "'tok': offsets decrease");

	offs[2] = 8;
	offs[3] = 16;  /* past the 12 value bytes */
	TU_FMT(dir, "%s/bad2", root);
	expect_failure(dir, col, NFIELDS, 3, -EINVAL, "past the 12 value");

	col[2].offsets = odd;
	col[0].values_len = 8 * 2;
	col[1].values_len = 15 * 2;  /* not 16 bytes per record */
	TU_FMT(dir, "%s/bad3", root);
	expect_failure(dir, col, NFIELDS, 2, -SLUICE_ESCHEMA, "'vec'");

	col[1].values_len = 16 * 2;
	TU_FMT(dir, "%s/bad4", root);
	expect_failure(dir, col, NFIELDS, 2, -SLUICE_ESCHEMA, "'tok'");

	TU_FMT(dir, "%s/bad5", root);
	expect_failure(dir, col, 2, 2, -EINVAL, "2 columns for 3 fields");

	/* A fixed field given with offsets: each record its exact size. */
	{
		uint64_t fixed[3] = { 0, 8, 12 };

		col[0].offsets = fixed;
		col[0].values_len = 16;
		TU_FMT(dir, "%s/bad6", root);
		expect_failure(dir, col, NFIELDS, 2, -SLUICE_ESCHEMA,
			       "record 1: field 'label': 4 bytes");
	}
}

/* Records larger than a block (block_size 1024, values up to 2.5 KB):
 * record by record, in one batch and in batches of 7 alike; a block over
 * block_size holds one record. */
#define BIG_N 300u
static void big_records(const char *root)
{
	static uint8_t blob[BIG_N * 2500];
	static uint64_t offs[BIG_N + 1];
	static int32_t id[BIG_N];
	struct sluice_field f[2];
	struct sluice_writer_config cfg;
	const char *names[3] = { "one", "all", "sevens" };
	char dir[3][1024];
	struct dataset ds;
	char err[512];

	tu_field(&f[0], "id", "int32", 0, 0, 0);
	tu_field(&f[1], "blob", "uint8", 1, -1, 0);
	for (uint32_t i = 0; i < BIG_N; i++) {
		id[i] = (int32_t)i;
		offs[i + 1] = offs[i] + (i * 997u) % 2500u;
		for (uint64_t j = offs[i]; j < offs[i + 1]; j++)
			blob[j] = (uint8_t)(i + j);
	}
	sluice_writer_config_init(&cfg);
	cfg.block_size = 1024;
	for (int m = 0; m < 3; m++) {
		uint32_t step = m == 0 ? 1 : m == 1 ? BIG_N : 7;
		sluice_writer *w;

		TU_FMT(dir[m], "%s/big-%s", root, names[m]);
		T_OK(sluice_writer_open(dir[m], f, 2, &cfg, &w));
		for (uint32_t i = 0; i < BIG_N; i += step) {
			uint32_t n = BIG_N - i < step ? BIG_N - i : step;
			struct sluice_column col[2];

			memset(col, 0, sizeof(col));
			col[0].values = &id[i];
			col[0].values_len = 4ull * n;
			col[1].values = blob;
			col[1].values_len = sizeof(blob);
			col[1].offsets = &offs[i];
			if (m == 0) {
				const void *v[2] = { &id[i], blob + offs[i] };
				uint64_t len[2] = { 4, offs[i + 1] - offs[i] };

				T_OK(sluice_writer_add(w, v, len));
			} else {
				T_OK(sluice_writer_add_columns(w, n, col, 2));
			}
		}
		T_OK(sluice_writer_close(w, NULL));
	}
	same_shards(dir[0], dir[1]);
	same_shards(dir[0], dir[2]);
	T_OK(dataset_load(dir[2], &ds, err, sizeof(err)));
	T_EQ(ds.shards[0].record_count, BIG_N);
	for (uint64_t b = 0; b < ds.shards[0].block_count; b++)
		if (ds.shards[0].blocks[b].raw_size > 1024)
			T_EQ(ds.shards[0].blocks[b].record_count, 1);
	dataset_free(&ds);
}

/* Not one worker per CPU: at most SLUICE_WRITER_DEFAULT_THREADS, and no
 * more than the CPUs this process may run on. */
static void default_threads(void)
{
	cpu_set_t all, one;
	int n;

	T_OK(sched_getaffinity(0, sizeof(all), &all));
	n = CPU_COUNT(&all);
	T_EQ(wpool_default_threads(),
	     n < SLUICE_WRITER_DEFAULT_THREADS ? n
					       : SLUICE_WRITER_DEFAULT_THREADS);
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all)) {
			CPU_SET(c, &one);
			break;
		}
	T_OK(sched_setaffinity(0, sizeof(one), &one));
	T_EQ(wpool_default_threads(), 1);
	T_OK(sched_setaffinity(0, sizeof(all), &all));
}

int main(void)
{
	/* Single records (<0) and batches (>0, 0 empty) mixed; the rest one
	 * batch.  The variable column is sliced in every batch but the
	 * first. */
	static const int uneven[] = { 1, 0, 333 };
	static const int mixed[] = { -5, 400, -3, 0, 1, -250, 17 };
	static const uint64_t per_shard[] = { 0, 150 };
	const char *root = tu_scratch("writer-batch");
	static struct columns c;
	char a[1024], b[1024], eq[1024];

	fill(&c);
	for (int p = 0; p < 2; p++) {
		TU_FMT(a, "%s/per-record-%d", root, p);
		write_per_record(a, &c, per_shard[p]);
		check_blocks(a, &c, per_shard[p]);
		check_values(a, &c);

		TU_FMT(b, "%s/uneven-%d", root, p);
		write_pieces(b, &c, per_shard[p], uneven, 3);
		same_shards(a, b);
		check_blocks(b, &c, per_shard[p]);
		check_values(b, &c);

		TU_FMT(b, "%s/mixed-%d", root, p);
		write_pieces(b, &c, per_shard[p], mixed, 7);
		same_shards(a, b);
		check_blocks(b, &c, per_shard[p]);

		TU_FMT(b, "%s/one-batch-%d", root, p);
		write_pieces(b, &c, per_shard[p], NULL, 0);
		same_shards(a, b);
		check_blocks(b, &c, per_shard[p]);
	}
	big_records(root);

	TU_FMT(eq, "%s/equal", root);
	equal_length_variable(eq);
	bad_columns(root, &c);
	default_threads();
	printf("ok\n");
	return 0;
}
