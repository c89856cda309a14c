/*
 * test_cache.c - a block cache that can hold every block is reused
 * (issue 22): whatever the shuffle mode, the codec, whether batches could
 * view their block or decode into their batch, and whether memory_bytes
 * is given, every block is read once over several epochs, and later
 * epochs are all cache hits.  An explicit cache_bytes above the default
 * budget's cap is honoured, not capped; one below the dataset is the io
 * memory the cache takes, not more.
 *
 * Datasets (each byte a function of the record index, checked in every
 * batch): "raw2", raw "x" uint8[1024] and "y" int64 (batches may view
 * their block; shuffle full may read record ranges); "zstd1", zstd "x"
 * alone (a block may decode straight into its batch); "var", raw "x"
 * plus a variable "v" (batches are copied).  About 17 blocks of 63
 * records, batches of 64: the 1.1 GB case, a thousand times
 * smaller.
 */
#include "t.h"
#include "t_field.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice.h"
#include "sluice_tools.h"
#include "io_sizes.h"    /* host_dataset_io_bytes; loader.h */
#include "budget_test.h"

#define N 1050u
#define XB 1024u
#define BATCH 64u
#define EPOCHS 3
#define BLOCK_SIZE (64u << 10)

enum layout { RAW2, ZSTD1, VAR, NLAYOUTS };

static const char *const layout_names[] = { "raw2", "zstd1", "var" };
static const char *const shuffle_names[] = { "none", "block", "window",
					     "full" };

static uint8_t want_x(uint64_t i, uint32_t k)
{
	/* runs of equal bytes: zstd compresses them */
	return (uint8_t)(i * 7 + k / 64);
}

static int64_t want_y(uint64_t i)
{
	return (int64_t)(i * 3 + 1);
}

static uint64_t vlen(uint64_t i)
{
	return i % 29;
}

