/*
 * test_stream.c - blocks checked as their read's pieces land
 * (pipeline/stream.c): blocks of 12 MiB, read buffered in 2 MiB pieces,
 * hashed piece by piece while the rest is still being read, and on the
 * simulated device uploaded piece by piece too, with room for every
 * block and with a budget that evicts them (read again each epoch).
 * Every byte delivered is checked, each record once per epoch, and every
 * block read for a gather is uploaded exactly once.  A byte flipped in
 * the middle of a block (a piece hashed early) fails the loader naming
 * shard and block, or is skipped with on_error=skip; so is a read that
 * ends early (a truncated file) after its first pieces were hashed: the
 * hashing job hands the failure on.  On the simulated device the
 * blocks are checksummed there instead, from their upload, and never
 * hashed by the CPU (zstd blocks too, from their stored bytes, before
 * they are decompressed): the same corrupt byte and short read are
 * caught from the device's copy, and SLUICE_FORCE_HOST_CHECKS brings back
 * the CPU's checks.  Raw blocks that go only to the device past the io
 * memory are fetched by the workers through staging buffers
 * (pipeline/fetch.c): their read and upload failures fail the loader
 * naming the part, and a dataset moved mid-epoch still streams.  Closing
 * mid-epoch, with blocks being hashed and a batch held, frees everything
 * (ASan, TSan).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>

#include "ring.h"

#include "sluice_tools.h"
#include "loader_fixture.h"    /* fx_tmpdir, fx_rmrf */
#include "sim_util.h"

#define N 256u
#define IMG ((uint64_t)256 << 10)
#define B 16u

/* Word @w of record @i: a hash of both with its top 16 bits clear, which
 * zstd shrinks by about a quarter, so that zstd blocks land in pieces
 * too. */
static uint64_t want(uint64_t i, uint64_t w)
{
	uint64_t x = (i << 32 | w) + 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return (x ^ (x >> 31)) >> 16;
}

/* Compression level 0 (raw) or 1 (zstd). */
static void write_big(const char *dir, int level)
{
	struct sluice_field f = t_field("img", (DLDataType){ kDLUInt, 8, 1 },
					(int64_t)IMG);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint64_t *img = malloc(IMG);

	T_ASSERT(img != NULL);
	sluice_writer_config_init(&wc);
	wc.block_size = 12u << 20;      /* 47 records: 12, 12, 8.5 MiB */
	wc.compression_level = level;
	wc.records_per_shard = N / 2;
	wc.threads = 2;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint64_t i = 0; i < N; i++) {
		const void *vals[1] = { img };
		uint64_t lens[1] = { IMG };

		for (uint64_t k = 0; k < IMG / 8; k++)
			img[k] = want(i, k);
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(img);
}

static int check_img(struct sim_pending *p)
{
	const uint8_t *got = p->data[0];

	if (p->shape0[0] != p->n) {
		snprintf(p->why, sizeof(p->why), "%lld rows of %u",
			 (long long)p->shape0[0], p->n);
		return 1;
	}
	for (uint32_t r = 0; r < p->n; r++)
		for (uint64_t k = 0; k < IMG / 8; k++) {
			uint64_t v;

			memcpy(&v, got + r * IMG + 8 * k, 8);
			if (v != want(p->idx[r], k)) {
				snprintf(p->why, sizeof(p->why),
					 "record %llu word %llu is %#llx, want %#llx",
					 (unsigned long long)p->idx[r],
					 (unsigned long long)k,
					 (unsigned long long)v,
					 (unsigned long long)want(p->idx[r], k));
				return 1;
			}
		}
	return 0;
}

/* The dataset is zstd (decoded blocks uploaded besides stored ones). */
static int zstd_data;

/* SLUICE_FORCE_* bits for the loaders opened from now on. */
static unsigned forced;
/* SLUICE_FETCH_OVERLAP=0 is set */
static int no_overlap;
/* the loaders' decode threads */
static uint32_t workers = 2;
/* the loaders check nothing (cfg.verify off) */
static int no_verify;
/* SLUICE_STAGED_DECODE=0 is set: zstd blocks read by the ring */
static int ring_decode;

