/*
 * test_sim_gather.c - device gathers on the simulated asynchronous device
 * (gpu/sim_device.c): blocks uploaded to the device's io memory on an
 * upload stream, batches gathered from them on the copy stream, in
 * every `make test`.
 *
 * As test_gpu_gather.c's ordering check: a small budget (blocks evicted
 * and their io memory reused all the time) while the consumer holds
 * three batches and queues slow reads on its stream, so that gathers
 * wait behind releases on the copy stream while uploads of new blocks
 * land in the io memory those gathers read.  An upload that overtook a
 * gather, a gather that overtook a release, or a read before the gather
 * shows as wrong bytes (and a test shows the first of these caught:
 * SIM_FAULT_EARLY_UPLOAD).  Every shuffle mode; raw data (device_gather
 * AUTO: the sim device says it gathers) and zstd (ON); two epochs, each
 * record delivered once per epoch.
 *
 * The seed is printed on failure; SLUICE_SIM_SEED=N reruns it,
 * SLUICE_SIM_STRESS=K runs K seeds.
 */
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gather_fixture.h"
#include "format_util.h"       /* tu_slurp, tu_drop_record_sums */
#include "ring.h"              /* io_ring_set_fault */
#include "sluice_tools.h"
#include "loader_fixture.h"    /* fx_tmpdir, fx_rmrf */
#include "sim_util.h"

#define B 40u

static int check_gathered(struct sim_pending *p)
{
	for (uint32_t f = 0; f < 3; f++) {
		const uint8_t *got = p->data[f];

		if (p->shape0[f] != p->n) {
			snprintf(p->why, sizeof(p->why), "%s has %lld rows of %u",
				 field_name[f], (long long)p->shape0[f], p->n);
			return 1;
		}
		for (uint32_t r = 0; r < p->n; r++)
			for (uint64_t k = 0; k < field_bytes[f]; k++) {
				uint8_t want = want_byte(p->idx[r], f, k);
				uint8_t b = got[r * field_bytes[f] + k];

				if (b != want) {
					snprintf(p->why, sizeof(p->why),
						 "record %llu %s byte %llu is %#x, want %#x",
						 (unsigned long long)p->idx[r],
						 field_name[f],
						 (unsigned long long)k, b, want);
					return 1;
				}
			}
	}
	return 0;
}

/* The loaders' range_reads: OFF but for full shuffle's case of records
 * read by range, which go through staging buffers to the device. */
static int range_reads = SLUICE_RANGE_READS_OFF;

/* @return: the batches that read wrong bytes (the checks of a clean run
 * only when @expect_clean). */
