/*
 * sampler.c - the epoch's record order: shuffle modes, rank split, batches.
 *
 * Every rank builds the same global sequence from (seed, epoch) alone, then
 * keeps its contiguous part, so ranks agree without talking to each other.
 *
 * Memory (8 bytes per record, allocated once in sampler_init):
 *   scratch: nrecords entries for the global sequence, plus nblocks entries
 *            for the shuffled block order in block and window modes;
 *   order:   per_rank entries, this rank's part.
 * So one rank of a 300M-record dataset holds about 2.4 GB of scratch plus
 * 2.4 GB / world_size of order.
 *
 * Counts: per_rank = floor(n / world) with drop_last (the tail that does not
 * fill every rank is dropped), else ceil(n / world) with the last parts
 * wrapping to the start of the sequence.  nbatches = per_rank / batch_size
 * with drop_last (then the rank delivers nbatches * batch_size records,
 * fewer than per_rank), else rounded up.
 */
#include "sampler.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

/* ------------------------------------------------------------------ */
/* The generator                                                       */
/* ------------------------------------------------------------------ */

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

static void shuffle_range(struct rng *r, uint64_t *a, uint64_t n)
{
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = rng_below(r, i);
		uint64_t tmp = a[i - 1];

		a[i - 1] = a[j];
		a[j] = tmp;
	}
}

static void fill_identity(uint64_t *a, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		a[i] = i;
}

/* ------------------------------------------------------------------ */
/* The sampler                                                         */
/* ------------------------------------------------------------------ */

static int shuffles_blocks(int shuffle)
{
	return shuffle == SLUICE_SHUFFLE_BLOCK ||
	       shuffle == SLUICE_SHUFFLE_WINDOW;
}

static int config_valid(const struct sampler_config *cfg)
{
	if (cfg->batch_size == 0 || cfg->world_size == 0 ||
	    cfg->rank >= cfg->world_size)
		return 0;
	switch (cfg->shuffle) {
	case SLUICE_SHUFFLE_NONE:
	case SLUICE_SHUFFLE_BLOCK:
	case SLUICE_SHUFFLE_FULL:
		return 1;
	case SLUICE_SHUFFLE_WINDOW:
		return cfg->window_blocks > 0;
	default:
		return 0;
	}
}

/* n records as a uint64_t array, or NULL when the size overflows. */
static uint64_t *alloc_u64(uint64_t n)
{
	if (n > SIZE_MAX / sizeof(uint64_t))
		return NULL;
	/* never malloc(0): NULL must mean failure */
	return malloc(n ? (size_t)n * sizeof(uint64_t) : 1);
}

int sampler_init(struct sampler *s, const struct sampler_config *cfg,
		 const uint64_t *block_first, uint64_t nblocks)
{
	uint64_t n = 0, world, scratch_len;

	if (!s)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	if (!cfg || !config_valid(cfg) || (nblocks > 0 && !block_first))
		return -EINVAL;
	if (block_first) {
		if (block_first[0] != 0)
			return -EINVAL;
		for (uint64_t b = 0; b < nblocks; b++)
			if (block_first[b + 1] < block_first[b])
				return -EINVAL;
		n = block_first[nblocks];
	}

	s->cfg = *cfg;
	s->nblocks = nblocks;
	s->block_first = block_first;
	s->nrecords = n;

	world = cfg->world_size;
	if (cfg->drop_last)
		s->per_rank = n / world;
	else
		s->per_rank = n / world + (n % world != 0);
	s->nbatches = s->per_rank / cfg->batch_size;
	if (!cfg->drop_last && s->per_rank % cfg->batch_size)
		s->nbatches++;

	scratch_len = n;
	if (shuffles_blocks(cfg->shuffle)) {
		if (nblocks > UINT64_MAX - n)
			return -ENOMEM;
		scratch_len += nblocks;
	}
	s->scratch = alloc_u64(scratch_len);
	s->order = alloc_u64(s->per_rank);
	if (!s->scratch || !s->order) {
		sampler_destroy(s);
		return -ENOMEM;
	}
	sampler_set_epoch(s, 0);
	return 0;
}

void sampler_destroy(struct sampler *s)
{
	if (!s)
		return;
	free(s->order);
	free(s->scratch);
	s->order = NULL;
	s->scratch = NULL;
	s->per_rank = 0;
	s->nbatches = 0;
}

/*
 * Block and window modes: lay the records out block by block in shuffled
 * block order; in window mode each run of W shuffled blocks (the last run
 * may be shorter) is then shuffled in place, so every block belongs to one
 * window and is read once per epoch.
 */
static void build_block_sequence(struct sampler *s, struct rng *r,
				 uint64_t *seq)
{
	uint64_t *blocks = seq + s->nrecords;
	uint64_t nblocks = s->nblocks, pos = 0;
	uint64_t per_window = nblocks;

	if (s->cfg.shuffle == SLUICE_SHUFFLE_WINDOW)
		per_window = s->cfg.window_blocks;

	fill_identity(blocks, nblocks);
	shuffle_range(r, blocks, nblocks);
	for (uint64_t w = 0; w < nblocks; w += per_window) {
		uint64_t wend = nblocks - w < per_window ? nblocks : w + per_window;
		uint64_t start = pos;

		for (uint64_t i = w; i < wend; i++) {
			uint64_t b = blocks[i];

			for (uint64_t rec = s->block_first[b];
			     rec < s->block_first[b + 1]; rec++)
				seq[pos++] = rec;
		}
		if (s->cfg.shuffle == SLUICE_SHUFFLE_WINDOW)
			shuffle_range(r, seq + start, pos - start);
	}
}

void sampler_set_epoch(struct sampler *s, uint64_t epoch)
{
	uint64_t *seq = s->scratch;
	uint64_t n = s->nrecords, start;
	struct rng r;

	s->epoch = epoch;
	if (n == 0)
		return;
	rng_seed(&r, s->cfg.seed, epoch);
	switch (s->cfg.shuffle) {
	case SLUICE_SHUFFLE_BLOCK:
	case SLUICE_SHUFFLE_WINDOW:
		build_block_sequence(s, &r, seq);
		break;
	case SLUICE_SHUFFLE_FULL:
		fill_identity(seq, n);
		shuffle_range(&r, seq, n);
		break;
	default:
		fill_identity(seq, n);
		break;
	}

	/* rank * per_rank <= n + world: no overflow for any n we can hold */
	start = (uint64_t)s->cfg.rank * s->per_rank;
	for (uint64_t i = 0; i < s->per_rank; i++) {
		uint64_t p = start + i;

		s->order[i] = seq[p < n ? p : p % n];
	}
}

void sampler_batch(const struct sampler *s, uint64_t k,
		   const uint64_t **first, uint32_t *count)
{
	uint64_t off, left;

	if (k >= s->nbatches) {
		*first = NULL;
		*count = 0;
		return;
	}
	off = k * s->cfg.batch_size; /* k < nbatches: at most per_rank */
	left = s->per_rank - off;
	*first = s->order + off;
	*count = left < s->cfg.batch_size ? (uint32_t)left : s->cfg.batch_size;
}
