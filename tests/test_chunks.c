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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	snprintf(sub, sizeof(sub), "%s/zstd", dir);
	check_corrupt_block(sub);
	printf("ok: a corrupt block fails the loader (-SLUICE_ECORRUPT)\n");
	snprintf(sub, sizeof(sub), "rm -rf '%s'", dir);
	T_EQ(system(sub), 0);
	free(dir);
	return 0;
}
