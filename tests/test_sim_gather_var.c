/*
 * test_sim_gather_var.c - variable-size fields gathered on the simulated
 * asynchronous device (gpu/sim_device.c): each value is a run of the
 * gather, a padded row's tail a run of zeros, and the offsets or lengths,
 * which the host works out from the blocks' offsets tables, are copied to
 * the batch's device memory after the gather.
 *
 * As test_sim_gather.c: a small budget (blocks evicted, their io memory
 * reused), a consumer that holds three batches and reads each on its own
 * stream after a random delay, every shuffle mode, two epochs, each
 * record delivered once per epoch, every byte checked where the consumer
 * reads it, padding included (the device memory it lands in is poisoned
 * before each copy and after each release).  Flat and padded, values
 * cut at the pad length, empty values, a 6-byte item (runs at odd
 * offsets), raw and zstd blocks; full shuffle's record ranges, checked
 * in the staging buffers and uploaded from there (ranges.device), for a
 * dataset whose one other field is kept resident; and raw blocks fetched
 * through the staging buffers, only their offsets tables copied to the
 * host (fetch.c), one of them from two parts.
 *
 * The seed is printed on failure; SLUICE_SIM_SEED=N reruns it,
 * SLUICE_SIM_STRESS=K runs K seeds.
 */
#include "format_util.h"       /* tu_field */
#include "loader_fixture.h"    /* fx_tmpdir, fx_rmrf */
#include "shard_patch.h"       /* sp_block */
#include "sim_util.h"
#include "sluice_tools.h"     /* SLUICE_DEVICE_GATHER_ON */

#define NREC 1500u
#define B 24u
#define PAD 9u                  /* items: some values are longer */
#define W_BIG 100000u           /* the fetched case's w: 40 KB on average */

/* Items (int16 x 3) of "v" and bytes of "w" of record @i, some empty */
/* the record whose v is LONG_ITEMS long (6 MiB: over a staging
 * buffer), or UINT64_MAX */
static uint64_t g_long_at = UINT64_MAX;
#define LONG_ITEMS ((6u << 20) / 6)

/* Every record the same (the split case): 100 records of 62,446 bytes
 * fill a 6 MiB block, where v's values end 1,296 bytes before its
 * second 4 MiB part, and w's offsets table (808 bytes, after the 800 of
 * the labels) starts 496 bytes before the part ends. */
static int g_split;
#define SPLIT_V_ITEMS 6987u
#define SPLIT_W 20500u
#define PART_BYTES (4u << 20) /* a staging buffer's (stage.c) */

static uint64_t v_items(uint64_t i)
{
	if (g_split)
		return SPLIT_V_ITEMS;
	return i == g_long_at ? LONG_ITEMS : (i * 7) % 17;
}

static uint64_t g_w_max;       /* w's values: shorter than this */

static uint64_t w_bytes(uint64_t i)
{
	if (g_split)
		return SPLIT_W;
	return (i * 13) % 5 ? 40 + (i * 2731) % g_w_max : 0;
}

/* The split dataset's block 0 has w's offsets table across the end of
 * its first part: else the case tests nothing new. */
static void assert_w_table_split(const char *dir)
{
	struct dls_index_entry_disk e;
	uint8_t *blk = sp_block(dir, 0, &e);
	uint64_t n = e.record_count, v_end, w_table;

	memcpy(&v_end, blk + n * 8, 8);  /* v's offsets[n] */
	w_table = (((n + 1) * 8 + v_end + 7) & ~7ull) + n * 8;
	if (!(w_table < PART_BYTES && w_table + (n + 1) * 8 > PART_BYTES))
		T_FAIL_AT("w's offsets table is at [%llu, %llu) of a block of %llu records, not across %u",
			  (unsigned long long)w_table,
			  (unsigned long long)(w_table + (n + 1) * 8),
			  (unsigned long long)n, PART_BYTES);
	free(blk);
}

static uint8_t ref_byte(uint64_t i, uint32_t f, uint64_t k)
{
	return (uint8_t)(i * 31 + k * 7 + f * 13 + 1);
}

/* v, label, and w unless @one_variable; w's values up to @w_max, in
 * blocks of @block_size */
