/*
 * test_xxh3_steps.c - the device checksum's cut of XXH3 (gpu/xxh3_steps.h)
 * gives libxxhash's XXH3_64bits: at every length from 241 bytes (the
 * first long input) past a few steps, at step and stripe edges, at a
 * block's size, and from inputs that start off 8-byte alignment.  The
 * secret is the library's own, as the device takes it.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_generateSecret_fromSeed */
#include <xxhash.h>

#include "t.h"
#include "xxh3_steps.h"

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void check(const uint8_t *p, uint64_t len,
		  const struct xxh3s_secret *s)
{
	uint64_t want = XXH3_64bits(p, len), got = xxh3s_hash_host(p, len, s);

	if (want != got)
		T_FAIL_AT("length %llu at alignment %u: %016llx, libxxhash %016llx",
			  (unsigned long long)len, (unsigned)((uintptr_t)p & 7),
			  (unsigned long long)got, (unsigned long long)want);
}

int main(void)
{
	const uint64_t big = (uint64_t)3 << 20;
	struct xxh3s_secret s;
	uint8_t *buf = malloc(big + 16);
	uint64_t seed = 0x9e3779b97f4a7c15ull, edges[] = {
		241, 255, 256, 1023, 1024, 1025, 1087, 1088, 1089, 2047,
		2048, 2049, 64u << 10, (64u << 10) + 1, (1u << 20) - 1,
		1u << 20, big - 37, big,
	};

	T_ASSERT(buf != NULL);
	XXH3_generateSecret_fromSeed(s.w, 0);
	for (uint64_t k = 0; k < big + 16; k++)
		buf[k] = (uint8_t)next_rand(&seed);

	for (uint64_t len = XXH3S_MIDSIZE_MAX + 1; len <= 5000; len++)
		check(buf, len, &s);
	for (size_t k = 0; k < sizeof(edges) / sizeof(edges[0]); k++)
		for (unsigned a = 0; a < 8; a++)
			check(buf + a, edges[k], &s);
	for (int k = 0; k < 200; k++) {
		uint64_t len = XXH3S_MIDSIZE_MAX + 1 +
			       next_rand(&seed) % (big - XXH3S_MIDSIZE_MAX);

		check(buf + (next_rand(&seed) & 15), len, &s);
	}
	/* All bytes alike (zeros, ones): the sums wrap, the products vanish. */
	memset(buf, 0, big);
	check(buf, big, &s);
	memset(buf, 0xff, big);
	check(buf, big, &s);
	free(buf);
	printf("xxh3 steps: every length matches libxxhash\n");
	return 0;
}
