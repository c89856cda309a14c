/*
 * test_format.c - round trips through sluice_writer and
 * sluice_dataset_read: raw and zstd blocks, fixed and variable fields,
 * empty values, big records, shard splitting, thread-count independence,
 * incompressible data, merge, abort.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <sys/stat.h>

#include "format_util.h"
#include "manifest.h"
#include "shard.h"

static char path_buf[1024];

static const char *sub(const char *root, const char *name)
{
	TU_FMT(path_buf, "%s/%s", root, name);
	return path_buf;
}

static int exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0;
}

/* Any ".*.tmp" left in @dir? */
static int has_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	T_ASSERT(d);
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);

		if (e->d_name[0] == '.' && n > 4 &&
		    strcmp(e->d_name + n - 4, ".tmp") == 0)
			found = 1;
	}
	closedir(d);
	return found;
}

static void check_all(const char *dir, uint64_t n, uint64_t first)
{
	sluice_dataset *ds;

	T_OK(sluice_dataset_open(dir, &ds));
	T_EQ(sluice_dataset_records(ds), n);
	T_EQ(sluice_dataset_field_count(ds), TU_NFIELDS);
	for (uint64_t i = 0; i < n; i++)
		tu_check(ds, i, first + i, 0);
	sluice_dataset_close(ds);
}

/* Count blocks by codec over every shard of @dir. */
static void codecs(const char *dir, uint64_t *raw, uint64_t *zstd)
{
	sluice_dataset *ds;

	*raw = *zstd = 0;
	T_OK(sluice_dataset_open(dir, &ds));
	for (uint32_t s = 0; s < ds->d.nshards; s++)
		for (uint64_t b = 0; b < ds->d.shards[s].block_count; b++)
			(ds->d.shards[s].blocks[b].codec == DLS_CODEC_ZSTD
				 ? (*zstd)++ : (*raw)++);
	sluice_dataset_close(ds);
}

static void test_basics(void)
{
	DLDataType dt;
	struct sluice_field f[2];
	struct shard_schema s;
	const char *names[] = { "int8", "int16", "int32", "int64", "uint8",
				"uint16", "uint32", "uint64", "float16",
				"bfloat16", "float32", "float64", "bool" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		T_OK(sluice_dtype_parse(names[i], &dt));
		T_EQ(strcmp(sluice_dtype_name(dt), names[i]), 0);
	}
	T_EQ(sluice_dtype_parse("complex64", &dt), -SLUICE_ESCHEMA);
	dt.lanes = 2;
	T_ASSERT(sluice_dtype_name(dt) == NULL);
	T_EQ(strcmp(sluice_strerror(0), "success"), 0);
	T_CONTAINS(sluice_strerror(-SLUICE_ECORRUPT), "corrupt");
	T_CONTAINS(sluice_strerror(-ENOENT), "No such file");
	T_ASSERT(sluice_strerror(-99999) != NULL);

	tu_field(&f[0], "a", "uint8", 1, -1, 0);
	tu_field(&f[1], "a", "int32", 0, 0, 0);
	T_EQ(schema_from_fields(f, 2, &s, NULL, 0), -SLUICE_ESCHEMA);
	tu_field(&f[1], "b", "int32", 2, 4, -1); /* only dim 0 may be -1 */
	T_EQ(schema_from_fields(f, 2, &s, NULL, 0), -SLUICE_ESCHEMA);
	tu_field(&f[1], "b", "int32", 2, 4, 0);
	T_EQ(schema_from_fields(f, 2, &s, NULL, 0), -SLUICE_ESCHEMA);
	tu_field(&f[1], "", "int32", 0, 0, 0);
	T_EQ(schema_from_fields(f, 2, &s, NULL, 0), -SLUICE_ESCHEMA);
	tu_field(&f[1], "b", "int32", 2, 1ll << 40, 1ll << 40);
	T_EQ(schema_from_fields(f, 2, &s, NULL, 0), -SLUICE_ESCHEMA);
	f[1].ndim = 7;
	T_EQ(schema_from_fields(f, 2, &s, NULL, 0), -SLUICE_ESCHEMA);
	T_EQ(schema_from_fields(f, 0, &s, NULL, 0), -SLUICE_ESCHEMA);
	tu_field(&f[1], "b", "int32", 2, 4, 5);
	T_OK(schema_from_fields(f, 2, &s, NULL, 0));
	T_EQ(s.fields[0].variable, 1);
	T_EQ(s.fields[0].unit_bytes, 1);
	T_EQ(s.fields[1].record_bytes, 80);
}

