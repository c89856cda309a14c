/*
 * test_binding.c - shards bound to their dataset, and writes that cannot
 * lose or mix data: a shard listed twice, two equal-size shards swapped,
 * a same-schema shard from another dataset, the leftovers of a killed
 * write (by glob and by folder), two writers on one folder, merge into a
 * source or a used folder, a part whose records disagree with its
 * manifest, merge with verify, and v1 datasets still read.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format_util.h"
#include "manifest.h"
#include "shard.h"
#include "shard_internal.h"

#define NREC 300
#define PER_SHARD 100 /* fixed-size raw records: equal-size shards */

static char path_buf[2048];

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

static void cfg_init(struct sluice_writer_config *cfg)
{
	sluice_writer_config_init(cfg);
	cfg->compression_level = 0;
	cfg->records_per_shard = PER_SHARD;
	cfg->shard_size = 0;
	cfg->block_size = 4096;
	cfg->threads = 2;
}

/* @n records of one uint32[16] field; record i holds i + @salt. */
static void write_fixed(const char *dir, uint32_t salt, uint64_t n)
{
	struct sluice_writer_config cfg;
	struct sluice_field f;
	sluice_writer *w;
	uint32_t v[16];
	const void *vals[1] = { v };
	uint64_t len[1] = { sizeof(v) };

	cfg_init(&cfg);
	tu_field(&f, "x", "uint32", 1, 16, 0);
	T_OK(sluice_writer_open(dir, &f, 1, &cfg, &w));
	for (uint64_t i = 0; i < n; i++) {
		for (int k = 0; k < 16; k++)
			v[k] = (uint32_t)i + salt;
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));
}

/* Opening @what fails with @code and a message holding @needle. */
static void open_fails(const char *what, int code, const char *needle)
{
	sluice_dataset *ds;
	char msg[1024];
	int r = sluice_dataset_open(what, &ds);

	sluice_dataset_error(ds, msg, sizeof(msg));
	if (r != code)
		T_FAIL_AT("open %s: %d, expected %d: %s", what, r, code, msg);
	T_CONTAINS(msg, needle);
	printf("  refused %s: %s\n", what, msg);
	sluice_dataset_close(ds);
}

static uint64_t open_records(const char *what)
{
	sluice_dataset *ds;
	uint64_t n;
	char msg[1024];
	int r = sluice_dataset_open(what, &ds);

	sluice_dataset_error(ds, msg, sizeof(msg));
	if (r != 0)
		T_FAIL_AT("open %s: %s", what, msg);
	n = sluice_dataset_records(ds);
	sluice_dataset_close(ds);
	return n;
}

struct collected {
	char text[8192];
	long n;
};

static void collect(void *ctx, const char *line)
{
	struct collected *c = ctx;
	size_t used = strlen(c->text);

	snprintf(c->text + used, sizeof(c->text) - used, "%s\n", line);
	c->n++;
}

/* verify @what reports at least one problem, one holding @needle. */
static void verify_finds(const char *what, const char *needle)
{
	struct collected c = { "", 0 };
	long got = dataset_verify(what, collect, &c);

	T_ASSERT(got > 0);
	T_CONTAINS(c.text, needle);
}

static void verify_clean(const char *what)
{
	struct collected c = { "", 0 };
	long got = dataset_verify(what, collect, &c);

	if (got != 0)
		T_FAIL_AT("verify %s: %ld problems:\n%s", what, got, c.text);
}

static void copy_file(const char *from, const char *to)
{
	size_t n;
	uint8_t *b = tu_slurp(from, &n);
	FILE *f = fopen(to, "wb");

	T_ASSERT(f);
	T_EQ(fwrite(b, 1, n, f), n);
	T_EQ(fclose(f), 0);
	free(b);
}

/* dataset.json of @dir through @edit, written back. */
static void edit_manifest(const char *dir, void (*edit)(struct manifest *))
{
	struct manifest m;
	char err[512];

	T_OK(manifest_read(dir, &m, err, sizeof(err)));
	edit(&m);
	T_OK(manifest_write(dir, &m, err, sizeof(err)));
	manifest_free(&m);
}

