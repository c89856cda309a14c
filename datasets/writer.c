/*
 * writer.c - sluice_writer: records into field-major blocks, blocks
 * through the compression pool, written in order into shards at aligned
 * offsets.  Every shard stays under a temporary name, its header marked
 * uncommitted (shard count 0), until the whole dataset is written; then
 * each header gets the count, is synced, and the shards are renamed;
 * dataset.json last.  The folder is locked while the writer runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dir_lock.h"
#include "identity.h"
#include "manifest.h"
#include "shard_internal.h"
#include "sluice_xxh3.h"
#include "writer_block.h"
#include "writer_commit.h"
#include "writer_internal.h"
#include "writer_pool.h"
#include "writer_sums.h"

#define WRITER_MAX_THREADS 64u
#define PATH_CAP 4096

struct sluice_writer {
	char out_dir[PATH_CAP];
	char prefix[128];
	struct sluice_writer_config cfg;
	struct shard_schema schema;
	uint8_t dataset_id[DLS_DATASET_ID_LEN];
	char tag[17];                   /* temporary names: unique per writer */
	struct shard_names names;       /* out_dir, prefix, tag */
	int lock_fd;

	struct open_block ob;           /* records not yet in a block */
	uint64_t planned_in_shard;      /* records_per_shard bookkeeping */

	struct wpool pool;

	/* the shard being written */
	int fd;
	char name[256], tmp_path[SHARD_PATH_CAP];
	uint64_t pos;
	struct dls_index_entry_disk *index;
	uint64_t nindex, index_cap;
	struct writer_sums sums;        /* its records' checksums (v3), in
					   bounded memory */
	uint64_t shard_records, shard_raw, shard_stored;
	/* its longest value per variable field: its header's bound (the
	 * blocks', as they are written: the same bytes whenever the
	 * compressing threads finish) */
	uint64_t shard_longest[DLS_MAX_FIELDS];

	struct manifest man;            /* finished shards and totals */
	uint32_t shards_cap;
	uint64_t blocks;
	uint32_t renamed;               /* shards under their final names */
	int committed;                  /* the dataset is complete */

	_Atomic uint64_t progress_records, progress_raw, progress_stored;
	int failed;
	char err[512];
	struct timespec start;
};

static int fail(struct sluice_writer *w, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct sluice_writer *w, int code, const char *fmt, ...)
{
	va_list ap;

	if (!w->failed) {
		va_start(ap, fmt);
		vsnprintf(w->err, sizeof(w->err), fmt, ap);
		va_end(ap);
		w->failed = code;
	}
	return code;
}

SLUICE_API void sluice_writer_config_init(struct sluice_writer_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->prefix = "data";
	cfg->shard_size = 1ull << 30;
	cfg->block_size = 1ull << 20;
	cfg->compression_level = 3;
	cfg->threads = 0;
	cfg->alignment = DLS_DEFAULT_ALIGNMENT;
}

static int write_full(int fd, const void *buf, uint64_t len, uint64_t off)
{
	uint64_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done,
				   (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		done += (uint64_t)n;
	}
	return 0;
}

/* Shard @k's path, final or temporary (never truncated: out_dir and
 * prefix lengths are bounded at open). */
static int shard_path(const struct sluice_writer *w, uint32_t k, int tmp,
		      char *buf, size_t cap)
{
	return shard_names_path(&w->names, k, tmp, buf, cap);
}

static int open_shard(struct sluice_writer *w)
{
	uint32_t k = w->man.nshards;

	snprintf(w->name, sizeof(w->name), "%s-%05u%s", w->prefix, k,
		 DLS_SHARD_SUFFIX);
	shard_path(w, k, 1, w->tmp_path, sizeof(w->tmp_path));
	/* O_EXCL: the name is this writer's alone. */
	w->fd = open(w->tmp_path,
		     O_WRONLY | O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		int r = -errno;

		return fail(w, r, "%s: %s", w->tmp_path, sluice_strerror(r));
	}
	w->pos = DLS_HEADER_SIZE;
	w->nindex = 0;
	w->shard_records = w->shard_raw = w->shard_stored = 0;
	memset(w->shard_longest, 0, sizeof(w->shard_longest));
	return 0;
}

/* Index and header last; the header says "uncommitted" (shard count 0)
 * until commit_shards(), and the name stays temporary. */