static uint64_t gather_case(sluice_dataset *ds, int shuffle, int gather,
			    int64_t stream, const char *what, int expect_clean,
			    uint64_t budget, unsigned kernel_us, uint32_t depth)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	struct sim_consumer c;
	sluice_loader *ld = NULL;
	uint32_t *seen = calloc(N, sizeof(*seen));
	char msg[256];
	int r;

	T_ASSERT(seen != NULL);
	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.seed = sim_seed;
	cfg.shuffle = shuffle;
	cfg.window_blocks = 4;
	cfg.prefetch_depth = depth;
	cfg.decode_threads = 2;
	cfg.range_reads = range_reads;
	cfg.device_gather = gather;
	cfg.memory_bytes = budget ? budget
			   : shuffle == SLUICE_SHUFFLE_FULL ? 2u << 20 : 768u << 10;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("%s: open: %s", what, msg);
	}
	memset(&c, 0, sizeof(c));
	c.names = field_name;
	c.ntensors = 3;
	c.check = check_gathered;
	c.stream = stream;
	c.kernel_us = kernel_us;
	c.hold = 3;
	c.seen = seen;
	c.records = N;
	c.rng = sim_seed * 3 + 1;
	for (int epoch = 0; epoch < 2; epoch++)
		T_EQ(sim_consume(ld, &c, 0), SLUICE_EOF);
	sim_finish(&c);
	if (!expect_clean) {
		printf("%s: %llu of %llu batches read wrong bytes%s%s\n", what,
		       (unsigned long long)c.bad, (unsigned long long)c.batches,
		       c.bad ? "; first: " : "", c.first_bad);
		sluice_loader_close(ld);
		free(seen);
		return c.bad;
	}
	if (c.bad)
		T_FAIL_AT("%s: %llu of %llu batches read wrong bytes; first: %s",
			  what, (unsigned long long)c.bad,
			  (unsigned long long)c.batches, c.first_bad);
	for (uint64_t i = 0; i < N; i++)
		if (seen[i] != 2)
			T_FAIL_AT("%s: record %llu delivered %u times in 2 epochs",
				  what, (unsigned long long)i, seen[i]);
	T_OK(sluice_loader_stats(ld, &st));
	T_CONTAINS(st.fallbacks, "simulated device");
	/* every batch went by the device: gathered, never copied */
	T_EQ(st.batches_gathered, st.batches);
	T_ASSERT(st.device_upload_bytes > 0);
	T_ASSERT(st.device_memory_bytes > 0);
	if (range_reads != SLUICE_RANGE_READS_OFF) {
		/* every record read by range (and some of the next
		 * epoch's), through a staging buffer; gathered (above) */
		T_ASSERT(st.range_records >= st.records);
		T_EQ(st.blocks_read, 0);
		T_LT(0, st.bytes_staged);
		T_ASSERT(st.bytes_staged <= st.read.bytes + st.io_memory_bytes);
		/* a worker reads the next ranges while the last upload
		 * runs, as a block's parts do (fetch.c) */
		T_LT(0, st.bytes_staged_overlapped);
		T_ASSERT(st.bytes_staged_overlapped <= st.bytes_staged);
	}
	printf("%s: %llu batches gathered, %llu bytes uploaded\n", what,
	       (unsigned long long)st.batches_gathered,
	       (unsigned long long)st.device_upload_bytes);
	sluice_loader_close(ld);
	free(seen);
	return 0;
}

/* Take @ld's batches until it stops: its last return, the records it
 * delivered in *@records (if not NULL), its error message in @msg. */
static int drain(sluice_loader *ld, uint64_t *records, char *msg,
		 size_t len)
{
	sluice_batch *b;
	int r;

	while ((r = sluice_loader_next(ld, &b)) == 0) {
		if (records)
			*records += sluice_batch_size(b);
		sluice_batch_release(b);
	}
	sluice_loader_error(ld, msg, len);
	return r;
}

/* Full shuffle, every record read by range, in 64 MiB: room for the
 * staging buffers beside the ranges (ranges.device). */
static void full_range_cfg(struct sluice_loader_config *cfg, uint32_t batch)
{
	sluice_loader_config_init(cfg);
	cfg->batch_size = batch;
	cfg->seed = sim_seed;
	cfg->shuffle = SLUICE_SHUFFLE_FULL;
	cfg->decode_threads = 2;
	cfg->range_reads = SLUICE_RANGE_READS_ON;
	cfg->memory_bytes = 64u << 20;
}

/* A flipped byte in the last record of shard 0's first block, read by
 * range on its way to the device: its checksum, taken in the staging
 * buffer, fails the loader with the file and the record's offset. */