static void test_round_trip(const char *root, int level, const char *name)
{
	struct sluice_writer_config cfg;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	uint64_t nraw, nzstd;
	const char *dir;
	char d[1024];

	TU_FMT(d, "%s", sub(root, name));
	dir = d;
	sluice_writer_config_init(&cfg);
	cfg.block_size = 4096;
	cfg.compression_level = level;
	cfg.threads = 2;
	T_OK(tu_write(dir, &cfg, 500, 0, &sum));
	T_EQ(sum.records, 500);
	T_EQ(sum.shards, 1);
	T_ASSERT(sum.blocks > 10);
	T_ASSERT(exists(sub(dir, "dataset.json")));
	T_ASSERT(exists(sub(dir, "data-00000.dls")));
	T_ASSERT(!has_tmp(dir));
	check_all(dir, 500, 0);
	codecs(dir, &nraw, &nzstd);
	if (level == 0) {
		T_EQ(nzstd, 0);
		T_EQ(sum.raw_bytes, sum.stored_bytes);
	} else {
		T_ASSERT(nzstd > 0);
		T_LT(sum.stored_bytes, sum.raw_bytes);
	}
	/* The single file, a list and a glob name the same data. */
	{
		sluice_dataset *ds;
		char spec[2100];

		T_OK(sluice_dataset_open(sub(dir, "data-00000.dls"), &ds));
		T_EQ(sluice_dataset_records(ds), 500);
		sluice_dataset_close(ds);
		/* A shard listed twice is a duplicate, not more data. */
		TU_FMT(spec, "%s/data-00000.dls,%s/data-00000.dls",
			 dir, dir);
		T_EQ(sluice_dataset_open(spec, &ds), -SLUICE_ECORRUPT);
		sluice_dataset_close(ds);
		TU_FMT(spec, "%s/*.dls", dir);
		T_OK(sluice_dataset_open(spec, &ds));
		T_EQ(sluice_dataset_records(ds), 500);
		sluice_dataset_close(ds);
	}
}

static void test_read_errors(const char *dir)
{
	sluice_dataset *ds;
	uint8_t small[4];
	size_t len;
	char msg[256];

	T_OK(sluice_dataset_open(dir, &ds));
	T_EQ(sluice_dataset_read(ds, 500, "label", small, 8, &len), -ERANGE);
	T_EQ(sluice_dataset_read(ds, 0, "nope", small, 8, &len), -ENOENT);
	sluice_dataset_error(ds, msg, sizeof(msg));
	T_CONTAINS(msg, "nope");
	T_EQ(sluice_dataset_read(ds, 1, "feat", small, sizeof(small), &len),
	     -ENOSPC);
	T_EQ(len, 48);
	T_ASSERT(sluice_dataset_field(ds, TU_NFIELDS) == NULL);
	T_EQ(strcmp(sluice_dataset_field(ds, 4)->name, "img"), 0);
	T_EQ(sluice_dataset_field(ds, 4)->shape[0], -1);
	sluice_dataset_close(ds);

	T_NE(sluice_dataset_open(sub(dir, "missing-dir"), &ds), 0);
	T_ASSERT(ds != NULL);
	sluice_dataset_error(ds, msg, sizeof(msg));
	T_CONTAINS(msg, "missing-dir");
	sluice_dataset_close(ds);
}

