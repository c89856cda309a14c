/*
 * test_gather.c - device gather (pipeline/gather.c) on the host device,
 * where the gather is a memcpy of the same runs the GPU kernel would
 * copy (device_gather ON): batches are byte for byte those of the CPU
 * assembly (device_gather OFF) and the bytes the writer wrote, under
 * every shuffle mode, raw and zstd, with batches straddling blocks and
 * shards, range reads, resume, rank partitions, a tiny memory budget
 * (blocks evicted all the time), and batches held across many next()
 * calls and released out of order.  Plus the run-coalescing rule.
 * The dataset: gather_fixture.h.
 */
#include "t.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "loader.h"
#include "gather_fixture.h"

#define BATCH 24u
#define HOLD 10u

struct setup {
	int shuffle;
	int range_reads;
	int rank, world;
	uint64_t memory_bytes;
};

static sluice_loader *open_loader(sluice_dataset *ds, const struct setup *su,
				  int gather)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	char msg[512];
	int r;

	sluice_loader_config_init(&cfg);
	cfg.shuffle = su->shuffle;
	cfg.batch_size = BATCH;
	cfg.seed = 11;
	cfg.window_blocks = 3;
	cfg.prefetch_depth = 4;
	cfg.decode_threads = 2;
	cfg.rank = su->rank;
	cfg.world_size = su->world;
	cfg.memory_bytes = su->memory_bytes;
	cfg.range_reads = su->range_reads;
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.device_gather = gather;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
	}
	return ld;
}

/* A batch the consumer holds: handle, tensors, indices when taken. */
struct held {
	sluice_batch *b;
	DLManagedTensor *t[3];
	uint64_t idx[BATCH];
	uint32_t n;
};

static void check_held(const struct held *h)
{
	for (uint32_t fi = 0; fi < 3; fi++) {
		const uint8_t *data = h->t[fi]->dl_tensor.data;

		T_EQ(h->t[fi]->dl_tensor.shape[0], h->n);
		for (uint32_t r = 0; r < h->n; r++)
			for (uint64_t k = 0; k < field_bytes[fi]; k++)
				if (data[r * field_bytes[fi] + k] !=
				    want_byte(h->idx[r], fi, k))
					T_FAIL_AT("record %llu field %s byte %llu differs",
						  (unsigned long long)h->idx[r],
						  field_name[fi],
						  (unsigned long long)k);
	}
}

static void take(sluice_batch *b, struct held *h)
{
	h->b = b;
	h->n = sluice_batch_size(b);
	T_ASSERT(h->n >= 1 && h->n <= BATCH);
	memcpy(h->idx, sluice_batch_indices(b), h->n * sizeof(h->idx[0]));
	for (uint32_t fi = 0; fi < 3; fi++)
		T_OK(sluice_batch_tensor(b, field_name[fi], -1, &h->t[fi]));
	check_held(h);
}

/* Let go of handle and tensors in an order that depends on @k. */
static void let_go(struct held *h, uint64_t k)
{
	check_held(h);
	if (k % 2)
		sluice_batch_release(h->b);
	for (uint32_t fi = 0; fi < 3; fi++)
		h->t[(fi + k) % 3]->deleter(h->t[(fi + k) % 3]);
	if (k % 2 == 0)
		sluice_batch_release(h->b);
	memset(h, 0, sizeof(*h));
}

/* The next batch of both loaders: same records, same bytes.  @return:
 * 0, or the code both gave (EOF). */
static int next_both(sluice_loader *on, sluice_loader *off, struct held *h)
{
	struct held other;
	sluice_batch *b, *b2;
	int r = sluice_loader_next(on, &b), r2 = sluice_loader_next(off, &b2);

	T_EQ(r, r2);
	if (r)
		return r;
	take(b, h);
	take(b2, &other);
	T_EQ(h->n, other.n);
	T_MEMEQ(h->idx, other.idx, h->n * sizeof(h->idx[0]));
	for (uint32_t fi = 0; fi < 3; fi++)
		T_MEMEQ(h->t[fi]->dl_tensor.data, other.t[fi]->dl_tensor.data,
			h->n * field_bytes[fi]);
	let_go(&other, 0);
	return 0;
}

/*
 * Two epochs of a gathering loader beside a CPU-assembling one, the
 * gathering consumer holding up to @hold batches and letting go of a
 * pseudo-random one when it holds that many.  @return: batches gathered.
 */
