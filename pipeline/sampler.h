/*
 * sampler.h - which records, in which order, in which batch: a pure
 * function of (dataset block layout, seed, epoch, shuffle, rank,
 * world_size, batch_size, drop_last).  No I/O.
 */
#ifndef SLUICE_PIPELINE_SAMPLER_H
#define SLUICE_PIPELINE_SAMPLER_H

#include <stdint.h>

struct sampler_config {
	int shuffle;            /* enum sluice_shuffle */
	uint32_t window_blocks; /* W, for SHUFFLE_WINDOW */
	uint64_t seed;
	uint32_t batch_size;
	int drop_last;
	uint32_t rank;
	uint32_t world_size;
};

/*
 * The dataset seen as blocks: block b holds global records
 * [block_first[b], block_first[b + 1]).  nblocks + 1 entries, borrowed
 * for the sampler's lifetime.
 */
struct sampler {
	struct sampler_config cfg;
	uint64_t nblocks;
	const uint64_t *block_first;
	uint64_t nrecords;
	/* this rank's sequence for the current epoch */
	uint64_t epoch;
	uint64_t *order;        /* record indices, length per_rank */
	uint64_t per_rank;      /* records this rank delivers per epoch */
	uint64_t nbatches;
	/* scratch, allocated once */
	uint64_t *scratch;
};

/*
 * Epoch sequence: a permutation of all records by the shuffle mode
 * (seeded by seed and epoch only, so every rank computes the same one),
 * then split across ranks into equal contiguous parts: rank r takes
 * positions [r * per_rank, (r + 1) * per_rank), so each rank reads only
 * about 1/world_size of the blocks.  With drop_last the tail that does not
 * fill every rank is dropped, otherwise the sequence wraps around to its
 * start to fill the last part.  Within a rank, batches are consecutive
 * runs of batch_size; a last short batch is dropped with drop_last.
 */
int sampler_init(struct sampler *s, const struct sampler_config *cfg,
		 const uint64_t *block_first, uint64_t nblocks);
void sampler_destroy(struct sampler *s);

/* Compute the sequence of @epoch (allocation-free after init). */
void sampler_set_epoch(struct sampler *s, uint64_t epoch);

/* Records of batch @k of the current epoch: *@first points into
 * s->order, *@count is its length (batch_size, or less for a last one). */
void sampler_batch(const struct sampler *s, uint64_t k,
		   const uint64_t **first, uint32_t *count);

/* Deterministic 64-bit generator (splitmix64 seeding xoshiro256**). */
struct rng {
	uint64_t s[4];
};
void rng_seed(struct rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(struct rng *r);
uint64_t rng_below(struct rng *r, uint64_t n);   /* unbiased [0, n) */

#endif /* SLUICE_PIPELINE_SAMPLER_H */
