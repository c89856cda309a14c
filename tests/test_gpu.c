/*
 * test_gpu.c - the cuda device implementation (`make test-gpu`): copies,
 * export and release ordering across streams and threads, the H2D probe
 * and the compute kernel; once with the arena pinned and once with the
 * pageable-copy fallback forced.  Without a GPU it skips (77); with
 * SLUICE_REQUIRE_GPU=1 a missing GPU is a failure.
 */
#include <errno.h>
#include <pthread.h>

#include "device_util.h"

#ifdef SLUICE_HAVE_CUDA
#include "cuda_compute.h"

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

/* Copy slot @i's batch at @host back through @stream after exporting it
 * there. */
static void read_slot(struct device *d, uint32_t i, const uint8_t *host,
		      cudaStream_t s, uint8_t *out)
{
	T_EQ(device_slot_export(d, i, (int64_t)(intptr_t)s), 0);
	CU_OK(cudaMemcpyAsync(out, device_mirror_ptr(d, host), SLOT_BYTES,
			      cudaMemcpyDeviceToHost, s));
	CU_OK(cudaStreamSynchronize(s));
}

static void test_cuda_device(int pageable)
{
	struct device_config cfg = config(SLUICE_DEVICE_CUDA, 4 * MIB, 2,
					  2 * SLOT_BYTES);
	struct release_arg ra;
	struct device_info info;
	struct device *d = NULL;
	uint8_t *arena, *a, *b, *back, *first, *dev_out;
	char err[256] = "", msg[256];
	cudaStream_t s1, s2;
	pthread_t th;
	double t0, bw;
	size_t len;

	cfg.pageable = pageable;
	setenv("LOCAL_RANK", "0", 1);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	unsetenv("LOCAL_RANK");
	device_get_info(d, &info);
	T_EQ(info.caps & (DEVICE_CAP_MIRROR | DEVICE_CAP_GATHER |
			  DEVICE_CAP_STREAMS),
	     DEVICE_CAP_MIRROR | DEVICE_CAP_GATHER | DEVICE_CAP_STREAMS);
	T_EQ(!!(info.caps & DEVICE_CAP_PINNED), info.arena_pinned);
	T_EQ(info.dl.device_type, kDLCUDA);
	T_EQ(info.dl.device_id, 0);
	if (pageable) {
		T_EQ(info.arena_pinned, 0);
		T_CONTAINS(info.fallbacks, "cudaHostRegister off (asked)");
	} else if (!info.arena_pinned) {
		T_CONTAINS(info.fallbacks, "cudaHostRegister failed: ");
	}
	check_arena(d, cfg.arena_bytes);
	arena = device_arena(d, &len);
	a = arena + cfg.mirror_offset;
	b = a + SLOT_BYTES;
	T_ASSERT(device_mirror_ptr(d, a) != NULL);
	T_ASSERT(device_mirror_ptr(d, arena) == NULL);
	T_EQ((uint8_t *)device_mirror_ptr(d, b) -
	     (uint8_t *)device_mirror_ptr(d, a), SLOT_BYTES);

	fill(a, SLOT_BYTES, 1);
	fill(b, SLOT_BYTES, 2);
	back = malloc(SLOT_BYTES);
	first = malloc(SLOT_BYTES);
	T_ASSERT(back != NULL && first != NULL);
	memcpy(first, a, SLOT_BYTES);
	CU_OK(cudaStreamCreate(&s1));
	CU_OK(cudaStreamCreate(&s2));
	CU_OK(cudaMalloc((void **)&dev_out, SLOT_BYTES));

	/* A copy, exported to a fresh stream, reads back the same bytes. */
	T_EQ(device_copy_slot(d, 0, a, SLOT_BYTES), 0);
	read_slot(d, 0, a, s1, back);
	T_MEMEQ(back, a, SLOT_BYTES);
	T_EQ(device_slot_release(d, 0), 0);

	/*
	 * Release orders every later copy after the consumer's work, also
	 * another slot's copy into the same memory (the budget hands freed
	 * memory to whichever batch comes next): s1 spins 100 ms and only
	 * then reads slot 0's batch; slot 1's copy of new bytes to the same
	 * place is issued at once.  Without the release's wait it would
	 * land first and s1 would read the new bytes.
	 */
	T_EQ(device_copy_slot(d, 0, a, SLOT_BYTES), 0);
	T_EQ(device_slot_export(d, 0, (int64_t)(intptr_t)s1), 0);
	CU_OK(cuda_spin_async(s1, 100.0));
	CU_OK(cudaMemcpyAsync(dev_out, device_mirror_ptr(d, a), SLOT_BYTES,
			      cudaMemcpyDeviceToDevice, s1));
	ra.d = d;
	ra.slot = 0;
	ra.result = -1;
	T_EQ(pthread_create(&th, NULL, release_in_thread, &ra), 0);
	T_EQ(pthread_join(th, NULL), 0);
	T_EQ(ra.result, 0);
	T_EQ(device_slot_wait_copied(d, 0), 0);   /* host memory free */
	memcpy(a, b, SLOT_BYTES);
	T_EQ(device_copy_slot(d, 1, a, SLOT_BYTES), 0);
	T_EQ(device_slot_wait_copied(d, 1), 0);
	CU_OK(cudaMemcpy(back, dev_out, SLOT_BYTES, cudaMemcpyDeviceToHost));
	T_MEMEQ(back, first, SLOT_BYTES);
	read_slot(d, 1, a, s2, back);
	T_MEMEQ(back, b, SLOT_BYTES);
	T_EQ(device_slot_release(d, 1), 0);

	/* The legacy default stream (0) is a consumer stream too. */
	T_EQ(device_copy_slot(d, 1, b, SLOT_BYTES), 0);
	read_slot(d, 1, b, (cudaStream_t)0, back);
	T_MEMEQ(back, b, SLOT_BYTES);
	T_EQ(device_slot_release(d, 1), 0);

	T_EQ(device_measure_h2d(d, 2 * MIB, 4, &bw), 0);
	T_ASSERT(bw > 0);
	/* capped at the arena, not an error */
	T_EQ(device_measure_h2d(d, 64 * MIB, 1, &bw), 0);
	T_ASSERT(bw > 0);
	printf("h2d: %.2f GB/s (pinned %d)\n", bw / 1e9, info.arena_pinned);

	/* The kernel spins on the GPU's wall clock: at least the time
	 * asked, on the stream asked, which the call waits for. */
	t0 = now_ms();
	T_EQ(device_compute(d, (int64_t)(intptr_t)s1, 5.0), 0);
	T_ASSERT(now_ms() - t0 >= 5.0);
	T_EQ(cudaStreamQuery(s1), cudaSuccess);
	t0 = now_ms();
	T_EQ(device_compute(d, 0, 5.0), 0);
	T_ASSERT(now_ms() - t0 >= 5.0);
	T_EQ(device_last_error(d, msg, sizeof(msg)), 0);

	CU_OK(cudaFree(dev_out));
	CU_OK(cudaStreamDestroy(s1));
	CU_OK(cudaStreamDestroy(s2));
	free(back);
	free(first);
	device_close(d);

	/* With a GPU, AUTO picks it. */
	cfg.kind = SLUICE_DEVICE_AUTO;
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	T_EQ(info.dl.device_type, kDLCUDA);
	device_close(d);
}
#endif /* SLUICE_HAVE_CUDA */

int main(void)
{
	const char *require = getenv("SLUICE_REQUIRE_GPU");
	char why_buf[200];
	const char *why;

	unsetenv("LOCAL_RANK");
	why = no_gpu_reason(why_buf, sizeof(why_buf));
	if (why) {
		if (require && strcmp(require, "1") == 0)
			T_FAIL_AT("SLUICE_REQUIRE_GPU=1 but no GPU: %s", why);
		T_SKIP_BECAUSE("no usable GPU: %s", why);
	}
#ifdef SLUICE_HAVE_CUDA
	test_cuda_device(0);
	printf("cuda device, pinned arena: ok\n");
	test_cuda_device(1);
	printf("cuda device, pageable copies: ok\n");
#endif
	return 0;
}