static sluice_loader *open_loader(sluice_dataset *ds, int device,
				  int on_error, uint64_t memory)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	char msg[256];

	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.shuffle = SLUICE_SHUFFLE_BLOCK;
	cfg.seed = sim_seed;
	cfg.decode_threads = workers;
	cfg.device = device;
	cfg.direct_io = SLUICE_DIRECT_IO_OFF;   /* pieces: buffered reads */
	/* blocks, whose pieces are the subject: host batches would read
	 * these records by range, straight into the batch (ranges.c) */
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	cfg.on_error = on_error;
	cfg.memory_bytes = memory;
	cfg.verify = !no_verify;
	sluice_loader_config_force(&cfg, forced);
	if (sluice_loader_open(ds, &cfg, &ld)) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s", msg);
	}
	return ld;
}

/* @epochs through the sim consumer (this thread's reads when the device
 * is the host's), every byte checked, deliveries per record in @seen;
 * the loader's stats in *@st. */
static void run_epochs(sluice_dataset *ds, int device, int on_error,
		       uint64_t memory, int epochs, uint32_t *seen,
		       const char *what, struct sluice_stats *st)
{
	const char *const names[1] = { "img" };
	struct sim_consumer c;
	sluice_loader *ld = open_loader(ds, device, on_error, memory);

	memset(&c, 0, sizeof(c));
	c.names = names;
	c.ntensors = 1;
	c.check = check_img;
	c.hold = 2;
	c.seen = seen;
	c.records = N;
	c.rng = sim_seed * 7 + 3;
	for (int epoch = 0; epoch < epochs; epoch++)
		T_EQ(sim_consume(ld, &c, 0), SLUICE_EOF);
	sim_finish(&c);
	if (c.bad)
		T_FAIL_AT("%s: %llu of %llu batches wrong; first: %s", what,
			  (unsigned long long)c.bad,
			  (unsigned long long)c.batches, c.first_bad);
	st->size = sizeof(*st);
	T_OK(sluice_loader_stats(ld, st));
	sluice_loader_close(ld);
}

/* Two epochs: every record once per epoch. */
static void two_epochs(sluice_dataset *ds, int device, uint64_t memory,
		       const char *what)
{
	struct sluice_stats st;
	uint32_t seen[N] = { 0 };

	run_epochs(ds, device, SLUICE_ON_ERROR_FAIL, memory, 2, seen, what,
		   &st);
	for (uint32_t i = 0; i < N; i++)
		if (seen[i] != 2)
			T_FAIL_AT("%s: record %u delivered %u times", what, i,
				  seen[i]);
	if (no_verify) {
		T_EQ(st.bytes_verified_landing, 0);
		T_EQ(st.bytes_verified_device, 0);
	} else if (zstd_data && !ring_decode && device != SLUICE_DEVICE_HOST &&
		   !(forced & SLUICE_FORCE_HOST_CHECKS)) {
		/* zstd blocks fetched, hashed part by part as they were
		 * read and decompressed by their fetch (fetch_decode) */
		T_EQ(st.bytes_verified_device, 0);
		T_LT(0, st.bytes_verified_landing);
	} else if (device != SLUICE_DEVICE_HOST &&
		   !(forced & SLUICE_FORCE_HOST_CHECKS)) {
		/* every block read checked on the device, none by the
		 * CPU; but for the reads in flight for the next epoch (in
		 * the io memory) */
		T_EQ(st.bytes_verified_landing, 0);
		T_LT(0, st.bytes_verified_device);
		T_ASSERT(st.bytes_verified_device <=
			 st.read.bytes + st.io_memory_bytes);
		T_ASSERT(st.read.bytes <=
			 st.bytes_verified_device + st.io_memory_bytes);
	} else if (forced & SLUICE_FORCE_WHOLE_BLOCK_CHECKS) {
		/* the A/B's other side: the same bytes, checked whole */
		T_EQ(st.bytes_verified_landing, 0);
		T_EQ(st.bytes_verified_device, 0);
		T_CONTAINS(st.fallbacks, "checksums taken once each block");
	} else {
		T_EQ(st.bytes_verified_device, 0);
		if (forced & SLUICE_FORCE_HOST_CHECKS)
			T_CONTAINS(st.fallbacks, "checksummed on the CPU");
		/* pieces of the 12 MiB blocks were hashed before their
		 * last one */
		T_LT(0, st.bytes_verified_landing);
	}
	/* reads still in flight for the next epoch (in the io memory) may
	 * have pieces hashed and not be counted as read yet */
	T_ASSERT(st.bytes_verified_landing <=
		 st.read.bytes + st.io_memory_bytes);
	/* raw blocks streamed past the io memory were fetched to the
	 * device through staging buffers, never into io memory (fetch.c),
	 * whether the device checks them or nothing does */
	if (device != SLUICE_DEVICE_HOST && memory && !ring_decode &&
	    !(forced & SLUICE_FORCE_HOST_CHECKS))
		T_LT(st.read.bytes / 2, st.bytes_staged);
	else
		T_EQ(st.bytes_staged, 0);
	/* a worker reads its next part while the last one uploads (one
	 * worker alone always has a next part: a block has three); not
	 * when told otherwise (the benchmarks' A/B) */
	T_ASSERT(st.bytes_staged_overlapped <= st.bytes_staged);
	if (st.bytes_staged && workers == 1 && !no_overlap)
		T_LT(0, st.bytes_staged_overlapped);
	if (no_overlap)
		T_EQ(st.bytes_staged_overlapped, 0);
	if (device != SLUICE_DEVICE_HOST) {
		/* every batch gathered; each block decoded uploaded whole,
		 * some of it piece by piece, the rest by the decode, and no
		 * more than once: beyond that, only pieces of the reads in
		 * flight for the next epoch (in the io memory) */
		T_EQ(st.batches_gathered, st.batches);
		T_ASSERT(st.device_upload_bytes >= st.decode.bytes);
		T_LT(0, st.device_upload_ns);   /* their time, too */
		/* and the checks' waits, where the device took them */
		if (st.bytes_verified_device)
			T_LT(0, st.device_check_ns);
		else
			T_EQ(st.device_check_ns, 0);
		/* zstd blocks checked there: their stored bytes too */
		T_ASSERT(st.device_upload_bytes <=
			 st.decode.bytes + st.io_memory_bytes +
			 (zstd_data ? st.bytes_verified_device : 0));
	}
	printf("%s: %.1f of %.1f MB read checked as they landed, %.1f MB "
	       "on the device, %.1f MB uploaded, %.1f MB of it staged "
	       "(%.1f MB while the next part was read)\n",
	       what, st.bytes_verified_landing / 1e6, st.read.bytes / 1e6,
	       st.bytes_verified_device / 1e6, st.device_upload_bytes / 1e6,
	       st.bytes_staged / 1e6, st.bytes_staged_overlapped / 1e6);
}

