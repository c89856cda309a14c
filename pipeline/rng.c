/*
 * rng.c - the deterministic generator behind every shuffle: splitmix64
 * seeding xoshiro256**, and unbiased bounded draws.
 */
#include "rng.h"

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
	/* Hash the stream before combining it with the seed, so that nearby
	 * pairs like (seed 1, epoch 0) and (seed 0, epoch 1) get unrelated
	 * states.  Four splitmix outputs from distinct inputs are never all
	 * zero, which xoshiro needs. */
	uint64_t h = stream;
	uint64_t x = seed ^ splitmix64(&h);

	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl64(s[3], 45);
	return result;
}

/* Lemire's multiply-shift with rejection: unbiased, and the division only
 * runs in the rare case the low half lands in the biased zone.  Returns 0
 * for n == 0 (there is no valid answer; callers never ask). */
uint64_t rng_below(struct rng *r, uint64_t n)
{
	unsigned __int128 m;
	uint64_t low;

	if (n == 0)
		return 0;
	m = (unsigned __int128)rng_next(r) * n;
	low = (uint64_t)m;
	if (low < n) {
		uint64_t threshold = (0 - n) % n; /* 2^64 mod n */

		while (low < threshold) {
			m = (unsigned __int128)rng_next(r) * n;
			low = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}