static int finish_shard(struct sluice_writer *w)
{
	struct dls_header_disk h;
	struct manifest_shard *ms;
	uint8_t *page;
	uint64_t index_off, index_len, sums_off, sums_len, sums_sum, sum;
	char what[512] = "";
	int r;

	if (w->fd < 0)
		return 0;
	index_off = align_up_u64(w->pos, w->cfg.alignment);
	index_len = w->nindex * sizeof(struct dls_index_entry_disk);
	sums_off = index_off + index_len;
	sums_len = writer_sums_count(&w->sums) * 8;
	if (sums_len != w->shard_records * 8)
		return fail(w, -EIO, "%s: %llu record checksums for %llu "
			    "records", w->tmp_path,
			    (unsigned long long)(sums_len / 8),
			    (unsigned long long)w->shard_records);
	r = write_full(w->fd, w->index, index_len, index_off);
	if (r == 0)
		r = writer_sums_write(&w->sums, w->fd, sums_off, &sums_sum,
				      what, sizeof(what));
	if (r < 0 && what[0])
		return fail(w, r, "%s", what);
	if (r < 0)
		return fail(w, r, "%s: writing the index: %s", w->tmp_path,
			    sluice_strerror(r));
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, DLS_MAGIC, DLS_MAGIC_LEN);
	h.version = DLS_VERSION;
	h.header_size = DLS_HEADER_SIZE;
	h.alignment = w->cfg.alignment;
	h.field_count = w->schema.nfields;
	h.record_count = w->shard_records;
	h.block_count = w->nindex;
	h.index_offset = index_off;
	h.index_length = index_len;
	h.index_checksum = XXH3_64bits(w->index, index_len);
	h.raw_bytes = w->shard_raw;
	h.record_sums_offset = sums_off;
	h.record_sums_length = sums_len;
	h.record_sums_checksum = sums_sum;
	memcpy(h.dataset_id, w->dataset_id, sizeof(h.dataset_id));
	h.shard_index = w->man.nshards;
	h.shard_count = 0;
	schema_to_disk(&w->schema, h.fields);
	for (uint32_t f = 0; f < w->schema.nfields; f++)
		h.fields[f].max_value_bytes = w->shard_longest[f];
	page = calloc(1, DLS_HEADER_SIZE);
	if (!page)
		return fail(w, -ENOMEM, "out of memory");
	memcpy(page, &h, sizeof(h));
	sum = header_checksum(page);
	memcpy(page + DLS_HEADER_CHECKSUM_OFFSET, &sum, 8);
	r = write_full(w->fd, page, DLS_HEADER_SIZE, 0);
	free(page);
	if (r < 0)
		return fail(w, r, "%s: writing the header: %s", w->tmp_path,
			    sluice_strerror(r));
	/* Synced now, not at commit: a full disk or an I/O error shows up
	 * while the shard is written, and commit only rewrites a page. */
	if (fsync(w->fd) != 0) {
		r = -errno;
		return fail(w, r, "%s: fsync: %s", w->tmp_path,
			    sluice_strerror(r));
	}
	close(w->fd);
	w->fd = -1;
	if (w->man.nshards == UINT32_MAX - 1)
		return fail(w, -E2BIG, "%s: too many shards", w->out_dir);
	if (w->man.nshards == w->shards_cap) {
		uint32_t cap = w->shards_cap ? w->shards_cap * 2 : 16;
		void *nv = realloc(w->man.shards, cap * sizeof(*w->man.shards));

		if (!nv)
			return fail(w, -ENOMEM, "out of memory");
		w->man.shards = nv;
		w->shards_cap = cap;
	}
	ms = &w->man.shards[w->man.nshards];
	memset(ms, 0, sizeof(*ms));
	snprintf(ms->file, MANIFEST_FILE_MAX, "%s", w->name);
	ms->records = w->shard_records;
	ms->blocks = w->nindex;
	ms->bytes = sums_off + sums_len;
	ms->id.bound = 1;
	memcpy(ms->id.dataset_id, w->dataset_id, sizeof(w->dataset_id));
	ms->id.index = w->man.nshards;
	w->man.nshards++;
	return 0;
}

/* The dataset is complete: commit and rename its shards. */
static int commit_shards(struct sluice_writer *w)
{
	char what[512];
	int r = shards_commit(&w->names, &w->man, &w->renamed, what,
			      sizeof(what));

	return r < 0 ? fail(w, r, "%s", what) : 0;
}

