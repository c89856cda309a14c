/*
 * dataset.c - a dataset: shards in order with one schema, from a
 * directory (dataset.json), one shard, a comma-separated list or a glob;
 * and the public sluice_dataset_* functions.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "identity.h"
#include "manifest.h"
#include "shard_internal.h"

/* A growing list of shard paths. */
struct path_list {
	char **v;
	size_t n, cap;
};

static int path_list_add(struct path_list *l, const char *p, size_t len)
{
	char *s;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		char **nv = realloc(l->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	s = strndup(p, len);
	if (!s)
		return -ENOMEM;
	l->v[l->n++] = s;
	return 0;
}

static void path_list_free(struct path_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* One list item: a glob pattern expands (sorted), a name stays. */
static int expand_item(struct path_list *l, const char *item, char *err,
		       size_t errlen)
{
	glob_t g;
	int r;

	if (!strpbrk(item, "*?["))
		return path_list_add(l, item, strlen(item));
	r = glob(item, GLOB_ERR, NULL, &g);
	if (r == GLOB_NOMATCH) {
		errf(err, errlen, "%s: no file matches", item);
		return -ENOENT;
	}
	if (r != 0) {
		errf(err, errlen, "%s: glob failed", item);
		return r == GLOB_NOSPACE ? -ENOMEM : -EIO;
	}
	r = 0;
	for (size_t i = 0; i < g.gl_pathc && r == 0; i++)
		r = path_list_add(l, g.gl_pathv[i], strlen(g.gl_pathv[i]));
	globfree(&g);
	return r;
}

static int by_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A list that names one path more than once (sorted copy, O(N log N)):
 * refused before any shard is opened, as a manifest's duplicates are.
 * Paths that differ as strings but name one file are left to the
 * identity checks. */
static int check_list_duplicates(const struct path_list *l, const char *spec,
				 char *err, size_t errlen)
{
	char **v;
	size_t hi;
	int r = 0;

	if (l->n < 2)
		return 0;
	v = malloc(l->n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memcpy(v, l->v, l->n * sizeof(*v));
	qsort(v, l->n, sizeof(*v), by_path);
	for (size_t lo = 0; lo < l->n && r == 0; lo = hi) {
		for (hi = lo + 1; hi < l->n && strcmp(v[lo], v[hi]) == 0; hi++)
			;
		if (hi - lo > 1) {
			char times[32];

			if (hi - lo == 2)
				snprintf(times, sizeof(times), "twice");
			else
				snprintf(times, sizeof(times), "%zu times",
					 hi - lo);
			errf(err, errlen, "%s: names %s %s (a shard listed "
			     "twice is a duplicate, not more data)", spec,
			     v[lo], times);
			r = -SLUICE_ECORRUPT;
		}
	}
	free(v);
	return r;
}

/* Totals over the shards; @differs: the first shard whose fields are not
 * the dataset's (open_shards), UINT32_MAX for none. */
static int finish_dataset(struct dataset *ds, uint32_t differs, char *err,
			  size_t errlen)
{
	uint64_t total = 0;

	ds->shard_first = calloc((size_t)ds->nshards + 1, sizeof(uint64_t));
	if (!ds->shard_first)
		return -ENOMEM;
	for (uint32_t i = 0; i < ds->nshards; i++) {
		struct shard_file *sf = &ds->shards[i];

		if (i == differs) {
			errf(err, errlen,
			     "%s: schema differs from %s", sf->path,
			     i ? ds->shards[0].path : ds->source);
			return -SLUICE_ESCHEMA;
		}
		ds->shard_first[i] = total;
		if (__builtin_add_overflow(total, sf->record_count, &total) ||
		    __builtin_add_overflow(ds->block_count, sf->block_count,
					   &ds->block_count)) {
			errf(err, errlen, "%s: record count overflows",
			     sf->path);
			return -SLUICE_ECORRUPT;
		}
		if (sf->max_stored > ds->max_stored)
			ds->max_stored = sf->max_stored;
		if (sf->max_raw > ds->max_raw)
			ds->max_raw = sf->max_raw;
		if (sf->alignment > ds->max_alignment)
			ds->max_alignment = sf->alignment;
	}
	ds->shard_first[ds->nshards] = total;
	ds->record_count = total;
	return 0;
}

/*
 * Open the shards.  The dataset holds the schema once: the manifest's
 * when it set one, else the first shard's; its max_value_bytes become
 * the max over the shards, while each shard keeps only its own bounds.
 * The first shard whose fields differ goes into @differs, for
 * finish_dataset to report after the identity checks.
 */
static int open_shards(struct dataset *ds, char *const *paths, size_t n,
		       uint32_t *differs, char *err, size_t errlen)
{
	struct shard_schema s;
	int r;

	*differs = UINT32_MAX;
	if (n > UINT32_MAX)
		return -E2BIG;
	ds->shards = calloc(n ? n : 1, sizeof(*ds->shards));
	if (!ds->shards)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		r = shard_open(paths[i], &ds->shards[i], &s, err, errlen);
		if (r < 0)
			return r;
		ds->nshards = (uint32_t)(i + 1);
		if (ds->schema.nfields == 0)
			ds->schema = s;
		if (!schema_equal(&s, &ds->schema)) {
			if (*differs == UINT32_MAX)
				*differs = (uint32_t)i;
			continue;
		}
		for (uint32_t f = 0; f < s.nfields; f++) {
			uint64_t m = s.fields[f].max_value_bytes;

			if (m > ds->schema.fields[f].max_value_bytes)
				ds->schema.fields[f].max_value_bytes = m;
		}
	}
	return 0;
}

/* The manifest's byte totals must be the shards' (info and tools report
 * them as the dataset's size). */
static int check_byte_totals(const struct dataset *ds,
			     const struct manifest *m, const char *dir,
			     char *err, size_t errlen)
{
	uint64_t raw = 0, stored = 0;
	int overflow = 0;

	for (uint32_t i = 0; i < ds->nshards; i++) {
		overflow |= __builtin_add_overflow(raw, ds->shards[i].raw_bytes,
						   &raw);
		overflow |= __builtin_add_overflow(
			stored, ds->shards[i].stored_bytes, &stored);
	}
	if (overflow || raw != m->raw_bytes || stored != m->stored_bytes) {
		errf(err, errlen,
		     "%s/%s: says raw_bytes %llu and stored_bytes %llu, the "
		     "shards hold %llu and %llu",
		     dir, DLS_MANIFEST_NAME, (unsigned long long)m->raw_bytes,
		     (unsigned long long)m->stored_bytes,
		     (unsigned long long)raw, (unsigned long long)stored);
		return -SLUICE_ECORRUPT;
	}
	return 0;
}

/* Keeps the first problem an identity check reports as the error. */
struct first_problem {
	char *err;
	size_t errlen;
	int seen;
};

static void keep_first(void *ctx, const char *line)
{
	struct first_problem *fp = ctx;

	if (!fp->seen++)
		errf(fp->err, fp->errlen, "%s", line);
}

/* The shards' identities: against dataset.json when @m, else as a run. */
static int check_identities(const struct dataset *ds, const char *dir,
			    const struct manifest *m, char *err,
			    size_t errlen)
{
	char mpath[4200];
	struct first_problem fp = { err, errlen, 0 };
	struct shard_identity *ids;
	const char **paths;
	long problems;

	ids = calloc(ds->nshards ? ds->nshards : 1, sizeof(*ids));
	paths = calloc(ds->nshards ? ds->nshards : 1, sizeof(*paths));
	if (!ids || !paths) {
		free(ids);
		free(paths);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ds->nshards; i++) {
		ids[i] = ds->shards[i].id;
		paths[i] = ds->shards[i].path;
	}
	snprintf(mpath, sizeof(mpath), "%s/%s", dir ? dir : ".",
		 DLS_MANIFEST_NAME);
	problems = m ? identity_check_manifest(mpath, m, paths, ids,
					       keep_first, &fp)
		     : identity_check_sequence(paths, ids, ds->nshards,
					       keep_first, &fp);
	free(ids);
	free(paths);
	return problems ? -SLUICE_ECORRUPT : 0;
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n > k && strcmp(s + n - k, suffix) == 0;
}

/* What @dir holds: shard files, committed (*.dls) or not (.*.tmp), and
 * WebDataset tars. */
static void scan_dir(const char *dir, int *shards, int *tars)
{
	struct dirent *e;
	DIR *d = opendir(dir);

	*shards = *tars = 0;
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);

		if (ends_with(e->d_name, n, ".dls") ||
		    (e->d_name[0] == '.' && ends_with(e->d_name, n, ".tmp")))
			*shards = 1;
		else if (ends_with(e->d_name, n, ".tar"))
			*tars = 1;
	}
	closedir(d);
}