static void check_corrupt_range(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	struct shard_block bi;
	char path[700], msg[512];
	uint8_t byte;
	int fd, r;

	write_dataset(dir, 0);
	T_OK(sluice_dataset_open(dir, &ds));
	bi = dataset_table(ds)->shards[0].blocks[0];
	snprintf(path, sizeof(path), "%s/data-00000.dls", dir);
	fd = open(path, O_RDWR);
	T_ASSERT(fd >= 0);
	/* the img section is the block's last: its last record's bytes */
	T_EQ(pread(fd, &byte, 1, (off_t)(bi.offset + bi.stored_size - 100)), 1);
	byte ^= 0x10;
	T_EQ(pwrite(fd, &byte, 1, (off_t)(bi.offset + bi.stored_size - 100)), 1);
	close(fd);
	full_range_cfg(&cfg, B);
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	r = drain(ld, NULL, msg, sizeof(msg));
	T_EQ(r, -SLUICE_ECORRUPT);
	T_CONTAINS(msg, path);
	T_CONTAINS(msg, "record checksum mismatch");
	printf("corrupt record read by range: %s\n", msg);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* An upload of staged ranges refused, or failed in flight (found when
 * its worker settles it): the loader fails with the device's words. */
static void check_range_upload_failure(sluice_dataset *ds)
{
	static const unsigned faults[2] = { SIM_FAULT_UPLOAD_ERROR,
					    SIM_FAULT_FINISH_ERROR };

	for (int f = 0; f < 2; f++)
		for (uint64_t nth = 1; nth <= 4; nth++) {
			struct sluice_loader_config cfg;
			sluice_loader *ld = NULL;
			char msg[512];
			int r;

			full_range_cfg(&cfg, B);
			sim_test_faults = faults[f];
			sim_test_fail_copy = nth;
			T_OK(sluice_loader_open(ds, &cfg, &ld));
			sim_test_faults = 0;
			sim_test_fail_copy = 0;
			r = drain(ld, NULL, msg, sizeof(msg));
			printf("range upload %llu failed: %s\n",
			       (unsigned long long)nth, msg);
			T_EQ(r, -SLUICE_ECUDA);
			T_CONTAINS(msg, "simulated upload");
			sluice_loader_close(ld);
		}
}

/* Records of 4 MiB (more than a staging buffer holds with its
 * alignment: ranges.device stays off) in three shards, the first without
 * record checksums (format v2: its blocks are read whole): whole blocks
 * must then not be fetched to the device, since the batches that mix
 * them with range records are copied on the CPU. */
static void check_ranges_not_on_device(const char *dir)
{
	const uint64_t img = 4u << 20;
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	struct sluice_loader_config cfg;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	uint8_t *v = malloc(img);
	uint64_t records = 0;
	char path[700], msg[512];
	size_t n;
	uint8_t *file;
	int r;

	T_ASSERT(v != NULL);
	f[0] = t_field("img", (DLDataType){ kDLUInt, 8, 1 }, (int64_t)img);
	f[1] = t_field("lab", (DLDataType){ kDLInt, 64, 1 }, 1);
	sluice_writer_config_init(&wc);
	wc.block_size = 8u << 20;
	wc.records_per_shard = 4;
	wc.compression_level = 0;
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (uint64_t i = 0; i < 12; i++) {
		const void *vals[2] = { v, &i };
		uint64_t lens[2] = { img, 8 };

		memset(v, (int)(i * 37 + 1), img);
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(v);
	snprintf(path, sizeof(path), "%s/data-00000.dls", dir);
	file = tu_slurp(path, &n);
	tu_drop_record_sums(file, &n);
	tu_spit(path, file, n);
	free(file);
	/* the shards alone: the manifest knew shard 0 as it was */
	snprintf(path, sizeof(path), "%s/*.dls", dir);
	T_OK(sluice_dataset_open(path, &ds));
	full_range_cfg(&cfg, 3);
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	r = drain(ld, &records, msg, sizeof(msg));
	if (r != SLUICE_EOF)
		T_FAIL_AT("v2 and v3 shards, 4 MiB records: %s", msg);
	T_EQ(records, 12);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* Shard 2's "a" sections: [start, end) per block, for cut_a. */
static uint64_t a_sec[64][2];
static uint32_t a_secs;
static _Atomic uint32_t a_cuts;

/* A read wholly inside an "a" section of shard 2 finds the file ending
 * there (0 bytes); reads of the other fields succeed. */
static void cut_a(void *ctx, uint32_t file, uint64_t offset, uint64_t length,
		  int *res)
{
	(void)ctx;
	for (uint32_t k = 0; file == 2 && *res > 0 && k < a_secs; k++)
		if (offset >= a_sec[k][0] && offset + length <= a_sec[k][1]) {
			*res = 0;
			atomic_fetch_add(&a_cuts, 1);
		}
}

/* With verify off a record's two large fields ("a" and "img"; "lab" is
 * kept since open) lie in different reads: a failed read of "a" alone
 * loses its records, named by file (on_error=fail), or drops them
 * (skip), as on the host. */
static void check_second_field_lost(const char *dir)
{
	const uint64_t na = 1000, nimg = 3000;
	struct sluice_field f[3];
	struct sluice_writer_config wc;
	struct sluice_loader_config cfg;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	uint8_t *va = calloc(1, na), *vimg = calloc(1, nimg);

	T_ASSERT(va && vimg);
	f[0] = t_field("a", (DLDataType){ kDLUInt, 8, 1 }, (int64_t)na);
	f[1] = t_field("lab", (DLDataType){ kDLInt, 64, 1 }, 1);
	f[2] = t_field("img", (DLDataType){ kDLUInt, 8, 1 }, (int64_t)nimg);
	sluice_writer_config_init(&wc);
	wc.block_size = 64u << 10;
	wc.records_per_shard = 500;
	wc.compression_level = 0;
	T_OK(sluice_writer_open(dir, f, 3, &wc, &w));
	for (uint64_t i = 0; i < 2000; i++) {
		const void *vals[3] = { va, &i, vimg };
		uint64_t lens[3] = { na, 8, nimg };

		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(va);
	free(vimg);
	T_OK(sluice_dataset_open(dir, &ds));
	a_secs = 0;
	for (uint32_t k = 0; k < dataset_table(ds)->shards[2].block_count &&
			     k < 64; k++) {
		const struct shard_block *blk =
			&dataset_table(ds)->shards[2].blocks[k];

		/* the block's first section: "a", a value per record */
		a_sec[a_secs][0] = blk->offset;
		a_sec[a_secs++][1] = blk->offset + blk->record_count * na;
	}
	io_ring_set_fault(cut_a, NULL);
	for (int skip = 0; skip < 2; skip++) {
		sluice_loader *ld = NULL;
		uint64_t records = 0;
		char msg[512];
		int r;

		full_range_cfg(&cfg, B);
		cfg.verify = 0;
		cfg.on_error = skip ? SLUICE_ON_ERROR_SKIP : SLUICE_ON_ERROR_FAIL;
		atomic_store(&a_cuts, 0);
		T_OK(sluice_loader_open(ds, &cfg, &ld));
		r = drain(ld, &records, msg, sizeof(msg));
		T_LT(0, atomic_load(&a_cuts));
		if (skip) {
			T_EQ(r, SLUICE_EOF);
			T_LT(records, 2000);
		} else {
			T_EQ(r, -SLUICE_ECORRUPT);
			T_CONTAINS(msg, "data-00002.dls");
		}
		printf("second field lost (%s): %llu records, %s\n",
		       skip ? "skip" : "fail", (unsigned long long)records,
		       msg);
		sluice_loader_close(ld);
	}
	io_ring_set_fault(NULL, NULL);
	sluice_dataset_close(ds);
}

/*
 * The net catches an upload that overtakes a gather
 * (SIM_FAULT_EARLY_UPLOAD): in a child process (forked before any
 * thread), which exits 3 when its consumer read wrong bytes.  Under
 * SAN=thread, ThreadSanitizer's race report (exit 66) catches it too.
 */
#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

static int early_upload_child(const char *path, int with_fault)
{
	sluice_dataset *ds;
	uint64_t bad;
	int64_t s;

	sim_finished = 1;       /* the parent prints the seed */
	sim_test_faults = with_fault ? SIM_FAULT_EARLY_UPLOAD : 0;
	T_OK(sluice_dataset_open(path, &ds));
	s = sim_stream_create(sim_seed * 5 + 2, 300);
	T_ASSERT(s != 0);
	/* Twelve batches in flight, each read slowly, in an io memory of
	 * a few blocks: gathers queue up behind the consumer's releases
	 * while their blocks' memory is given to new blocks. */
	bad = gather_case(ds, SLUICE_SHUFFLE_NONE, SLUICE_DEVICE_GATHER_AUTO, s,
			  with_fault ? "early_upload" : "early_upload (not injected)",
			  0, 400000, 3000, 12);
	sim_stream_destroy(s);
	sluice_dataset_close(ds);
	return bad ? 3 : 0;
}

static int run_child(const char *path, int with_fault)
{
	int status = 0;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	T_ASSERT(pid >= 0);
	if (pid == 0) {
		int code = early_upload_child(path, with_fault);

		fflush(stdout);
		_exit(code);
	}
	T_EQ(waitpid(pid, &status, 0), pid);
	T_ASSERT(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void early_upload_caught(const char *path, uint64_t seed)
{
	int status = 0, tries;

	/* the same run without the fault reads every byte right */
	sim_use_seed(seed);
	T_EQ(run_child(path, 0), 0);
	for (tries = 0; tries < 5; tries++) {
		sim_use_seed(seed + 1000u * (tries + 1));
		status = run_child(path, 1);
		if (status == 3 || (TSAN && status == 66))
			break;
		T_EQ(status, 0);
	}
	if (tries == 5)
		T_FAIL_AT("early_upload: 5 seeds, and no read saw wrong bytes");
	printf("early_upload: caught (seed %llu%s)\n",
	       (unsigned long long)sim_seed,
	       status == 66 ? ", by ThreadSanitizer" : "");
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
		write_dataset(path[z], z ? 1 : 0);
	}
	/* first, while this process has no threads to fork with */
	early_upload_caught(path[0], seed);
	for (int z = 0; z < 2; z++)
		T_OK(sluice_dataset_open(path[z], &ds[z]));
	for (unsigned round = 0; round < rounds; round++) {
		int64_t s;

		sim_use_seed(seed + round);
		printf("seed %llu\n", (unsigned long long)sim_seed);
		s = sim_stream_create(sim_seed * 5 + 2, 300);
		T_ASSERT(s != 0);
		for (int z = 0; z < 2; z++)
			for (int m = 0; m < 4; m++) {
				snprintf(what, sizeof(what), "%s, shuffle %s",
					 z ? "zstd (gather on)" : "raw",
					 mode_name[m]);
				gather_case(ds[z], modes[m],
					    z ? SLUICE_DEVICE_GATHER_ON
					      : SLUICE_DEVICE_GATHER_AUTO,
					    s, what, 1, 0, 1000, 4);
			}
		/* full shuffle's records read by range: their ranges go up
		 * from the staging buffers into the io memory their batch
		 * took (a budget that holds the buffers beside it) */
		range_reads = SLUICE_RANGE_READS_ON;
		gather_case(ds[0], SLUICE_SHUFFLE_FULL,
			    SLUICE_DEVICE_GATHER_AUTO, s,
			    "raw, shuffle full, records read by range", 1,
			    64u << 20, 1000, 4);
		range_reads = SLUICE_RANGE_READS_OFF;
		snprintf(what, sizeof(what), "%s/corrupt-%u", dir, round);
		check_corrupt_range(what);
		check_range_upload_failure(ds[0]);
		snprintf(what, sizeof(what), "%s/mixed-%u", dir, round);
		check_ranges_not_on_device(what);
		snprintf(what, sizeof(what), "%s/second-%u", dir, round);
		check_second_field_lost(what);
		sim_stream_destroy(s);
	}
	for (int z = 0; z < 2; z++)
		sluice_dataset_close(ds[z]);
	fx_rmrf(dir);
	free(dir);
	sim_done();
	return 0;
}
