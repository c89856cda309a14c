/*
 * permutation.h - a keyed bijection over [0, n) evaluated one index at a
 * time: the i-th element of a random-looking permutation in O(1) time and
 * memory, with no per-element array.
 *
 * A Feistel network over the smallest power of two >= n (split into two
 * halves of floor/ceil bits, so unbalanced halves are fine), with cycle
 * walking: values that land outside [0, n) are permuted again until they
 * fall inside.  Because the domain is at most 2n, that takes fewer than
 * two rounds of the network on average.
 */
#ifndef SLUICE_PIPELINE_PERMUTATION_H
#define SLUICE_PIPELINE_PERMUTATION_H

#include <stdint.h>

#define PERM_ROUNDS 6   /* even: the halves end where they started */

struct perm {
	uint64_t n;
	uint64_t keys[PERM_ROUNDS];
	unsigned lo_bits, hi_bits; /* the two halves of ceil(log2 n) bits */
};

/* A permutation of [0, @n) chosen by @key (any 64-bit value). */
void perm_init(struct perm *p, uint64_t n, uint64_t key);

/* The image of @x (< n).  x >= n is returned unchanged. */
uint64_t perm_apply(const struct perm *p, uint64_t x);

/* A well-mixed 64-bit hash (the splitmix64 finalizer), for keys. */
uint64_t perm_mix64(uint64_t x);

#endif /* SLUICE_PIPELINE_PERMUTATION_H */