static void test_one_and_zero(const char *root)
{
	struct sluice_writer_config cfg;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	sluice_dataset *ds;
	char d[1024];

	sluice_writer_config_init(&cfg);
	cfg.threads = 1;
	TU_FMT(d, "%s", sub(root, "one"));
	T_OK(tu_write(d, &cfg, 1, 42, &sum));
	T_EQ(sum.blocks, 1);
	check_all(d, 1, 42);

	TU_FMT(d, "%s", sub(root, "zero"));
	T_OK(tu_write(d, &cfg, 0, 0, &sum));
	T_EQ(sum.shards, 0);
	T_OK(sluice_dataset_open(d, &ds));
	T_EQ(sluice_dataset_records(ds), 0);
	T_EQ(sluice_dataset_field_count(ds), TU_NFIELDS);
	sluice_dataset_close(ds);
}

static void test_big_record(const char *root)
{
	static uint8_t buf[1 << 20];
	struct sluice_writer_config cfg;
	struct sluice_field f[TU_NFIELDS];
	struct tu_record r;
	sluice_writer *w;
	sluice_dataset *ds;
	char d[1024];
	int found = 0;

	TU_FMT(d, "%s", sub(root, "big"));
	sluice_writer_config_init(&cfg);
	cfg.block_size = 4096;
	cfg.threads = 2;
	tu_schema(f);
	T_OK(sluice_writer_open(d, f, TU_NFIELDS, &cfg, &w));
	for (uint64_t i = 0; i < 60; i++) {
		tu_make(i, buf, i == 30 ? 20000 : 0, &r);
		T_OK(sluice_writer_add(w, r.values, r.lengths));
	}
	/* A wrong length fails the writer; it then only aborts. */
	r.lengths[1] = 47;
	T_EQ(sluice_writer_add(w, r.values, r.lengths), -SLUICE_ESCHEMA);
	{
		char msg[256];
		sluice_writer_error(w, msg, sizeof(msg));
		T_CONTAINS(msg, "feat");
	}
	sluice_writer_abort(w);
	T_ASSERT(!exists(sub(d, "dataset.json")));
	T_ASSERT(!has_tmp(d));

	T_OK(sluice_writer_open(d, f, TU_NFIELDS, &cfg, &w));
	for (uint64_t i = 0; i < 60; i++) {
		tu_make(i, buf, i == 30 ? 20000 : 0, &r);
		T_OK(sluice_writer_add(w, r.values, r.lengths));
	}
	T_OK(sluice_writer_close(w, NULL));
	T_OK(sluice_dataset_open(d, &ds));
	for (uint64_t b = 0; b < ds->d.shards[0].block_count; b++) {
		const struct shard_block *blk = &ds->d.shards[0].blocks[b];

		if (blk->raw_size > 4096) {
			T_EQ(blk->record_count, 1);
			T_EQ(blk->first_record, 30);
			found = 1;
		}
	}
	T_ASSERT(found);
	for (uint64_t i = 0; i < 60; i++)
		tu_check(ds, i, i, i == 30 ? 20000 : 0);
	sluice_dataset_close(ds);
}

