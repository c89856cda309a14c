/*
 * xxh3_steps.h - private to gpu/: XXH3-64 of a long input (over 240
 * bytes, seed 0: the format's block checksum), cut where it can run in
 * parallel, for the device's checksums (checksum.cu) and the sim device.
 *
 * XXH3 folds its input into eight 64-bit accumulators, 1 KiB at a time
 * (a "step": 16 stripes of 64 bytes), and scrambles them after each
 * step.  What a step adds to an accumulator depends only on the step's
 * bytes and the secret, never on the accumulators: every step's sums can
 * be taken at once, by as many threads as there are steps, and only the
 * short add-and-scramble chain runs in order.  The arithmetic is the
 * algorithm's (xxhash.h, XXH3_hashLong_64b with the default secret); the
 * cut is ours, tested against libxxhash in tests/test_xxh3_steps.c.
 *
 * The secret is the library's default, taken at run time from
 * XXH3_generateSecret_fromSeed(seed 0), which returns it unchanged.
 * Little-endian hosts and devices only (x86-64, CUDA).
 */
#ifndef SLUICE_GPU_XXH3_STEPS_H
#define SLUICE_GPU_XXH3_STEPS_H

#include <stdint.h>

#ifdef __CUDACC__
#define XXH3S_FN static __host__ __device__ __forceinline__
#else
#define XXH3S_FN static inline
#endif

#define XXH3S_STEP 1024u        /* bytes between two scrambles */
#define XXH3S_STRIPE 64u
#define XXH3S_SECRET 192u       /* XXH3_SECRET_DEFAULT_SIZE */
#define XXH3S_MIDSIZE_MAX 240u  /* longer inputs take this path */

#define XXH3S_P32_1 0x9E3779B1u
#define XXH3S_P32_2 0x85EBCA77u
#define XXH3S_P32_3 0xC2B2AE3Du
#define XXH3S_P64_1 0x9E3779B185EBCA87ull
#define XXH3S_P64_2 0xC2B2AE3D27D4EB4Full
#define XXH3S_P64_3 0x165667B19E3779F9ull
#define XXH3S_P64_4 0x85EBCA77C2B2AE63ull
#define XXH3S_P64_5 0x27D4EB2F165667C5ull

/* The secret's bytes; 8-aligned, so a step's keys are whole words. */
struct xxh3s_secret {
	uint64_t w[XXH3S_SECRET / 8];
};

/* Accumulator @i's start (XXH3_INIT_ACC). */
XXH3S_FN uint64_t xxh3s_init(unsigned i)
{
	switch (i) {
	case 0: return XXH3S_P32_3;
	case 1: return XXH3S_P64_1;
	case 2: return XXH3S_P64_2;
	case 3: return XXH3S_P64_3;
	case 4: return XXH3S_P64_4;
	case 5: return XXH3S_P32_2;
	case 6: return XXH3S_P64_5;
	default: return XXH3S_P32_1;
	}
}

/* 8 little-endian bytes at any alignment. */
XXH3S_FN uint64_t xxh3s_read(const uint8_t *p)
{
	uint64_t v = 0;

	for (unsigned k = 0; k < 8; k++)
		v |= (uint64_t)p[k] << (8 * k);
	return v;
}

/* The input's word: aligned inputs load it at once. */
XXH3S_FN uint64_t xxh3s_load(const uint8_t *p, int aligned)
{
	return aligned ? *(const uint64_t *)(const void *)p : xxh3s_read(p);
}

/*
 * Lane @i of @nstripes stripes from @p (at most 16: one step): the
 * products it adds to accumulator i, and the words it adds to
 * accumulator i ^ 1 (XXH3_accumulate_512, summed over the stripes).
 */
XXH3S_FN void xxh3s_lane(const uint8_t *p, unsigned nstripes, int aligned,
			 const struct xxh3s_secret *s, unsigned i,
			 uint64_t *prod, uint64_t *data)
{
	uint64_t pr = 0, d = 0;

	for (unsigned n = 0; n < nstripes; n++) {
		uint64_t x = xxh3s_load(p + (uint64_t)n * XXH3S_STRIPE + 8 * i,
					aligned);
		uint64_t key = x ^ s->w[n + i];

		pr += (uint64_t)(uint32_t)key * (key >> 32);
		d += x;
	}
	*prod = pr;
	*data = d;
}

