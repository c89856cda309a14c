/*
 * loader_fixture.h - datasets whose every byte is a function of the record
 * index, so a test can check any delivered record without a reference
 * copy.  Fields: "x" int32[4] (fixed), "v" uint8[-1] (variable, length
 * idx % 37, possibly 0, unless the test defines FX_VLEN first).
 */
#ifndef SLUICE_TESTS_LOADER_FIXTURE_H
#define SLUICE_TESTS_LOADER_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice.h"
#include "t.h"
#include "t_field.h"

#ifndef FX_VLEN
#define FX_VLEN(i) ((uint64_t)((i) % 37))
#endif

static inline void fx_x(uint64_t i, int32_t out[4])
{
	for (int k = 0; k < 4; k++)
		out[k] = (int32_t)(i * 4 + (uint64_t)k) ^ 0x5a5a;
}

static inline uint8_t fx_v(uint64_t i, uint64_t k)
{
	return (uint8_t)(i * 131 + k * 7 + 1);
}

/* Write records [@first, @first + @n) into @dir; @level 0 raw, else
 * zstd.  (A mixture of datasets written as consecutive ranges numbers
 * its records as the fixture does.) */
static inline void fx_write_range(const char *dir, uint64_t first, uint64_t n,
				  uint64_t block_size, int level,
				  uint64_t per_shard)
{
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t *v = NULL;
	uint64_t vcap = 0;
	int32_t x[4];

	f[0] = t_field("x", (DLDataType){ kDLInt, 32, 1 }, 4);
	f[1] = t_field("v", (DLDataType){ kDLUInt, 8, 1 }, -1);
	sluice_writer_config_init(&wc);
	wc.block_size = block_size;
	wc.compression_level = level;
	wc.records_per_shard = per_shard;
	wc.threads = 2;
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (uint64_t i = first; i < first + n; i++) {
		const void *vals[2] = { x, v };
		uint64_t lens[2] = { sizeof(x), FX_VLEN(i) };

		if (FX_VLEN(i) >= vcap) {
			vcap = FX_VLEN(i) + 64;
			v = realloc(v, vcap);
			T_ASSERT(v != NULL);
			vals[1] = v;
		}
		fx_x(i, x);
		for (uint64_t k = 0; k < FX_VLEN(i); k++)
			v[k] = fx_v(i, k);
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(v);
}

/* Write @n records into @dir; @level 0 raw, else zstd. */
static inline void fx_write(const char *dir, uint64_t n, uint64_t block_size,
			    int level, uint64_t per_shard)
{
	fx_write_range(dir, 0, n, block_size, level, per_shard);
}

static inline char *fx_tmpdir(void)
{
	char *d = strdup("/tmp/sluice-test-XXXXXX");

	T_ASSERT(d && mkdtemp(d));
	return d;
}

static inline void fx_rmrf(const char *dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	T_EQ(system(cmd), 0);
}

/* Take tensor @name of @b, check its device/dtype, return its data. */
static inline const void *fx_tensor(sluice_batch *b, const char *name,
				    DLManagedTensor **keep, int64_t *shape0)
{
	DLManagedTensor *t = NULL;

	T_OK(sluice_batch_tensor(b, name, -1, &t));
	T_EQ(t->dl_tensor.device.device_type, kDLCPU);
	*shape0 = t->dl_tensor.shape[0];
	*keep = t;
	return t->dl_tensor.data;
}

/*
 * Check every record of @b against the fixture and mark it in @seen
 * (which counts deliveries per index).  @return: the record count.
 */
static inline uint32_t fx_check_batch(sluice_batch *b, uint32_t *seen)
{
	DLManagedTensor *tx, *tv, *to;
	int64_t nx, nv, no;
	const int32_t *x = fx_tensor(b, "x", &tx, &nx);
	const uint8_t *v = fx_tensor(b, "v", &tv, &nv);
	const int64_t *off = fx_tensor(b, "v.offsets", &to, &no);
	const uint64_t *idx = sluice_batch_indices(b);
	uint32_t n = sluice_batch_size(b);

	T_EQ(nx, n);
	T_EQ(no, n + 1);
	T_EQ(off[0], 0);
	T_EQ(off[n], nv);
	for (uint32_t r = 0; r < n; r++) {
		int32_t want[4];

		fx_x(idx[r], want);
		T_MEMEQ(x + 4 * r, want, sizeof(want));
		T_EQ(off[r + 1] - off[r], FX_VLEN(idx[r]));
		for (uint64_t k = 0; k < FX_VLEN(idx[r]); k++)
			if (v[off[r] + (int64_t)k] != fx_v(idx[r], k))
				T_FAIL_AT("record %llu byte %llu differs",
					  (unsigned long long)idx[r],
					  (unsigned long long)k);
		if (seen)
			seen[idx[r]]++;
	}
	tx->deleter(tx);
	tv->deleter(tv);
	to->deleter(to);
	return n;
}

#endif /* SLUICE_TESTS_LOADER_FIXTURE_H */