static void test_shards(const char *root)
{
	struct sluice_writer_config cfg;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	sluice_dataset *ds;
	char d[1024];

	sluice_writer_config_init(&cfg);
	cfg.block_size = 4096;
	cfg.threads = 2;
	cfg.shard_size = 0;
	cfg.records_per_shard = 100;
	cfg.prefix = "part";
	TU_FMT(d, "%s", sub(root, "rps"));
	T_OK(tu_write(d, &cfg, 450, 0, &sum));
	T_EQ(sum.shards, 5);
	T_ASSERT(exists(sub(d, "part-00004.dls")));
	T_OK(sluice_dataset_open(d, &ds));
	for (uint32_t s = 0; s < 5; s++)
		T_EQ(ds->d.shards[s].record_count, s < 4 ? 100 : 50);
	sluice_dataset_close(ds);
	check_all(d, 450, 0);

	cfg.records_per_shard = 0;
	cfg.shard_size = 12000;
	cfg.compression_level = 0;
	cfg.prefix = NULL;
	TU_FMT(d, "%s", sub(root, "bytes"));
	T_OK(tu_write(d, &cfg, 450, 0, &sum));
	T_ASSERT(sum.shards > 3);
	T_OK(sluice_dataset_open(d, &ds));
	T_EQ(ds->d.nshards, sum.shards);
	for (uint32_t s = 0; s + 1 < ds->d.nshards; s++) {
		T_ASSERT(ds->d.shards[s].stored_bytes >= 12000);
		/* It ended at the first block that reached the limit. */
		T_LT(ds->d.shards[s].stored_bytes -
			     ds->d.shards[s]
				     .blocks[ds->d.shards[s].block_count - 1]
				     .stored_size,
		     12000);
	}
	sluice_dataset_close(ds);
	check_all(d, 450, 0);
}

#define DLS_ID_OFF offsetof(struct dls_header_disk, dataset_id)

static void test_threads_identical(const char *root)
{
	struct sluice_writer_config cfg;
	struct sluice_writer_summary s1 = { .size = sizeof(s1) },
		s4 = { .size = sizeof(s4) };
	char d1[1024], d4[1024], p1[1100], p4[1100];

	sluice_writer_config_init(&cfg);
	cfg.block_size = 8192;
	cfg.shard_size = 20000;
	cfg.compression_level = 5;
	cfg.threads = 1;
	TU_FMT(d1, "%s", sub(root, "t1"));
	TU_FMT(d4, "%s", sub(root, "t4"));
	T_OK(tu_write(d1, &cfg, 800, 0, &s1));
	cfg.threads = 4;
	T_OK(tu_write(d4, &cfg, 800, 0, &s4));
	T_EQ(s1.shards, s4.shards);
	T_ASSERT(s1.shards > 1);
	for (uint32_t s = 0; s < s1.shards; s++) {
		size_t n1, n4;
		uint8_t *a, *b;

		TU_FMT(p1, "%s/data-%05u.dls", d1, s);
		TU_FMT(p4, "%s/data-%05u.dls", d4, s);
		a = tu_slurp(p1, &n1);
		b = tu_slurp(p4, &n4);
		T_EQ(n1, n4);
		/* Identical but for the random dataset id (and so the
		 * header checksum). */
		T_ASSERT(n1 > DLS_HEADER_SIZE);
		T_ASSERT(memcmp(a + DLS_ID_OFF, b + DLS_ID_OFF,
				DLS_DATASET_ID_LEN) != 0);
		memset(a + DLS_ID_OFF, 0, DLS_DATASET_ID_LEN);
		memset(b + DLS_ID_OFF, 0, DLS_DATASET_ID_LEN);
		memset(a + DLS_HEADER_CHECKSUM_OFFSET, 0, 8);
		memset(b + DLS_HEADER_CHECKSUM_OFFSET, 0, 8);
		T_MEMEQ(a, b, n1);
		free(a);
		free(b);
	}
}

static void test_incompressible(const char *root)
{
	struct sluice_writer_config cfg;
	struct sluice_field f;
	sluice_writer *w;
	sluice_dataset *ds;
	uint8_t rec[1000], got[1000];
	uint64_t x = 0x9e3779b97f4a7c15ull, nraw, nzstd;
	const void *v[1] = { rec };
	uint64_t len[1] = { sizeof(rec) };
	char d[1024];
	size_t n;

	TU_FMT(d, "%s", sub(root, "random"));
	sluice_writer_config_init(&cfg);
	cfg.block_size = 8192;
	cfg.compression_level = 19;
	cfg.threads = 2;
	tu_field(&f, "noise", "uint8", 1, 1000, 0);
	T_OK(sluice_writer_open(d, &f, 1, &cfg, &w));
	for (int i = 0; i < 50; i++) {
		for (size_t k = 0; k < sizeof(rec); k++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			rec[k] = (uint8_t)x;
		}
		T_OK(sluice_writer_add(w, v, len));
	}
	T_OK(sluice_writer_close(w, NULL));
	codecs(d, &nraw, &nzstd);
	T_EQ(nzstd, 0);
	T_ASSERT(nraw > 1);
	T_OK(sluice_dataset_open(d, &ds));
	T_OK(sluice_dataset_read(ds, 49, "noise", got, sizeof(got), &n));
	T_EQ(n, 1000);
	T_MEMEQ(got, rec, 1000);
	sluice_dataset_close(ds);
}

