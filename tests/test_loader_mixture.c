/*
 * test_loader_mixture.c - a loader over a mixture of three datasets
 * (sluice_loader_open_streams): every batch holds each stream's share
 * (within the stream count of records), each stream gives exactly its
 * samples per epoch with the right bytes (repeating a small stream,
 * subsampling a large one), ranks partition the mixed epoch, a saved
 * state resumes bit-exactly (also elastically, and refused by another
 * mixture), and a schema mismatch or an empty stream is refused.
 */
#include <errno.h>

#include "loader_fixture.h"

#define N0 300 /* records 0..299: weight 0.5 */
#define N1 120 /* records 300..419: exactly 400 samples (repeats) */
#define N2 500 /* records 420..919: weight 0.5 */
#define NALL (N0 + N1 + N2)

static int stream_of(uint64_t idx)
{
	return idx < N0 ? 0 : idx < N0 + N1 ? 1 : 2;
}

static sluice_loader *open_mix(sluice_dataset **ds, int shuffle,
			       uint32_t batch, int rank, int world,
			       uint64_t seed)
{
	struct sluice_stream streams[3] = {
		{ ds[0], 0.5, 0 }, { ds[1], 0, 400 }, { ds[2], 0.5, 0 },
	};
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	int r;

	sluice_loader_config_init(&cfg);
	cfg.shuffle = shuffle;
	cfg.batch_size = batch;
	cfg.seed = seed;
	cfg.rank = rank;
	cfg.world_size = world;
	cfg.window_blocks = 2;
	cfg.prefetch_depth = 3;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	r = sluice_loader_open_streams(streams, 3, &cfg, &ld);
	if (r) {
		char msg[512];

		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open_streams: %s: %s", sluice_strerror(r), msg);
	}
	return ld;
}

/* One epoch: indices in order; checks bytes and per-batch proportions. */
static uint64_t *run_epoch(sluice_loader *ld, uint32_t *seen, uint64_t *n)
{
	/* weights share N0 + N2 = 800 samples: 400 and 400, plus 400 */
	static const double share[3] = { 400.0 / 1200, 400.0 / 1200,
					 400.0 / 1200 };
	uint64_t *order = malloc(8 * 4000), got = 0;
	sluice_batch *b;
	int r;

	T_ASSERT(order);
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		const uint64_t *idx = sluice_batch_indices(b);
		uint32_t k = fx_check_batch(b, seen), count[3] = {0, 0, 0};

		for (uint32_t i = 0; i < k; i++) {
			count[stream_of(idx[i])]++;
			order[got++] = idx[i];
		}
		for (int s = 0; s < 3; s++) {
			double d = count[s] - share[s] * k;

			if (d > 3 || d < -3)
				T_FAIL_AT("batch of %u: stream %d has %u, share %.1f",
					  k, s, count[s], share[s] * k);
		}
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	*n = got;
	return order;
}

static void check_epoch(sluice_dataset **ds, int shuffle)
{
	uint32_t *seen = calloc(NALL, sizeof(*seen));
	sluice_loader *ld = open_mix(ds, shuffle, 24, 0, 1, 3);
	uint64_t n, per[3] = {0, 0, 0}, *order;

	T_ASSERT(seen);
	T_EQ(sluice_loader_batches(ld), 50); /* 1200 / 24 */
	order = run_epoch(ld, seen, &n);
	T_EQ(n, 1200);
	for (uint64_t i = 0; i < NALL; i++)
		per[stream_of(i)] += seen[i];
	T_EQ(per[0], 400);
	T_EQ(per[1], 400);
	T_EQ(per[2], 400);
	for (uint64_t i = 0; i < NALL; i++) {
		int s = stream_of(i);

		if (s == 0)          /* 400 of 300: each once or twice */
			T_ASSERT(seen[i] == 1 || seen[i] == 2);
		else if (s == 1)     /* 400 of 120: 3 or 4 times */
			T_ASSERT(seen[i] == 3 || seen[i] == 4);
		else                 /* 400 of 500: at most once */
			T_ASSERT(seen[i] <= 1);
	}
	free(order);
	sluice_loader_close(ld);
	free(seen);
}

/* Two ranks split it; a state saved mid-epoch resumes bit-exactly, and
 * with another world size covers the rest once. */
