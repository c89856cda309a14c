/*
 * test_sim_loader.c - the loader's device path (copies, events, exports,
 * releases, slot reuse) on the simulated asynchronous device
 * (gpu/sim_device.c), through the C API, in every `make test`.  Batches
 * are copied, not gathered (test_sim_gather.c, test_sim_gather_var.c).
 *
 * The consumer reads each batch on its own stream after random delays
 * and releases the batch before those reads ran (sim_util.h); the device
 * poisons its memory before each copy lands and after each release, so a
 * missing or misplaced wait shows as wrong bytes.  Cases, for every
 * shuffle mode and for raw and zstd data:
 *   - every record delivered once per epoch with its bytes;
 *   - batches held across next() calls, released in random order;
 *   - a consumer on the calling thread (stream 0);
 * and once each: the loader closed while batches are held and their
 * reads still queued; a copy that fails (the loader fails with its
 * message, the batches before it intact).
 *
 * The seed is printed on failure; SLUICE_SIM_SEED=N reruns it,
 * SLUICE_SIM_STRESS=K runs K seeds.
 */
#include "loader_fixture.h"
#include "sim_util.h"

#define N 3000
#define B 100

static const char *const names[] = { "x", "v", "v.offsets" };

static int check_fixture(struct sim_pending *p)
{
	const int32_t *x = p->data[0];
	const uint8_t *v = p->data[1];
	const int64_t *off = p->data[2];

	if (p->shape0[0] != p->n || p->shape0[2] != p->n + 1) {
		snprintf(p->why, sizeof(p->why), "shapes %lld, %lld for %u rows",
			 (long long)p->shape0[0], (long long)p->shape0[2], p->n);
		return 1;
	}
	if (off[0] != 0 || off[p->n] != p->shape0[1]) {
		snprintf(p->why, sizeof(p->why),
			 "offsets run from %lld to %lld, %lld values",
			 (long long)off[0], (long long)off[p->n],
			 (long long)p->shape0[1]);
		return 1;
	}
	for (uint32_t r = 0; r < p->n; r++) {
		int32_t want[4];

		fx_x(p->idx[r], want);
		if (memcmp(x + 4 * r, want, sizeof(want))) {
			snprintf(p->why, sizeof(p->why),
				 "row %u (record %llu): x is %08x, want %08x",
				 r, (unsigned long long)p->idx[r],
				 (unsigned)x[4 * r], (unsigned)want[0]);
			return 1;
		}
		if ((uint64_t)(off[r + 1] - off[r]) != FX_VLEN(p->idx[r])) {
			snprintf(p->why, sizeof(p->why),
				 "row %u (record %llu): v has %lld bytes",
				 r, (unsigned long long)p->idx[r],
				 (long long)(off[r + 1] - off[r]));
			return 1;
		}
		for (uint64_t k = 0; k < FX_VLEN(p->idx[r]); k++)
			if (v[off[r] + (int64_t)k] != fx_v(p->idx[r], k)) {
				snprintf(p->why, sizeof(p->why),
					 "record %llu: v byte %llu is %#x",
					 (unsigned long long)p->idx[r],
					 (unsigned long long)k,
					 v[off[r] + (int64_t)k]);
				return 1;
			}
	}
	return 0;
}

static sluice_loader *open_sim(sluice_dataset *ds, int shuffle,
			       uint32_t depth)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld = NULL;
	char msg[256];
	int r;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.seed = sim_seed;
	cfg.shuffle = shuffle;
	cfg.window_blocks = 4;
	cfg.prefetch_depth = depth;
	cfg.decode_threads = 2;
	/* the copy path: its variable field would have the batches
	 * gathered (test_sim_gather_var.c) */
	cfg.device_gather = SLUICE_DEVICE_GATHER_OFF;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
	}
	T_EQ(sluice_loader_device(ld).device_type, kDLCPU);
	T_OK(sluice_loader_stats(ld, &st));
	T_CONTAINS(st.fallbacks, "simulated device");
	return ld;
}

static void consumer_init(struct sim_consumer *c, int64_t stream,
			  unsigned hold, uint32_t *seen)
{
	memset(c, 0, sizeof(*c));
	c->names = names;
	c->ntensors = 3;
	c->check = check_fixture;
	c->stream = stream;
	c->kernel_us = 400;
	c->hold = hold;
	c->seen = seen;
	c->records = N;
	c->rng = sim_seed * 7 + 3;
}

static void expect_clean(const struct sim_consumer *c, const char *what)
{
	if (c->bad)
		T_FAIL_AT("%s: %llu of %llu batches read wrong bytes; first: %s",
			  what, (unsigned long long)c->bad,
			  (unsigned long long)c->batches, c->first_bad);
}