/* Flip the byte 6 MiB into shard 0's first block: in its fourth piece. */
static void corrupt_mid_block(const char *dir)
{
	sluice_dataset *ds = NULL;
	struct shard_block bi;
	char path[700];
	uint8_t byte;
	int fd;

	T_OK(sluice_dataset_open(dir, &ds));
	bi = dataset_table(ds)->shards[0].blocks[0];
	sluice_dataset_close(ds);
	T_LT((uint64_t)7 << 20, bi.stored_size);
	snprintf(path, sizeof(path), "%s/data-00000.dls", dir);
	fd = open(path, O_RDWR);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, &byte, 1, (off_t)(bi.offset + (6u << 20))), 1);
	byte ^= 0x10;
	T_EQ(pwrite(fd, &byte, 1, (off_t)(bi.offset + (6u << 20))), 1);
	close(fd);
}

/* Completions of shard 0's piece at 10 MiB into its first block end
 * there (0 bytes: end of file), as a truncated file's would. */
static _Atomic uint64_t cut_at;
static _Atomic int cuts;

static void cut_short(void *ctx, uint32_t file, uint64_t offset,
		      uint64_t length, int *res)
{
	uint64_t at = atomic_load(&cut_at);

	(void)ctx;
	if (file == 0 && offset <= at && at < offset + length && *res > 0) {
		*res = 0;
		atomic_fetch_add(&cuts, 1);
	}
}

/* One epoch with on_error=skip: every record but the skipped ones, right,
 * at most once.  @return: records skipped. */
static uint64_t skip_epoch(sluice_dataset *ds, int device, uint64_t memory)
{
	struct sluice_stats st;
	uint32_t seen[N] = { 0 };

	run_epochs(ds, device, SLUICE_ON_ERROR_SKIP, memory, 1, seen, "skip",
		   &st);
	for (uint32_t i = 0; i < N; i++)
		T_ASSERT(seen[i] <= 1);
	T_EQ(st.records + st.records_skipped, N);
	return st.records_skipped;
}

