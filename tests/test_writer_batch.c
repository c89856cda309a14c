/*
 * test_writer_batch.c - sluice_writer_add_columns: the same records given
 * column-wise (in uneven batches, from sliced offsets, equal-length
 * variable values without offsets) make the same blocks and index, byte
 * for byte, as one sluice_writer_add per record; bad columns fail with a message naming
 * the field and leave no dataset behind.  Also the writer's default
 * thread count.
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
#include "t.h"
#include "writer_pool.h"

#define NREC 1000u
#define NFIELDS 3

/* label int64 scalar, vec float32 [4], tok int32 [-1] (i % 7 tokens). */
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
		for (uint32_t k = 0; k < i % 7; k++)
			c->tok[pos++] = (int32_t)(i * 100 + k);
	}
	c->offs[NREC] = pos * 4;
}

static void config(struct sluice_writer_config *cfg)
{
	sluice_writer_config_init(cfg);
	cfg->block_size = 4096;  /* many blocks, so boundaries are compared */
	cfg->threads = 2;
}

static void write_per_record(const char *dir, const struct columns *c)
{
	struct sluice_field f[NFIELDS];
	struct sluice_writer_config cfg;
	sluice_writer *w;

	schema(f);
	config(&cfg);
	T_OK(sluice_writer_open(dir, f, NFIELDS, &cfg, &w));
	for (uint32_t i = 0; i < NREC; i++) {
		const uint8_t *tok = (const uint8_t *)c->tok + c->offs[i];
		const void *v[NFIELDS] = { &c->label[i], &c->vec[i * 4], tok };
		uint64_t len[NFIELDS] = { 8, 16, c->offs[i + 1] - c->offs[i] };

		T_OK(sluice_writer_add(w, v, len));
	}
	T_OK(sluice_writer_close(w, NULL));
}

/* Batches of 1, 0, 333 and the rest; each variable column a slice of the
 * whole offsets array (offsets[0] != 0 after the first batch). */
static void write_columns(const char *dir, const struct columns *c)
{
	static const uint32_t sizes[] = { 1, 0, 333, NREC - 334 };
	struct sluice_field f[NFIELDS];
	struct sluice_writer_config cfg;
	struct sluice_writer_summary sum;
	sluice_writer *w;
	uint32_t first = 0;

	schema(f);
	config(&cfg);
	T_OK(sluice_writer_open(dir, f, NFIELDS, &cfg, &w));
	for (size_t b = 0; b < sizeof(sizes) / sizeof(sizes[0]); b++) {
		uint32_t n = sizes[b];
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
		first += n;
	}
	T_OK(sluice_writer_close(w, &sum));
	T_EQ(sum.records, NREC);
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
static void same_shard_body(const char *a, const char *b)
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
	const char *root = tu_scratch("writer-batch");
	static struct columns c;
	char a[1024], b[1024], fa[1100], fb[1100], eq[1024];

	fill(&c);
	TU_FMT(a, "%s/per-record", root);
	TU_FMT(b, "%s/columns", root);
	write_per_record(a, &c);
	write_columns(b, &c);
	TU_FMT(fa, "%s/data-00000.dls", a);
	TU_FMT(fb, "%s/data-00000.dls", b);
	same_shard_body(fa, fb);
	check_values(a, &c);
	check_values(b, &c);

	TU_FMT(eq, "%s/equal", root);
	equal_length_variable(eq);
	bad_columns(root, &c);
	default_threads();
	printf("ok\n");
	return 0;
}