static uint64_t run_pair(sluice_dataset *ds, const struct setup *su,
			 uint32_t hold)
{
	sluice_loader *on = open_loader(ds, su, SLUICE_DEVICE_GATHER_ON);
	sluice_loader *off = open_loader(ds, su, SLUICE_DEVICE_GATHER_OFF);
	struct held *h = calloc(hold, sizeof(*h));
	uint64_t rng = 0x9e3779b97f4a7c15ull, taken = 0, records = 0;
	struct sluice_stats st = { .size = sizeof(st) },
		st_off = { .size = sizeof(st_off) };
	int r;

	T_ASSERT(h != NULL);
	for (int epoch = 0; epoch < 2; epoch++) {
		for (;;) {
			uint32_t k = 0;

			while (k < hold && h[k].b)
				k++;
			if (k == hold) {
				rng = rng * 6364136223846793005ull +
				      1442695040888963407ull;
				k = (uint32_t)((rng >> 33) % hold);
				let_go(&h[k], rng >> 40);
			}
			r = next_both(on, off, &h[k]);
			if (r)
				break;
			records += h[k].n;
			if (++taken % 7 == 0)
				for (uint32_t j = 0; j < hold; j++)
					if (h[j].b)
						check_held(&h[j]);
		}
		T_EQ(r, SLUICE_EOF);
	}
	for (uint32_t j = 0; j < hold; j++)
		if (h[j].b)
			let_go(&h[j], j);
	T_OK(sluice_loader_stats(on, &st));
	T_OK(sluice_loader_stats(off, &st_off));
	T_EQ(st.records, records);
	T_EQ(st_off.batches_gathered, 0);
	T_EQ(st_off.device_upload_bytes, 0);
	T_ASSERT(st.batches_gathered <= st.batches);
	if (st.batches_gathered) {
		T_ASSERT(st.gather_runs >= st.batches_gathered);
		T_ASSERT(st.device_upload_bytes > 0);
	}
	/* the host's gathers go through no device memory */
	T_EQ(st.device_memory_bytes, 0);
	sluice_loader_close(on);
	sluice_loader_close(off);
	free(h);
	return st.batches_gathered;
}

/* Resume: a gathering loader set to the state taken after @k batches
 * delivers what a CPU-assembling loader does from there. */
static void check_resume(sluice_dataset *ds, int shuffle)
{
	struct setup su = { shuffle, SLUICE_RANGE_READS_OFF, 0, 1, 0 };
	sluice_loader *first = open_loader(ds, &su, SLUICE_DEVICE_GATHER_ON);
	sluice_loader *on, *off;
	struct sluice_state state;
	struct held h;
	sluice_batch *b;
	int r;

	for (int k = 0; k < 17; k++) {
		T_OK(sluice_loader_next(first, &b));
		sluice_batch_release(b);
	}
	T_OK(sluice_loader_state_get(first, &state));
	sluice_loader_close(first);
	on = open_loader(ds, &su, SLUICE_DEVICE_GATHER_ON);
	off = open_loader(ds, &su, SLUICE_DEVICE_GATHER_OFF);
	T_OK(sluice_loader_state_set(on, &state));
	T_OK(sluice_loader_state_set(off, &state));
	while ((r = next_both(on, off, &h)) == 0)
		let_go(&h, 1);
	T_EQ(r, SLUICE_EOF);
	sluice_loader_close(on);
	sluice_loader_close(off);
}

/* The coalescing rule: a run that continues the last on both sides
 * extends it; anything else starts a new one; empty runs vanish. */
static void check_coalescing(void)
{
	struct gather_run runs[8];
	uint32_t n = 0;

	gather_run_append(runs, &n, 100, 5000, 0);
	T_EQ(n, 0);
	gather_run_append(runs, &n, 100, 5000, 16);
	gather_run_append(runs, &n, 116, 5016, 16);    /* both continue */
	T_EQ(n, 1);
	T_EQ(runs[0].len, 32);
	gather_run_append(runs, &n, 132, 6000, 16);    /* dst jumps */
	gather_run_append(runs, &n, 400, 6016, 16);    /* src jumps */
	gather_run_append(runs, &n, 416, 6032, 8);
	T_EQ(n, 3);
	T_EQ(runs[1].src, 132);
	T_EQ(runs[1].dst, 6000);
	T_EQ(runs[1].len, 16);
	T_EQ(runs[2].src, 400);
	T_EQ(runs[2].dst, 6016);
	T_EQ(runs[2].len, 24);
	gather_run_append(runs, &n, 100, 6056, 4);     /* src goes back */
	T_EQ(n, 4);
	/* zeros join zeros that end where they start, never a copy */
	gather_run_append(runs, &n, GATHER_ZEROS, 6060, 8);
	gather_run_append(runs, &n, GATHER_ZEROS, 6068, 8);
	T_EQ(n, 5);
	T_EQ(runs[4].len, 16);
	gather_run_append(runs, &n, 200, 6076, 8);     /* a copy after */
	gather_run_append(runs, &n, 208, 6084, 4);
	T_EQ(n, 6);
	T_EQ(runs[5].len, 12);
	T_EQ(runs[3].len, 4);                   /* the copy before the zeros */
}

/* The device calls on the host device: runs land where they should, and
 * any run or upload outside its mirror is refused. */