static void check_ranks_and_resume(sluice_dataset **ds, int shuffle)
{
	uint32_t *ref = calloc(NALL, sizeof(*ref));
	uint32_t *got = calloc(NALL, sizeof(*got));
	uint64_t n, m, *full, *rest;
	sluice_loader *ld;
	struct sluice_state st;
	char line[SLUICE_STATE_TEXT_MAX];
	sluice_batch *b;

	T_ASSERT(ref && got);
	ld = open_mix(ds, shuffle, 24, 0, 1, 8);
	full = run_epoch(ld, ref, &n);
	sluice_loader_close(ld);
	for (int r = 0; r < 2; r++) {
		uint64_t *part;

		ld = open_mix(ds, shuffle, 24, r, 2, 8);
		part = run_epoch(ld, got, &m);
		T_EQ(m, 600);
		T_MEMEQ(part, full + r * 600, m * 8);
		free(part);
		sluice_loader_close(ld);
	}
	T_MEMEQ(got, ref, NALL * sizeof(*got));

	/* stop after 7 batches, resume from the text line */
	ld = open_mix(ds, shuffle, 24, 0, 1, 8);
	for (int k = 0; k < 7; k++) {
		T_OK(sluice_loader_next(ld, &b));
		sluice_batch_release(b);
	}
	T_OK(sluice_loader_state_get(ld, &st));
	T_ASSERT(st.mix != 0);
	T_LT(0, sluice_state_format(&st, line, sizeof(line)));
	sluice_loader_close(ld);
	T_OK(sluice_state_parse(line, &st));
	ld = open_mix(ds, shuffle, 24, 0, 1, 8);
	T_OK(sluice_loader_state_set(ld, &st));
	rest = run_epoch(ld, NULL, &m);
	T_EQ(m, n - 7 * 24);
	T_MEMEQ(rest, full + 7 * 24, m * 8);
	free(rest);
	sluice_loader_close(ld);

	/* elastically: 3 ranks of 10 take the rest: together with the 168
	 * taken, the uninterrupted epoch's multiset */
	memset(got, 0, NALL * sizeof(*got));
	for (uint64_t i = 0; i < 7 * 24; i++)
		got[full[i]]++;
	for (int r = 0; r < 3; r++) {
		ld = open_mix(ds, shuffle, 10, r, 3, 8);
		T_OK(sluice_loader_state_set(ld, &st));
		free(run_epoch(ld, got, &m));
		sluice_loader_close(ld);
	}
	T_MEMEQ(got, ref, NALL * sizeof(*got)); /* 1032 = 3 x 344: no pad */

	/* another mixture refuses the state */
	{
		struct sluice_stream two[2] = { { ds[0], 1, 0 }, { ds[2], 1, 0 } };
		struct sluice_loader_config cfg;

		sluice_loader_config_init(&cfg);
		cfg.shuffle = shuffle;
		cfg.batch_size = 24;
		cfg.seed = 8;
		cfg.rank = 0;
		cfg.world_size = 1;
		cfg.device = SLUICE_DEVICE_HOST;
		T_OK(sluice_loader_open_streams(two, 2, &cfg, &ld));
		T_EQ(sluice_loader_state_set(ld, &st), -SLUICE_ESTATE);
		sluice_loader_close(ld);
	}
	free(full);
	free(ref);
	free(got);
}

static void check_refusals(sluice_dataset **ds, sluice_dataset *other,
			   sluice_dataset *empty)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	char msg[512];

	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	{
		struct sluice_stream s[2] = { { ds[0], 1, 0 }, { other, 1, 0 } };

		T_EQ(sluice_loader_open_streams(s, 2, &cfg, &ld),
		     -SLUICE_ESCHEMA);
		sluice_loader_error(ld, msg, sizeof(msg));
		T_ASSERT(strstr(msg, "stream 1"));
		sluice_loader_close(ld);
	}
	{
		struct sluice_stream s[2] = { { ds[0], 1, 0 }, { empty, 0, 5 } };

		T_EQ(sluice_loader_open_streams(s, 2, &cfg, &ld), -EINVAL);
		sluice_loader_error(ld, msg, sizeof(msg));
		T_ASSERT(strstr(msg, "no records"));
		sluice_loader_close(ld);
	}
	{
		struct sluice_stream s[2] = { { ds[0], -1, 0 }, { ds[1], 1, 0 } };

		T_EQ(sluice_loader_open_streams(s, 2, &cfg, &ld), -EINVAL);
		sluice_loader_close(ld);
		T_EQ(sluice_loader_open_streams(s, 0, &cfg, &ld), -EINVAL);
		sluice_loader_close(ld);
		T_EQ(sluice_loader_open_streams(NULL, 1, &cfg, &ld), -EINVAL);
		sluice_loader_close(ld);
		T_EQ(sluice_loader_open_streams(s, 1, &cfg, NULL), -EINVAL);
	}
	/* an empty stream taking nothing is fine */
	{
		struct sluice_stream s[2] = { { ds[0], 1, 0 }, { empty, 0, 0 } };
		uint32_t *seen = calloc(NALL, sizeof(*seen));
		sluice_batch *b;
		uint64_t n = 0;

		T_ASSERT(seen);
		T_OK(sluice_loader_open_streams(s, 2, &cfg, &ld));
		while (sluice_loader_next(ld, &b) == 0) {
			n += fx_check_batch(b, seen);
			sluice_batch_release(b);
		}
		T_EQ(n, N0);
		for (uint64_t i = 0; i < N0; i++)
			T_EQ(seen[i], 1);
		sluice_loader_close(ld);
		free(seen);
	}
}

