/*
 * test_sim_device.c - the simulated device (gpu/sim_device.c) through
 * gpu/device.h, without the loader: what it says it can do, that its
 * memory is apart from the arena and poisoned until a copy lands, that a
 * consumer stream reads after the copy when it waited on the export, that
 * a release orders the poison after the consumer's queued reads, uploads
 * and gathers, checksums taken from what the uploads left on the device,
 * stream 0 (the caller waits), and the environment's checks.
 *
 * The seed is printed on failure; SLUICE_SIM_SEED=N reruns it,
 * SLUICE_SIM_STRESS=K runs K seeds.
 */
#include <errno.h>
#include <xxhash.h>

#include "device_util.h"
#include "device_impl.h"
#include "sim_util.h"

#define ARENA (1 * MIB)
#define MIRROR (64 * 1024)
#define LEN 4096

struct snapshot {
	const uint8_t *from;
	uint8_t bytes[LEN];
};

static void take_snapshot(void *arg)
{
	struct snapshot *s = arg;

	memcpy(s->bytes, s->from, LEN);
}

static int all_poison(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != SIM_POISON)
			return 0;
	return 1;
}

static struct device *open_sim_device(struct device_config *cfg)
{
	struct device_info info;
	struct device *d = NULL;
	char err[256] = "";

	if (device_open(cfg, &d, err, sizeof(err)))
		T_FAIL_AT("device_open: %s", err);
	device_get_info(d, &info);
	/* checksums are taken from the io mirror: only with one */
	T_EQ(info.caps, DEVICE_CAP_MIRROR | DEVICE_CAP_GATHER |
			DEVICE_CAP_STREAMS |
			(cfg->io_mirror_bytes ? DEVICE_CAP_CHECKSUM : 0));
	T_EQ(info.dl.device_type, kDLCPU);
	T_CONTAINS(info.fallbacks, "simulated device");
	return d;
}

static void test_copy_export_release(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_AUTO, ARENA, 2, MIRROR);
	struct device *d = open_sim_device(&cfg);
	static struct snapshot snap, later;
	uint8_t *host, *dev, want[LEN];
	char msg[256];
	int64_t s;

	host = (uint8_t *)device_arena(d, NULL) + cfg.mirror_offset;
	dev = device_mirror_ptr(d, host);
	T_ASSERT(dev != NULL && dev != host);
	T_ASSERT(all_poison(dev, MIRROR));      /* nothing landed yet */
	s = sim_stream_create(sim_seed * 3 + 1, 300);
	T_ASSERT(s != 0);

	/* A consumer that waits on the export reads the copy. */
	fill(host, LEN, 1);
	memcpy(want, host, LEN);
	T_OK(device_copy_slot(d, 0, host, LEN));
	T_OK(device_slot_export(d, 0, s));
	snap.from = dev;
	T_OK(sim_stream_call(s, take_snapshot, &snap));
	/* Its reads queued after a slow "kernel" still see the batch, though
	 * the slot is released at once: the poison waits for them. */
	T_OK(sim_stream_call(s, sim_sleep_fn, (void *)(uintptr_t)3000));
	later.from = dev;
	T_OK(sim_stream_call(s, take_snapshot, &later));
	T_OK(device_slot_release(d, 0));
	T_OK(device_slot_wait_copied(d, 0));
	T_OK(sim_stream_synchronize(s));
	T_MEMEQ(snap.bytes, want, LEN);
	T_MEMEQ(later.bytes, want, LEN);
	/* Once the copy stream passed the release, the bytes are poison. */
	T_OK(device_copy_slot(d, 1, host + LEN, 16));
	T_OK(device_slot_wait_copied(d, 1));
	T_ASSERT(all_poison(dev, LEN));

	/* Stream 0: the caller is the consumer and reads on return. */
	fill(host, LEN, 2);
	memcpy(want, host, LEN);
	T_OK(device_copy_slot(d, 0, host, LEN));
	T_OK(device_slot_export(d, 0, 0));
	T_MEMEQ(dev, want, LEN);
	T_OK(device_slot_release(d, 0));

	/* After wait_copied the host memory may be written: the copy has
	 * read it. */
	fill(host, LEN, 3);
	memcpy(want, host, LEN);
	T_OK(device_copy_slot(d, 1, host, LEN));
	T_OK(device_slot_wait_copied(d, 1));
	memset(host, 0, LEN);
	T_MEMEQ(dev, want, LEN);
	T_OK(device_slot_release(d, 1));

	/* Not a stream of ours: refused, with a message. */
	T_EQ(device_slot_export(d, 0, 12345), -EINVAL);
	device_last_error(d, msg, sizeof(msg));
	T_CONTAINS(msg, "not a simulated stream");
	T_EQ(device_slot_export(d, 0, -1), 0);  /* no synchronisation */
	sim_stream_destroy(s);
	T_EQ(sim_stream_call(s, take_snapshot, &snap), -EINVAL);
	device_close(d);
}

