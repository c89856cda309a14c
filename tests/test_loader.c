/*
 * test_loader.c - the loader delivers every record exactly once per epoch
 * with the right bytes, for every shuffle mode, batch size, codec and
 * shard layout; ranks partition the epoch; order is a function of seed and
 * epoch; a resumed loader continues exactly where the saved one stopped.
 */
#include "loader_fixture.h"

#define N 1000

static sluice_loader *open_loader(sluice_dataset *ds, int shuffle,
				  uint32_t batch, uint64_t seed, int drop_last,
				  int rank, int world)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	int r;

	sluice_loader_config_init(&cfg);
	cfg.shuffle = shuffle;
	cfg.batch_size = batch;
	cfg.seed = seed;
	cfg.drop_last = drop_last;
	cfg.rank = rank;
	cfg.world_size = world;
	cfg.window_blocks = 3;
	cfg.prefetch_depth = 3;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		char msg[512];

		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("sluice_loader_open: %s: %s", sluice_strerror(r), msg);
	}
	return ld;
}

/* The rest of an epoch; returns the delivered indices in order (caller
 * frees).  @done: batches of it already consumed. */
static uint64_t *run_rest(sluice_loader *ld, uint64_t done, uint32_t *seen,
			  uint64_t *count)
{
	uint64_t *order = malloc(sizeof(*order) * N * 2), n = 0, batches = 0;
	sluice_batch *b;
	int r;

	T_ASSERT(order);
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		const uint64_t *idx = sluice_batch_indices(b);
		uint32_t k = fx_check_batch(b, seen);

		for (uint32_t i = 0; i < k; i++)
			order[n++] = idx[i];
		sluice_batch_release(b);
		batches++;
	}
	if (r != SLUICE_EOF) {
		char msg[512];

		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("next: %s: %s", sluice_strerror(r), msg);
	}
	T_EQ(done + batches, sluice_loader_batches(ld));
	*count = n;
	return order;
}

static uint64_t *run_epoch(sluice_loader *ld, uint32_t *seen, uint64_t *count)
{
	return run_rest(ld, 0, seen, count);
}

static void check_modes(const char *dir)
{
	static const uint32_t batches[] = { 1, 7, 64, 1000, 1500 };
	sluice_dataset *ds = NULL;

	T_OK(sluice_dataset_open(dir, &ds));
	T_EQ(sluice_dataset_records(ds), N);
	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		for (size_t bi = 0; bi < sizeof(batches) / sizeof(*batches); bi++) {
			for (int drop = 0; drop <= 1; drop++) {
				uint32_t b = batches[bi];
				sluice_loader *ld = open_loader(ds, mode, b, 7, drop, 0, 1);

				for (int epoch = 0; epoch < 2; epoch++) {
					uint32_t seen[N] = { 0 };
					uint64_t n, want = drop ? (N / b) * b : N;
					uint64_t *order = run_epoch(ld, seen, &n);

					T_EQ(n, want);
					for (uint64_t i = 0; i < N; i++)
						T_ASSERT(seen[i] <= 1);
					if (mode == SLUICE_SHUFFLE_NONE)
						for (uint64_t i = 0; i < n; i++)
							T_EQ(order[i], i);
					free(order);
				}
				sluice_loader_close(ld);
			}
		}
	}
	sluice_dataset_close(ds);
}

static void check_ranks(const char *dir)
{
	sluice_dataset *ds = NULL;

	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		uint32_t seen[N] = { 0 };
		uint64_t per = 0;

		for (int rank = 0; rank < 4; rank++) {
			sluice_loader *ld = open_loader(ds, mode, 16, 3, 0, rank, 4);
			uint64_t n, *order = run_epoch(ld, seen, &n);

			if (rank == 0)
				per = n;
			T_EQ(n, per);
			free(order);
			sluice_loader_close(ld);
		}
		T_EQ(per, N / 4);
		for (uint64_t i = 0; i < N; i++)
			T_EQ(seen[i], 1);   /* disjoint and covering */
	}
	sluice_dataset_close(ds);
}

static void check_order(const char *dir)
{
	sluice_dataset *ds = NULL;
	uint64_t n1, n2, n3, n4;

	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_BLOCK; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		sluice_loader *a = open_loader(ds, mode, 10, 1, 0, 0, 1);
		sluice_loader *b = open_loader(ds, mode, 10, 1, 0, 0, 1);
		sluice_loader *c = open_loader(ds, mode, 10, 2, 0, 0, 1);
		uint64_t *oa = run_epoch(a, NULL, &n1);
		uint64_t *ob = run_epoch(b, NULL, &n2);
		uint64_t *oc = run_epoch(c, NULL, &n3);
		uint64_t *oa2 = run_epoch(a, NULL, &n4);  /* epoch 1 */

		T_MEMEQ(oa, ob, n1 * sizeof(*oa));
		T_ASSERT(memcmp(oa, oc, n1 * sizeof(*oa)) != 0);
		T_ASSERT(memcmp(oa, oa2, n1 * sizeof(*oa)) != 0);
		free(oa), free(ob), free(oc), free(oa2);
		sluice_loader_close(a), sluice_loader_close(b),
			sluice_loader_close(c);
	}
	sluice_dataset_close(ds);
}

/* Stop after k batches, save the state as text, resume in a new loader:
 * the rest of the epoch and the next one equal the uninterrupted run. */