static void write_var(const char *dir, int level, int one_variable,
		      uint64_t w_max, uint64_t block_size)
{
	struct sluice_field f[3];
	uint32_t nf = one_variable ? 2 : 3;
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t *buf[3];

	tu_field(&f[0], "v", "int16", 2, -1, 3);
	tu_field(&f[1], "label", "int64", 0, 0, 0);
	tu_field(&f[2], "w", "uint8", 1, -1, 0);
	sluice_writer_config_init(&wc);
	g_w_max = w_max;
	buf[0] = malloc(LONG_ITEMS * 6);
	buf[1] = malloc(8);
	buf[2] = malloc(W_BIG + 64);
	T_ASSERT(buf[0] && buf[1] && buf[2]);
	wc.block_size = block_size;
	wc.records_per_shard = 600;     /* 3 shards */
	wc.compression_level = level;
	wc.threads = 2;
	T_OK(sluice_writer_open(dir, f, nf, &wc, &w));
	for (uint64_t i = 0; i < NREC; i++) {
		const void *vals[3] = { buf[0], buf[1], buf[2] };
		uint64_t len[3] = { v_items(i) * 6, 8, w_bytes(i) };

		for (uint32_t fi = 0; fi < 3; fi++)
			for (uint64_t k = 0; k < len[fi]; k++)
				buf[fi][k] = ref_byte(i, fi, k);
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));
	for (int k = 0; k < 3; k++)
		free(buf[k]);
}

static uint32_t g_pad;  /* the case's pad length, 0: flat */
static int g_has_w;     /* the dataset has w */
static int g_ranges;    /* full shuffle reads record ranges */
static int g_fetch;     /* blocks fetched through the staging buffers */
static int g_on_cpu;    /* the batches are copied on the CPU */
static int g_no_verify; /* the loaders check nothing */

/* Tensors: v, its index, label, w, its index */
static const char *const flat_names[] = { "v", "v.offsets", "label", "w",
					  "w.offsets" };
static const char *const pad_names[] = { "v", "v.lengths", "label", "w",
					 "w.lengths" };

/* Variable field @f (0 or 2, items of @unit bytes, @len items of record
 * @i) in row @r of @p's batch: 0, or 1 with p->why said. */
static int check_values(struct sim_pending *p, uint32_t f, uint32_t t,
			uint64_t unit, uint32_t r, uint64_t *flat_at)
{
	uint64_t i = p->idx[r], len = (f == 0 ? v_items(i) : w_bytes(i));
	const int64_t *index = p->data[t + 1];
	const uint8_t *got;
	uint64_t keep = len, room;

	if (g_pad) {
		if (index[r] != (int64_t)len) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu %s length %lld, want %llu",
				 (unsigned long long)i, flat_names[t],
				 (long long)index[r], (unsigned long long)len);
			return 1;
		}
		keep = len < g_pad ? len : g_pad;
		room = (uint64_t)g_pad * unit;
		got = (const uint8_t *)p->data[t] + r * room;
	} else {
		if ((r == 0 && index[0] != 0) ||
		    index[r + 1] - index[r] != (int64_t)len ||
		    (uint64_t)index[r] != *flat_at) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu %s offsets %lld..%lld, want %llu items from %llu",
				 (unsigned long long)i, flat_names[t + 1],
				 (long long)index[r], (long long)index[r + 1],
				 (unsigned long long)len,
				 (unsigned long long)*flat_at);
			return 1;
		}
		room = len * unit;
		got = (const uint8_t *)p->data[t] + *flat_at * unit;
		*flat_at += len;
	}
	for (uint64_t k = 0; k < room; k++) {
		uint8_t want = k < keep * unit ? ref_byte(i, f, k) : 0;

		if (got[k] != want) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu %s byte %llu is %#x, want %#x%s",
				 (unsigned long long)i, flat_names[t],
				 (unsigned long long)k, got[k], want,
				 k < keep * unit ? "" : " (padding)");
			return 1;
		}
	}
	return 0;
}