/* A folder with neither dataset.json nor shards is the user's source
 * data: say so and name the command that makes a dataset of it. */
static void not_a_dataset(const char *dir, int tars, char *err,
			  size_t errlen)
{
	size_t n = strlen(dir);

	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (tars)
		errf(err, errlen,
		     "%.*s is not a sluice dataset (no %s, no shards); to "
		     "convert its WebDataset tars: dlpack-shard convert "
		     "'%.*s/*.tar' --from tar --out %.*s-shards",
		     (int)n, dir, DLS_MANIFEST_NAME, (int)n, dir, (int)n, dir);
	else
		errf(err, errlen,
		     "%.*s is not a sluice dataset (no %s, no shards); to "
		     "convert it (an ImageFolder tree: a folder per class): "
		     "dlpack-shard convert %.*s --out %.*s-shards",
		     (int)n, dir, DLS_MANIFEST_NAME, (int)n, dir, (int)n, dir);
}

/* "classes" names an int64 scalar field of the schema. */
static int check_classes(const struct dataset *ds, const struct manifest *m,
			 const char *dir, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < ds->schema.nfields; i++) {
		const struct sluice_field *f = &ds->schema.fields[i].f;

		if (strcmp(f->name, m->classes.field) == 0 && f->ndim == 0 &&
		    f->dtype.code == kDLInt && f->dtype.bits == 64 &&
		    f->dtype.lanes == 1)
			return 0;
	}
	errf(err, errlen, "%s/%s: \"classes\" names '%s', not an int64 "
	     "scalar field", dir, DLS_MANIFEST_NAME, m->classes.field);
	return -SLUICE_ECORRUPT;
}

