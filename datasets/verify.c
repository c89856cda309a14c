/*
 * verify.c - dataset_verify: every header, index, block checksum and
 * decoded layout, the manifest against its shards, and leftovers of an
 * interrupted write.  Reports every problem, not only the first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "identity.h"
#include "manifest.h"
#include "shard_internal.h"
#include "verify_dups.h"

struct verifier {
	verify_report_fn report;
	void *ctx;
	long problems;
};

static void problem(struct verifier *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void problem(struct verifier *v, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	v->problems++;
	if (v->report)
		v->report(v->ctx, line);
}

/* Where a shard's records go for the duplicate check (set UINT32_MAX:
 * nowhere). */
struct dup_target {
	struct dup_check *dc;
	uint32_t set, shard;
};

/* Block @b's records against their checksums (format v3, @sums; NULL:
 * none to compare), and into the duplicate check. */
static void verify_record_sums(struct verifier *v,
			       const struct shard_schema *schema,
			       const struct shard_file *sf, uint64_t b,
			       const struct block_view *view,
			       const uint64_t *sums,
			       const struct dup_target *dt)
{
	const struct shard_block *blk = &sf->blocks[b];

	for (uint32_t i = 0; i < blk->record_count; i++) {
		uint64_t rec = blk->first_record + i;
		uint64_t sum = record_checksum_view(schema, view, i);

		if (dt && dt->set != UINT32_MAX)
			dup_check_add(dt->dc, dt->set, dt->shard, rec, sum);
		if (!sums || sum == sums[rec])
			continue;
		problem(v, "%s: block %llu: offset %llu: record %llu: record "
			"checksum mismatch (the checksum is at offset %llu)",
			sf->path, (unsigned long long)b,
			(unsigned long long)blk->offset,
			(unsigned long long)rec,
			(unsigned long long)(sf->record_sums_offset + rec * 8));
	}
}

static void verify_blocks(struct verifier *v, const struct shard_schema *schema,
			  const struct shard_file *sf,
			  const struct dup_target *dt)
{
	struct block_reader br = { 0 };
	struct block_view view;
	uint64_t *sums = NULL;
	int have_sums = 0;
	char err[1024];
	int fd;

	fd = file_open_regular(sf->path, O_RDONLY, NULL, err, sizeof(err));
	if (fd < 0) {
		problem(v, "%s", err);
		return;
	}
	/* Sized by record_count, which parse checked against the file. */
	if (sf->record_sums_length) {
		sums = malloc((size_t)sf->record_sums_length);
		if (!sums)
			problem(v, "%s: out of memory for %llu record checksums",
				sf->path, (unsigned long long)sf->record_count);
		else if (shard_read_record_sums(sf, sums, err, sizeof(err)) < 0)
			problem(v, "%s", err);
		else
			have_sums = 1;
	}
	for (uint64_t b = 0; b < sf->block_count; b++) {
		if (block_read(&br, fd, schema, sf, b, &view, err,
			       sizeof(err)) < 0) {
			problem(v, "%s", err);
			continue;
		}
		if (have_sums || (dt && dt->set != UINT32_MAX))
			verify_record_sums(v, schema, sf, b, &view,
					   have_sums ? sums : NULL, dt);
	}
	close(fd);
	free(sums);
	block_reader_free(&br);
}

/* Verify one shard; fills @sf (caller frees) and @own, its schema, when
 * its header and index are sound, else leaves them empty.  @schema: the
 * schema it must have. */
static void verify_shard(struct verifier *v, const char *path,
			 const struct shard_schema *schema,
			 struct shard_file *sf, struct shard_schema *own,
			 struct dup_check *dc, uint32_t ordinal)
{
	struct dup_target dt = { dc, UINT32_MAX, ordinal };
	char err[512];

	if (shard_open(path, sf, own, err, sizeof(err)) < 0) {
		problem(v, "%s", err);
		return;
	}
	if (schema && !schema_equal(own, schema))
		problem(v, "%s: schema differs from the dataset's", path);
	if (dc)
		dt.set = dup_check_set(dc, &sf->id);
	verify_blocks(v, own, sf, &dt);
}

/* Identities of the shards verified so far, for the binding checks. */
struct seen_shards {
	char **paths;           /* NULL where the shard did not open */
	struct shard_identity *ids;
	size_t n, cap;
};