static void list_shard0_twice(struct manifest *m)
{
	m->shards[1] = m->shards[0];
}

static void name_shard0_twice(struct manifest *m)
{
	snprintf(m->shards[1].file, sizeof(m->shards[1].file), "%s",
		 m->shards[0].file);
}

static void test_duplicate_in_manifest(const char *root)
{
	char d[1024], spec[2200];

	TU_FMT(d, "%s", sub(root, "dup"));
	write_fixed(d, 0, NREC);
	T_EQ(open_records(d), NREC);
	verify_clean(d);
	/* The whole entry copied (its checksum too). */
	edit_manifest(d, list_shard0_twice);
	open_fails(d, -SLUICE_ECORRUPT, "twice");
	verify_finds(d, "twice");
	/* Only the name: shard 0 stands where shard 1 belongs. */
	write_fixed(sub(root, "dup2"), 0, NREC);
	TU_FMT(d, "%s", sub(root, "dup2"));
	edit_manifest(d, name_shard0_twice);
	open_fails(d, -SLUICE_ECORRUPT, "twice");
	/* Found from the manifest alone, before any shard is read. */
	verify_finds(d, "lists data-00000.dls twice (shards 0 and 1)");
	/* A list naming one shard twice. */
	TU_FMT(spec, "%s/data-00000.dls,%s/data-00001.dls,%s/data-00001.dls",
	       d, d, d);
	open_fails(spec, -SLUICE_ECORRUPT, "data-00001.dls twice");
	verify_finds(spec, "shard 1 of 3");
}

static void test_swapped(const char *root)
{
	char d[1024], a[1100], b[1100], t[1100], glob_spec[1100];
	struct stat sa, sb;

	TU_FMT(d, "%s", sub(root, "swap"));
	write_fixed(d, 0, NREC);
	TU_FMT(a, "%s/data-00000.dls", d);
	TU_FMT(b, "%s/data-00001.dls", d);
	TU_FMT(t, "%s/tmp", d);
	T_OK(stat(a, &sa));
	T_OK(stat(b, &sb));
	T_EQ(sa.st_size, sb.st_size);
	T_OK(rename(a, t));
	T_OK(rename(b, a));
	T_OK(rename(t, b));
	open_fails(d, -SLUICE_ECORRUPT, "data-00000.dls: is shard 1");
	verify_finds(d, "data-00001.dls: is shard 0");
	TU_FMT(glob_spec, "%s/*.dls", d);
	open_fails(glob_spec, -SLUICE_ECORRUPT, "data-00000.dls: shard 1 of 3");
	verify_finds(glob_spec, "data-00000.dls: shard 1 of 3");
}

static void test_foreign(const char *root)
{
	char d[1024], other[1024], from[1100], to[1100], glob_spec[1100];

	TU_FMT(d, "%s", sub(root, "mine"));
	TU_FMT(other, "%s", sub(root, "theirs"));
	write_fixed(d, 0, NREC);
	write_fixed(other, 1000, NREC);
	TU_FMT(from, "%s/data-00001.dls", other);
	TU_FMT(to, "%s/data-00001.dls", d);
	copy_file(from, to);
	open_fails(d, -SLUICE_ECORRUPT, "data-00001.dls: is shard 1 of dataset");
	verify_finds(d, "a duplicated, swapped, foreign or rewritten shard");
	TU_FMT(glob_spec, "%s/*.dls", d);
	open_fails(glob_spec, -SLUICE_ECORRUPT, "are missing");
}

/* Temporary shard files in @dir. */
static int count_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] == '.' && strstr(e->d_name, ".dls.") &&
		    strstr(e->d_name, ".tmp"))
			n++;
	closedir(d);
	return n;
}

