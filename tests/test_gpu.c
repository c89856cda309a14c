/*
 * test_gpu.c - the device layer: the host implementation everywhere, and
 * the cuda implementation where a GPU is present.  With
 * SLUICE_REQUIRE_GPU=1 (make test-gpu) a missing GPU is a failure.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "device.h"
#include "t.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "cuda_compute.h"
#endif

#define MIB ((size_t)1 << 20)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct device_config config(int kind, size_t arena, uint32_t slots,
				   size_t slot_bytes)
{
	struct device_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = kind;
	cfg.device_id = -1;
	cfg.arena_bytes = arena;
	cfg.slots = slots;
	cfg.slot_bytes = slot_bytes;
	return cfg;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (uint8_t)(seed >> 24);
	}
}

/* The whole arena is ours to write, exactly the size asked for. */
static void check_arena(struct device *d, size_t want)
{
	uint8_t *arena, *copy;
	size_t len = 0;

	arena = device_arena(d, &len);
	T_ASSERT(arena != NULL);
	T_EQ(len, want);
	copy = malloc(len);
	T_ASSERT(copy != NULL);
	fill(copy, len, 7);
	memcpy(arena, copy, len);
	T_MEMEQ(arena, copy, len);
	free(copy);
}

static void test_host_device(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_HOST, 1 * MIB + 100, 3,
					  64 * 1024);
	struct device_info info;
	struct device *d = NULL;
	char err[256] = "", msg[64];
	uint8_t *arena;
	double t0, ms;
	size_t len;

	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	T_EQ(info.is_cuda, 0);
	T_EQ(info.dl.device_type, kDLCPU);
	T_EQ(info.dl.device_id, 0);
	T_EQ(info.huge_pages, 0);           /* under 2 MiB: never tried */
	if (!info.arena_pinned)
		T_CONTAINS(info.fallbacks, "mlock failed: ");
	else
		T_EQ(info.fallbacks[0], '\0');
	check_arena(d, cfg.arena_bytes);
	arena = device_arena(d, &len);

	T_ASSERT(device_slot_ptr(d, 0) == NULL);
	T_EQ(device_copy_slot(d, 2, arena + len - 100, 100), 0);
	T_EQ(device_copy_slot(d, 0, arena, 0), 0);
	T_EQ(device_slot_wait_copied(d, 2), 0);
	T_EQ(device_slot_export(d, 2, 0), 0);
	T_EQ(device_slot_export(d, 2, -1), 0);
	T_EQ(device_slot_release(d, 2), 0);
	T_EQ(device_measure_h2d(d, 4096, 3) == 0.0, 1);

	/* The pipeline's bugs are caught here, not as wild copies later. */
	T_EQ(device_copy_slot(d, 3, arena, 10), -EINVAL);
	T_EQ(device_copy_slot(d, 0, arena, 64 * 1024 + 1), -EINVAL);
	T_EQ(device_copy_slot(d, 0, arena + len - 99, 100), -EINVAL);
	T_EQ(device_copy_slot(d, 0, msg, sizeof(msg)), -EINVAL);
	T_EQ(device_slot_export(d, 3, 0), -EINVAL);
	T_EQ(device_slot_export(d, 0, -2), -EINVAL);
	T_EQ(device_slot_release(d, 3), -EINVAL);
	T_EQ(device_slot_wait_copied(d, 3), -EINVAL);

	/* A busy loop of at least the time asked (functional, not perf). */
	t0 = now_ms();
	device_compute(d, 5.0);
	ms = now_ms() - t0;
	T_ASSERT(ms >= 5.0);
	T_EQ(device_last_error(d, msg, sizeof(msg)), 0);
	device_close(d);
	device_close(NULL);
}

/* 2 MiB and up tries MAP_HUGETLB; either way the arena is usable. */
static void test_large_arena(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_HOST, 3 * MIB + 1, 1,
					  4096);
	struct device_info info;
	struct device *d = NULL;
	char err[256] = "";

	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	T_ASSERT(info.huge_pages == 0 || info.huge_pages == 1);
	check_arena(d, cfg.arena_bytes);
	device_close(d);
}