static void check_truncated_read(const char *dir, int device)
{
	sluice_dataset *ds = NULL;
	struct shard_block bi;

	int zstd = strstr(dir, "zstd") != NULL;

	T_OK(sluice_dataset_open(dir, &ds));
	bi = dataset_table(ds)->shards[0].blocks[0];
	/* a zstd block (fetched and decompressed part by part on the sim
	 * device) is cut in its middle */
	atomic_store(&cut_at, bi.offset + (zstd ? bi.stored_size / 2
						: 10u << 20));
	atomic_store(&cuts, 0);
	io_ring_set_fault(cut_short, NULL);
	/* its records skipped, with room for every block and without (a
	 * zstd entry holds its stored and its decoded bytes) */
	T_EQ(skip_epoch(ds, device, 0), bi.record_count);
	T_EQ(skip_epoch(ds, device, (zstd ? 128u : 56u) << 20),
	     bi.record_count);
	io_ring_set_fault(NULL, NULL);
	T_LT(0, atomic_load(&cuts));
	sluice_dataset_close(ds);
}

/* Close after the first batch, with blocks being read and hashed (or
 * staged to the device), the consumer still holding that batch; and
 * again after a few. */
static void check_close_mid_epoch(sluice_dataset *ds, int device)
{
	for (int taken = 1; taken <= 5; taken += 4) {
		sluice_loader *ld = open_loader(ds, device,
						SLUICE_ON_ERROR_FAIL,
						56u << 20);
		sluice_batch *b = NULL;

		for (int k = 0; k < taken; k++) {
			if (b)
				sluice_batch_release(b);
			T_OK(sluice_loader_next(ld, &b));
		}
		sluice_loader_close(ld);
		sluice_batch_release(b);
	}
}

/* Take batches until next() fails; its code, the loader's message in
 * @msg. */
static int drain(sluice_loader *ld, char *msg, size_t len)
{
	sluice_batch *b;
	int r;

	while ((r = sluice_loader_next(ld, &b)) == 0)
		sluice_batch_release(b);
	sluice_loader_error(ld, msg, len);
	return r;
}

/* Whether @ld fetched blocks through staging buffers (@want) or not;
 * only on the sim device are they fetched (fetch.c), raw or zstd. */
static void expect_staged(sluice_loader *ld, int want)
{
	struct sluice_stats st = { .size = sizeof(st) };

	T_OK(sluice_loader_stats(ld, &st));
	if (want)
		T_LT(0, st.bytes_staged);
	else
		T_EQ(st.bytes_staged, 0);
}