/* A child writes until 2 shards are finished, then is killed. */
static void test_killed_write(const char *root)
{
	char d[1024], spec[1100];
	struct sluice_writer_config cfg;
	struct sluice_field f;
	int status;
	pid_t pid;

	TU_FMT(d, "%s", sub(root, "killed"));
	fflush(stdout);
	pid = fork();
	T_ASSERT(pid >= 0);
	if (pid == 0) {
		sluice_writer *w;
		uint32_t v[16] = { 0 };
		const void *vals[1] = { v };
		uint64_t len[1] = { sizeof(v) };

		cfg_init(&cfg);
		cfg.threads = 1;
		tu_field(&f, "x", "uint32", 1, 16, 0);
		if (sluice_writer_open(d, &f, 1, &cfg, &w) < 0)
			_exit(2);
		/* Until shard 2 is started, so 0 and 1 are finished (blocks
		 * are written as later records come). */
		for (uint64_t i = 0; count_tmp(d) < 3; i++)
			if (i > 100000 || sluice_writer_add(w, vals, len) < 0)
				_exit(3);
		raise(SIGKILL);
		_exit(4);
	}
	T_EQ(waitpid(pid, &status, 0), pid);
	T_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	T_ASSERT(!exists(sub(d, "dataset.json")));
	T_ASSERT(!exists(sub(d, "data-00000.dls")));
	/* By folder: no dataset.json; by glob of shards: none; by glob of
	 * the temporary files themselves: uncommitted. */
	open_fails(d, -ENOENT, "dataset.json");
	TU_FMT(spec, "%s/*.dls", d);
	open_fails(spec, -ENOENT, "no file matches");
	TU_FMT(spec, "%s/.*.tmp", d);
	open_fails(spec, -SLUICE_ECORRUPT, "uncommitted shard");
	verify_finds(d, "incomplete temporary file");

	/* Killed during the commit's renames: 2 of 3 shards renamed. */
	TU_FMT(d, "%s", sub(root, "half-renamed"));
	write_fixed(d, 0, NREC);
	T_OK(unlink(sub(d, "dataset.json")));
	T_OK(unlink(sub(d, "data-00002.dls")));
	TU_FMT(spec, "%s/*.dls", d);
	open_fails(spec, -SLUICE_ECORRUPT, "shard 2 is missing");
	verify_finds(d, "shard 2 is missing");
	/* One shard named exactly is the caller's choice. */
	T_EQ(open_records(sub(d, "data-00000.dls")), PER_SHARD);
}

static void test_two_writers(const char *root)
{
	struct sluice_writer_config cfg;
	struct sluice_field f;
	sluice_writer *w1, *w2;
	char d[1024], msg[512];
	uint32_t v[16] = { 0 };
	const void *vals[1] = { v };
	uint64_t len[1] = { sizeof(v) };

	TU_FMT(d, "%s", sub(root, "shared"));
	cfg_init(&cfg);
	tu_field(&f, "x", "uint32", 1, 16, 0);
	T_OK(sluice_writer_open(d, &f, 1, &cfg, &w1));
	T_EQ(sluice_writer_open(d, &f, 1, &cfg, &w2), -EBUSY);
	T_ASSERT(w2);
	sluice_writer_error(w2, msg, sizeof(msg));
	{
		char want[128];

		/* The holder named by its pid (here this process's). */
		TU_FMT(want, "busy: a writer or merge (process %ld) is writing "
		       "into this folder", (long)getpid());
		T_CONTAINS(msg, want);
	}
	sluice_writer_abort(w2);
	/* The first writer is unharmed by the refused one. */
	for (int i = 0; i < NREC; i++) {
		v[0] = (uint32_t)i;
		T_OK(sluice_writer_add(w1, vals, len));
	}
	T_OK(sluice_writer_close(w1, NULL));
	T_EQ(open_records(d), NREC);
	verify_clean(d);
	T_ASSERT(!exists(sub(d, ".sluice.lock")));
	/* A later writer finds a dataset there. */
	T_EQ(sluice_writer_open(d, &f, 1, &cfg, &w2), -EEXIST);
	sluice_writer_error(w2, msg, sizeof(msg));
	T_CONTAINS(msg, "already holds a dataset");
	sluice_writer_abort(w2);
	T_EQ(open_records(d), NREC);
}