static void test_bad_config(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_HOST, MIB, 2, 4096);
	struct device *d = (struct device *)&cfg;
	char err[256];

	cfg.kind = 7;
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	T_ASSERT(d == NULL);
	T_CONTAINS(err, "unknown device kind 7");

	cfg = config(SLUICE_DEVICE_HOST, MIB, 0, 4096);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	cfg = config(SLUICE_DEVICE_HOST, 0, 2, 4096);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	cfg = config(SLUICE_DEVICE_HOST, MIB, 2, SIZE_MAX / 2 + 1);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	T_CONTAINS(err, "overflow");

	cfg = config(SLUICE_DEVICE_AUTO, MIB, 2, 4096);
	cfg.device_id = -5;
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	cfg.device_id = -1;
	setenv("LOCAL_RANK", "1x", 1);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	T_CONTAINS(err, "LOCAL_RANK=\"1x\"");
	unsetenv("LOCAL_RANK");
	T_ASSERT(d == NULL);
}

/* Why this process has no usable GPU, or NULL when it has one. */
static const char *no_gpu_reason(char *buf, size_t len)
{
#ifdef SLUICE_HAVE_CUDA
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		snprintf(buf, len, "the CUDA driver says: %s",
			 cudaGetErrorString(e));
		return buf;
	}
	if (n == 0) {
		snprintf(buf, len, "0 CUDA devices");
		return buf;
	}
	return NULL;
#else
	snprintf(buf, len, "built without CUDA");
	return buf;
#endif
}

/* Without a GPU: AUTO is the host with one clear reason; CUDA refuses. */
static void test_no_gpu(const char *why)
{
	struct device_config cfg = config(SLUICE_DEVICE_AUTO, MIB, 2, 4096);
	struct device_info info;
	struct device *d = NULL;
	char err[256] = "", want[300];

	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	T_EQ(info.is_cuda, 0);
	T_EQ(info.dl.device_type, kDLCPU);
	snprintf(want, sizeof(want), "no CUDA GPU found: %s; host batches", why);
	T_CONTAINS(info.fallbacks, want);
	T_ASSERT(strncmp(info.fallbacks, "no CUDA GPU found: ", 19) == 0);
	printf("AUTO fallbacks: %s\n", info.fallbacks);
	check_arena(d, cfg.arena_bytes);
	device_close(d);

	cfg.kind = SLUICE_DEVICE_CUDA;
	d = (struct device *)&cfg;
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -SLUICE_ENODEVICE);
	T_ASSERT(d == NULL);
	T_CONTAINS(err, "no CUDA GPU found: ");
	printf("CUDA kind: %s\n", err);
}

#ifdef SLUICE_HAVE_CUDA

