/*
 * test_chunks.c - full shuffle of whole blocks within a budget smaller
 * than one batch's blocks (chunks.c): a batch of 256 records touches
 * about 256 blocks, 3 MB of io memory, and streams in 1 MiB.  Every
 * record comes once per epoch with the file's bytes, raw and zstd; a
 * consumer that holds a whole epoch of batches still gets them all; a
 * resumed loader continues the exact sequence; closing mid-epoch with a
 * batch held leaves that batch intact; a corrupt block fails the loader;
 * the smallest budget that opens streams epochs while releases race the
 * chunks.
 * With on_error=skip batches still
 * pin all their blocks at once, and the same budget is refused.
 */
#include "t.h"
#include "sluice_tools.h"
#include "t_field.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "dlpack_shard.h"
#include "sluice.h"
#include "runs.h"
#include "assemble_test.h"

#define N 20000u
#define BATCH 256u
#define BATCHES ((N + BATCH - 1) / BATCH)
#define MEMORY (1ull << 20)
#define BLOCK 4096u     /* 15 records of 264 bytes */
#define TIGHT_N 4000u   /* records of check_tightest_budget() */
#define TIGHT_BLOCK 65536u

static void want_x(uint64_t i, uint32_t out[64])
{
	uint64_t h = i * 0x9e3779b97f4a7c15ull;

	for (int k = 0; k < 64; k++) {
		h ^= h >> 29;
		h *= 0xbf58476d1ce4e5b9ull;
		out[k] = (uint32_t)(h >> 32);
	}
}