static void test_upload_gather(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_AUTO, ARENA, 2, MIRROR);
	struct gather_run runs[3];
	struct device *d;
	uint8_t *arena, *dev, io[8192], zeros[300] = { 0 };

	cfg.io_mirror_bytes = 256 * 1024;
	cfg.gather_runs_max = 3;
	d = open_sim_device(&cfg);
	arena = device_arena(d, NULL);
	dev = device_mirror_ptr(d, arena + cfg.mirror_offset);
	fill(arena, sizeof(io), 4);
	memcpy(io, arena, sizeof(io));
	T_OK(device_upload(d, arena, sizeof(io)));
	memset(arena, 0, sizeof(io));   /* complete on return: reusable */
	runs[0] = (struct gather_run){ 0, cfg.mirror_offset + 100, 1000 };
	runs[1] = (struct gather_run){ 5000, cfg.mirror_offset + 2000, 77 };
	/* no source: zeros (a padded row's tail) */
	runs[2] = (struct gather_run){ GATHER_ZEROS, cfg.mirror_offset + 2077,
				       300 };
	T_OK(device_gather_slot(d, 0, runs, 3));
	T_OK(device_slot_export(d, 0, 0));
	T_MEMEQ(dev + 100, io, 1000);
	T_MEMEQ(dev + 2000, io + 5000, 77);
	T_MEMEQ(dev + 2077, zeros, sizeof(zeros));
	T_ASSERT(all_poison(dev + 2377, 100));
	T_ASSERT(all_poison(dev, 100));         /* not written by the runs */
	T_ASSERT(all_poison(dev + 1100, 900));
	T_OK(device_slot_release(d, 0));
	/* an upload after the gather waits for it */
	fill(arena, sizeof(io), 5);
	T_OK(device_upload(d, arena, sizeof(io)));
	T_OK(device_slot_wait_copied(d, 0));
	device_close(d);
}

/* The checksum is the device's copy's: what the uploads put there. */
static void test_checksum(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_AUTO, ARENA, 2, MIRROR);
	struct device *d;
	uint8_t *arena;
	uint64_t sum = 0, want;
	size_t len = 3 * 1024 + 5;

	cfg.io_mirror_bytes = 256 * 1024;
	cfg.gather_runs_max = 2;
	d = open_sim_device(&cfg);
	arena = device_arena(d, NULL);
	fill(arena, len + 8, 6);
	want = XXH3_64bits(arena + 3, len);
	/* not uploaded: the device holds poison */
	T_OK(device_checksum(d, arena + 3, len, &sum));
	T_NE(sum, want);
	T_OK(device_upload(d, arena, len + 8));
	T_OK(device_checksum(d, arena + 3, len, &sum));
	T_EQ(sum, want);
	/* changed on the host since: the device's copy still counts */
	arena[100] ^= 1;
	T_OK(device_checksum(d, arena + 3, len, &sum));
	T_EQ(sum, want);
	/* short inputs are the CPU's; nothing outside the io mirror */
	T_EQ(device_checksum(d, arena, 240, &sum), -EINVAL);
	T_EQ(device_checksum(d, arena + cfg.io_mirror_bytes - 1000, 2000, &sum),
	     -EINVAL);
	device_close(d);
	/* without an io mirror there is nothing to take it from */
	cfg.io_mirror_bytes = 0;
	cfg.gather_runs_max = 0;
	d = open_sim_device(&cfg);
	T_EQ(device_checksum(d, device_arena(d, NULL), len, &sum), -ENOTSUP);
	device_close(d);
}

static void test_environment(void)
{
	struct device_config cfg = config(SLUICE_DEVICE_AUTO, ARENA, 2, MIRROR);
	struct device_info info;
	struct device *d = NULL;
	char err[256] = "";
	uint64_t want;

	T_OK(setenv("SLUICE_DEVICE_SIM", "seven", 1) ? -1 : 0);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	T_CONTAINS(err, "SLUICE_DEVICE_SIM=\"seven\"");
	sim_use_seed(sim_seed);
	T_OK(setenv("SLUICE_SIM_DELAY_US", "2000000", 1) ? -1 : 0);
	T_EQ(device_open(&cfg, &d, err, sizeof(err)), -EINVAL);
	T_CONTAINS(err, "SLUICE_SIM_DELAY_US");
	T_OK(unsetenv("SLUICE_SIM_DELAY_US") ? -1 : 0);
	/* kind HOST stays the host */
	cfg.kind = SLUICE_DEVICE_HOST;
	T_OK(device_open(&cfg, &d, err, sizeof(err)));
	device_get_info(d, &info);
	T_EQ(info.caps, 0);
	T_EQ(device_checksum(d, device_arena(d, NULL), 4096, &want), -ENOTSUP);
	device_close(d);
}

int main(void)
{
	uint64_t seed = sim_first_seed();
	unsigned rounds = sim_rounds(3);

	for (unsigned round = 0; round < rounds; round++) {
		sim_use_seed(seed + round);
		test_copy_export_release();
		test_upload_gather();
		test_checksum();
	}
	test_environment();
	printf("%u seed(s) from %llu: ok\n", rounds, (unsigned long long)seed);
	sim_done();
	return 0;
}