#define CU_OK(call)                                                         \
	do {                                                                \
		cudaError_t cu_e_ = (call);                                 \
		if (cu_e_ != cudaSuccess)                                   \
			T_FAIL_AT("%s: %s", #call, cudaGetErrorString(cu_e_)); \
	} while (0)

#define SLOT_BYTES MIB

struct release_arg {
	struct device *d;
	uint32_t slot;
	int result;
};

static void *release_in_thread(void *p)
{
	struct release_arg *a = p;

	a->result = device_slot_release(a->d, a->slot);
	return NULL;
}

/* Copy a slot back through @stream after exporting it there. */
static void read_slot(struct device *d, uint32_t i, cudaStream_t s,
		      uint8_t *out)
{
	T_EQ(device_slot_export(d, i, (int64_t)(intptr_t)s), 0);
	CU_OK(cudaMemcpyAsync(out, device_slot_ptr(d, i), SLOT_BYTES,
			      cudaMemcpyDeviceToHost, s));
	CU_OK(cudaStreamSynchronize(s));
}

static void test_cuda_device(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_CUDA, 4 * MIB, 2,
					  SLOT_BYTES);
	struct release_arg ra;
	struct device_info info;
	struct device *d = NULL;
	uint8_t *arena, *a, *b, *back, *dev_out;
	char err[256] = "", msg[256];
	cudaStream_t s1, s2;
	pthread_t th;
	double t0, bw;
	size_t len;

	setenv("LOCAL_RANK", "0", 1);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	unsetenv("LOCAL_RANK");
	device_get_info(d, &info);
	T_EQ(info.is_cuda, 1);
	T_EQ(info.dl.device_type, kDLCUDA);
	T_EQ(info.dl.device_id, 0);
	if (!info.arena_pinned)
		T_CONTAINS(info.fallbacks, "cudaHostRegister failed: ");
	check_arena(d, cfg.arena_bytes);
	arena = device_arena(d, &len);
	T_ASSERT(device_slot_ptr(d, 0) != NULL);
	T_EQ((uint8_t *)device_slot_ptr(d, 1) - (uint8_t *)device_slot_ptr(d, 0),
	     SLOT_BYTES);

	a = arena;
	b = arena + SLOT_BYTES;
	fill(a, SLOT_BYTES, 1);
	fill(b, SLOT_BYTES, 2);
	back = malloc(SLOT_BYTES);
	T_ASSERT(back != NULL);
	CU_OK(cudaStreamCreate(&s1));
	CU_OK(cudaStreamCreate(&s2));
	CU_OK(cudaMalloc((void **)&dev_out, SLOT_BYTES));

	/* A copy, exported to a fresh stream, reads back the same bytes. */
	T_EQ(device_copy_slot(d, 0, a, SLOT_BYTES), 0);
	read_slot(d, 0, s1, back);
	T_MEMEQ(back, a, SLOT_BYTES);
	T_EQ(device_slot_release(d, 0), 0);

	/*
	 * Release orders the next copy after the consumer's work: s1 spins
	 * 100 ms and only then reads slot 0; the recopy of B is issued at
	 * once.  Without the release event it would land first and s1
	 * would read B.
	 */
	T_EQ(device_copy_slot(d, 0, a, SLOT_BYTES), 0);
	T_EQ(device_slot_export(d, 0, (int64_t)(intptr_t)s1), 0);
	CU_OK(cuda_spin_async(s1, 100.0));
	CU_OK(cudaMemcpyAsync(dev_out, device_slot_ptr(d, 0), SLOT_BYTES,
			      cudaMemcpyDeviceToDevice, s1));
	ra.d = d;
	ra.slot = 0;
	ra.result = -1;
	T_EQ(pthread_create(&th, NULL, release_in_thread, &ra), 0);
	T_EQ(pthread_join(th, NULL), 0);
	T_EQ(ra.result, 0);
	T_EQ(device_copy_slot(d, 0, b, SLOT_BYTES), 0);
	T_EQ(device_slot_wait_copied(d, 0), 0);
	CU_OK(cudaMemcpy(back, dev_out, SLOT_BYTES, cudaMemcpyDeviceToHost));
	T_MEMEQ(back, a, SLOT_BYTES);
	read_slot(d, 0, s2, back);
	T_MEMEQ(back, b, SLOT_BYTES);
	T_EQ(device_slot_release(d, 0), 0);

	/* The legacy default stream (0) is a consumer stream too. */
	T_EQ(device_copy_slot(d, 1, a, SLOT_BYTES), 0);
	read_slot(d, 1, (cudaStream_t)0, back);
	T_MEMEQ(back, a, SLOT_BYTES);
	T_EQ(device_slot_release(d, 1), 0);

	bw = device_measure_h2d(d, 2 * MIB, 4);
	T_ASSERT(bw > 0);
	printf("h2d: %.2f GB/s (pinned %d)\n", bw / 1e9, info.arena_pinned);

	/* clock64 against the peak clock: at least ~the time asked. */
	t0 = now_ms();
	device_compute(d, 5.0);
	T_ASSERT(now_ms() - t0 >= 4.0);
	T_EQ(device_last_error(d, msg, sizeof(msg)), 0);

	CU_OK(cudaFree(dev_out));
	CU_OK(cudaStreamDestroy(s1));
	CU_OK(cudaStreamDestroy(s2));
	free(back);
	device_close(d);

	/* With a GPU, AUTO picks it. */
	cfg.kind = SLUICE_DEVICE_AUTO;
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	T_EQ(info.is_cuda, 1);
	device_close(d);
}
#endif /* SLUICE_HAVE_CUDA */

int main(void)
{
	const char *require = getenv("SLUICE_REQUIRE_GPU");
	char why_buf[200];
	const char *why;

	unsetenv("LOCAL_RANK");
	test_host_device();
	test_large_arena();
	test_bad_config();
	printf("host device: ok\n");

	why = no_gpu_reason(why_buf, sizeof(why_buf));
	if (why) {
		test_no_gpu(why);
		printf("no-GPU fallback: ok\n");
		if (require && strcmp(require, "1") == 0)
			T_FAIL_AT("SLUICE_REQUIRE_GPU=1 but no GPU: %s", why);
		T_SKIP_BECAUSE("GPU part: %s (the host part passed)", why);
	}
#ifdef SLUICE_HAVE_CUDA
	test_cuda_device();
	printf("cuda device: ok\n");
#endif
	return 0;
}