static void bump_records(struct manifest *m)
{
	m->shards[0].records++;
	m->records++;
}

static void test_merge(const char *root)
{
	char a[1024], b[1024], out[1024], err[1024], p[1100];
	const char *parts[2] = { a, b };
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	FILE *f;

	TU_FMT(a, "%s", sub(root, "pa"));
	TU_FMT(b, "%s", sub(root, "pb"));
	write_fixed(a, 0, NREC);
	write_fixed(b, NREC, NREC);

	/* Into a source: refused before anything is touched. */
	T_EQ(sluice_merge(parts, 2, a, 0, NULL, err, sizeof(err)), -EINVAL);
	T_CONTAINS(err, "is also part 1");
	TU_FMT(out, "%s/.", b);
	T_EQ(sluice_merge(parts, 2, out, 0, NULL, err, sizeof(err)), -EINVAL);
	T_EQ(open_records(a), NREC);
	T_EQ(open_records(b), NREC);

	/* Into a used folder: refused, the stray file stays. */
	TU_FMT(out, "%s", sub(root, "used"));
	T_OK(mkdir(out, 0755));
	TU_FMT(p, "%s/data-00000.dls", out);
	f = fopen(p, "w");
	T_ASSERT(f);
	fclose(f);
	T_EQ(sluice_merge(parts, 2, out, 0, NULL, err, sizeof(err)),
	     -ENOTEMPTY);
	T_CONTAINS(err, "not empty");
	T_ASSERT(exists(p));
	TU_FMT(p, "%s/data-00001.dls", out);
	T_ASSERT(!exists(p));

	/* A clean merge: sources intact, a new dataset id, verify clean. */
	TU_FMT(out, "%s", sub(root, "merged"));
	T_OK(sluice_merge(parts, 2, out, SLUICE_MERGE_VERIFY, &sum, err,
			  sizeof(err)));
	T_EQ(sum.records, 2 * NREC);
	T_EQ(sum.shards, 6);
	T_EQ(open_records(out), 2 * NREC);
	verify_clean(out);
	T_EQ(open_records(a), NREC);
	T_EQ(open_records(b), NREC);
	{
		struct manifest m, ma;

		T_OK(manifest_read(out, &m, err, sizeof(err)));
		T_OK(manifest_read(a, &ma, err, sizeof(err)));
		T_ASSERT(m.bound);
		T_ASSERT(memcmp(m.dataset_id, ma.dataset_id,
				DLS_DATASET_ID_LEN) != 0);
		T_MEMEQ(m.shards[0].id.dataset_id, ma.dataset_id,
			DLS_DATASET_ID_LEN);
		T_EQ(m.shards[3].id.index, 0);
		manifest_free(&m);
		manifest_free(&ma);
	}
	/* Merging again into the merged folder: not empty. */
	T_EQ(sluice_merge(parts, 2, out, 0, NULL, err, sizeof(err)),
	     -ENOTEMPTY);
	T_EQ(open_records(out), 2 * NREC);

	/* A part given twice, or a part beside a merge that holds it. */
	{
		char merged[1024];
		const char *twice[2] = { a, a };
		const char *nested[2] = { merged, b };

		TU_FMT(merged, "%s", sub(root, "merged"));
		TU_FMT(out, "%s", sub(root, "merged-twice"));
		T_EQ(sluice_merge(twice, 2, out, 0, NULL, err, sizeof(err)),
		     -EINVAL);
		T_CONTAINS(err, "the parts hold the same shard twice");
		T_EQ(sluice_merge(nested, 2, out, 0, NULL, err, sizeof(err)),
		     -EINVAL);
		T_ASSERT(!exists(out));
	}

	/* A part whose manifest disagrees with its shards' records. */
	edit_manifest(b, bump_records);
	TU_FMT(out, "%s", sub(root, "merged-count"));
	T_EQ(sluice_merge(parts, 2, out, 0, NULL, err, sizeof(err)),
	     -SLUICE_ECORRUPT);
	T_CONTAINS(err, "the manifest says 101");
	T_ASSERT(!exists(out));
}