static int load_dir(struct dataset *ds, const char *dir,
		    struct dataset_classes *classes, char *err, size_t errlen)
{
	struct path_list l = { 0 };
	struct manifest m;
	char path[4096];
	uint32_t differs;
	int r;

	r = manifest_read(dir, &m, err, errlen);
	if (r == -ENOENT) {
		int shards, tars;

		scan_dir(dir, &shards, &tars);
		if (!shards)
			not_a_dataset(dir, tars, err, errlen);
	}
	if (r < 0)
		return r;
	/* A shard listed many times would be opened and parsed each time
	 * before the identity checks: refuse duplicates first (sorted,
	 * O(N log N)), before any shard is read. */
	{
		struct first_problem fp = { err, errlen, 0 };

		snprintf(path, sizeof(path), "%s/%s", dir, DLS_MANIFEST_NAME);
		if (identity_check_duplicates(path, &m, keep_first, &fp)) {
			r = -SLUICE_ECORRUPT;
			goto out;
		}
	}
	ds->schema = m.schema;
	for (uint32_t i = 0; i < m.nshards; i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
				     m.shards[i].file) >= sizeof(path)) {
			r = -ENAMETOOLONG;
			errf(err, errlen, "%s: path too long", dir);
			goto out;
		}
		r = path_list_add(&l, path, strlen(path));
		if (r < 0)
			goto out;
	}
	r = open_shards(ds, l.v, l.n, &differs, err, errlen);
	if (r < 0) {
		if (r == -ENOENT)
			errf(err, errlen, "%s/%s: shard %s listed in the "
			     "manifest is missing", dir, DLS_MANIFEST_NAME,
			     m.shards[ds->nshards].file);
		goto out;
	}
	r = check_identities(ds, dir, &m, err, errlen);
	if (r < 0)
		goto out;
	for (uint32_t i = 0; i < m.nshards; i++) {
		const struct shard_file *sf = &ds->shards[i];

		if (sf->record_count != m.shards[i].records ||
		    sf->block_count != m.shards[i].blocks ||
		    sf->file_size != m.shards[i].bytes) {
			r = -SLUICE_ECORRUPT;
			errf(err, errlen,
			     "%s: %llu records, %llu blocks, %llu bytes; the "
			     "manifest says %llu, %llu, %llu",
			     sf->path, (unsigned long long)sf->record_count,
			     (unsigned long long)sf->block_count,
			     (unsigned long long)sf->file_size,
			     (unsigned long long)m.shards[i].records,
			     (unsigned long long)m.shards[i].blocks,
			     (unsigned long long)m.shards[i].bytes);
			goto out;
		}
	}
	r = finish_dataset(ds, differs, err, errlen);
	if (r == 0 && ds->record_count != m.records) {
		r = -SLUICE_ECORRUPT;
		errf(err, errlen, "%s/%s: says %llu records, shards hold %llu",
		     dir, DLS_MANIFEST_NAME, (unsigned long long)m.records,
		     (unsigned long long)ds->record_count);
	}
	if (r == 0)
		r = check_byte_totals(ds, &m, dir, err, errlen);
	if (r == 0 && m.classes.n)
		r = check_classes(ds, &m, dir, err, errlen);
	if (r == 0 && classes) {
		*classes = m.classes;         /* moved out of m */
		memset(&m.classes, 0, sizeof(m.classes));
	}
