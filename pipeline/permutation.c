/*
 * permutation.c - the keyed Feistel bijection of permutation.h.
 *
 * Each round maps (L, R) of (a, b) bits to (R, L ^ F(R) mod 2^a), which is
 * invertible whatever F is, and swaps the halves' widths; with an even
 * number of rounds the value keeps its layout, so the network is a
 * permutation of [0, 2^k).  Cycle walking restricts it to [0, n): the
 * orbit of a value below n returns below n (at the latest to the value
 * itself), so the walk ends, and distinct inputs give distinct outputs.
 */
#include "permutation.h"

uint64_t perm_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

void perm_init(struct perm *p, uint64_t n, uint64_t key)
{
	/* bits = ceil(log2 n): the domain [0, 2^bits) holds n values */
	unsigned bits = n <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(n - 1);

	p->n = n;
	p->hi_bits = bits / 2;
	p->lo_bits = bits - p->hi_bits;
	for (int i = 0; i < PERM_ROUNDS; i++)
		p->keys[i] = perm_mix64(key + 0x9E3779B97F4A7C15ull *
					      (uint64_t)(i + 1));
}

static inline uint64_t low_mask(unsigned bits)
{
	return (1ull << bits) - 1;
}

static uint64_t network(const struct perm *p, uint64_t x)
{
	unsigned a = p->hi_bits, b = p->lo_bits;

	for (int i = 0; i < PERM_ROUNDS; i++) {
		uint64_t left = x >> b; /* halves are at most 32 bits */
		uint64_t right = x & low_mask(b);
		uint64_t f = perm_mix64(right ^ p->keys[i]);
		unsigned t;

		left = (left ^ f) & low_mask(a);
		x = (right << a) | left;
		t = a;
		a = b;
		b = t;
	}
	return x;
}

uint64_t perm_apply(const struct perm *p, uint64_t x)
{
	if (x >= p->n)
		return x;
	do
		x = network(p, x);
	while (x >= p->n);
	return x;
}