/* A flipped block byte passes the load checks; verify catches it. */
static void test_merge_verify(const char *root)
{
	char a[1024], b[1024], out[1024], err[1024], shard[1100];
	const char *parts[2] = { a, b };
	uint8_t *img;
	size_t n;
	FILE *f;

	TU_FMT(a, "%s", sub(root, "va"));
	TU_FMT(b, "%s", sub(root, "vb"));
	write_fixed(a, 0, NREC);
	write_fixed(b, 5, NREC);
	TU_FMT(shard, "%s/data-00002.dls", b);
	img = tu_slurp(shard, &n);
	img[DLS_HEADER_SIZE + 100] ^= 1;
	f = fopen(shard, "wb");
	T_ASSERT(f);
	T_EQ(fwrite(img, 1, n, f), n);
	fclose(f);
	free(img);
	TU_FMT(out, "%s", sub(root, "vm"));
	T_EQ(sluice_merge(parts, 2, out, SLUICE_MERGE_VERIFY, NULL, err,
			  sizeof(err)),
	     -SLUICE_ECORRUPT);
	T_CONTAINS(err, "data-00002.dls: block 0");
	T_ASSERT(!exists(out));
	/* Without verify the merge trusts the blocks (the loader checks
	 * each when it reads it). */
	T_OK(sluice_merge(parts, 2, out, 0, NULL, err, sizeof(err)));
	verify_finds(out, "checksum mismatch");
}

/* Rewrite @dir's shards and manifest as format v1 (no identity). */
static void make_v1(const char *dir, uint32_t nshards)
{
	struct manifest m;
	char shard[1100], err[512];
	uint64_t bytes[64];

	for (uint32_t s = 0; s < nshards; s++) {
		struct dls_header_disk h;
		uint64_t sum;
		uint8_t *img;
		size_t n;

		TU_FMT(shard, "%s/data-%05u.dls", dir, s);
		img = tu_slurp(shard, &n);
		tu_drop_record_sums(img, &n);
		T_ASSERT(s < 64);
		bytes[s] = n;
		memcpy(&h, img, sizeof(h));
		h.version = DLS_VERSION_UNBOUND;
		memset(h.dataset_id, 0, sizeof(h.dataset_id));
		h.shard_index = h.shard_count = 0;
		memcpy(img, &h, sizeof(h));
		sum = header_checksum(img);
		memcpy(img + DLS_HEADER_CHECKSUM_OFFSET, &sum, 8);
		tu_spit(shard, img, n);
		free(img);
	}
	T_OK(manifest_read(dir, &m, err, sizeof(err)));
	m.bound = 0;
	for (uint32_t s = 0; s < m.nshards; s++) {
		memset(&m.shards[s].id, 0, sizeof(m.shards[s].id));
		m.shards[s].bytes = bytes[s];
	}
	T_OK(manifest_write(dir, &m, err, sizeof(err)));
	manifest_free(&m);
}

static void test_v1_still_read(const char *root)
{
	char d[1024], spec[1100], out[1024], err[1024];
	const char *parts[1] = { d };

	TU_FMT(d, "%s", sub(root, "v1"));
	write_fixed(d, 0, NREC);
	make_v1(d, 3);
	T_EQ(open_records(d), NREC);
	TU_FMT(spec, "%s/*.dls", d);
	T_EQ(open_records(spec), NREC);
	verify_clean(d);
	/* A v1 part merges into a v2 manifest that binds nothing. */
	TU_FMT(out, "%s", sub(root, "v1-merged"));
	T_OK(sluice_merge(parts, 1, out, 0, NULL, err, sizeof(err)));
	T_EQ(open_records(out), NREC);
	verify_clean(out);
}

int main(void)
{
	const char *root = tu_scratch("binding");

	test_duplicate_in_manifest(root);
	test_swapped(root);
	test_foreign(root);
	test_killed_write(root);
	test_two_writers(root);
	test_merge(root);
	test_merge_verify(root);
	test_v1_still_read(root);
	return 0;
}