static void write_dataset(const char *dir, int level, uint64_t n,
			  uint64_t block)
{
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint32_t x[64];
	int64_t y;

	memset(f, 0, sizeof(f));
	f[0] = t_field("x", (DLDataType){ kDLUInt, 32, 1 }, 64);
	snprintf(f[1].name, sizeof(f[1].name), "y");
	f[1].dtype = (DLDataType){ kDLInt, 64, 1 };
	f[1].ndim = 0;
	sluice_writer_config_init(&wc);
	wc.block_size = block;
	wc.compression_level = level;
	wc.records_per_shard = 7000;
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (uint64_t i = 0; i < n; i++) {
		const void *vals[2] = { x, &y };
		uint64_t lens[2] = { sizeof(x), sizeof(y) };

		want_x(i, x);
		y = (int64_t)i * -3;
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
}

static void loader_config(struct sluice_loader_config *cfg, int on_error)
{
	sluice_loader_config_init(cfg);
	cfg->shuffle = SLUICE_SHUFFLE_FULL;
	cfg->batch_size = BATCH;
	cfg->seed = 11;
	cfg->decode_threads = 2;
	cfg->memory_bytes = MEMORY;
	cfg->range_reads = SLUICE_RANGE_READS_OFF;
	cfg->on_error = on_error;
	cfg->device = SLUICE_DEVICE_HOST;
}

static int open_loader(sluice_dataset *ds, int on_error, sluice_loader **ld)
{
	struct sluice_loader_config cfg;

	loader_config(&cfg, on_error);
	return sluice_loader_open(ds, &cfg, ld);
}

/* The batch's records are the file's; count them in @seen. */
static void check_batch(sluice_batch *b, uint32_t *seen)
{
	const uint64_t *idx = sluice_batch_indices(b);
	DLManagedTensor *tx, *ty;
	uint32_t n = sluice_batch_size(b);

	T_OK(sluice_batch_tensor(b, "x", -1, &tx));
	T_OK(sluice_batch_tensor(b, "y", -1, &ty));
	T_EQ(tx->dl_tensor.shape[0], n);
	for (uint32_t r = 0; r < n; r++) {
		const uint32_t *x = (const uint32_t *)tx->dl_tensor.data + 64 * r;
		const int64_t *y = (const int64_t *)ty->dl_tensor.data + r;
		uint32_t want[64];

		T_ASSERT(idx[r] < N);
		want_x(idx[r], want);
		if (memcmp(x, want, sizeof(want)) || *y != (int64_t)idx[r] * -3)
			T_FAIL_AT("record %llu (row %u) differs",
				  (unsigned long long)idx[r], r);
		if (seen)
			seen[idx[r]]++;
	}
	tx->deleter(tx);
	ty->deleter(ty);
}

static void check_epochs(sluice_dataset *ds)
{
	sluice_loader *ld = NULL;
	uint32_t *seen = calloc(N, sizeof(*seen));
	struct sluice_stats st = { .size = sizeof(st) };
	char msg[512];
	int r;

	T_ASSERT(seen);
	r = open_loader(ds, SLUICE_ON_ERROR_FAIL, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
	}
	for (int epoch = 0; epoch < 2; epoch++) {
		sluice_batch *b;

		memset(seen, 0, N * sizeof(*seen));
		while ((r = sluice_loader_next(ld, &b)) == 0) {
			check_batch(b, seen);
			sluice_batch_release(b);
		}
		T_EQ(r, SLUICE_EOF);
		for (uint32_t i = 0; i < N; i++)
			T_EQ(seen[i], 1);
	}
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(st.memory_bytes <= MEMORY);
	T_EQ(st.batches_over_budget, 0);
	T_EQ(st.records, 2ull * N);
	sluice_loader_close(ld);
	free(seen);
}

/*
 * The smallest budget the loader opens with, over TIGHT_N records in
 * blocks of 64 KiB at batch 64, so that the io memory holds one block (a
 * chunk) at a time: a batch's last chunk must give its blocks
 * back before the I/O thread, woken by a release, decides that nothing
 * will come back and fails the next claim with -ENOSPC.  The consumer
 * takes 1 ms a batch and releases the batch before last after taking
 * the next, and each batch's finish is held back 2 ms, so releases land
 * while batches finish (the I/O thread failed this at once when the last chunk kept
 * its blocks pinned until then).  Asked for device gather, which chunked
 * loaders refuse: stats.fallbacks says so.
 */
static void finish_late(struct loader_core *c)
{
	(void)c;
	usleep(2000);   /* widens the gap a release can fall into */
}

static void check_tightest_budget(const char *dir, int level)
{
	sluice_dataset *ds = NULL;
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	uint32_t *seen = calloc(N, sizeof(*seen));
	struct sluice_stats st = { .size = sizeof(st) };
	char msg[512];
	int r = -ENOSPC;

	T_ASSERT(seen);
	write_dataset(dir, level, TIGHT_N, TIGHT_BLOCK);
	T_OK(sluice_dataset_open(dir, &ds));
	loader_config(&cfg, SLUICE_ON_ERROR_FAIL);
	cfg.device_gather = SLUICE_DEVICE_GATHER_ON;
	cfg.batch_size = 64;
	assemble_test_finish_hook = finish_late;  /* set while no thread runs */
	for (cfg.memory_bytes = 2 * TIGHT_BLOCK; r == -ENOSPC &&
	     cfg.memory_bytes <= MEMORY; cfg.memory_bytes += 4096) {
		sluice_loader_close(ld);
		ld = NULL;
		r = sluice_loader_open(ds, &cfg, &ld);
	}
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
	}
	for (int epoch = 0; epoch < 3; epoch++) {
		sluice_batch *b, *prev = NULL;

		memset(seen, 0, TIGHT_N * sizeof(*seen));
		while ((r = sluice_loader_next(ld, &b)) == 0) {
			check_batch(b, seen);
			usleep(1000);   /* a training step: the loader runs ahead */
			if (prev)
				sluice_batch_release(prev);
			prev = b;
		}
		if (r != SLUICE_EOF) {
			sluice_loader_error(ld, msg, sizeof(msg));
			T_FAIL_AT("memory_bytes %llu, epoch %d: %s: %s",
				  (unsigned long long)cfg.memory_bytes, epoch,
				  sluice_strerror(r), msg);
		}
		if (prev)
			sluice_batch_release(prev);
		for (uint32_t i = 0; i < TIGHT_N; i++)
			T_EQ(seen[i], 1);
	}
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.batches_gathered, 0);
	if (!strstr(st.fallbacks, "a chunk of blocks at a time") ||
	    !strstr(st.fallbacks, "not gathered on the device"))
		T_FAIL_AT("fallbacks: \"%s\"", st.fallbacks);
	printf("  tightest budget: %llu bytes\n",
	       (unsigned long long)cfg.memory_bytes);
	sluice_loader_close(ld);
	assemble_test_finish_hook = NULL;
	sluice_dataset_close(ds);
	free(seen);
}

/* The consumer holds every batch of an epoch before releasing any. */
static void check_hoarding(sluice_dataset *ds)
{
	sluice_loader *ld = NULL;
	sluice_batch **held = calloc(BATCHES, sizeof(*held));
	uint32_t *seen = calloc(N, sizeof(*seen));
	uint32_t n = 0;
	sluice_batch *b;
	int r;

	T_ASSERT(held && seen);
	T_OK(open_loader(ds, SLUICE_ON_ERROR_FAIL, &ld));
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		T_LT(n, BATCHES);
		held[n++] = b;
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(n, BATCHES);
	for (uint32_t k = 0; k < n; k++) {
		check_batch(held[k], seen);
		sluice_batch_release(held[k]);
	}
	for (uint32_t i = 0; i < N; i++)
		T_EQ(seen[i], 1);
	sluice_loader_close(ld);
	free(held);
	free(seen);
}