static int check_batch(struct sim_pending *p)
{
	uint64_t v_at = 0, w_at = 0;
	const int64_t *label = p->data[2];

	for (uint32_t r = 0; r < p->n; r++) {
		int64_t want = 0;
		uint8_t *b = (uint8_t *)&want;

		for (uint64_t k = 0; k < 8; k++)
			b[k] = ref_byte(p->idx[r], 1, k);
		if (label[r] != want) {
			snprintf(p->why, sizeof(p->why),
				 "record %llu label %lld, want %lld",
				 (unsigned long long)p->idx[r],
				 (long long)label[r], (long long)want);
			return 1;
		}
		if (check_values(p, 0, 0, 6, r, &v_at) ||
		    (g_has_w && check_values(p, 2, 3, 1, r, &w_at)))
			return 1;
	}
	/* flat: the values tensors hold exactly the batch's items */
	if (!g_pad && (p->shape0[0] != (int64_t)v_at ||
		       (g_has_w && p->shape0[3] != (int64_t)w_at))) {
		snprintf(p->why, sizeof(p->why),
			 "v has %lld items, w %lld: want %llu, %llu",
			 (long long)p->shape0[0], (long long)p->shape0[3],
			 (unsigned long long)v_at, (unsigned long long)w_at);
		return 1;
	}
	return 0;
}

/* The cases' loaders: batches gathered, the case's pad length and range
 * reads, prefetch @depth, the small budget of the small datasets. */
static void var_config(struct sluice_loader_config *cfg, int shuffle,
		       uint32_t depth)
{
	sluice_loader_config_init(cfg);
	cfg->batch_size = B;
	cfg->seed = sim_seed;
	cfg->shuffle = shuffle;
	cfg->window_blocks = 4;
	cfg->prefetch_depth = depth;
	cfg->decode_threads = 2;
	cfg->pad_length = g_pad;
	cfg->range_reads = g_ranges ? SLUICE_RANGE_READS_ON
				    : SLUICE_RANGE_READS_OFF;
	cfg->device_gather = SLUICE_DEVICE_GATHER_ON;
	cfg->memory_bytes = 1u << 20;
}

/* A consumer of the five tensors (flat, or padded) on @stream. */
static void var_consumer(struct sim_consumer *c, int64_t stream)
{
	memset(c, 0, sizeof(*c));
	c->names = g_pad ? pad_names : flat_names;
	c->ntensors = g_has_w ? 5 : 3;
	c->check = check_batch;
	c->stream = stream;
	c->rng = sim_seed * 3 + 1;
}

static void gather_case(sluice_dataset *ds, int shuffle, int64_t stream,
			const char *what)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	struct sim_consumer c;
	sluice_loader *ld = NULL;
	uint32_t *seen = calloc(NREC, sizeof(*seen));
	char msg[256];
	int r;

	T_ASSERT(seen != NULL);
	var_config(&cfg, shuffle, 4);
	/* room for staging buffers beside the ranges, or beside the blocks
	 * in flight but not the dataset (blocks evicted, read again) */
	cfg.memory_bytes = g_ranges ? 64u << 20 : g_fetch ? 32u << 20
				    : 1u << 20;
	cfg.verify = !g_no_verify;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("%s: open: %s", what, msg);
	}
	var_consumer(&c, stream);
	c.kernel_us = 1000;
	c.hold = 3;
	c.seen = seen;
	c.records = NREC;
	for (int epoch = 0; epoch < 2; epoch++)
		T_EQ(sim_consume(ld, &c, 0), SLUICE_EOF);
	sim_finish(&c);
	if (c.bad)
		T_FAIL_AT("%s: %llu of %llu batches read wrong bytes; first: %s",
			  what, (unsigned long long)c.bad,
			  (unsigned long long)c.batches, c.first_bad);
	for (uint64_t i = 0; i < NREC; i++)
		if (seen[i] != 2)
			T_FAIL_AT("%s: record %llu delivered %u times in 2 epochs",
				  what, (unsigned long long)i, seen[i]);
	T_OK(sluice_loader_stats(ld, &st));
	T_CONTAINS(st.fallbacks, "simulated device");
	if (g_on_cpu) {
		/* nothing gathered, nothing staged; decided before the
		 * device opened, not given up after (no io mirror, no
		 * staging buffers, no fallback) */
		T_EQ(st.batches_gathered, 0);
		T_EQ(st.bytes_staged, 0);
		T_ASSERT(strstr(st.fallbacks, "not gathered on the device") ==
			 NULL);
		printf("%s: %llu batches copied\n", what,
		       (unsigned long long)st.batches);
		sluice_loader_close(ld);
		free(seen);
		return;
	}
	/* every batch went by the device: gathered, never copied */
	T_EQ(st.batches_gathered, st.batches);
	T_ASSERT(st.device_upload_bytes > 0);
	if (g_ranges) {
		/* every record read by range, through a staging buffer */
		T_ASSERT(st.range_records >= st.records);
		T_EQ(st.blocks_read, 0);
		T_LT(0, st.bytes_staged);
	}
	if (g_fetch) {
		/* only their offsets tables copied to the host; every
		 * block of an epoch at least (the cache holds fewer) */
		const struct dataset *t = dataset_table(ds);
		uint64_t stored = 0;

		for (uint32_t k = 0; k < t->nshards; k++)
			stored += t->shards[k].stored_bytes;
		T_ASSERT(st.bytes_staged >= stored);
	}
	if (g_pad)
		T_LT(0, st.values_truncated);
	printf("%s: %llu batches gathered\n", what,
	       (unsigned long long)st.batches_gathered);
	sluice_loader_close(ld);
	free(seen);
}