static void seen_add(struct verifier *v, struct seen_shards *s,
		     const struct shard_file *sf)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **np = realloc(s->paths, cap * sizeof(*np));
		struct shard_identity *ni;

		if (np)
			s->paths = np;
		ni = np ? realloc(s->ids, cap * sizeof(*ni)) : NULL;
		if (!ni) {
			problem(v, "out of memory for the shard list");
			return;
		}
		s->ids = ni;
		s->cap = cap;
	}
	s->paths[s->n] = sf->path ? strdup(sf->path) : NULL;
	s->ids[s->n] = sf->id;
	s->n++;
}

static void seen_free(struct seen_shards *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->paths[i]);
	free(s->paths);
	free(s->ids);
	memset(s, 0, sizeof(*s));
}

static void report_problem(void *ctx, const char *line)
{
	problem(ctx, "%s", line);
}

/* Shards given without dataset.json: each dataset's as one whole run. */
static void check_sequence(struct verifier *v, struct seen_shards *s)
{
	/* The count is kept by report_problem; the return is the same. */
	(void)identity_check_sequence((const char *const *)s->paths, s->ids,
				      s->n, report_problem, v);
}

static int is_tmp_name(const char *n)
{
	size_t len = strlen(n);

	return n[0] == '.' && len > 5 && strcmp(n + len - 4, ".tmp") == 0;
}

