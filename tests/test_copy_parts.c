/*
 * test_copy_parts.c - a batch's CPU copy is split into parts of about
 * equal bytes, not equal records, where values vary in size: in every
 * batch here the first half of the records hold all of the large values,
 * so parts of equal records would leave one worker nearly all of the
 * copy.  Each part's bytes come from the assemble stage's spans
 * (on_span); the batches' contents are checked as everywhere.
 */
#define FX_VLEN(i) ((uint64_t)((i) % BATCH < BATCH / 2 ? VALUE : 0))
#define BATCH 128u
#define VALUE 8192u

#include <pthread.h>

#include "loader_fixture.h"

#define N (BATCH * 24u)

struct spans {
	pthread_mutex_t mu;
	uint64_t parts, most;   /* assemble spans, the largest one's bytes */
};

static void on_span(void *ctx, enum sluice_stage stage, uint64_t start_ns,
		    uint64_t end_ns, uint64_t bytes)
{
	struct spans *sp = ctx;

	(void)start_ns;
	(void)end_ns;
	if (stage != SLUICE_STAGE_ASSEMBLE)
		return;
	pthread_mutex_lock(&sp->mu);
	sp->parts++;
	if (bytes > sp->most)
		sp->most = bytes;
	pthread_mutex_unlock(&sp->mu);
}

int main(void)
{
	char *dir = fx_tmpdir();
	struct spans sp = { .mu = PTHREAD_MUTEX_INITIALIZER };
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	uint32_t *seen = calloc(N, sizeof(*seen));
	/* a batch's copy: the large values, and x's rows */
	uint64_t batch_bytes = (BATCH / 2) * VALUE + BATCH * 16, got = 0;
	int r;

	T_ASSERT(seen);
	fx_write(dir, N, 256 << 10, 0, 0);
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.batch_size = BATCH;
	cfg.decode_threads = 2;     /* two parts a batch (128 / 32 > 2) */
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.on_span = on_span;
	cfg.on_span_ctx = &sp;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		got += fx_check_batch(b, seen);
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(got, N);
	for (uint32_t i = 0; i < N; i++)
		T_EQ(seen[i], 1);
	sluice_loader_close(ld);

	/* two parts a batch (and the next epoch's first batches, planned
	 * before the close), neither more than half the batch's bytes and
	 * one record: equal records would give one part 64 values */
	T_ASSERT(sp.parts >= 2 * (N / BATCH));
	T_ASSERT(sp.most <= batch_bytes / 2 + VALUE + 16);
	T_ASSERT(sp.most >= batch_bytes / 2);

	sluice_dataset_close(ds);
	fx_rmrf(dir);
	free(dir);
	free(seen);
	return 0;
}