/* One epoch: every record once, with its bytes. */
static void epoch_case(sluice_dataset *ds, int shuffle, int64_t stream,
		       unsigned hold, uint32_t depth, const char *what)
{
	sluice_loader *ld = open_sim(ds, shuffle, depth);
	struct sim_consumer c;
	uint32_t *seen = calloc(N, sizeof(*seen));

	T_ASSERT(seen != NULL);
	consumer_init(&c, stream, hold, seen);
	T_EQ(sim_consume(ld, &c, 0), SLUICE_EOF);
	sim_finish(&c);
	expect_clean(&c, what);
	for (uint64_t i = 0; i < N; i++)
		if (seen[i] != 1)
			T_FAIL_AT("%s: record %llu delivered %u times", what,
				  (unsigned long long)i, seen[i]);
	sluice_loader_close(ld);
	free(seen);
}

/* Close with batches held and their reads queued; release afterwards. */
static void close_held_case(sluice_dataset *ds, int64_t stream)
{
	sluice_loader *ld = open_sim(ds, SLUICE_SHUFFLE_WINDOW, 4);
	struct sim_consumer c;

	consumer_init(&c, stream, 3, NULL);
	c.kernel_us = 2000;
	T_OK(sim_consume(ld, &c, 5));
	T_EQ(c.nheld, 3);
	sluice_loader_close(ld);
	sim_finish(&c);
	expect_clean(&c, "close with batches held");
	T_EQ(c.batches, 5);
}

/* The 4th copy fails: the loader says so; the batches before are whole. */
static void copy_error_case(sluice_dataset *ds, int64_t stream)
{
	sluice_loader *ld;
	struct sim_consumer c;
	char msg[512];
	int r;

	sim_test_faults = SIM_FAULT_COPY_ERROR;
	sim_test_fail_copy = 4;
	ld = open_sim(ds, SLUICE_SHUFFLE_BLOCK, 3);
	sim_test_faults = 0;
	consumer_init(&c, stream, 0, NULL);
	r = sim_consume(ld, &c, 0);
	sim_finish(&c);
	T_EQ(r, -SLUICE_ECUDA);
	T_LT(c.batches, 4);
	expect_clean(&c, "before a failed copy");
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, "copy of batch");
	/* with the device's own words */
	T_CONTAINS(msg, "simulated copy 4");
	/* and it stays failed */
	{
		sluice_batch *b;

		T_EQ(sluice_loader_next(ld, &b), -SLUICE_ECUDA);
	}
	sluice_loader_close(ld);
}

int main(void)
{
	static const int modes[] = { SLUICE_SHUFFLE_NONE, SLUICE_SHUFFLE_BLOCK,
				     SLUICE_SHUFFLE_WINDOW, SLUICE_SHUFFLE_FULL };
	static const char *const mode_name[] = { "none", "block", "window",
						 "full" };
	char *dir = fx_tmpdir();
	uint64_t seed = sim_first_seed();
	unsigned rounds = sim_rounds(1);
	char path[2][600], what[128];
	sluice_dataset *ds[2];

	for (int z = 0; z < 2; z++) {
		snprintf(path[z], sizeof(path[z]), "%s/%s", dir,
			 z ? "zstd" : "raw");
		fx_write(path[z], N, 4096, z ? 1 : 0, 1000);
		T_OK(sluice_dataset_open(path[z], &ds[z]));
	}
	for (unsigned round = 0; round < rounds; round++) {
		int64_t s;

		sim_use_seed(seed + round);
		printf("seed %llu\n", (unsigned long long)sim_seed);
		s = sim_stream_create(sim_seed * 5 + 1, 300);
		T_ASSERT(s != 0);
		for (int z = 0; z < 2; z++)
			for (int m = 0; m < 4; m++) {
				snprintf(what, sizeof(what), "%s, shuffle %s",
					 z ? "zstd" : "raw", mode_name[m]);
				epoch_case(ds[z], modes[m], s, 0, 4, what);
				snprintf(what, sizeof(what),
					 "%s, shuffle %s, 3 held", z ? "zstd" : "raw",
					 mode_name[m]);
				epoch_case(ds[z], modes[m], s, 3, 4, what);
				snprintf(what, sizeof(what),
					 "%s, shuffle %s, host consumer",
					 z ? "zstd" : "raw", mode_name[m]);
				epoch_case(ds[z], modes[m], 0, 1, 2, what);
			}
		close_held_case(ds[0], s);
		copy_error_case(ds[1], s);
		sim_stream_destroy(s);
	}
	printf("%u seed(s) from %llu: every batch read after its copy and "
	       "before its reuse\n", rounds, (unsigned long long)seed);
	for (int z = 0; z < 2; z++)
		sluice_dataset_close(ds[z]);
	fx_rmrf(dir);
	free(dir);
	sim_done();
	return 0;
}
