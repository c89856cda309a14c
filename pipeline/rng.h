/*
 * rng.h - a deterministic 64-bit generator (splitmix64 seeding
 * xoshiro256**): the same (seed, stream) gives the same draws everywhere.
 */
#ifndef SLUICE_PIPELINE_RNG_H
#define SLUICE_PIPELINE_RNG_H

#include <stdint.h>

struct rng {
	uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(struct rng *r);
uint64_t rng_below(struct rng *r, uint64_t n);   /* unbiased [0, n) */

#endif /* SLUICE_PIPELINE_RNG_H */