/* Write one compressed block (the oldest) at the next aligned offset. */
static int write_block(struct sluice_writer *w, const struct wslot *s)
{
	struct dls_index_entry_disk *e;
	uint64_t off;
	int r;

	if (s->error < 0)
		return fail(w, s->error, "%s: block %llu: %s", w->out_dir,
			    (unsigned long long)w->blocks,
			    sluice_strerror(s->error));
	if (w->fd < 0 && (r = open_shard(w)) < 0)
		return r;
	off = align_up_u64(w->pos, w->cfg.alignment);
	r = write_full(w->fd, s->stored, s->stored_size, off);
	if (r < 0)
		return fail(w, r, "%s: block %llu: offset %llu: %s",
			    w->tmp_path, (unsigned long long)w->nindex,
			    (unsigned long long)off, sluice_strerror(r));
	if (w->nindex == w->index_cap) {
		uint64_t cap = w->index_cap ? w->index_cap * 2 : 64;
		void *nv = realloc(w->index, cap * sizeof(*w->index));

		if (!nv)
			return fail(w, -ENOMEM, "out of memory");
		w->index = nv;
		w->index_cap = cap;
	}
	{
		char what[512];

		r = writer_sums_add(&w->sums, s->sums, s->records, what,
				    sizeof(what));
		if (r < 0)
			return fail(w, r, "%s", what);
	}
	e = &w->index[w->nindex++];
	memset(e, 0, sizeof(*e));
	e->offset = off;
	e->stored_size = s->stored_size;
	e->raw_size = s->raw_size;
	e->first_record = w->shard_records;
	e->record_count = s->records;
	e->codec = s->codec;
	e->checksum = s->checksum;
	w->pos = off + s->stored_size;
	w->shard_records += s->records;
	w->shard_raw += s->raw_size;
	w->shard_stored += s->stored_size;
	for (uint32_t f = 0; f < w->schema.nfields; f++)
		if (s->longest[f] > w->shard_longest[f])
			w->shard_longest[f] = s->longest[f];
	w->man.records += s->records;
	w->man.raw_bytes += s->raw_size;
	w->man.stored_bytes += s->stored_size;
	w->blocks++;
	atomic_store_explicit(&w->progress_stored, w->man.stored_bytes,
			      memory_order_relaxed);
	if (s->ends_shard ||
	    (w->cfg.shard_size && w->shard_stored >= w->cfg.shard_size))
		return finish_shard(w);
	return 0;
}