out:
	path_list_free(&l);
	manifest_free(&m);
	return r;
}

int dataset_expand_paths(const char *spec, char ***paths, size_t *n,
			 char *err, size_t errlen)
{
	struct path_list l = { 0 };
	const char *p = spec;
	int r = 0;

	*paths = NULL;
	*n = 0;
	while (r == 0 && *p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char *item = strndup(p, len);

		if (!item) {
			r = -ENOMEM;
			break;
		}
		if (len)
			r = expand_item(&l, item, err, errlen);
		free(item);
		p += len + (comma ? 1 : 0);
	}
	if (r < 0) {
		path_list_free(&l);
		return r;
	}
	*paths = l.v;
	*n = l.n;
	return 0;
}

void dataset_free_paths(char **paths, size_t n)
{
	struct path_list l = { paths, n, n };

	path_list_free(&l);
}

static int load(const char *path, struct dataset *out,
		struct dataset_classes *classes, char *err, size_t errlen);

int dataset_load(const char *path, struct dataset *out, char *err,
		 size_t errlen)
{
	return load(path, out, NULL, err, errlen);
}

/* dataset_load, and a directory's class names into @classes (NULL: not
 * wanted). */
static int load(const char *path, struct dataset *out,
		struct dataset_classes *classes, char *err, size_t errlen)
{
	struct path_list l = { 0 };
	struct stat st;
	uint32_t differs;
	int r;

	memset(out, 0, sizeof(*out));
	out->source = strdup(path ? path : "");
	if (!out->source)
		return -ENOMEM;
	if (!path || !*path) {
		errf(err, errlen, "empty dataset path");
		return -EINVAL;
	}
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		r = load_dir(out, path, classes, err, errlen);
		goto out;
	}
	if (stat(path, &st) == 0)
		r = path_list_add(&l, path, strlen(path));
	else
		r = dataset_expand_paths(path, &l.v, &l.n, err, errlen);
	if (r < 0)
		goto out;
	if (l.n == 0) {
		r = -ENOENT;
		errf(err, errlen, "%s: no shard files", path);
		goto out;
	}
	r = check_list_duplicates(&l, path, err, errlen);
	if (r < 0)
		goto out;
	r = open_shards(out, l.v, l.n, &differs, err, errlen);
	if (r < 0)
		goto out;
	/* One shard named exactly is the caller's choice (tools inspect
	 * single shards); lists and globs must hold whole datasets. */
	if (l.n > 1 || strcmp(l.v[0], path) != 0)
		r = check_identities(out, NULL, NULL, err, errlen);
	if (r < 0)
		goto out;
	r = finish_dataset(out, differs, err, errlen);
out:
	path_list_free(&l);
	if (r < 0) {
		if (r == -ENOMEM)
			errf(err, errlen, "%s: out of memory", path);
		dataset_free(out);
	}
	return r;
}

void dataset_free(struct dataset *ds)
{
	if (!ds)
		return;
	for (uint32_t i = 0; ds->shards && i < ds->nshards; i++)
		shard_file_free(&ds->shards[i]);
	free(ds->shards);
	free(ds->shard_first);
	free(ds->source);
	memset(ds, 0, sizeof(*ds));
}

int dataset_locate(const struct dataset *ds, uint64_t index,
		   uint32_t *shard, uint64_t *block, uint32_t *in_block)
{
	uint32_t lo;
	uint64_t blo = 0, bhi, rel;
	const struct shard_file *sf;

	if (index >= ds->record_count)
		return -ERANGE;
	/* Last shard whose first record is <= index (skipping empty ones). */
	lo = (uint32_t)last_at_or_before(ds->shard_first, ds->nshards, index);
	sf = &ds->shards[lo];
	rel = index - ds->shard_first[lo];
	bhi = sf->block_count;
	while (bhi - blo > 1) {
		uint64_t mid = blo + (bhi - blo) / 2;

		if (sf->blocks[mid].first_record <= rel)
			blo = mid;
		else
			bhi = mid;
	}
	*shard = lo;
	*block = blo;
	*in_block = (uint32_t)(rel - sf->blocks[blo].first_record);
	return 0;
}

/* ---- the public handle ---- */

void dataset_set_error(struct sluice_dataset *ds, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&ds->lock);
	va_start(ap, fmt);
	vsnprintf(ds->err, sizeof(ds->err), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&ds->lock);
}

