/*
 * test_read_ahead.c - the read-ahead follows bandwidth x latency
 * (pipeline/read_ahead.c): on a slow device (every read 50 ms late) it
 * keeps more blocks in flight than the two per decode thread it opens
 * with, up to the cache entries a batch does not need; every record is
 * still delivered once, right.
 */
#include "sluice_tools.h"
#include "loader_fixture.h"

#define N 4000u

static uint32_t epoch_read_ahead(sluice_dataset *ds, uint32_t delay_us,
				 uint32_t *at_open, uint64_t *blocks_read)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	uint32_t *seen = calloc(N, sizeof(*seen));
	sluice_loader *ld = NULL;
	sluice_batch *b;
	uint64_t n = 0;
	int r;

	T_ASSERT(seen != NULL);
	sluice_loader_config_init(&cfg);
	cfg.batch_size = 32;
	cfg.shuffle = SLUICE_SHUFFLE_BLOCK;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	sluice_loader_config_read_delay(&cfg, delay_us);
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_OK(sluice_loader_stats(ld, &st));
	*at_open = (uint32_t)st.read_ahead_blocks;
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		n += fx_check_batch(b, seen);
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(n, N);
	for (uint32_t i = 0; i < N; i++)
		T_EQ(seen[i], 1);
	T_OK(sluice_loader_stats(ld, &st));
	printf("read delay %u us: read-ahead %u blocks at open, %llu at the "
	       "end; %llu blocks read\n", delay_us, *at_open,
	       (unsigned long long)st.read_ahead_blocks,
	       (unsigned long long)st.blocks_read);
	*blocks_read = st.blocks_read;
	sluice_loader_close(ld);
	free(seen);
	return (uint32_t)st.read_ahead_blocks;
}

int main(void)
{
	char *dir = fx_tmpdir();
	sluice_dataset *ds = NULL;
	char path[600];
	uint32_t open_fast, open_slow, slow;
	uint64_t nblocks, read_fast, read_slow;

	snprintf(path, sizeof(path), "%s/ds", dir);
	fx_write(path, N, 2048, 0, 0);      /* ~48 records, 84 blocks */
	T_OK(sluice_dataset_open(path, &ds));
	nblocks = dataset_table(ds)->block_count;
	epoch_read_ahead(ds, 0, &open_fast, &read_fast);
	slow = epoch_read_ahead(ds, 50000, &open_slow, &read_slow);
	T_EQ(open_fast, 4);                 /* two per decode thread */
	T_EQ(open_slow, 4);
	/* 50 ms a read: more than the 4 blocks in flight it opened with */
	T_LT(open_slow, slow);
	/* without evicting what it read for batches still to come (it read
	 * 141 of 84 blocks when it did); the planner's own evictions re-read
	 * a few, and by the end of the epoch the next one's first blocks
	 * are being read (at most every cache entry: 16 here) */
	T_LT(read_slow, nblocks + nblocks / 8 + 16);
	T_LT(read_fast, nblocks + nblocks / 8 + 16);
	sluice_dataset_close(ds);
	fx_rmrf(dir);
	free(dir);
	printf("ok\n");
	return 0;
}