/* Write every finished block at the head of the ring (waiting when @all). */
static int drain(struct sluice_writer *w, int all)
{
	struct wslot *s;
	int r;

	while ((s = wpool_oldest(&w->pool, all)) != NULL) {
		r = write_block(w, s);
		wpool_retire(&w->pool);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Lay the open block, and records [i, i + k) of @run after its own (none
 * when @run is NULL), into a ring slot and submit it. */
static int close_block(struct sluice_writer *w, int ends_shard,
		       const struct record_run *run, uint64_t i, uint64_t k)
{
	struct wslot *s;
	uint32_t n = w->ob.n + (uint32_t)k;
	int r;

	if (n == 0)
		return 0;
	while ((s = wpool_free_slot(&w->pool)) == NULL) {
		/* Backpressure: the ring is full, write its oldest block. */
		s = wpool_oldest(&w->pool, 1);
		r = write_block(w, s);
		wpool_retire(&w->pool);
		if (r < 0)
			return r;
	}
	if (open_block_lay(&w->ob, run, i, k, &s->raw, &s->raw_cap,
			   &s->raw_size, s->longest) < 0)
		return fail(w, -ENOMEM, "out of memory for a %llu-byte block",
			    (unsigned long long)s->raw_size);
	s->records = n;
	s->ends_shard = ends_shard;
	wpool_submit(&w->pool);
	return drain(w, 0);
}

/* How many of records [i, end) of @run the open block takes, as they
 * would be taken one by one: the most that keep its layout within
 * block_size (its size only grows with records, so a binary search
 * finds them); 0 when the open block must close first; 1 for a lone
 * record larger than a block. */
static uint64_t run_fit(const struct sluice_writer *w,
			const struct record_run *run, uint64_t i, uint64_t end)
{
	uint64_t lo = 0, hi = end - i;

	if (hi > UINT32_MAX - 1 - w->ob.n)
		hi = UINT32_MAX - 1 - w->ob.n;
	if (w->cfg.records_per_shard &&
	    hi > w->cfg.records_per_shard - w->planned_in_shard)
		hi = w->cfg.records_per_shard - w->planned_in_shard;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo + 1) / 2;

		if (open_block_size_with(&w->ob, run, i, mid) <=
		    w->cfg.block_size)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo == 0 && w->ob.n == 0 ? 1 : lo;
}

int writer_add_run(sluice_writer *w, const struct record_run *run)
{
	uint64_t i = run->first, end = run->first + run->count;

	if (w->failed)
		return w->failed;
	while (i < end) {
		uint64_t k = run_fit(w, run, i, end), size, raw = 0;
		int ends_shard, r;

		if (k == 0) {
			/* The next record does not fit: it starts a block. */
			if ((r = close_block(w, 0, NULL, 0, 0)) < 0)
				return r;
			continue;
		}
		size = open_block_size_with(&w->ob, run, i, k);
		if (size > DLS_MAX_BLOCK_BYTES)
			return fail(w, -E2BIG, "record %llu: %llu bytes exceed "
				    "the block limit",
				    (unsigned long long)atomic_load(
					    &w->progress_records),
				    (unsigned long long)size);
		for (uint32_t f = 0; f < w->schema.nfields; f++)
			raw += record_run_start(run, f, i + k) -
			       record_run_start(run, f, i);
		atomic_fetch_add_explicit(&w->progress_raw, raw,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&w->progress_records, k,
					  memory_order_relaxed);
		w->planned_in_shard += k;
		ends_shard = w->cfg.records_per_shard &&
			     w->planned_in_shard >= w->cfg.records_per_shard;
		if (ends_shard)
			w->planned_in_shard = 0;
		/* A block closes when full, at a shard's record count, or
		 * when the run's next record does not fit in it. */
		if (ends_shard || size >= w->cfg.block_size || i + k < end)
			r = close_block(w, ends_shard, run, i, k);
		else if (open_block_stage(&w->ob, run, i, k) < 0)
			r = fail(w, -ENOMEM, "out of memory");
		else
			r = 0;
		if (r < 0)
			return r;
		i += k;
	}
	return 0;
}

/* Names that do not make a folder hold a dataset: all but dataset.json
 * and committed shards (hidden files are temporary or the lock). */
static int not_dataset_file(const char *name)
{
	size_t len = strlen(name), sl = strlen(DLS_SHARD_SUFFIX);

	if (strcmp(name, DLS_MANIFEST_NAME) == 0)
		return 0;
	return name[0] == '.' || len <= sl ||
	       strcmp(name + len - sl, DLS_SHARD_SUFFIX) != 0;
}

/* Create and lock the output folder, which must not hold a dataset. */
static int claim_out_dir(struct sluice_writer *w)
{
	char what[512], found[256];
	int r;

	if (mkdir(w->out_dir, 0755) != 0 && errno != EEXIST) {
		r = -errno;
		return fail(w, r, "%s: %s", w->out_dir, sluice_strerror(r));
	}
	r = dir_lock(w->out_dir, &w->lock_fd, what, sizeof(what));
	if (r < 0)
		return fail(w, r, "%s", what);
	r = dir_first_entry(w->out_dir, not_dataset_file, found,
			    sizeof(found));
	if (r < 0)
		return fail(w, r, "%s: %s", w->out_dir, sluice_strerror(r));
	if (r > 0) {
		/* Not ours to remove on failure: drop the lock first. */
		dir_unlock(w->out_dir, w->lock_fd);
		w->lock_fd = -1;
		return fail(w, -EEXIST, "%s: already holds a dataset (%s); "
			    "write into a new or empty folder", w->out_dir,
			    found);
	}
	return 0;
}

SLUICE_API int sluice_writer_open(const char *out_dir,
				  const struct sluice_field *fields,
				  int nfields,
				  const struct sluice_writer_config *cfg,
				  sluice_writer **out)
{
	struct sluice_writer_config defaults;
	struct sluice_writer *w;
	uint32_t threads;
	char what[256];
	int r;

	*out = NULL;
	if (!cfg) {
		sluice_writer_config_init(&defaults);
		cfg = &defaults;
	}
	if (!out_dir || !*out_dir || strlen(out_dir) >= PATH_CAP - 300)
		return -EINVAL;
	if (cfg->compression_level < 0 || cfg->compression_level > 22 ||
	    cfg->block_size == 0 || cfg->block_size > DLS_MAX_BLOCK_BYTES ||
	    (cfg->alignment &&
	     (cfg->alignment < 512 || cfg->alignment > (1u << 20) ||
	      (cfg->alignment & (cfg->alignment - 1)))))
		return -EINVAL;
	if (cfg->prefix && (!*cfg->prefix || strlen(cfg->prefix) >= 128 ||
			    !shard_name_is_plain(cfg->prefix)))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = -1;
	w->lock_fd = -1;
	w->sums.fd = -1;        /* writer_sums_free before init: nothing */
	clock_gettime(CLOCK_MONOTONIC, &w->start);
	w->cfg = *cfg;
	if (!w->cfg.alignment)
		w->cfg.alignment = DLS_DEFAULT_ALIGNMENT;
	snprintf(w->prefix, sizeof(w->prefix), "%s",
		 cfg->prefix ? cfg->prefix : "data");
	w->cfg.prefix = w->prefix;
	snprintf(w->out_dir, sizeof(w->out_dir), "%s", out_dir);
	r = schema_from_fields(fields, nfields, &w->schema, what, sizeof(what));
	if (r < 0) {
		fail(w, r, "%s", what);
		goto fail;
	}
	r = dataset_id_new(w->dataset_id);
	if (r < 0) {
		fail(w, r, "getrandom: %s", sluice_strerror(r));
		goto fail;
	}
	{
		char hex[DATASET_ID_HEX_LEN + 1];

		dataset_id_hex(w->dataset_id, hex);
		memcpy(w->tag, hex, sizeof(w->tag) - 1);
	}
	w->names = (struct shard_names){ w->out_dir, w->prefix, w->tag };
	w->man.schema = w->schema;
	w->man.bound = 1;
	memcpy(w->man.dataset_id, w->dataset_id, sizeof(w->dataset_id));
	if (open_block_init(&w->ob, &w->schema) < 0 ||
	    writer_sums_init(&w->sums, w->out_dir) < 0) {
		r = fail(w, -ENOMEM, "out of memory");
		goto fail;
	}
	r = claim_out_dir(w);
	if (r < 0)
		goto fail;
	threads = cfg->threads ? cfg->threads : wpool_default_threads();
	if (threads > WRITER_MAX_THREADS)
		threads = WRITER_MAX_THREADS;
	r = wpool_start(&w->pool, threads, cfg->compression_level, &w->schema);
	if (r < 0) {
		fail(w, r, "starting %u compression threads: %s", threads,
		     sluice_strerror(r));
		goto fail;
	}
	*out = w;
	return 0;
fail:
	/* The failed writer says why (sluice_writer_error); the caller
	 * aborts it.  It holds no lock (and wrote no file). */
	dir_unlock(w->out_dir, w->lock_fd);
	w->lock_fd = -1;
	*out = w;
	return r;
}

SLUICE_API int sluice_writer_add(sluice_writer *w, const void *const *values,
				 const uint64_t *lengths)
{
	struct sluice_column cols[DLS_MAX_FIELDS];
	uint64_t offs[DLS_MAX_FIELDS][2];
	struct record_run run = { cols, NULL, 0, 1 };

	if (!w)
		return -EINVAL;
	if (w->failed)
		return w->failed;
	for (uint32_t f = 0; f < w->schema.nfields; f++) {
		const struct shard_field *sf = &w->schema.fields[f];

		if (sf->variable ? lengths[f] % sf->unit_bytes != 0
				 : lengths[f] != sf->record_bytes)
			return fail(w, -SLUICE_ESCHEMA,
				    "record %llu: field '%s': %llu bytes, "
				    "expected %s %llu",
				    (unsigned long long)atomic_load(
					    &w->progress_records),
				    sf->f.name, (unsigned long long)lengths[f],
				    sf->variable ? "a multiple of" : "exactly",
				    (unsigned long long)(sf->variable
								 ? sf->unit_bytes
								 : sf->record_bytes));
		if (lengths[f] && !values[f])
			return fail(w, -EINVAL, "field '%s': NULL value",
				    sf->f.name);
		memset(&cols[f], 0, sizeof(cols[f]));
		cols[f].values = values[f];
		cols[f].values_len = lengths[f];
		cols[f].offsets = offs[f];
		offs[f][0] = 0;
		offs[f][1] = lengths[f];
	}
	return writer_add_run(w, &run);
}

/* Remove every file of a dataset that was not committed: temporary
 * shards (the open one too) and shards already renamed.  Only under the
 * lock: the folder held no dataset when it was taken, so they are ours. */
static void remove_uncommitted(struct sluice_writer *w)
{
	if (w->committed || w->lock_fd < 0)
		return;
	shards_remove(&w->names, w->man.nshards + 1, w->renamed);
}

/* Stop the workers and remove what is not complete. */
static void writer_free(struct sluice_writer *w)
{
	wpool_stop(&w->pool);
	if (w->fd >= 0)
		close(w->fd);
	remove_uncommitted(w);
	dir_unlock(w->out_dir, w->lock_fd);
	open_block_free(&w->ob);
	free(w->index);
	writer_sums_free(&w->sums);
	manifest_free(&w->man);
	free(w);
}

void writer_summary_copy(struct sluice_writer_summary *out,
			 const struct sluice_writer_summary *all)
{
	size_t n = out->size < sizeof(*all) ? out->size : sizeof(*all);
	struct sluice_writer_summary tmp = *all;

	tmp.size = (uint32_t)n;
	if (out->size > n)
		memset((char *)out + n, 0, out->size - n);
	memcpy(out, &tmp, n);
}

SLUICE_API int sluice_writer_close(sluice_writer *w,
				   struct sluice_writer_summary *summary)
{
	struct sluice_writer_summary all = { .size = sizeof(all) };
	struct timespec end;
	char what[512];
	int r = 0, dfd;

	if (summary && summary->size == 0) {
		sluice_writer_abort(w);   /* close frees @w in every case */
		return -EINVAL;
	}
	if (summary)
		writer_summary_copy(summary, &all);
	if (!w)
		return -EINVAL;
	if (!w->failed && (r = close_block(w, 0, NULL, 0, 0)) == 0 &&
	    (r = drain(w, 1)) == 0 && (r = finish_shard(w)) == 0)
		r = commit_shards(w);
	if (w->failed) {
		r = w->failed;
		goto out;
	}
	dfd = open(w->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) != 0)
			r = -errno;
		close(dfd);
	}
	if (r == 0 && !w->cfg.no_manifest) {
		r = manifest_write(w->out_dir, &w->man, what, sizeof(what));
		if (r < 0)
			fail(w, r, "%s", what);
	}
	if (r == 0)
		w->committed = 1;
	if (r == 0 && summary) {
		clock_gettime(CLOCK_MONOTONIC, &end);
		all.records = w->man.records;
		all.blocks = w->blocks;
		all.shards = w->man.nshards;
		all.raw_bytes = w->man.raw_bytes;
		all.stored_bytes = w->man.stored_bytes;
		all.seconds = (double)(end.tv_sec - w->start.tv_sec) +
			      (double)(end.tv_nsec - w->start.tv_nsec) / 1e9;
		writer_summary_copy(summary, &all);
	}