/* gather_case flat, then padded. */
static void both_pads(sluice_dataset *ds, int shuffle, int64_t stream,
		      const char *what)
{
	char name[160];

	for (int pad = 0; pad < 2; pad++) {
		g_pad = pad ? PAD : 0;
		snprintf(name, sizeof(name), "%s, %s", what,
			 pad ? "padded" : "flat");
		gather_case(ds, shuffle, stream, name);
	}
	g_pad = 0;
}

/*
 * Restarts (set_epoch) mid-epoch, the consumer holding three batches and
 * reading every other one on a second stream: the prefetched batches
 * dropped are released on the device, so that its poison after a later
 * release never lands on memory another slot's batch took since, while
 * a read of it is still queued.
 */
static void restart_case(sluice_dataset *ds, int64_t stream)
{
	struct sluice_loader_config cfg;
	struct sim_consumer c;
	sluice_loader *ld = NULL;

	var_config(&cfg, SLUICE_SHUFFLE_WINDOW, 4);
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	var_consumer(&c, stream);
	c.stream2 = sim_stream_create(sim_seed * 7 + 3, 300);
	T_ASSERT(c.stream2 != 0);
	c.kernel_us = 10000;
	c.hold = 3;
	for (uint64_t epoch = 0; epoch < 24; epoch++) {
		T_OK(sim_consume(ld, &c, 3 + epoch % 4));
		T_OK(sluice_loader_set_epoch(ld, epoch + 1));
	}
	sim_finish(&c);
	sim_stream_destroy(c.stream2);
	if (c.bad)
		T_FAIL_AT("restarts: %llu of %llu batches read wrong bytes; first: %s",
			  (unsigned long long)c.bad,
			  (unsigned long long)c.batches, c.first_bad);
	printf("restarts: %llu batches, none wrong\n",
	       (unsigned long long)c.batches);
	sluice_loader_close(ld);
}

/* The gather of batch 1 fails, then (another loader) its index copy:
 * the loader fails with the device's words, the batch before whole. */