/* After a step's sums are added: XXH3_scrambleAcc, accumulator @i. */
XXH3S_FN uint64_t xxh3s_scramble(uint64_t acc, const struct xxh3s_secret *s,
				 unsigned i)
{
	acc ^= acc >> 47;
	acc ^= s->w[(XXH3S_SECRET - XXH3S_STRIPE) / 8 + i];
	return acc * XXH3S_P32_1;
}

/* Steps the chain scrambles after: the last (partial or whole) 1 KiB is
 * taken by xxh3s_finish. */
XXH3S_FN uint64_t xxh3s_steps(uint64_t len)
{
	return (len - 1) / XXH3S_STEP;
}

XXH3S_FN uint64_t xxh3s_fold64(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
	return (a * b) ^ __umul64hi(a, b);
#else
	unsigned __int128 m = (unsigned __int128)a * b;

	return (uint64_t)m ^ (uint64_t)(m >> 64);
#endif
}

/* One stripe into all eight accumulators, the secret read at byte @at. */
XXH3S_FN void xxh3s_stripe(uint64_t acc[8], const uint8_t *p,
			   const struct xxh3s_secret *s, unsigned at)
{
	const uint8_t *key = (const uint8_t *)s->w + at;

	for (unsigned i = 0; i < 8; i++) {
		uint64_t x = xxh3s_read(p + 8 * i);
		uint64_t k = x ^ xxh3s_read(key + 8 * i);

		acc[i ^ 1] += x;
		acc[i] += (uint64_t)(uint32_t)k * (k >> 32);
	}
}

/*
 * The accumulators after xxh3s_steps(@len) steps -> the hash: the last
 * step's whole stripes, the input's last 64 bytes, the merge and the
 * avalanche (XXH3_hashLong_64b's end).
 */
XXH3S_FN uint64_t xxh3s_finish(uint64_t acc[8], const uint8_t *p,
			       uint64_t len, const struct xxh3s_secret *s)
{
	const uint8_t *secret = (const uint8_t *)s->w;
	uint64_t done = xxh3s_steps(len) * XXH3S_STEP;
	unsigned nstripes = (unsigned)((len - 1 - done) / XXH3S_STRIPE);
	uint64_t h = len * XXH3S_P64_1;

	for (unsigned n = 0; n < nstripes; n++)
		xxh3s_stripe(acc, p + done + (uint64_t)n * XXH3S_STRIPE, s,
			     8 * n);
	xxh3s_stripe(acc, p + len - XXH3S_STRIPE, s,
		     XXH3S_SECRET - XXH3S_STRIPE - 7);
	for (unsigned i = 0; i < 4; i++)
		h += xxh3s_fold64(acc[2 * i] ^ xxh3s_read(secret + 11 + 16 * i),
				  acc[2 * i + 1] ^
					  xxh3s_read(secret + 11 + 16 * i + 8));
	h ^= h >> 37;
	h *= 0x165667919E3779F9ull;
	return h ^ (h >> 32);
}

#ifndef __CUDACC__
/* The same cut, run in order on the host: the sim device's checksum
 * (and the reference the tests hold the kernel's cut to). */
static inline uint64_t xxh3s_hash_host(const void *in, uint64_t len,
				       const struct xxh3s_secret *s)
{
	const uint8_t *p = (const uint8_t *)in;
	int aligned = ((uintptr_t)p & 7u) == 0;
	uint64_t acc[8], nsteps = xxh3s_steps(len);

	for (unsigned i = 0; i < 8; i++)
		acc[i] = xxh3s_init(i);
	for (uint64_t k = 0; k < nsteps; k++) {
		uint64_t prod[8], data[8];

		for (unsigned i = 0; i < 8; i++)
			xxh3s_lane(p + k * XXH3S_STEP, XXH3S_STEP / XXH3S_STRIPE,
				   aligned, s, i, &prod[i], &data[i]);
		for (unsigned i = 0; i < 8; i++)
			acc[i] = xxh3s_scramble(acc[i] + prod[i] + data[i ^ 1],
						s, i);
	}
	return xxh3s_finish(acc, p, len, s);
}
#endif

#endif /* SLUICE_GPU_XXH3_STEPS_H */