static int is_shard_name(const char *n)
{
	size_t len = strlen(n), sl = strlen(DLS_SHARD_SUFFIX);

	return n[0] != '.' && len > sl &&
	       strcmp(n + len - sl, DLS_SHARD_SUFFIX) == 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The manifest's file names, sorted, so that each directory entry is
 * looked up in O(log N) (a linear search made verify O(N^2)). */
static const char **sorted_names(const struct manifest *m)
{
	const char **names = malloc((m->nshards ? m->nshards : 1) *
				    sizeof(*names));

	if (!names)
		return NULL;
	for (uint32_t i = 0; i < m->nshards; i++)
		names[i] = m->shards[i].file;
	qsort(names, m->nshards, sizeof(*names), by_name);
	return names;
}

static int listed(const char **names, uint32_t n, const char *name)
{
	return bsearch(&name, names, n, sizeof(*names), by_name) != NULL;
}

static long verify_dir(struct verifier *v, const char *dir)
{
	struct manifest m;
	char err[600], path[4400];
	const char **names = NULL;
	struct dirent *e;
	int have_manifest;
	DIR *d;

	d = opendir(dir);
	if (!d)
		return -errno;
	/* A live writer's files are not an interrupted write's: say so and
	 * stop, since every check below would report its work in progress. */
	{
		long pid;

		if (dir_lock_holder(dir, &pid) > 0) {
			char who[40] = "";

			if (pid > 0)
				snprintf(who, sizeof(who), " (process %ld)",
					 pid);
			problem(v, "%s: busy: a writer%s is writing into it "
				"now; verify it once the writer has finished",
				dir, who);
			closedir(d);
			return v->problems;
		}
	}
	have_manifest = manifest_read(dir, &m, err, sizeof(err)) == 0;
	if (!have_manifest)
		problem(v, "%s", err);
	if (have_manifest) {
		/* Duplicates first, before any shard is read: a shard
		 * listed 100,000 times took 27 s to be refused. */
		snprintf(path, sizeof(path), "%s/%s", dir, DLS_MANIFEST_NAME);
		if (identity_check_duplicates(path, &m, report_problem, v)) {
			closedir(d);
			manifest_free(&m);
			return v->problems;
		}
		names = sorted_names(&m);
		if (!names) {
			problem(v, "%s: out of memory", path);
			closedir(d);
			manifest_free(&m);
			return v->problems;
		}
	}
	while ((e = readdir(d)) != NULL) {
		if (is_tmp_name(e->d_name))
			problem(v, "%s/%s: incomplete temporary file (an "
				"interrupted write)", dir, e->d_name);
		else if (have_manifest && is_shard_name(e->d_name) &&
			 !listed(names, m.nshards, e->d_name))
			problem(v, "%s/%s: shard not listed in %s", dir,
				e->d_name, DLS_MANIFEST_NAME);
	}
	free(names);
	if (!have_manifest) {
		/* Still check whatever shards are there, in name order. */
		char **paths;
		size_t n;

		struct seen_shards seen = { 0 };

		closedir(d);
		snprintf(path, sizeof(path), "%s/*%s", dir, DLS_SHARD_SUFFIX);
		if (dataset_expand_paths(path, &paths, &n, NULL, 0) == 0) {
			struct dup_check dc;

			dup_check_init(&dc, paths, n);
			for (size_t i = 0; i < n; i++) {
				struct shard_schema own;
				struct shard_file sf;

				verify_shard(v, paths[i], NULL, &sf, &own, &dc,
					     (uint32_t)i);
				seen_add(v, &seen, &sf);
				shard_file_free(&sf);
			}
			dup_check_report(&dc, report_problem, v);
			dup_check_free(&dc);
			dataset_free_paths(paths, n);
		}
		check_sequence(v, &seen);
		seen_free(&seen);
		return v->problems;
	}
	closedir(d);
	{
		struct seen_shards seen = { 0 };
		uint64_t records = 0, raw = 0, stored = 0;
		int whole = 1;  /* every shard parsed: its byte sums count */

		for (uint32_t i = 0; i < m.nshards; i++) {
			const struct manifest_shard *ms = &m.shards[i];
			struct shard_schema own;
			struct shard_file sf;

			snprintf(path, sizeof(path), "%s/%s", dir, ms->file);
			verify_shard(v, path, &m.schema, &sf, &own, NULL, 0);
			if (sf.path && (sf.record_count != ms->records ||
					sf.block_count != ms->blocks ||
					sf.file_size != ms->bytes))
				problem(v, "%s: %llu records, %llu blocks, %llu "
					"bytes; %s says %llu, %llu, %llu", path,
					(unsigned long long)sf.record_count,
					(unsigned long long)sf.block_count,
					(unsigned long long)sf.file_size,
					DLS_MANIFEST_NAME,
					(unsigned long long)ms->records,
					(unsigned long long)ms->blocks,
					(unsigned long long)ms->bytes);
			records += ms->records;
			if (sf.path) {
				raw += sf.raw_bytes;
				stored += sf.stored_bytes;
			} else {
				whole = 0;
			}
			seen_add(v, &seen, &sf);
			shard_file_free(&sf);
		}
		if (whole && (raw != m.raw_bytes || stored != m.stored_bytes))
			problem(v, "%s/%s: says raw_bytes %llu and "
				"stored_bytes %llu, its shards hold %llu and "
				"%llu", dir, DLS_MANIFEST_NAME,
				(unsigned long long)m.raw_bytes,
				(unsigned long long)m.stored_bytes,
				(unsigned long long)raw,
				(unsigned long long)stored);
		snprintf(path, sizeof(path), "%s/%s", dir, DLS_MANIFEST_NAME);
		if (seen.n == m.nshards)
			(void)identity_check_manifest(
				path, &m, (const char *const *)seen.paths,
				seen.ids, report_problem, v);
		seen_free(&seen);
		if (records != m.records)
			problem(v, "%s/%s: says %llu records, its shards list "
				"%llu", dir, DLS_MANIFEST_NAME,
				(unsigned long long)m.records,
				(unsigned long long)records);
	}
	manifest_free(&m);
	return v->problems;
}

long dataset_verify(const char *path, verify_report_fn report, void *ctx)
{
	struct verifier v = { report, ctx, 0 };
	struct shard_schema first;
	int have_first = 0;
	struct stat st;
	char err[512];
	char **paths;
	size_t n;
	int r;

	if (!path || !*path)
		return -EINVAL;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		long got = verify_dir(&v, path);

		if (got < 0 && report) {
			snprintf(err, sizeof(err), "%s: %s", path,
				 sluice_strerror((int)got));
			report(ctx, err);
		}
		return got;
	}
	if (stat(path, &st) == 0) {
		struct shard_schema own;
		struct shard_file sf;

		verify_shard(&v, path, NULL, &sf, &own, NULL, 0);
		shard_file_free(&sf);
		return v.problems;
	}
	r = dataset_expand_paths(path, &paths, &n, err, sizeof(err));
	if (r < 0) {
		if (report)
			report(ctx, err);
		return r;
	}
	{
		struct seen_shards seen = { 0 };
		struct dup_check dc;

		/* Two datasets or more: their records are compared too. */
		dup_check_init(&dc, paths, n);
		for (size_t i = 0; i < n; i++) {
			struct shard_schema own;
			struct shard_file sf;

			/* The first sound shard sets the schema the others
			 * must have. */
			verify_shard(&v, paths[i], have_first ? &first : NULL,
				     &sf, &own, &dc, (uint32_t)i);
			if (!have_first && sf.path) {
				first = own;
				have_first = 1;
			}
			seen_add(&v, &seen, &sf);
			shard_file_free(&sf);
		}
		check_sequence(&v, &seen);
		seen_free(&seen);
		dup_check_report(&dc, report_problem, &v);
		dup_check_free(&dc);
	}
	dataset_free_paths(paths, n);
	return v.problems;
}
