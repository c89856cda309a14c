/*
 * io_sizes.h - what a dataset's blocks take in a host loader's io
 * memory, for tests that size a cache_bytes or memory_bytes by it.
 */
#ifndef SLUICE_TESTS_IO_SIZES_H
#define SLUICE_TESTS_IO_SIZES_H

#include "t.h"
#include "sluice.h"
#include "sluice_tools.h"
#include "loader.h"     /* -Ipipeline: block_io_bytes, zstd_fetched */

/*
 * Every block of @ds in the cache of a host loader with two decode
 * workers (a zstd block that its workers read through a staging buffer
 * takes only its decoded bytes: c->zstd_fetched, which depends on the
 * page cache, so a loader is opened to tell); the largest block's in
 * *@max, and their count in *@n.
 */
static inline uint64_t host_dataset_io_bytes(sluice_dataset *ds,
					     uint64_t *max, uint64_t *n)
{
	const struct dataset *d = dataset_table(ds);
	struct sluice_loader_config cfg;
	struct loader_core sizes = { 0 };
	sluice_loader *probe = NULL;
	uint64_t sum = 0;

	sluice_loader_config_init(&cfg);
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	T_OK(sluice_loader_open(ds, &cfg, &probe));
	sizes.zstd_fetched = probe->core->zstd_fetched;
	sluice_loader_close(probe);
	*max = *n = 0;
	for (uint32_t s = 0; s < d->nshards; s++)
		for (uint64_t b = 0; b < d->shards[s].block_count; b++) {
			uint64_t k = block_io_bytes(&sizes,
						    &d->shards[s].blocks[b]);

			sum += k;
			*max = k > *max ? k : *max;
			++*n;
		}
	return sum;
}

#endif /* SLUICE_TESTS_IO_SIZES_H */