/* A loader resumed after 7 batches delivers the rest of the sequence;
 * then both are closed mid-epoch, a batch still held. */
static void check_resume_and_close(sluice_dataset *ds)
{
	sluice_loader *a = NULL, *b = NULL;
	struct sluice_state st;
	sluice_batch *x, *y;

	T_OK(open_loader(ds, SLUICE_ON_ERROR_FAIL, &a));
	for (int k = 0; k < 7; k++) {
		T_OK(sluice_loader_next(a, &x));
		sluice_batch_release(x);
	}
	T_OK(sluice_loader_state_get(a, &st));
	T_OK(open_loader(ds, SLUICE_ON_ERROR_FAIL, &b));
	T_OK(sluice_loader_state_set(b, &st));
	for (int k = 0; k < 5; k++) {
		T_OK(sluice_loader_next(a, &x));
		T_OK(sluice_loader_next(b, &y));
		T_EQ(sluice_batch_size(x), sluice_batch_size(y));
		T_MEMEQ(sluice_batch_indices(x), sluice_batch_indices(y),
			sluice_batch_size(x) * sizeof(uint64_t));
		check_batch(y, NULL);
		sluice_batch_release(y);
		if (k < 4)
			sluice_batch_release(x);
	}
	sluice_loader_close(a);
	sluice_loader_close(b);
	check_batch(x, NULL);
	sluice_batch_release(x);
}

/* Records of a failed block would move the rows after them, so with
 * on_error=skip a batch pins all its blocks at once: -ENOSPC, at open or
 * at the first batch. */
static void check_skip_refused(sluice_dataset *ds)
{
	sluice_loader *ld = NULL;
	sluice_batch *b = NULL;
	int r = open_loader(ds, SLUICE_ON_ERROR_SKIP, &ld);

	if (r == 0)
		r = sluice_loader_next(ld, &b);
	T_EQ(r, -ENOSPC);
	sluice_loader_close(ld);
}

/* A block that fails its checksum fails the loader with -SLUICE_ECORRUPT
 * (no hang, no batch with its bytes), whichever chunk meets it. */
