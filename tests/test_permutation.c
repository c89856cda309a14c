/*
 * test_permutation.c - the keyed Feistel permutation is a bijection of
 * [0, n): exhaustively for every n up to 2000 under several keys, and by
 * sampling (no two of many inputs collide, every image in range) for n up
 * to 2^64 - 1; keys matter; images are spread evenly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "permutation.h"
#include "t.h"

static void test_exhaustive(void)
{
	static const uint64_t keys[] = {0, 1, 42, 0xdeadbeefcafef00dull,
					UINT64_MAX};
	unsigned char *seen = malloc(2000);

	T_ASSERT(seen);
	for (uint64_t n = 0; n <= 2000; n++)
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			struct perm p;

			perm_init(&p, n, keys[k]);
			memset(seen, 0, 2000);
			for (uint64_t x = 0; x < n; x++) {
				uint64_t y = perm_apply(&p, x);

				if (y >= n || seen[y])
					T_FAIL_AT("n %llu key %zu: %llu -> %llu",
						  (unsigned long long)n, k,
						  (unsigned long long)x,
						  (unsigned long long)y);
				seen[y] = 1;
			}
			/* out of range is returned as is */
			T_EQ(perm_apply(&p, n), n);
		}
	free(seen);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* @count inputs spread over [0, n) (a stride walk, distinct), their
 * images all below n and all distinct. */
static void sample_bijection(uint64_t n, uint64_t key, uint64_t count)
{
	struct perm p;
	uint64_t *img = malloc(count * sizeof(*img));
	uint64_t stride = n / count;

	T_ASSERT(img && stride > 0);
	perm_init(&p, n, key);
	for (uint64_t i = 0; i < count; i++) {
		/* a run of neighbours at the start, then a stride walk */
		uint64_t x = i < count / 4 ? i : i * stride + (i % stride);

		img[i] = perm_apply(&p, x);
		T_ASSERT(img[i] < n);
	}
	qsort(img, count, sizeof(*img), cmp_u64);
	for (uint64_t i = 1; i < count; i++)
		if (img[i] == img[i - 1])
			T_FAIL_AT("n %llu: two inputs map to %llu",
				  (unsigned long long)n,
				  (unsigned long long)img[i]);
	free(img);
}

static void test_sampled(void)
{
	static const uint64_t sizes[] = {
		10000000ull, 100000000ull, 1000000000ull, (1ull << 32) + 1,
		1000000000000ull, (1ull << 63) + 12345, UINT64_MAX,
	};

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		sample_bijection(sizes[i], 7 + i, 200000);
	/* and a full check of one domain just over a power of two, where
	 * cycle walking works hardest */
	{
		uint64_t n = (1u << 20) + 3;
		unsigned char *seen = calloc(n, 1);
		struct perm p;

		T_ASSERT(seen);
		perm_init(&p, n, 99);
		for (uint64_t x = 0; x < n; x++) {
			uint64_t y = perm_apply(&p, x);

			T_LT(y, n);
			T_EQ(seen[y], 0);
			seen[y] = 1;
		}
		free(seen);
	}
}

/* Different keys, different permutations; the same key, the same one. */
static void test_keys(void)
{
	struct perm a, b, c;
	uint64_t n = 1000, same_ab = 0, fixed = 0;

	perm_init(&a, n, 1);
	perm_init(&b, n, 2);
	perm_init(&c, n, 1);
	for (uint64_t x = 0; x < n; x++) {
		T_EQ(perm_apply(&a, x), perm_apply(&c, x));
		same_ab += perm_apply(&a, x) == perm_apply(&b, x);
		fixed += perm_apply(&a, x) == x;
	}
	/* a random pair agrees on ~1 point, a random perm fixes ~1 */
	T_LT(same_ab, 10);
	T_LT(fixed, 10);
}

/*
 * Where does x go, over many keys: for n = 10, every (x, y) cell should
 * get about keys / n hits.  Fixed keys, so deterministic; a badly mixing
 * network (few rounds, a weak round function) fails this.
 */
static void test_spread(void)
{
	enum { N = 10, KEYS = 20000 };
	static uint32_t hits[N][N];

	for (uint64_t k = 0; k < KEYS; k++) {
		struct perm p;

		perm_init(&p, N, k * 0x9E3779B97F4A7C15ull);
		for (uint64_t x = 0; x < N; x++)
			hits[x][perm_apply(&p, x)]++;
	}
	for (int x = 0; x < N; x++)
		for (int y = 0; y < N; y++) {
			/* mean 2000, sd ~42: +-250 is ~6 sd */
			T_LT(1750, hits[x][y]);
			T_LT(hits[x][y], 2250);
		}
}

int main(void)
{
	test_exhaustive();
	test_sampled();
	test_keys();
	test_spread();
	return 0;
}