static void test_merge(const char *root)
{
	struct sluice_writer_config cfg;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	char a[1024], b[1024], out[1024], other[1024];
	const char *parts[2] = { a, b };
	struct sluice_field f;
	sluice_writer *w;
	char err[512];

	sluice_writer_config_init(&cfg);
	cfg.block_size = 4096;
	cfg.threads = 2;
	cfg.records_per_shard = 120;
	cfg.shard_size = 0;
	TU_FMT(a, "%s", sub(root, "partA"));
	TU_FMT(b, "%s", sub(root, "partB"));
	TU_FMT(out, "%s", sub(root, "merged"));
	T_OK(tu_write(a, &cfg, 200, 0, NULL));
	T_OK(tu_write(b, &cfg, 300, 200, NULL));
	T_OK(sluice_merge(parts, 2, out, 0, &sum, err, sizeof(err)));
	T_EQ(sum.records, 500);
	T_EQ(sum.shards, 5);
	T_ASSERT(exists(sub(out, "data-00004.dls")));
	check_all(out, 500, 0);

	/* A part with another schema is refused. */
	TU_FMT(other, "%s", sub(root, "other"));
	tu_field(&f, "x", "uint8", 0, 0, 0);
	T_OK(sluice_writer_open(other, &f, 1, &cfg, &w));
	{
		uint8_t one = 1;
		const void *v[1] = { &one };
		uint64_t l[1] = { 1 };
		T_OK(sluice_writer_add(w, v, l));
	}
	T_OK(sluice_writer_close(w, NULL));
	parts[1] = other;
	T_EQ(sluice_merge(parts, 2, sub(root, "merged2"), 0, NULL, err,
			  sizeof(err)),
	     -SLUICE_ESCHEMA);
}

static void test_abort(const char *root)
{
	static uint8_t buf[1 << 16];
	struct sluice_writer_config cfg;
	struct sluice_field f[TU_NFIELDS];
	struct tu_record r;
	sluice_writer *w;
	uint64_t recs, raw, stored;
	char d[1024];

	TU_FMT(d, "%s", sub(root, "aborted"));
	sluice_writer_config_init(&cfg);
	cfg.block_size = 4096;
	cfg.records_per_shard = 50;
	cfg.threads = 2;
	tu_schema(f);
	T_OK(sluice_writer_open(d, f, TU_NFIELDS, &cfg, &w));
	for (uint64_t i = 0; i < 175; i++) {
		tu_make(i, buf, 0, &r);
		T_OK(sluice_writer_add(w, r.values, r.lengths));
	}
	sluice_writer_progress(w, &recs, &raw, &stored);
	T_EQ(recs, 175);
	T_ASSERT(raw > 0);
	sluice_writer_abort(w);
	T_ASSERT(!exists(sub(d, "dataset.json")));
	T_ASSERT(!has_tmp(d));
}

int main(void)
{
	const char *root = tu_scratch("format");
	char first[1024];

	test_basics();
	test_round_trip(root, 0, "raw");
	test_round_trip(root, 3, "zstd");
	TU_FMT(first, "%s", sub(root, "zstd"));
	test_read_errors(first);
	test_one_and_zero(root);
	test_big_record(root);
	test_shards(root);
	test_threads_identical(root);
	test_incompressible(root);
	test_abort(root);
	test_merge(root);
	return 0;
}