SLUICE_API int sluice_dataset_open(const char *path, sluice_dataset **out)
{
	struct sluice_dataset *ds;
	int r;

	*out = NULL;
	ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	pthread_mutex_init(&ds->lock, NULL);
	r = load(path, &ds->d, &ds->classes, ds->err, sizeof(ds->err));
	if (r == 0)
		ds->loaded = 1;
	*out = ds;
	return r;
}

SLUICE_API void sluice_dataset_close(sluice_dataset *ds)
{
	if (!ds)
		return;
	dataset_free(&ds->d);
	dataset_classes_free(&ds->classes);
	pthread_mutex_destroy(&ds->lock);
	free(ds);
}

SLUICE_API int sluice_dataset_error(const sluice_dataset *ds, char *buf,
				    size_t len)
{
	struct sluice_dataset *m = (struct sluice_dataset *)(uintptr_t)ds;
	int n;

	if (!ds)
		return snprintf(buf, len, "no dataset");
	pthread_mutex_lock(&m->lock);
	n = snprintf(buf, len, "%s", ds->err);
	pthread_mutex_unlock(&m->lock);
	return n;
}

SLUICE_API uint64_t sluice_dataset_records(const sluice_dataset *ds)
{
	return ds ? ds->d.record_count : 0;
}

SLUICE_API uint32_t sluice_dataset_shards(const sluice_dataset *ds)
{
	return ds ? ds->d.nshards : 0;
}

SLUICE_API uint64_t sluice_dataset_blocks(const sluice_dataset *ds)
{
	return ds ? ds->d.block_count : 0;
}

SLUICE_API int sluice_dataset_field_count(const sluice_dataset *ds)
{
	return ds && ds->loaded ? (int)ds->d.schema.nfields : 0;
}

SLUICE_API const struct sluice_field *
sluice_dataset_field(const sluice_dataset *ds, int i)
{
	if (!ds || !ds->loaded || i < 0 || (uint32_t)i >= ds->d.schema.nfields)
		return NULL;
	return &ds->d.schema.fields[i].f;
}

SLUICE_API int sluice_dataset_read(sluice_dataset *ds, uint64_t index,
				   const char *field, void *buf, size_t cap,
				   size_t *len)
{
	const struct shard_file *sf;
	struct block_reader br = { 0 };
	struct block_view view;
	const uint8_t *ptr;
	uint64_t b, flen;
	uint32_t s, in_block, f;
	char err[sizeof(ds->err)];
	int fd, r;

	if (len)
		*len = 0;
	if (!ds || !ds->loaded || !field)
		return -EINVAL;
	r = dataset_locate(&ds->d, index, &s, &b, &in_block);
	if (r < 0) {
		dataset_set_error(ds, "record %llu out of range (%llu records)",
				  (unsigned long long)index,
				  (unsigned long long)ds->d.record_count);
		return r;
	}
	for (f = 0; f < ds->d.schema.nfields; f++)
		if (strcmp(ds->d.schema.fields[f].f.name, field) == 0)
			break;
	if (f == ds->d.schema.nfields) {
		dataset_set_error(ds, "no field '%s'", field);
		return -ENOENT;
	}
	sf = &ds->d.shards[s];
	fd = file_open_regular(sf->path, O_RDONLY, NULL, err, sizeof(err));
	if (fd < 0) {
		dataset_set_error(ds, "%s", err);
		return fd;
	}
	r = block_read(&br, fd, &ds->d.schema, sf, b, &view, err, sizeof(err));
	close(fd);
	if (r < 0) {
		dataset_set_error(ds, "%s", err);
		block_reader_free(&br);
		return r;
	}
	block_view_get(&ds->d.schema, &view, f, in_block, &ptr, &flen);
	if (len)
		*len = (size_t)flen;
	if (flen > cap)
		r = -ENOSPC;
	else if (flen)
		memcpy(buf, ptr, flen);
	block_reader_free(&br);
	return r;
}

const struct dataset *dataset_table(const sluice_dataset *ds)
{
	return ds && ds->loaded ? &ds->d : NULL;
}

SLUICE_API int64_t sluice_dataset_class_count(const sluice_dataset *ds,
					      const char **field)
{
	if (!ds || !ds->loaded)
		return -EINVAL;
	if (field)
		*field = ds->classes.n ? ds->classes.field : NULL;
	return ds->classes.n;
}

SLUICE_API const char *sluice_dataset_class_name(const sluice_dataset *ds,
						 uint32_t label)
{
	if (!ds || !ds->loaded || label >= ds->classes.n)
		return NULL;
	return ds->classes.names[label];
}