out:
	writer_free(w);
	return r;
}

SLUICE_API void sluice_writer_abort(sluice_writer *w)
{
	if (w)
		writer_free(w);
}

SLUICE_API int sluice_writer_error(const sluice_writer *w, char *buf,
				   size_t len)
{
	return snprintf(buf, len, "%s", w ? w->err : "no writer");
}

SLUICE_API int sluice_writer_set_classes(sluice_writer *w, const char *field,
					 const char *const *names, uint32_t n)
{
	if (!w || !field || (n && !names))
		return -EINVAL;
	for (uint32_t i = 0; i < w->schema.nfields; i++) {
		const struct sluice_field *f = &w->schema.fields[i].f;

		if (strcmp(f->name, field) == 0 && f->ndim == 0 &&
		    f->dtype.code == kDLInt && f->dtype.bits == 64 &&
		    f->dtype.lanes == 1)
			return dataset_classes_set(&w->man.classes, field,
						   names, n);
	}
	return -EINVAL;
}

SLUICE_API void sluice_writer_progress(const sluice_writer *w,
				       uint64_t *records, uint64_t *raw_bytes,
				       uint64_t *stored_bytes)
{
	struct sluice_writer *m = (struct sluice_writer *)(uintptr_t)w;

	if (records)
		*records = w ? atomic_load_explicit(&m->progress_records,
						    memory_order_relaxed) : 0;
	if (raw_bytes)
		*raw_bytes = w ? atomic_load_explicit(&m->progress_raw,
						      memory_order_relaxed) : 0;
	if (stored_bytes)
		*stored_bytes = w ? atomic_load_explicit(
					    &m->progress_stored,
					    memory_order_relaxed) : 0;
}

/* For writer_batch.c, which appends through sluice_writer_add. */
const struct shard_schema *writer_schema(const sluice_writer *w)
{
	return &w->schema;
}

int writer_fail(sluice_writer *w, int code, const char *msg)
{
	return fail(w, code, "%s", msg);
}