static void copy_fault_case(sluice_dataset *ds, int64_t stream)
{
	for (uint64_t nth = 3; nth <= 4; nth++) {
		struct sluice_loader_config cfg;
		struct sim_consumer c;
		sluice_loader *ld = NULL;
		sluice_batch *b;
		char msg[512], want[64];

		/* a batch at a time: in order */
		var_config(&cfg, SLUICE_SHUFFLE_NONE, 1);
		sim_test_faults = SIM_FAULT_COPY_ERROR;
		sim_test_fail_copy = nth;
		T_OK(sluice_loader_open(ds, &cfg, &ld));
		sim_test_faults = 0;
		var_consumer(&c, stream);
		T_EQ(sim_consume(ld, &c, 0), -SLUICE_ECUDA);
		sim_finish(&c);
		T_EQ(c.batches, 1);
		T_EQ(c.bad, 0);
		sluice_loader_error(ld, msg, sizeof(msg));
		T_CONTAINS(msg, nth == 3 ? "gather of batch 1"
			   : "copy of the variable fields' offsets or lengths"
			     " of batch 1");
		snprintf(want, sizeof(want), "simulated %s %llu",
			 nth == 3 ? "gather" : "copy",
			 (unsigned long long)nth);
		T_CONTAINS(msg, want);
		T_EQ(sluice_loader_next(ld, &b), -SLUICE_ECUDA);
		sluice_loader_close(ld);
	}
	printf("a failed gather, a failed index copy: the loader fails\n");
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
	static const char *const name[6] = { "raw", "zstd", "one", "big",
					     "long", "split" };
	char path[6][600], what[128];
	sluice_dataset *ds[6];

	/* small blocks; datasets of large blocks (device-checked,
	 * DEVICE_CHECK_MIN, so fetched) larger than their loaders'
	 * budget, one of them with w's offsets table across two parts;
	 * and one with a value longer than a staging buffer */
	for (int z = 0; z < 6; z++) {
		int big = z == 3 || z == 5;

		snprintf(path[z], sizeof(path[z]), "%s/%s", dir, name[z]);
		g_long_at = z == 4 ? 7 : UINT64_MAX;
		g_split = z == 5;
		write_var(path[z], z == 1, z >= 2 && !big,
			  z == 3 ? W_BIG : 211, big ? 6u << 20 : 8192);
		T_OK(sluice_dataset_open(path[z], &ds[z]));
	}
	g_long_at = UINT64_MAX;
	g_split = 0;
	assert_w_table_split(path[5]);
	for (unsigned round = 0; round < rounds; round++) {
		int64_t s;

		sim_use_seed(seed + round);
		printf("seed %llu\n", (unsigned long long)sim_seed);
		s = sim_stream_create(sim_seed * 5 + 2, 300);
		T_ASSERT(s != 0);
		g_has_w = 1;
		g_w_max = 211;
		for (int z = 0; z < 2; z++)
			for (int m = 0; m < 4; m++) {
				snprintf(what, sizeof(what), "%s, shuffle %s",
					 z ? "zstd" : "raw", mode_name[m]);
				both_pads(ds[z], modes[m], s, what);
			}
		/* full shuffle's records read by range (v; label kept
		 * resident) */
		g_has_w = 0;
		g_ranges = 1;
		both_pads(ds[2], SLUICE_SHUFFLE_FULL, s,
			  "raw, full, records read by range");
		/* a value longer than a staging buffer: the ranges are
		 * copied on the CPU, and nothing is set aside for the
		 * device (ranges_device_suits) */
		g_long_at = 7;
		g_on_cpu = 1;
		gather_case(ds[4], SLUICE_SHUFFLE_FULL, s,
			    "raw, flat, full, a value over a staging buffer");
		g_on_cpu = 0;
		g_long_at = UINT64_MAX;
		g_ranges = 0;
		/* raw blocks fetched to the device, in order: two parts a
		 * block, the offsets tables in the first */
		g_has_w = 1;
		g_w_max = W_BIG;
		g_fetch = 1;
		both_pads(ds[3], SLUICE_SHUFFLE_NONE, s,
			  "raw, none, blocks fetched");
		/* unchecked: fetched all the same (gather_device_only) */
		g_no_verify = 1;
		gather_case(ds[3], SLUICE_SHUFFLE_NONE, s,
			    "raw, none, blocks fetched, flat, verify off");
		g_no_verify = 0;
		/* w's offsets table copied to the host from two parts
		 * (copy_tables) */
		g_split = 1;
		both_pads(ds[5], SLUICE_SHUFFLE_NONE, s,
			  "raw, none, blocks fetched, a table across parts");
		g_split = 0;
		g_fetch = 0;
		g_w_max = 211;
		restart_case(ds[0], s);
		copy_fault_case(ds[0], s);
		sim_stream_destroy(s);
	}
	for (int z = 0; z < 6; z++)
		sluice_dataset_close(ds[z]);
	fx_rmrf(dir);
	free(dir);
	sim_done();
	return 0;
}