static void write_dataset(const char *dir, enum layout l)
{
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t x[XB], v[32];
	int64_t y;
	uint32_t nf = l == ZSTD1 ? 1 : 2;

	f[0] = t_field("x", (DLDataType){ kDLUInt, 8, 1 }, XB);
	if (l == RAW2)
		f[1] = t_field("y", (DLDataType){ kDLInt, 64, 1 }, 1);
	else
		f[1] = t_field("v", (DLDataType){ kDLUInt, 8, 1 }, -1);
	sluice_writer_config_init(&wc);
	wc.block_size = BLOCK_SIZE;
	wc.compression_level = l == ZSTD1 ? 3 : 0;
	wc.threads = 2;
	T_OK(sluice_writer_open(dir, f, nf, &wc, &w));
	for (uint64_t i = 0; i < N; i++) {
		const void *vals[2] = { x, l == RAW2 ? (const void *)&y : v };
		uint64_t lens[2] = { XB, l == RAW2 ? sizeof(y) : vlen(i) };

		for (uint32_t k = 0; k < XB; k++)
			x[k] = want_x(i, k);
		y = want_y(i);
		for (uint64_t k = 0; k < vlen(i); k++)
			v[k] = (uint8_t)(i + k);
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
}

/* Every record of @b has the file's bytes; mark it in @seen. */
static void check_batch(sluice_batch *b, enum layout l, uint32_t *seen)
{
	const uint64_t *idx = sluice_batch_indices(b);
	uint32_t n = sluice_batch_size(b);
	DLManagedTensor *tx = NULL, *t2 = NULL, *to = NULL;
	const uint8_t *x;

	T_OK(sluice_batch_tensor(b, "x", -1, &tx));
	T_EQ(tx->dl_tensor.shape[0], n);
	x = tx->dl_tensor.data;
	if (l == RAW2)
		T_OK(sluice_batch_tensor(b, "y", -1, &t2));
	if (l == VAR) {
		T_OK(sluice_batch_tensor(b, "v", -1, &t2));
		T_OK(sluice_batch_tensor(b, "v.offsets", -1, &to));
	}
	for (uint32_t r = 0; r < n; r++) {
		uint64_t i = idx[r];

		T_ASSERT(i < N);
		seen[i]++;
		for (uint32_t k = 0; k < XB; k++)
			if (x[(uint64_t)r * XB + k] != want_x(i, k))
				T_FAIL_AT("%s: record %llu byte %u differs",
					  layout_names[l],
					  (unsigned long long)i, k);
		if (l == RAW2)
			T_EQ(((const int64_t *)t2->dl_tensor.data)[r],
			     want_y(i));
		if (l == VAR) {
			const int64_t *off = to->dl_tensor.data;
			const uint8_t *v = t2->dl_tensor.data;

			T_EQ(off[r + 1] - off[r], vlen(i));
			for (uint64_t k = 0; k < vlen(i); k++)
				T_EQ(v[off[r] + (int64_t)k], (uint8_t)(i + k));
		}
	}
	tx->deleter(tx);
	if (t2)
		t2->deleter(t2);
	if (to)
		to->deleter(to);
}

/*
 * EPOCHS epochs under @cfg, every record once per epoch with its bytes.
 * @return the loader's stats at the end.
 */
static struct sluice_stats run(sluice_dataset *ds, enum layout l,
			       const struct sluice_loader_config *cfg)
{
	sluice_loader *ld = NULL;
	struct sluice_stats st = { .size = sizeof(st) };
	uint32_t seen[N];
	char msg[512];
	int r;

	r = sluice_loader_open(ds, cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("%s: open: %s: %s", layout_names[l],
			  sluice_strerror(r), msg);
	}
	for (int e = 0; e < EPOCHS; e++) {
		sluice_batch *b;

		memset(seen, 0, sizeof(seen));
		while ((r = sluice_loader_next(ld, &b)) == 0) {
			check_batch(b, l, seen);
			sluice_batch_release(b);
		}
		if (r != SLUICE_EOF) {
			sluice_loader_error(ld, msg, sizeof(msg));
			T_FAIL_AT("%s: next: %s: %s", layout_names[l],
				  sluice_strerror(r), msg);
		}
		for (uint32_t i = 0; i < N; i++)
			T_EQ(seen[i], 1);
	}
	T_OK(sluice_loader_stats(ld, &st));
	sluice_loader_close(ld);
	return st;
}

static void config(struct sluice_loader_config *cfg, int shuffle)
{
	sluice_loader_config_init(cfg);
	cfg->shuffle = shuffle;
	cfg->batch_size = BATCH;
	cfg->seed = 11;
	cfg->prefetch_depth = 4;
	cfg->decode_threads = 2;
	cfg->device = SLUICE_DEVICE_HOST;
}

/* Every block read once in all EPOCHS epochs; the rest were hits.
 * @return: 0, or 1 (said on stdout) when not: every case is reported,
 * then the test fails. */
static int check_read_once(const struct sluice_stats *st, uint64_t blocks,
			    const char *what, enum layout l, int shuffle)
{
	printf("%s: %s, shuffle %s: %llu blocks read of %llu, %llu range reads, %llu cache hits, %llu batches viewed, %llu decoded into their batch, memory %llu (io %llu)\n",
	       what, layout_names[l], shuffle_names[shuffle],
	       (unsigned long long)st->blocks_read,
	       (unsigned long long)blocks,
	       (unsigned long long)st->range_reads,
	       (unsigned long long)st->block_cache_hits,
	       (unsigned long long)st->batches_viewed,
	       (unsigned long long)st->blocks_direct,
	       (unsigned long long)st->memory_bytes,
	       (unsigned long long)st->io_memory_bytes);
	if (st->blocks_read == blocks && st->range_reads == 0 &&
	    st->block_cache_hits > 0)
		return 0;
	printf("FAIL: want %llu blocks read, no range reads, cache hits\n",
	       (unsigned long long)blocks);
	return 1;
}

int main(void)
{
	char dir[] = "/tmp/sluice-test-cache-XXXXXX";
	char path[600];
	int failed = 0;

	T_ASSERT(mkdtemp(dir));
	for (int l = 0; l < NLAYOUTS; l++) {
		sluice_dataset *ds = NULL;
		uint64_t blocks, io, io_max, nb;

		snprintf(path, sizeof(path), "%s/%s", dir, layout_names[l]);
		write_dataset(path, (enum layout)l);
		T_OK(sluice_dataset_open(path, &ds));
		blocks = sluice_dataset_blocks(ds);
		io = host_dataset_io_bytes(ds, &io_max, &nb);
		T_ASSERT(blocks >= 16);
		for (int sh = SLUICE_SHUFFLE_NONE; sh <= SLUICE_SHUFFLE_FULL;
		     sh++) {
			struct sluice_loader_config cfg;
			struct sluice_stats st = { .size = sizeof(st) };

			/* The case: --memory 3G --cache-bytes 2G
			 * for 1.1 GB. */
			config(&cfg, sh);
			cfg.memory_bytes = 3 * io;
			cfg.cache_bytes = 2 * io;
			st = run(ds, (enum layout)l, &cfg);
			failed |= check_read_once(&st, blocks,
					"memory_bytes and cache_bytes",
					(enum layout)l, sh);
			T_ASSERT(st.memory_bytes <= cfg.memory_bytes);

			/* cache_bytes alone, the default budget's cap far
			 * below it: honoured, not capped. */
			config(&cfg, sh);
			cfg.cache_bytes = 2 * io;
			budget_test_default_cap = io / 4;
			st = run(ds, (enum layout)l, &cfg);
			budget_test_default_cap = 0;
			failed |= check_read_once(&st, blocks,
					"cache_bytes above the cap",
					(enum layout)l, sh);
			T_ASSERT(st.io_memory_bytes >= io);

			/* Defaults: when the io memory they give holds the
			 * whole dataset, the same.  Not checked where they
			 * read records by range (shuffle full, raw): that io
			 * memory is the range reads', not the cache's (the
			 * default budget does not trade them for a cache of
			 * every block yet). */
			config(&cfg, sh);
			st = run(ds, (enum layout)l, &cfg);
			if (st.io_memory_bytes >= io && st.range_reads == 0)
				failed |= check_read_once(&st, blocks,
							  "defaults",
							  (enum layout)l, sh);
			else
				printf("defaults: %s, shuffle %s: not checked: io memory %llu, the dataset's %llu, %llu range reads: %llu blocks read\n",
				       layout_names[l], shuffle_names[sh],
				       (unsigned long long)st.io_memory_bytes,
				       (unsigned long long)io,
				       (unsigned long long)st.range_reads,
				       (unsigned long long)st.blocks_read);
		}
		/* A cache_bytes that holds part of the dataset is the io
		 * memory the cache takes (a block more for room), counted
		 * in what blocks take there, not in their stored bytes: a
		 * zstd block takes its decoded bytes too, and counting
		 * stored bytes gave this cache every block. */
		{
			struct sluice_loader_config cfg;
			struct sluice_stats st = { .size = sizeof(st) };

			config(&cfg, SLUICE_SHUFFLE_NONE);
			cfg.decode_threads = 1;
			cfg.cache_bytes = io / 4 * 3;
			st = run(ds, (enum layout)l, &cfg);
			printf("cache_bytes %llu of the dataset's %llu: %s: io memory %llu, %llu blocks read\n",
			       (unsigned long long)cfg.cache_bytes,
			       (unsigned long long)io, layout_names[l],
			       (unsigned long long)st.io_memory_bytes,
			       (unsigned long long)st.blocks_read);
			if (st.io_memory_bytes > cfg.cache_bytes + io_max) {
				printf("FAIL: want io memory at most %llu\n",
				       (unsigned long long)(cfg.cache_bytes +
							    io_max));
				failed = 1;
			}
		}
		sluice_dataset_close(ds);
	}
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	T_EQ(system(path), 0);
	return failed;
}