static void check_resume(const char *dir)
{
	static const uint64_t points[] = { 0, 1, 13, 62, 63 };
	sluice_dataset *ds = NULL;
	uint64_t n0, n1;

	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		sluice_loader *ref = open_loader(ds, mode, 16, 9, 0, 0, 1);
		uint64_t *e0 = run_epoch(ref, NULL, &n0);
		uint64_t *e1 = run_epoch(ref, NULL, &n1);

		sluice_loader_close(ref);
		for (size_t p = 0; p < sizeof(points) / sizeof(*points); p++) {
			sluice_loader *ld = open_loader(ds, mode, 16, 9, 0, 0, 1);
			struct sluice_state st;
			char text[256];
			sluice_batch *b;
			uint64_t n, *rest, *next, skip = points[p] * 16;

			for (uint64_t k = 0; k < points[p]; k++) {
				T_OK(sluice_loader_next(ld, &b));
				sluice_batch_release(b);
			}
			T_OK(sluice_loader_state_get(ld, &st));
			T_EQ(st.batches_consumed, points[p]);
			T_ASSERT(sluice_state_format(&st, text, sizeof(text)) > 0);
			sluice_loader_close(ld);

			memset(&st, 0, sizeof(st));
			T_OK(sluice_state_parse(text, &st));
			ld = open_loader(ds, mode, 16, 9, 0, 0, 1);
			T_OK(sluice_loader_state_set(ld, &st));
			rest = run_rest(ld, points[p], NULL, &n);
			T_EQ(n, n0 - (skip < n0 ? skip : n0));
			T_MEMEQ(rest, e0 + skip, n * sizeof(*rest));
			next = run_epoch(ld, NULL, &n);
			T_EQ(n, n1);
			T_MEMEQ(next, e1, n * sizeof(*next));
			free(rest), free(next);
			sluice_loader_close(ld);
		}
		free(e0), free(e1);
	}
	sluice_dataset_close(ds);
}

/* Padded variable fields: [B, L] plus the true lengths, zero beyond the
 * value; values past L are cut and counted. */
static void check_padding(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	struct sluice_stats st = { .size = sizeof(st) };
	uint64_t cut = 0;

	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_FULL;
	cfg.batch_size = 32;
	cfg.pad_length = 20;
	cfg.device = SLUICE_DEVICE_HOST;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	while (sluice_loader_next(ld, &b) == 0) {
		DLManagedTensor *tv, *tl;
		const uint64_t *idx = sluice_batch_indices(b);
		uint32_t n = sluice_batch_size(b);

		T_OK(sluice_batch_tensor(b, "v", -1, &tv));
		T_OK(sluice_batch_tensor(b, "v.lengths", -1, &tl));
		T_EQ(tv->dl_tensor.ndim, 2);
		T_EQ(tv->dl_tensor.shape[0], n);
		T_EQ(tv->dl_tensor.shape[1], 20);
		for (uint32_t r = 0; r < n; r++) {
			const uint8_t *row = (const uint8_t *)tv->dl_tensor.data + r * 20;
			uint64_t len = FX_VLEN(idx[r]) < 20 ? FX_VLEN(idx[r]) : 20;

			T_EQ(((const int64_t *)tl->dl_tensor.data)[r],
			     FX_VLEN(idx[r]));
			cut += FX_VLEN(idx[r]) - len;
			for (uint64_t k = 0; k < 20; k++)
				T_EQ(row[k], k < len ? fx_v(idx[r], k) : 0);
		}
		tv->deleter(tv);
		tl->deleter(tl);
		sluice_batch_release(b);
	}
	T_OK(sluice_loader_stats(ld, &st));
	T_LT(0, st.decode_threads);   /* the default's choice, not 0 */
	T_LT(0, cut);
	T_EQ(st.values_truncated, cut);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* A consumer that keeps every batch of an epoch (more than the prefetch
 * depth) gets them all, intact, instead of a deadlock. */
static void check_hoarding(const char *dir)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	sluice_batch *held[N];
	uint32_t seen[N] = { 0 };
	uint64_t n = 0, k = 0;
	int r;

	T_OK(sluice_dataset_open(dir, &ds));
	ld = open_loader(ds, SLUICE_SHUFFLE_WINDOW, 50, 4, 0, 0, 1);
	while ((r = sluice_loader_next(ld, &held[k])) == 0)
		k++;
	T_EQ(r, SLUICE_EOF);
	T_EQ(k, N / 50);
	for (uint64_t i = 0; i < k; i++) {
		n += fx_check_batch(held[i], seen);
		sluice_batch_release(held[i]);
	}
	T_EQ(n, N);
	free(run_epoch(ld, NULL, &n));   /* and the loader goes on */
	T_EQ(n, N);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* An empty dataset: every epoch ends at once. */
static void check_empty(const char *dir)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	sluice_batch *b;

	fx_write(dir, 0, 4096, 0, 0);
	T_OK(sluice_dataset_open(dir, &ds));
	ld = open_loader(ds, SLUICE_SHUFFLE_WINDOW, 8, 1, 0, 0, 1);
	T_EQ(sluice_loader_batches(ld), 0);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

int main(void)
{
	char *dir = fx_tmpdir();
	char path[600];
	struct {
		uint64_t block;
		int level;
		uint64_t per_shard;
	} layouts[] = {
		{ 2048, 0, 0 },       /* raw, one shard, many blocks */
		{ 4096, 3, 0 },       /* zstd */
		{ 1500, 3, 170 },     /* zstd, many shards, uneven blocks */
	};

	for (size_t l = 0; l < sizeof(layouts) / sizeof(*layouts); l++) {
		snprintf(path, sizeof(path), "%s/d%zu", dir, l);
		fx_write(path, N, layouts[l].block, layouts[l].level,
			 layouts[l].per_shard);
		check_modes(path);
		check_ranks(path);
	}
	snprintf(path, sizeof(path), "%s/d2", dir);
	check_order(path);
	check_resume(path);
	check_padding(path);
	check_hoarding(path);
	snprintf(path, sizeof(path), "%s/empty", dir);
	check_empty(path);
	fx_rmrf(dir);
	free(dir);
	return 0;
}
