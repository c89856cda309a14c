/*
 * test_device.c - the device layer without a GPU: the host implementation,
 * config checks, and (where there is no GPU) the AUTO fallback to the
 * host with its reason.  The cuda implementation is tests/test_gpu.c.
 */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device_util.h"
#include "device_impl.h"

static void test_host_device(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_HOST, 1 * MIB + 100, 3,
					  64 * 1024);
	struct device_info info;
	struct device *d = NULL;
	char err[256] = "", msg[64];
	uint8_t *arena;
	double t0, ms, bw;
	size_t len;

	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	T_EQ(info.caps, 0);
	T_EQ(info.dl.device_type, kDLCPU);
	T_EQ(info.dl.device_id, 0);
	T_EQ(info.huge_pages, 0);           /* under 2 MiB: never tried */
	if (!info.arena_pinned)
		T_CONTAINS(info.fallbacks, "mlock failed: ");
	else
		T_EQ(info.fallbacks[0], '\0');
	check_arena(d, cfg.arena_bytes);
	arena = device_arena(d, &len);

	/* the host's batch memory is its own mirror */
	T_ASSERT(device_mirror_ptr(d, arena + len - 1) == arena + len - 1);
	T_ASSERT(device_mirror_ptr(d, arena) == NULL);
	T_EQ(device_copy_slot(d, 2, arena + len - 100, 100), 0);
	T_EQ(device_copy_slot(d, 0, arena, 0), 0);
	T_EQ(device_slot_wait_copied(d, 2), 0);
	T_EQ(device_slot_export(d, 2, 0), 0);
	T_EQ(device_slot_export(d, 2, -1), 0);
	T_EQ(device_slot_release(d, 2), 0);
	T_EQ(device_measure_h2d(d, 4096, 3, &bw), -SLUICE_ENODEVICE);
	T_ASSERT(bw == 0.0);
	T_EQ(device_last_error(d, msg, sizeof(msg)) > 0, 1);
	T_CONTAINS(msg, "no host-to-device link");
	msg[0] = '\0';
	T_EQ(device_measure_h2d(d, 0, 3, &bw), -EINVAL);
	T_EQ(device_compute(d, 0, -1.0), -EINVAL);
	T_EQ(device_compute(d, -1, 1.0), -EINVAL);

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
	T_EQ(device_compute(d, 0, 5.0), 0);
	ms = now_ms() - t0;
	T_ASSERT(ms >= 5.0);
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

/* Pages of [@p, @p + @len) resident now (mincore). */
static size_t resident_pages(void *p, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page;
	unsigned char *v = calloc(n, 1);
	size_t in = 0;

	T_ASSERT(v != NULL);
	T_EQ(mincore(p, len, v), 0);
	for (size_t i = 0; i < n; i++)
		in += v[i] & 1;
	free(v);
	return in;
}

/* The arena is faulted in at open whether or not mlock is allowed: a
 * fresh mapping has no page resident, arena_populate() makes them all
 * resident (the host device's path when RLIMIT_MEMLOCK refuses mlock);
 * an opened host device's arena is all resident, its time counted. */
static void test_arena_resident(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_HOST, 6 * MIB, 1, 4096);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct device_info info;
	struct device *d = NULL;
	struct arena a;
	char err[256] = "";
	size_t len;
	void *base;

	T_EQ(arena_map(&a, 6 * MIB), 0);
	T_EQ(resident_pages(a.base, a.map_len), 0);
	arena_populate(&a);
	T_EQ(resident_pages(a.base, a.map_len), a.map_len / page);
	arena_unmap(&a);

	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	base = device_arena(d, &len);
	T_EQ(resident_pages(base, len), (len + page - 1) / page);
	T_ASSERT(info.arena_resident_ns > 0);
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

/* Without a GPU: AUTO is the host with one clear reason; CUDA refuses. */
static void test_no_gpu(const char *why)
{
	struct device_config cfg = config(SLUICE_DEVICE_AUTO, MIB, 2, 4096);
	struct device_info info;
	struct device *d = NULL;
	char err[256] = "", want[300];

	T_EQ(device_open(&cfg, &d, err, sizeof(err)), 0);
	device_get_info(d, &info);
	T_EQ(info.caps, 0);
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

int main(void)
{
	char why_buf[200];
	const char *why;

	unsetenv("LOCAL_RANK");
	test_host_device();
	test_large_arena();
	test_arena_resident();
	test_bad_config();
	printf("host device: ok\n");
	why = no_gpu_reason(why_buf, sizeof(why_buf));
	if (why) {
		test_no_gpu(why);
		printf("no-GPU fallback: ok\n");
	} else {
		printf("a GPU is present: the no-GPU fallback is not reachable "
		       "here (tests/test_gpu.c covers the GPU)\n");
	}
	return 0;
}