static void check_corrupt(const char *dir, int device)
{
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	sluice_batch *b;
	uint64_t n = 0;
	char msg[512];
	int r;

	T_OK(sluice_dataset_open(dir, &ds));
	/* cached whole, and streamed (fetched on the device; a zstd
	 * entry holds its stored and its decoded bytes) */
	for (int k = 0; k < 2; k++) {
		uint64_t streamed = (strstr(dir, "zstd") ? 128u : 56u) << 20;

		ld = open_loader(ds, device, SLUICE_ON_ERROR_FAIL,
				 k ? streamed : 0);
		T_EQ(drain(ld, msg, sizeof(msg)), -SLUICE_ECORRUPT);
		T_CONTAINS(msg, "data-00000.dls");
		T_CONTAINS(msg, "block 0");
		if (device != SLUICE_DEVICE_HOST && !forced)
			expect_staged(ld, k);
		sluice_loader_close(ld);
	}

	ld = open_loader(ds, device, SLUICE_ON_ERROR_SKIP, 0);
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		const uint64_t *idx = sluice_batch_indices(b);

		for (uint32_t k = 0; k < sluice_batch_size(b); k++)
			T_LT(idx[k], N);
		n += sluice_batch_size(b);
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	T_OK(sluice_loader_stats(ld, &st));
	T_LT(0, st.records_skipped);
	T_EQ(n + st.records_skipped, N);
	if (device != SLUICE_DEVICE_HOST && !forced)
		T_LT(0, st.bytes_verified_device);  /* caught there */
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* The device fails its checksums: the loader fails, naming the device,
 * also with on_error=skip (the data is not at fault, nothing is
 * skipped). */
static void check_device_failure(sluice_dataset *ds)
{
	sluice_loader *ld;
	char msg[512];

	/* the whole dataset cached, then streamed through fetches */
	for (int k = 0; k < 2; k++) {
		sim_test_faults = SIM_FAULT_CHECKSUM_ERROR;
		ld = open_loader(ds, SLUICE_DEVICE_AUTO, SLUICE_ON_ERROR_SKIP,
				 k ? 56u << 20 : 0);
		sim_test_faults = 0;
		T_EQ(drain(ld, msg, sizeof(msg)), -SLUICE_ECUDA);
		T_CONTAINS(msg, "checksum on the device");
		T_CONTAINS(msg, "simulated checksum failure");
		expect_staged(ld, k);
		sluice_loader_close(ld);
	}
}

/* The nth upload fails, early or mid-block, in a loader that fetches
 * every block (two_epochs' "blocks evicted"): the part's bytes were
 * only in a staging buffer, so the loader fails naming the copy, also
 * with on_error=skip, and the block's other parts still finish. */
static void check_upload_failure(sluice_dataset *ds, unsigned fault)
{
	for (uint64_t nth = 1; nth <= 6; nth++) {
		sluice_loader *ld;
		char msg[512];

		sim_test_faults = fault;
		sim_test_fail_copy = nth;
		ld = open_loader(ds, SLUICE_DEVICE_AUTO, SLUICE_ON_ERROR_SKIP,
				 56u << 20);
		sim_test_faults = 0;
		sim_test_fail_copy = 0;
		T_EQ(drain(ld, msg, sizeof(msg)), -SLUICE_ECUDA);
		printf("upload %llu failed: %s\n", (unsigned long long)nth,
		       msg);
		T_CONTAINS(msg, "copy to the device for its checksum");
		T_CONTAINS(msg, "simulated upload");
		sluice_loader_close(ld);
	}
}

/* The bytes 18 MiB into data-00001.dls (its second block's middle):
 * their reads fail with -EIO, or find the file ending there. */
static const uint64_t fault_at = 18u << 20;

static void fail_read(void *ctx, uint32_t file, uint64_t offset,
		      uint64_t length, int *res)
{
	if (file == 1 && offset <= fault_at && fault_at < offset + length &&
	    *res >= 0)
		*res = *(const int *)ctx;
}

/* A block's read fails (an I/O error, a file cut short) while streamed
 * to the device, where its parts go through the workers' fetches
 * (fetch.c): the loader fails naming the file, the block and what
 * happened, and nothing waits for the parts after the failed one. */
static void check_read_failure(sluice_dataset *ds)
{
	static int faults[] = { -EIO, 0 };
	uint64_t block = dataset_table(ds)->shards[1].blocks[1].offset;
	char part_at[64];

	snprintf(part_at, sizeof(part_at), "offset %llu:",
		 (unsigned long long)(block + (fault_at - block) /
					      (4u << 20) * (4u << 20)));
	for (int k = 0; k < 2; k++) {
		sluice_loader *ld;
		char msg[512];

		io_ring_set_fault(fail_read, &faults[k]);
		ld = open_loader(ds, SLUICE_DEVICE_AUTO, SLUICE_ON_ERROR_FAIL,
				 56u << 20);
		T_EQ(drain(ld, msg, sizeof(msg)),
		     k ? -SLUICE_ECORRUPT : -EIO);
		io_ring_set_fault(NULL, NULL);
		T_CONTAINS(msg, "data-00001.dls: block 1");
		T_CONTAINS(msg, k ? "read failed: file truncated"
				  : "read failed: Input/output error");
		/* at the 4 MiB part that failed, not the block's start */
		T_CONTAINS(msg, part_at);
		sluice_loader_close(ld);
	}
}

/* The dataset's folder renamed while a loader streams it: the fetches
 * read through the descriptors the loader opened, as the ring does, and
 * the epoch ends whole. */
static void check_moved(const char *path)
{
	char moved[700], msg[512];
	sluice_dataset *ds = NULL;
	sluice_loader *ld;

	snprintf(moved, sizeof(moved), "%s-moved", path);
	T_OK(sluice_dataset_open(path, &ds));
	ld = open_loader(ds, SLUICE_DEVICE_AUTO, SLUICE_ON_ERROR_FAIL,
			 56u << 20);
	T_OK(rename(path, moved) ? -errno : 0);
	T_EQ(drain(ld, msg, sizeof(msg)), SLUICE_EOF);
	expect_staged(ld, 1);
	sluice_loader_close(ld);
	T_OK(rename(moved, path) ? -errno : 0);
	sluice_dataset_close(ds);
}

int main(void)
{
	char *dir = fx_tmpdir();
	sluice_dataset *ds = NULL;
	char path[600], zpath[600];

	sim_first_seed();
	snprintf(path, sizeof(path), "%s/big", dir);
	snprintf(zpath, sizeof(zpath), "%s/zstd", dir);
	write_big(path, 0);
	write_big(zpath, 1);
	T_OK(sluice_dataset_open(path, &ds));
	two_epochs(ds, SLUICE_DEVICE_HOST, 0, "host");
	two_epochs(ds, SLUICE_DEVICE_HOST, 56u << 20, "host, blocks evicted");
	forced = SLUICE_FORCE_WHOLE_BLOCK_CHECKS;
	two_epochs(ds, SLUICE_DEVICE_HOST, 56u << 20, "host, whole-block checks");
	forced = 0;
	sim_use_seed(sim_seed);
	two_epochs(ds, SLUICE_DEVICE_AUTO, 0, "sim device, gathered");
	two_epochs(ds, SLUICE_DEVICE_AUTO, 56u << 20,
		   "sim device, gathered, blocks evicted");
	forced = SLUICE_FORCE_HOST_CHECKS;
	two_epochs(ds, SLUICE_DEVICE_AUTO, 56u << 20,
		   "sim device, gathered, checked on the CPU");
	/* nothing hashed as it lands: fetches go on all the same */
	forced = SLUICE_FORCE_WHOLE_BLOCK_CHECKS;
	two_epochs(ds, SLUICE_DEVICE_AUTO, 56u << 20,
		   "sim device, gathered, whole-block checks");
	forced = 0;
	workers = 1;
	two_epochs(ds, SLUICE_DEVICE_AUTO, 56u << 20,
		   "sim device, gathered, blocks evicted, one worker");
	workers = 2;
	/* each part read, then uploaded, by the same worker in turn */
	T_OK(setenv("SLUICE_FETCH_OVERLAP", "0", 1) ? -1 : 0);
	no_overlap = 1;
	two_epochs(ds, SLUICE_DEVICE_AUTO, 56u << 20,
		   "sim device, gathered, blocks evicted, no overlap");
	T_OK(unsetenv("SLUICE_FETCH_OVERLAP") ? -1 : 0);
	no_overlap = 0;
	no_verify = 1;
	two_epochs(ds, SLUICE_DEVICE_AUTO, 56u << 20,
		   "sim device, gathered, blocks evicted, nothing checked");
	no_verify = 0;
	check_device_failure(ds);
	/* an upload refused, or failed in flight (a fetched part's, found
	 * when its worker settles it: fetch.c) */
	check_upload_failure(ds, SIM_FAULT_UPLOAD_ERROR);
	check_upload_failure(ds, SIM_FAULT_FINISH_ERROR);
	check_read_failure(ds);
	check_moved(path);
	check_close_mid_epoch(ds, SLUICE_DEVICE_HOST);
	check_close_mid_epoch(ds, SLUICE_DEVICE_AUTO);
	sluice_dataset_close(ds);
	/* zstd blocks: checked on the device from their stored bytes,
	 * decompressed on the CPU, gathered there decoded */
	zstd_data = 1;
	T_OK(sluice_dataset_open(zpath, &ds));
	T_EQ(dataset_table(ds)->shards[0].blocks[0].codec, DLS_CODEC_ZSTD);
	T_LT((uint64_t)8 << 20, dataset_table(ds)->shards[0].blocks[0].stored_size);
	/* a zstd entry holds its stored and its decoded bytes */
	two_epochs(ds, SLUICE_DEVICE_AUTO, 128u << 20,
		   "sim device, zstd, blocks evicted");
	/* the A/B's other side: read by the ring, checked on the device */
	T_OK(setenv("SLUICE_STAGED_DECODE", "0", 1) ? -1 : 0);
	ring_decode = 1;
	two_epochs(ds, SLUICE_DEVICE_AUTO, 128u << 20,
		   "sim device, zstd, blocks evicted, read by the ring");
	T_OK(unsetenv("SLUICE_STAGED_DECODE") ? -1 : 0);
	ring_decode = 0;
	sluice_dataset_close(ds);
	zstd_data = 0;
	check_truncated_read(path, SLUICE_DEVICE_AUTO);
	check_truncated_read(path, SLUICE_DEVICE_HOST);
	check_truncated_read(zpath, SLUICE_DEVICE_AUTO);
	corrupt_mid_block(path);
	corrupt_mid_block(zpath);
	check_corrupt(path, SLUICE_DEVICE_AUTO);
	check_corrupt(zpath, SLUICE_DEVICE_AUTO);
	forced = SLUICE_FORCE_HOST_CHECKS;
	check_corrupt(path, SLUICE_DEVICE_AUTO);
	forced = 0;
	T_OK(unsetenv("SLUICE_DEVICE_SIM") ? -1 : 0);
	check_corrupt(path, SLUICE_DEVICE_HOST);
	fx_rmrf(dir);
	free(dir);
	sim_done();
	printf("ok\n");
	return 0;
}
