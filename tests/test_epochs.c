/*
 * test_epochs.c - a loader told how many epochs the job runs
 * (cfg.epochs) delivers each of them exactly once, reads nothing of the
 * epoch after the last, then returns SLUICE_EOF at once, and set_epoch or
 * a saved state take it back to an earlier epoch.
 */
#include <time.h>

#include "sluice_tools.h"
#include "loader_fixture.h"

#define N 4000u
#define EPOCHS 2u

static sluice_loader *open_loader(sluice_dataset *ds, uint64_t epochs)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = 32;
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	/* 16 cache entries for 84 blocks: the next epoch's first blocks are
	 * not cached, so reading ahead into it reads them */
	cfg.cache_bytes = 16 * 2048;
	/* reads 20 ms late: those made as an epoch ends land after it */
	sluice_loader_config_read_delay(&cfg, 20000);
	cfg.epochs = epochs;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	return ld;
}

/* One epoch, every record once; @return: its batches. */
static uint64_t run_epoch(sluice_loader *ld)
{
	uint32_t *seen = calloc(N, sizeof(*seen));
	uint64_t n = 0, batches = 0;
	sluice_batch *b;
	int r;

	T_ASSERT(seen != NULL);
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		n += fx_check_batch(b, seen);
		sluice_batch_release(b);
		batches++;
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(n, N);
	for (uint32_t i = 0; i < N; i++)
		T_EQ(seen[i], 1);
	free(seen);
	return batches;
}

static uint64_t blocks_read(sluice_loader *ld)
{
	struct sluice_stats st = { .size = sizeof(st) };

	T_OK(sluice_loader_stats(ld, &st));
	return st.blocks_read;
}

/* The blocks read after @epochs epochs are consumed, while the consumer
 * looks away for @ms. */
static uint64_t reads_after(sluice_loader *ld, uint64_t epochs, long ms)
{
	struct timespec pause = { 0, ms * 1000000L };
	uint64_t before;

	for (uint64_t e = 0; e < epochs; e++)
		run_epoch(ld);
	before = blocks_read(ld);
	nanosleep(&pause, NULL);
	return blocks_read(ld) - before;
}

int main(void)
{
	char *dir = fx_tmpdir();
	sluice_dataset *ds = NULL;
	struct sluice_state st;
	sluice_loader *ld;
	sluice_batch *b;
	char path[600];
	uint64_t nblocks, batches, endless_extra;

	snprintf(path, sizeof(path), "%s/ds", dir);
	fx_write(path, N, 2048, 0, 0);      /* ~48 records, 84 blocks */
	T_OK(sluice_dataset_open(path, &ds));
	nblocks = dataset_table(ds)->block_count;

	/* Without an end, the second epoch's end reads ahead into the
	 * third: what the bounded loader must not do (so this test can
	 * fail). */
	ld = open_loader(ds, 0);
	endless_extra = reads_after(ld, EPOCHS, 100);
	sluice_loader_close(ld);
	printf("no end: %llu blocks read past epoch %u\n",
	       (unsigned long long)endless_extra, EPOCHS - 1);
	T_LT(0, endless_extra);

	ld = open_loader(ds, EPOCHS);
	batches = sluice_loader_batches(ld);
	T_EQ(reads_after(ld, EPOCHS, 100), 0);
	/* each epoch read its blocks (a few twice, where the planner
	 * evicted one read ahead), nothing of the third */
	T_LT(blocks_read(ld), EPOCHS * (nblocks + nblocks / 8) + 1);
	T_EQ(sluice_loader_batches(ld), 0);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);
	T_OK(sluice_loader_state_get(ld, &st));
	T_EQ(st.epoch, EPOCHS);
	T_EQ(st.batches_consumed, 0);

	/* back to the last epoch: delivered again, then the end again */
	T_OK(sluice_loader_set_epoch(ld, EPOCHS - 1));
	T_EQ(sluice_loader_batches(ld), batches);
	T_EQ(run_epoch(ld), batches);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);

	/* a state past the end restores the end, and a set_epoch past it
	 * goes there: neither reads anything (the read-ahead read 9 and 11
	 * blocks of such an epoch); an earlier epoch goes on */
	T_OK(sluice_loader_state_set(ld, &st));
	T_EQ(reads_after(ld, 0, 100), 0);
	T_EQ(sluice_loader_batches(ld), 0);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);
	T_OK(sluice_loader_set_epoch(ld, EPOCHS + 5));
	T_EQ(reads_after(ld, 0, 100), 0);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);
	T_OK(sluice_loader_set_epoch(ld, 0));
	T_EQ(run_epoch(ld), batches);
	T_EQ(run_epoch(ld), batches);
	T_EQ(sluice_loader_next(ld, &b), SLUICE_EOF);
	sluice_loader_close(ld);

	sluice_dataset_close(ds);
	fx_rmrf(dir);
	free(dir);
	printf("ok\n");
	return 0;
}