static void check_corrupt_block(const char *dir)
{
	char path[700];
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	FILE *f;
	int r, c;

	snprintf(path, sizeof(path), "%s/data-00000.dls", dir);
	f = fopen(path, "r+b");
	T_ASSERT(f);
	T_EQ(fseek(f, 40 * BLOCK + 100, SEEK_SET), 0);
	c = fgetc(f);
	T_NE(c, EOF);
	T_EQ(fseek(f, 40 * BLOCK + 100, SEEK_SET), 0);
	T_NE(fputc(c ^ 0x5a, f), EOF);
	T_EQ(fclose(f), 0);
	T_OK(sluice_dataset_open(dir, &ds));
	T_OK(open_loader(ds, SLUICE_ON_ERROR_FAIL, &ld));
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		check_batch(b, NULL);
		sluice_batch_release(b);
	}
	T_EQ(r, -SLUICE_ECORRUPT);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* Variable values: record i's "v" holds var_len(i) uint32 items, from
 * none to 80 (a few records of 8 KiB stretch their shard's bound). */
#define VAR_N 6000u
#define VAR_MEMORY (2ull << 20)

static uint32_t var_len(uint64_t i)
{
	return i % 997 == 5 ? 2048 : (uint32_t)((i * 7) % 81);
}

static uint32_t var_item(uint64_t i, uint32_t k)
{
	return (uint32_t)(i * 2654435761u) ^ k;
}

static void write_var_dataset(const char *dir, int level)
{
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	static uint32_t v[2048];
	int64_t y;

	f[0] = t_field("v", (DLDataType){ kDLUInt, 32, 1 }, -1);
	f[1] = t_field("y", (DLDataType){ kDLInt, 64, 1 }, 1);
	sluice_writer_config_init(&wc);
	wc.block_size = BLOCK;
	wc.compression_level = level;
	wc.records_per_shard = 2500;
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (uint64_t i = 0; i < VAR_N; i++) {
		const void *vals[2] = { v, &y };
		uint64_t lens[2] = { var_len(i) * 4ull, sizeof(y) };

		for (uint32_t k = 0; k < var_len(i); k++)
			v[k] = var_item(i, k);
		y = (int64_t)i * 5;
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
}

/* Every row's values (and with @pad its padded row and true length) are
 * record idx[r]'s; count them in @seen. */
static void check_var_batch(sluice_batch *b, uint32_t pad, uint32_t *seen,
			    uint64_t *truncated)
{
	const uint64_t *idx = sluice_batch_indices(b);
	uint32_t n = sluice_batch_size(b);
	DLManagedTensor *tv, *ti, *ty;
	const uint32_t *v;
	const int64_t *index, *y;

	T_OK(sluice_batch_tensor(b, "v", -1, &tv));
	T_OK(sluice_batch_tensor(b, pad ? "v.lengths" : "v.offsets", -1, &ti));
	T_OK(sluice_batch_tensor(b, "y", -1, &ty));
	v = tv->dl_tensor.data;
	index = ti->dl_tensor.data;
	y = ty->dl_tensor.data;
	T_EQ(ti->dl_tensor.shape[0], pad ? n : n + 1);
	if (!pad) {
		T_EQ(index[0], 0);
		T_EQ(tv->dl_tensor.shape[0], index[n]);
	}
	for (uint32_t r = 0; r < n; r++) {
		uint64_t i = idx[r];
		uint32_t len = var_len(i);
		const uint32_t *row = pad ? v + (uint64_t)r * pad : v + index[r];

		T_ASSERT(i < VAR_N);
		if (pad) {
			T_EQ(index[r], len);
			*truncated += len > pad ? len - pad : 0;
		} else {
			T_EQ(index[r + 1] - index[r], len);
		}
		for (uint32_t k = 0; k < (pad && len > pad ? pad : len); k++)
			if (row[k] != var_item(i, k))
				T_FAIL_AT("record %llu item %u differs",
					  (unsigned long long)i, k);
		for (uint32_t k = len; pad && k < pad; k++)
			T_EQ(row[k], 0);
		T_EQ(y[r], (int64_t)i * 5);
		seen[i]++;
	}
	tv->deleter(tv);
	ti->deleter(ti);
	ty->deleter(ty);
}

/*
 * Variable-length values in a budget smaller than a batch's blocks: the
 * batch takes each value's bound and its chunks compact them (chunks.c).
 * Two epochs, every record once each, its values intact; a consumer
 * holding every batch of an epoch gets them intact too; with pad_length
 * the rows are fixed and the cut items counted.  (The loader refused
 * this budget before: a batch's blocks did not fit at once.)
 */
static void check_variable(const char *dir, int level)
{
	static const uint32_t pads[2] = { 0, 48 };
	uint32_t *seen = calloc(VAR_N, sizeof(*seen));
	sluice_batch **held = calloc(VAR_N, sizeof(*held));
	sluice_dataset *ds = NULL;

	T_ASSERT(seen && held);
	write_var_dataset(dir, level);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int k = 0; k < 2; k++) {
		struct sluice_loader_config cfg;
		struct sluice_stats st = { .size = sizeof(st) };
		sluice_loader *ld = NULL;
		uint64_t truncated = 0, want_cut = 0;
		uint32_t nheld = 0;
		sluice_batch *b;
		char msg[512];
		int r;

		loader_config(&cfg, SLUICE_ON_ERROR_FAIL);
		/* zstd blocks read by the workers take only their decoded
		 * bytes (direct_io off: whether or not the page cache
		 * holds them), and 2 MiB holds a batch's: half does not */
		cfg.memory_bytes = level ? VAR_MEMORY / 2 : VAR_MEMORY;
		cfg.direct_io = SLUICE_DIRECT_IO_OFF;
		cfg.pad_length = pads[k];
		r = sluice_loader_open(ds, &cfg, &ld);
		if (r) {
			sluice_loader_error(ld, msg, sizeof(msg));
			T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
		}
		for (int epoch = 0; epoch < 3; epoch++) {
			memset(seen, 0, VAR_N * sizeof(*seen));
			truncated = 0;
			while ((r = sluice_loader_next(ld, &b)) == 0) {
				check_var_batch(b, pads[k], seen, &truncated);
				if (epoch == 2)
					held[nheld++] = b;   /* hoarding */
				else
					sluice_batch_release(b);
			}
			T_EQ(r, SLUICE_EOF);
			for (uint32_t i = 0; i < VAR_N; i++)
				T_EQ(seen[i], 1);
		}
		memset(seen, 0, VAR_N * sizeof(*seen));
		for (uint32_t h = 0; h < nheld; h++) {
			check_var_batch(held[h], pads[k], seen, &truncated);
			sluice_batch_release(held[h]);
		}
		for (uint32_t i = 0; i < VAR_N; i++) {
			T_EQ(seen[i], 1);
			if (pads[k] && var_len(i) > pads[k])
				want_cut += var_len(i) - pads[k];
		}
		T_OK(sluice_loader_stats(ld, &st));
		T_CONTAINS(st.fallbacks, "a chunk of blocks at a time");
		T_ASSERT(st.memory_bytes <= VAR_MEMORY);
		if (pads[k])
			T_EQ(st.values_truncated, 3 * want_cut);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
	free(seen);
	free(held);
}

/*
 * A shard whose header bounds "v" below a value its blocks hold (the
 * header's checksum redone, so it verifies): a chunk must not copy that
 * value past its bound's room into the next one's.  The block's decode
 * refuses it (block_view_init), and the loader fails with
 * -SLUICE_ECORRUPT naming the file; nothing overruns (ASan).
 */
static void check_value_over_bound(const char *dir)
{
	struct dls_header_disk h;
	uint8_t page[DLS_HEADER_SIZE];
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	char path[700], msg[1024];
	uint64_t sum;
	int fd, r;

	snprintf(path, sizeof(path), "%s/data-00000.dls", dir);
	fd = open(path, O_RDWR);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	memcpy(&h, page, sizeof(h));
	T_EQ(h.fields[0].max_value_bytes, 2048 * 4);  /* record 5's */
	h.fields[0].max_value_bytes = 1024;
	memcpy(page, &h, sizeof(h));
	sum = XXH3_64bits(page, DLS_HEADER_CHECKSUM_OFFSET);
	memcpy(page + DLS_HEADER_CHECKSUM_OFFSET, &sum, sizeof(sum));
	T_EQ(pwrite(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	close(fd);

	T_OK(sluice_dataset_open(path, &ds));
	loader_config(&cfg, SLUICE_ON_ERROR_FAIL);
	cfg.memory_bytes = VAR_MEMORY;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	while ((r = sluice_loader_next(ld, &b)) == 0)
		sluice_batch_release(b);
	T_EQ(r, -SLUICE_ECORRUPT);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, path);
	T_CONTAINS(msg, "corrupt");
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

int main(void)
{
	char *dir = strdup("/tmp/sluice-test-XXXXXX"), sub[600];

	T_ASSERT(dir && mkdtemp(dir));
	for (int level = 0; level <= 3; level += 3) {
		sluice_dataset *ds = NULL;
		const char *name = level ? "zstd" : "raw";

		snprintf(sub, sizeof(sub), "%s/%s", dir, name);
		write_dataset(sub, level, N, BLOCK);
		T_OK(sluice_dataset_open(sub, &ds));
		check_epochs(ds);
		printf("ok: %s: full shuffle, batch %u of ~%u blocks, in %llu bytes: every record once per epoch, intact\n",
		       name, BATCH, BATCH, (unsigned long long)MEMORY);
		runs_test_cap = 1;     /* a chunk's rows one run a call */
		check_epochs(ds);
		runs_test_cap = 0;
		printf("ok: %s: the same, one run a call\n", name);
		check_hoarding(ds);
		printf("ok: %s: a consumer holding a whole epoch gets it all\n",
		       name);
		check_resume_and_close(ds);
		printf("ok: %s: resume continues the sequence; a batch held past close stays intact\n",
		       name);
		check_skip_refused(ds);
		printf("ok: %s: on_error=skip pins whole batches: the budget is refused\n",
		       name);
		sluice_dataset_close(ds);
		snprintf(sub, sizeof(sub), "%s/%s-tight", dir, name);
		check_tightest_budget(sub, level);
		printf("ok: %s: in the tightest budget 3 epochs stream while releases race the chunks; fallbacks say chunks, no device gather\n",
		       name);
	}
	for (int level = 0; level <= 3; level += 3) {
		snprintf(sub, sizeof(sub), "%s/var-%d", dir, level);
		check_variable(sub, level);
		printf("ok: %s: variable values, each batch at their bounds, compacted: every record intact, padded or not, held or not\n",
		       level ? "zstd" : "raw");
	}
	snprintf(sub, sizeof(sub), "%s/var-0", dir);
	check_value_over_bound(sub);
	printf("ok: a value over its shard's bound fails the loader (-SLUICE_ECORRUPT), nothing copied past it\n");
	snprintf(sub, sizeof(sub), "%s/zstd", dir);
	check_corrupt_block(sub);
	printf("ok: a corrupt block fails the loader (-SLUICE_ECORRUPT)\n");
	snprintf(sub, sizeof(sub), "rm -rf '%s'", dir);
	T_EQ(system(sub), 0);
	free(dir);
	return 0;
}
