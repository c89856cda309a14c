/*
 * test_loader_faults.c - what the consumer sees when the disk or the data
 * misbehaves: short reads and -EAGAIN are invisible; -EIO and a corrupt
 * block fail with a message naming shard and offset; on_error=skip counts
 * and continues.  Also: closing mid-epoch with batches held, and memory
 * that does not grow over 20 epochs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>

#include "loader_fixture.h"
#include "ring.h"

#define N 600

static _Atomic int fault_mode;
static _Atomic int faults_done;
static _Atomic int short_calls;

enum { F_NONE, F_SHORT, F_EAGAIN, F_EIO };

static void inject(void *ctx, uint32_t file, uint64_t offset, uint64_t length,
		   int *res)
{
	(void)ctx, (void)offset, (void)length;
	switch (atomic_load(&fault_mode)) {
	case F_SHORT:   /* every other completion stops half way */
		if (*res >= 1024 && atomic_fetch_add(&short_calls, 1) % 2 == 0) {
			*res = (*res / 2) & ~511;
			atomic_fetch_add(&faults_done, 1);
		}
		break;
	case F_EAGAIN:
		if (atomic_fetch_add(&faults_done, 1) % 3 == 0)
			*res = -EAGAIN;
		break;
	case F_EIO:
		if (file >= 1 && *res > 0) {
			*res = -EIO;
			atomic_fetch_add(&faults_done, 1);
		}
		break;
	default:
		break;
	}
}

static sluice_loader *open_loader(sluice_dataset *ds, int on_error)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = 50;
	cfg.shuffle = SLUICE_SHUFFLE_BLOCK;
	cfg.prefetch_depth = 2;
	cfg.decode_threads = 2;
	cfg.on_error = on_error;
	cfg.device = SLUICE_DEVICE_HOST;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	return ld;
}

/* Drain an epoch; @return: next()'s final code, records in *count. */
static int drain(sluice_loader *ld, uint64_t *count)
{
	uint32_t seen[N] = { 0 };
	sluice_batch *b;
	int r;

	*count = 0;
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		*count += fx_check_batch(b, seen);
		sluice_batch_release(b);
	}
	for (int i = 0; i < N; i++)
		T_ASSERT(seen[i] <= 1);
	return r;
}

static void check_faults(const char *dir)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	char msg[512];
	uint64_t n;

	T_OK(sluice_dataset_open(dir, &ds));
	io_ring_set_fault(inject, NULL);

	atomic_store(&fault_mode, F_SHORT);
	atomic_store(&faults_done, 0);
	ld = open_loader(ds, SLUICE_ON_ERROR_FAIL);
	T_EQ(drain(ld, &n), SLUICE_EOF);
	T_EQ(n, N);
	T_LT(0, atomic_load(&faults_done));
	sluice_loader_close(ld);

	atomic_store(&fault_mode, F_EAGAIN);
	atomic_store(&faults_done, 0);
	ld = open_loader(ds, SLUICE_ON_ERROR_FAIL);
	T_EQ(drain(ld, &n), SLUICE_EOF);
	T_EQ(n, N);
	sluice_loader_close(ld);

	atomic_store(&fault_mode, F_EIO);
	atomic_store(&faults_done, 0);
	ld = open_loader(ds, SLUICE_ON_ERROR_SKIP);   /* EIO is never skipped */
	T_EQ(drain(ld, &n), -EIO);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, ".dls");
	T_CONTAINS(msg, "offset");
	sluice_loader_close(ld);

	atomic_store(&fault_mode, F_NONE);
	io_ring_set_fault(NULL, NULL);
	sluice_dataset_close(ds);
}

/* Flip one byte inside the first block of the first shard. */
static void corrupt_first_block(const char *dir)
{
	char path[600];
	uint8_t byte;
	int fd;

	snprintf(path, sizeof(path), "%s/data-00000.dls", dir);
	fd = open(path, O_RDWR);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, &byte, 1, 4096 + 100), 1);
	byte ^= 0x40;
	T_EQ(pwrite(fd, &byte, 1, 4096 + 100), 1);
	close(fd);
}

static void check_corrupt(const char *dir)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	struct sluice_stats st = { .size = sizeof(st) };
	char msg[512];
	uint64_t n;

	corrupt_first_block(dir);
	T_OK(sluice_dataset_open(dir, &ds));
	ld = open_loader(ds, SLUICE_ON_ERROR_FAIL);
	T_EQ(drain(ld, &n), -SLUICE_ECORRUPT);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, "data-00000.dls");
	T_CONTAINS(msg, "block 0");
	T_CONTAINS(msg, "offset 4096");
	sluice_loader_close(ld);

	ld = open_loader(ds, SLUICE_ON_ERROR_SKIP);
	T_EQ(drain(ld, &n), SLUICE_EOF);
	T_OK(sluice_loader_stats(ld, &st));
	T_LT(0, st.records_skipped);
	T_EQ(n + st.records_skipped, N);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* Close with reads in flight and batches/tensors still held. */
static void check_close_mid_epoch(const char *dir)
{
	sluice_dataset *ds = NULL;

	T_OK(sluice_dataset_open(dir, &ds));
	for (int i = 0; i < 40; i++) {
		sluice_loader *ld = open_loader(ds, SLUICE_ON_ERROR_FAIL);
		sluice_batch *b = NULL;
		DLManagedTensor *t = NULL;

		for (int k = 0; k < i % 4; k++) {
			T_OK(sluice_loader_next(ld, &b));
			if (k + 1 < i % 4)
				sluice_batch_release(b);
		}
		if (b)
			T_OK(sluice_batch_tensor(b, "x", -1, &t));
		sluice_loader_close(ld);
		if (b) {
			/* still valid after close */
			T_EQ(((const int32_t *)t->dl_tensor.data)[0] ^ 0x5a5a,
			     (int32_t)(sluice_batch_indices(b)[0] * 4));
			sluice_batch_release(b);
			t->deleter(t);
		}
	}
	sluice_dataset_close(ds);
}

static long rss_kib(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
		rss = -1;
	fclose(f);
	return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void check_memory(const char *dir)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	long after2 = 0, after20;
	uint64_t n;

	T_OK(sluice_dataset_open(dir, &ds));
	ld = open_loader(ds, SLUICE_ON_ERROR_FAIL);
	for (int e = 0; e < 20; e++) {
		T_EQ(drain(ld, &n), SLUICE_EOF);
		T_EQ(n, N);
		if (e == 1)
			after2 = rss_kib();
	}
	after20 = rss_kib();
#ifdef __SANITIZE_THREAD__
	/* TSan's shadow and history memory grow with every access: RSS
	 * says nothing about ours there (ASan and plain builds check it). */
	after20 = after2;
#endif
	if (after2 > 0 && after20 > 0)
		T_LT(after20 - after2, 512);   /* KiB: no per-epoch growth */
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

int main(void)
{
	char *dir = fx_tmpdir();
	char raw[600], zst[600];

	snprintf(raw, sizeof(raw), "%s/raw", dir);
	snprintf(zst, sizeof(zst), "%s/zstd", dir);
	fx_write(raw, N, 16384, 0, 250);
	fx_write(zst, N, 16384, 3, 250);
	check_faults(raw);
	check_faults(zst);
	check_close_mid_epoch(zst);
	check_memory(raw);
	check_corrupt(raw);
	check_corrupt(zst);
	fx_rmrf(dir);
	free(dir);
	return 0;
}
