/*
 * test_batch_odds.c - the bound on a random batch's bytes (batch_odds.c)
 * is an upper bound: never below the exact odds of a population of small
 * and large records (a hypergeometric tail), over batch sizes and limits;
 * 0 where even the largest batch fits; and tight enough that a batch
 * whose mean is far below the limit is not refused (odds under one in a
 * million), as the budget uses it (budget.c); the least limit for given
 * odds is within 1/64 of the least.
 */
#include <math.h>
#include <stdint.h>

#include "sluice.h"
#include "batch_odds.h"
#include "t.h"

/* ln of n choose k */
static double ln_choose(double n, double k)
{
	return lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1);
}

/* Exact odds that @b records drawn without replacement from @big records
 * of @big_bytes and @n - @big of @small_bytes take more than @limit. */
static double exact_over(uint64_t n, uint64_t big, uint64_t big_bytes,
			 uint64_t small_bytes, uint64_t b, uint64_t limit)
{
	double p = 0;

	for (uint64_t k = 0; k <= b && k <= big; k++) {
		if (b - k > n - big)
			continue;
		if (k * big_bytes + (b - k) * small_bytes <= limit)
			continue;
		p += exp(ln_choose((double)big, (double)k) +
			 ln_choose((double)(n - big), (double)(b - k)) -
			 ln_choose((double)n, (double)b));
	}
	return p;
}

static void check_upper(uint64_t n, uint64_t big, uint64_t big_bytes,
			uint64_t small_bytes)
{
	struct batch_odds o;
	static const uint64_t batches[] = { 1, 2, 7, 16, 64, 256 };

	batch_odds_init(&o);
	batch_odds_add(&o, big_bytes, big);
	batch_odds_add(&o, small_bytes, n - big);
	for (uint32_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
		uint64_t b = batches[i];

		if (b > n)
			continue;
		for (uint64_t k = 0; k <= b; k++) {
			/* limits between k and k + 1 large records */
			uint64_t limit = k * big_bytes + (b - k) * small_bytes +
					 (big_bytes - small_bytes) / 2;
			double exact = exact_over(n, big, big_bytes,
						  small_bytes, b, limit);
			double bound = batch_odds_over(&o, b, limit);

			if (bound < exact * (1 - 1e-9))
				T_FAIL_AT("n %llu big %llu batch %llu limit %llu: bound %.3g below the exact %.3g",
					  (unsigned long long)n,
					  (unsigned long long)big,
					  (unsigned long long)b,
					  (unsigned long long)limit, bound,
					  exact);
			T_ASSERT(bound <= 1);
			if (k >= big || k >= b)
				T_ASSERT(bound == 0);   /* the largest fits */
		}
	}
}

int main(void)
{
	struct batch_odds o;

	check_upper(400, 80, 1 << 20, 16 << 10);
	check_upper(2000, 80, 256 << 10, 40);
	check_upper(100, 1, 6 << 20, 4096);
	check_upper(1000, 500, 3, 1);

	/* 2,000 values, 80 of 256 KiB (test_budget's capped ranges), batch
	 * 64, 5 MiB: 2.6 large ones on average, 20 at the limit */
	batch_odds_init(&o);
	batch_odds_add(&o, 256 << 10, 80);
	batch_odds_add(&o, 40, 1920);
	T_ASSERT(batch_odds_over(&o, 64, 5 << 20) < 1e-6);
	/* a fifth of 1 MiB, batch 16, 6 MB: 3.2 on average, odds high */
	batch_odds_init(&o);
	batch_odds_add(&o, 1 << 20, 80);
	batch_odds_add(&o, 16 << 10, 320);
	T_ASSERT(batch_odds_over(&o, 16, 6 << 20) > 0.01);
	/* the least limit for odds of one in a million: within 1/64 */
	{
		uint64_t t = batch_odds_limit(&o, 16, 1e-6);

		T_ASSERT(batch_odds_over(&o, 16, t) <= 1e-6);
		T_ASSERT(batch_odds_over(&o, 16, t - t / 32) > 1e-6);
		/* past the mean batch (3.5 MB) by some way */
		T_ASSERT(t > 6ull << 20);
		T_ASSERT(batch_odds_over(&o, 16, batch_odds_limit(&o, 16, 0.5))
			 <= 0.5);
	}
	/* nothing, or no batch */
	batch_odds_init(&o);
	T_ASSERT(batch_odds_over(&o, 16, 0) == 0);
	batch_odds_add(&o, 0, 10);
	T_ASSERT(batch_odds_over(&o, 16, 0) == 0);
	batch_odds_add(&o, 1, 1);
	T_ASSERT(batch_odds_over(&o, 16, 0) == 1);
	T_ASSERT(batch_odds_over(&o, 0, 0) == 0);
	/* the largest sizes a uint64_t holds */
	batch_odds_init(&o);
	batch_odds_add(&o, UINT64_MAX, 3);
	T_ASSERT(batch_odds_over(&o, 2, UINT64_MAX) == 1);
	printf("ok\n");
	return 0;
}
