/*
 * test_fallbacks.c - the forced fallbacks on the host path: plain reads
 * (no io_uring registered buffers) deliver exactly what the default path
 * delivers, every record once per epoch, and the stats say which path
 * ran.  The pageable-copy fallback needs a GPU: tests/test_gpu.c and
 * tests/test_gpu_loader.c.
 */
#include <errno.h>

#include "loader_fixture.h"
#include "sluice_tools.h"

#define N 2000
#define B 64

static sluice_loader *open_host(sluice_dataset *ds, int plain_reads)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.seed = 11;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	if (plain_reads)
		sluice_loader_config_force(&cfg, SLUICE_FORCE_PLAIN_READS);
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	return ld;
}

/* Both loaders, side by side: same order, same bytes, every record. */
static void check_plain_reads(sluice_dataset *ds)
{
	sluice_loader *fixed = open_host(ds, 0), *plain = open_host(ds, 1);
	static uint32_t seen[N];
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_batch *a, *b;
	int ra;

	while ((ra = sluice_loader_next(fixed, &a)) == 0) {
		T_OK(sluice_loader_next(plain, &b));
		T_EQ(sluice_batch_size(a), sluice_batch_size(b));
		T_MEMEQ(sluice_batch_indices(a), sluice_batch_indices(b),
			sluice_batch_size(a) * sizeof(uint64_t));
		fx_check_batch(b, seen);
		sluice_batch_release(a);
		sluice_batch_release(b);
	}
	T_EQ(ra, SLUICE_EOF);
	T_EQ(sluice_loader_next(plain, &b), SLUICE_EOF);
	for (uint32_t i = 0; i < N; i++)
		T_EQ(seen[i], 1);

	T_OK(sluice_loader_stats(plain, &st));
	T_EQ(st.registered_buffers, 0);
	T_CONTAINS(st.fallbacks, "buffer registration off (asked): plain reads");
	T_EQ(st.records, N);
	T_OK(sluice_loader_stats(fixed, &st));
	T_ASSERT(strstr(st.fallbacks, "(asked)") == NULL);
	printf("default path: registered buffers %d (%s)\n",
	       st.registered_buffers, st.fallbacks[0] ? st.fallbacks : "-");
	sluice_loader_close(fixed);
	sluice_loader_close(plain);
}

/* Asking for pageable copies on the host changes nothing: there are no
 * copies, and no CUDA registration to leave out. */
static void check_pageable_on_host(sluice_dataset *ds)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld = NULL;
	sluice_batch *b;
	uint32_t n = 0;
	int r;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.device = SLUICE_DEVICE_HOST;
	sluice_loader_config_force(&cfg, SLUICE_FORCE_PAGEABLE_COPIES);
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		n += fx_check_batch(b, NULL);
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(n, N);
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(strstr(st.fallbacks, "cudaHostRegister") == NULL);
	sluice_loader_close(ld);
}

/* The probes on a host loader: no link to measure, a busy step. */
static void check_probes_on_host(sluice_dataset *ds)
{
	sluice_loader *ld = open_host(ds, 0);
	char msg[256];
	double bps = -1;

	T_EQ(sluice_loader_measure_h2d(ld, 1 << 20, 2, &bps),
	     -SLUICE_ENODEVICE);
	T_ASSERT(bps == 0.0);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, "no host-to-device link");
	T_EQ(sluice_loader_measure_h2d(ld, 0, 2, &bps), -EINVAL);
	T_EQ(sluice_loader_measure_h2d(NULL, 1, 1, &bps), -EINVAL);
	T_OK(sluice_loader_compute(ld, 0, 1.0));
	T_OK(sluice_loader_compute(ld, 0, 0));
	T_EQ(sluice_loader_compute(ld, 0, -1.0), -EINVAL);
	T_EQ(sluice_loader_compute(ld, -1, 1.0), -EINVAL);
	T_EQ(sluice_loader_compute(NULL, 0, 1.0), -EINVAL);
	sluice_loader_close(ld);
}

int main(void)
{
	char *dir = fx_tmpdir();
	char path[600];
	sluice_dataset *ds = NULL;

	snprintf(path, sizeof(path), "%s/d", dir);
	fx_write(path, N, 16384, 3, 700);
	T_OK(sluice_dataset_open(path, &ds));
	check_plain_reads(ds);
	check_pageable_on_host(ds);
	check_probes_on_host(ds);
	sluice_dataset_close(ds);
	fx_rmrf(dir);
	free(dir);
	return 0;
}
