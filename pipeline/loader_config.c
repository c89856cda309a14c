/*
 * loader_config.c - a loader configuration's defaults and its check at
 * open: values left unset taken from the environment (torchrun's RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and the host's CPUs.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader.h"

int env_off(const char *name)
{
	const char *v = getenv(name);

	return v && strcmp(v, "0") == 0;
}

#define MAX_DECODE_THREADS 64
/* The default's ceiling: past it, more workers mostly contend for memory
 * bandwidth (and each one adds two blocks of read-ahead). */
#define DEFAULT_DECODE_THREADS_MAX 32

SLUICE_API void sluice_loader_config_init(struct sluice_loader_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->batch_size = 256;
	cfg->shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg->window_blocks = 16;
	cfg->rank = -1;
	cfg->world_size = -1;
	cfg->prefetch_depth = 4;
	cfg->queue_depth = 64;
	cfg->device = SLUICE_DEVICE_AUTO;
	cfg->device_id = -1;
	cfg->verify = 1;
	cfg->direct_io = SLUICE_DIRECT_IO_AUTO;
}

/* Every CPU this process may run on, shared with the other ranks of this
 * host.  It was at most 8: on a 16-core host zstd data then reached
 * 0.86x what all of them decompress. */
static uint32_t default_decode_threads(void)
{
	cpu_set_t set;
	long n = sched_getaffinity(0, sizeof(set), &set) == 0
		? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);

	n /= local_ranks();
	return n < 1 ? 1 : n > DEFAULT_DECODE_THREADS_MAX
		? DEFAULT_DECODE_THREADS_MAX : (uint32_t)n;
}

static int env_int(const char *name, int fallback)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !*v)
		return fallback;
	x = strtol(v, &end, 10);
	return (*end || x < 0 || x > 1 << 20) ? fallback : (int)x;
}

uint32_t local_ranks(void)
{
	int ranks = env_int("LOCAL_WORLD_SIZE", 1);

	return ranks > 1 ? (uint32_t)ranks : 1;
}

int loader_config_check(struct sluice_loader_config *cfg, char *err,
			size_t errlen)
{
	if (cfg->rank < 0)
		cfg->rank = env_int("RANK", 0);
	if (cfg->world_size <= 0)
		cfg->world_size = env_int("WORLD_SIZE", 1);
	if (cfg->world_size < 1)
		cfg->world_size = 1;
	if (cfg->device_id < 0)
		cfg->device_id = env_int("LOCAL_RANK", 0);
	if ((int)cfg->direct_io == -1)   /* AUTO before 0.2 */
		cfg->direct_io = SLUICE_DIRECT_IO_AUTO;
	if (cfg->decode_threads == 0)
		cfg->decode_threads = default_decode_threads();
	if (cfg->batch_size == 0 || cfg->batch_size > (1u << 24) ||
	    cfg->prefetch_depth == 0 || cfg->prefetch_depth > 1024 ||
	    cfg->decode_threads > MAX_DECODE_THREADS ||
	    cfg->shuffle < SLUICE_SHUFFLE_NONE ||
	    cfg->shuffle > SLUICE_SHUFFLE_FULL ||
	    (cfg->shuffle == SLUICE_SHUFFLE_WINDOW && cfg->window_blocks == 0) ||
	    cfg->rank >= cfg->world_size ||
	    cfg->device_gather < SLUICE_DEVICE_GATHER_AUTO ||
	    cfg->device_gather > SLUICE_DEVICE_GATHER_OFF ||
	    cfg->range_reads < SLUICE_RANGE_READS_AUTO ||
	    cfg->range_reads > SLUICE_RANGE_READS_OFF ||
	    cfg->direct_io < SLUICE_DIRECT_IO_AUTO ||
	    cfg->direct_io > SLUICE_DIRECT_IO_OFF) {
		snprintf(err, errlen, "invalid loader configuration (batch_size %u, prefetch %u, decode_threads %u, shuffle %d, rank %d of %d, device_gather %d, range_reads %d, direct_io %d)",
			 cfg->batch_size, cfg->prefetch_depth,
			 cfg->decode_threads, cfg->shuffle, cfg->rank,
			 cfg->world_size, (int)cfg->device_gather,
			 (int)cfg->range_reads, (int)cfg->direct_io);
		return -EINVAL;
	}
	if (cfg->queue_depth == 0)
		cfg->queue_depth = 64;
	return 0;
}
