/*
 * test_top_values.c - the sum of the @want largest values offered equals
 * that of a sort of every value, for random offers of single values and
 * of many at once, wants from 0 to past every value; the heap holds no
 * more entries than needed; ties, zeros and empty offers count right.
 */
#include <stdint.h>
#include <stdlib.h>

#include "sluice.h"
#include "top_values.h"
#include "t.h"

static int by_down(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x > y ? -1 : x < y;
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Offer @n random (bytes, count) pairs; compare with a sort. */
static void check_random(uint64_t seed, uint32_t n, uint64_t want)
{
	uint64_t s = seed, *all = NULL, total = 0, expect = 0;
	struct top_values t;

	top_values_init(&t, want);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t bytes = rng_next(&s) % (seed & 1 ? 1000 : 1u << 30);
		uint64_t count = rng_next(&s) % 4 == 0 ? rng_next(&s) % 50 : 1;

		all = realloc(all, (total + count + 1) * sizeof(*all));
		T_ASSERT(all != NULL);
		for (uint64_t k = 0; k < count; k++)
			all[total++] = bytes;
		T_OK(top_values_offer(&t, bytes, count));
	}
	if (total)
		qsort(all, total, sizeof(*all), by_down);
	for (uint64_t k = 0; k < want && k < total; k++)
		expect += all[k];
	T_EQ(top_values_sum(&t), expect);
	/* entries past the top count fewer than @want */
	if (t.n > 1)
		T_ASSERT(t.count - t.heap[0].count < want);
	top_values_free(&t);
	free(all);
}

int main(void)
{
	struct top_values t;

	for (uint64_t seed = 1; seed <= 200; seed++)
		for (uint64_t want = 0; want <= 70; want += 7)
			check_random(seed * 2654435761u, (uint32_t)(seed % 60),
				     want);
	check_random(7, 20000, 512);
	check_random(8, 20000, 1);

	/* many at once: the top counts only as far as @want */
	top_values_init(&t, 5);
	T_OK(top_values_offer(&t, 10, 1000000));
	T_OK(top_values_offer(&t, 3, 1));
	T_EQ(top_values_sum(&t), 50);
	T_OK(top_values_offer(&t, 20, 2));
	T_EQ(top_values_sum(&t), 70);
	T_OK(top_values_offer(&t, 30, 5));
	T_EQ(top_values_sum(&t), 150);
	T_EQ(t.n, 1);
	top_values_free(&t);

	/* nothing offered, empty offers */
	top_values_init(&t, 3);
	T_OK(top_values_offer(&t, 99, 0));
	T_EQ(top_values_sum(&t), 0);
	top_values_free(&t);
	return 0;
}