static void check_device_calls(void)
{
	struct device_config dc = {
		.kind = SLUICE_DEVICE_HOST, .device_id = 0,
		.arena_bytes = 1 << 20, .slots = 2,
		.mirror_offset = 1 << 19, .mirror_bytes = 1 << 19,
		.io_mirror_bytes = 1 << 19, .gather_runs_max = 4,
		.upload_lanes = 1,
	};
	struct gather_run ok[2] = { { 3, (1 << 19) + 100, 1000 },
				    { 5000, (1 << 19) + 7, 17 } };
	struct gather_run bad[4] = {
		{ (1 << 19) - 10, 1 << 19, 11 },       /* src past the io part */
		{ 0, (1 << 20) - 10, 11 },             /* dst past the arena */
		{ 0, 1000, 10 },                       /* dst in the io part */
		{ UINT64_MAX - 5, 1 << 19, 10 },       /* wraps */
	};
	struct device *d = NULL;
	uint8_t *arena;
	char err[256];

	T_OK(device_open(&dc, &d, err, sizeof(err)));
	arena = device_arena(d, NULL);
	for (size_t k = 0; k < (1 << 19); k++)
		arena[k] = (uint8_t)(k * 13 + 1);
	T_OK(device_upload(d, arena + 3, 1000));
	T_EQ(device_upload(d, arena + (1 << 19) - 4, 8), -EINVAL);
	T_OK(device_gather_slot(d, 1, ok, 2));
	T_MEMEQ(arena + (1 << 19) + 100, arena + 3, 1000);
	T_MEMEQ(arena + (1 << 19) + 7, arena + 5000, 17);
	for (int k = 0; k < 4; k++)
		T_EQ(device_gather_slot(d, 0, &bad[k], 1), -EINVAL);
	T_EQ(device_gather_slot(d, 2, ok, 1), -EINVAL);    /* no slot 2 */
	T_EQ(device_gather_slot(d, 0, ok, 5), -EINVAL);    /* over the max */
	device_close(d);
	/* an io mirror overlapping the batch mirror is refused at open */
	dc.io_mirror_bytes = (1 << 19) + 4096;
	T_EQ(device_open(&dc, &d, err, sizeof(err)), -EINVAL);
}

int main(void)
{
	static const char *names[] = { "none", "block", "window", "full" };
	char *dir = strdup("/tmp/sluice-test-XXXXXX"), sub[600];

	check_coalescing();
	printf("ok: runs coalesce only when they continue on both sides\n");
	check_device_calls();
	printf("ok: device_gather_slot and device_upload on the host: runs land, any outside their mirror are refused\n");
	T_ASSERT(dir && mkdtemp(dir));
	for (int level = 0; level <= 3; level += 3) {
		const char *kind = level ? "zstd" : "raw";
		sluice_dataset *ds = NULL;

		snprintf(sub, sizeof(sub), "%s/%s", dir, kind);
		write_dataset(sub, level);
		T_OK(sluice_dataset_open(sub, &ds));
		for (int sh = SLUICE_SHUFFLE_NONE; sh <= SLUICE_SHUFFLE_FULL;
		     sh++) {
			struct setup su = { sh, SLUICE_RANGE_READS_OFF, 0, 1, 0 };
			uint64_t g = run_pair(ds, &su, 1);

			/* 2 epochs of ceil(2500 / 24) batches, every one */
			T_EQ(g, 2ull * ((N + BATCH - 1) / BATCH));
			/* Held batches past the budget get memory of their
			 * own on the host, and are assembled there. */
			g = run_pair(ds, &su, HOLD);
			T_ASSERT(g > 0);
			printf("ok: %s, shuffle %s: batches gathered equal the CPU's, also with %u held and released out of order (%llu gathered)\n",
			       kind, names[sh], HOLD, (unsigned long long)g);
		}
		/* Range reads: batches with records read by range are
		 * assembled on the CPU, and still equal. */
		{
			struct setup su = { SLUICE_SHUFFLE_FULL,
					    SLUICE_RANGE_READS_ON, 0, 1, 0 };
			uint64_t g = run_pair(ds, &su, 3);

			printf("ok: %s, full shuffle, range reads on: %llu gathered, equal\n",
			       kind, (unsigned long long)g);
		}
		/* A tiny budget: the io pool holds a few blocks, so blocks
		 * are evicted and their memory re-read all the time. */
		for (int sh = SLUICE_SHUFFLE_NONE; sh <= SLUICE_SHUFFLE_FULL;
		     sh += 3) {
			struct setup su = { sh, SLUICE_RANGE_READS_OFF, 0, 1,
					    640u << 10 };

			T_ASSERT(run_pair(ds, &su, 2) > 0);
		}
		printf("ok: %s: a 640 KiB budget (blocks evicted all the time): equal\n",
		       kind);
		for (int rank = 0; rank < 3; rank++) {
			struct setup su = { SLUICE_SHUFFLE_WINDOW,
					    SLUICE_RANGE_READS_OFF, rank, 3, 0 };

			T_ASSERT(run_pair(ds, &su, 4) > 0);
		}
		printf("ok: %s: ranks 0..2 of 3: equal\n", kind);
		check_resume(ds, SLUICE_SHUFFLE_WINDOW);
		check_resume(ds, SLUICE_SHUFFLE_FULL);
		printf("ok: %s: resumed mid-epoch: equal\n", kind);
		sluice_dataset_close(ds);
	}
	snprintf(sub, sizeof(sub), "rm -rf '%s'", dir);
	T_EQ(system(sub), 0);
	free(dir);
	return 0;
}