/* 10 records of fx's schema, the first with a value of 64 KiB, the
 * others of 8 bytes. */
static void write_one_large(const char *dir)
{
	static uint8_t v[64 << 10];
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	int32_t x[4] = { 1, 2, 3, 4 };

	f[0] = t_field("x", (DLDataType){ kDLInt, 32, 1 }, 4);
	f[1] = t_field("v", (DLDataType){ kDLUInt, 8, 1 }, -1);
	sluice_writer_config_init(&wc);
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (int i = 0; i < 10; i++) {
		const void *vals[2] = { x, v };
		uint64_t lens[2] = { sizeof(x), i ? 8 : sizeof(v) };

		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
}

/*
 * A stream of 10 records taken 1000 times an epoch beside another of 10,
 * in one batch of them all: the batch holds the 64 KiB value about 100
 * times, which the blocks it comes from (640 KiB less) do not bound.
 * The default budget holds it (it was refused: "needs 6585856 bytes,
 * more than the 532480 bytes of batch memory").
 */
static void check_repeats_in_a_batch(const char *dir)
{
	char a[600], b[600];
	sluice_dataset *ds[2];
	struct sluice_stream streams[2];
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	sluice_batch *batch;
	char msg[512];
	uint64_t got = 0;
	int r;

	snprintf(a, sizeof(a), "%s/rep-a", dir);
	snprintf(b, sizeof(b), "%s/rep-b", dir);
	write_one_large(a);
	fx_write_range(b, 64, 10, 65536, 0, 0);
	T_OK(sluice_dataset_open(a, &ds[0]));
	T_OK(sluice_dataset_open(b, &ds[1]));
	streams[0] = (struct sluice_stream){ ds[0], 0, 1000 };
	streams[1] = (struct sluice_stream){ ds[1], 1, 0 };
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.batch_size = 4096;
	cfg.device = SLUICE_DEVICE_HOST;
	r = sluice_loader_open_streams(streams, 2, &cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open_streams: %s: %s", sluice_strerror(r), msg);
	}
	while ((r = sluice_loader_next(ld, &batch)) == 0) {
		got += sluice_batch_size(batch);
		sluice_batch_release(batch);
	}
	if (r != SLUICE_EOF) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("next: %s: %s", sluice_strerror(r), msg);
	}
	T_EQ(got, 1010);
	sluice_loader_close(ld);
	sluice_dataset_close(ds[0]);
	sluice_dataset_close(ds[1]);
}

int main(void)
{
	char *dir = fx_tmpdir();
	char path[600];
	sluice_dataset *ds[3], *other = NULL, *empty = NULL;
	static const uint64_t first[3] = { 0, N0, N0 + N1 };
	static const uint64_t count[3] = { N0, N1, N2 };

	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/s%d", dir, i);
		fx_write_range(path, first[i], count[i], 1500, i == 1 ? 0 : 3,
			       i == 2 ? 170 : 0);
		T_OK(sluice_dataset_open(path, &ds[i]));
	}
	snprintf(path, sizeof(path), "%s/empty", dir);
	fx_write(path, 0, 4096, 0, 0);
	T_OK(sluice_dataset_open(path, &empty));
	{
		/* another schema: one field only */
		struct sluice_field f;
		struct sluice_writer_config wc;
		sluice_writer *w;
		int32_t v = 1;
		const void *vals[1] = { &v };
		uint64_t lens[1] = { 4 };

		memset(&f, 0, sizeof(f));
		snprintf(f.name, sizeof(f.name), "x");
		f.dtype = (DLDataType){ kDLInt, 32, 1 };
		sluice_writer_config_init(&wc);
		snprintf(path, sizeof(path), "%s/other", dir);
		T_OK(sluice_writer_open(path, &f, 1, &wc, &w));
		T_OK(sluice_writer_add(w, vals, lens));
		T_OK(sluice_writer_close(w, NULL));
		T_OK(sluice_dataset_open(path, &other));
	}
	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		check_epoch(ds, mode);
		check_ranks_and_resume(ds, mode);
	}
	check_refusals(ds, other, empty);
	check_repeats_in_a_batch(dir);
	for (int i = 0; i < 3; i++)
		sluice_dataset_close(ds[i]);
	sluice_dataset_close(other);
	sluice_dataset_close(empty);
	fx_rmrf(dir);
	free(dir);
	return 0;
}
