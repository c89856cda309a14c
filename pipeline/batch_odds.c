/*
 * batch_odds.c - a Chernoff bound on a random batch's bytes.
 *
 * A full shuffle's batch is @batch records drawn without replacement.
 * Its sum is no more spread than the sum of draws with replacement
 * (Hoeffding 1963, theorem 4: E f(S) is at most its value with
 * replacement for every convex f), so for every l >= 0
 *
 *     P(S >= t) <= exp(-l t) M(l)^batch,   M(l) = mean of exp(l x),
 *
 * x over the records' sizes.  The sizes are kept as a histogram, each
 * counted at the largest size of its bucket (at most 1/64 more), which
 * only raises the bound; the bound is minimized over l on a grid of
 * quarter octaves.  It overstates the odds, never understates them.
 */
#include <math.h>
#include <string.h>

#include "batch_odds.h"

/* Sizes below 64 have a bucket each; above, 64 buckets an octave. */
static uint32_t bucket_of(uint64_t x)
{
	uint32_t e;

	if (x < 64)
		return (uint32_t)x;
	e = 63u - (uint32_t)__builtin_clzll(x);      /* 6..63 */
	return 64u + (e - 6u) * 64u + (uint32_t)((x >> (e - 6u)) - 64u);
}

void batch_odds_init(struct batch_odds *o)
{
	memset(o, 0, sizeof(*o));
}

void batch_odds_add(struct batch_odds *o, uint64_t bytes, uint64_t count)
{
	uint32_t k = bucket_of(bytes);

	if (count == 0)
		return;
	o->count[k] += count;
	if (bytes > o->top[k])
		o->top[k] = bytes;
	o->records += count;
}

/* The @batch largest sizes, each at its bucket's largest. */
static double largest_sum(const struct batch_odds *o, uint64_t batch)
{
	double sum = 0;

	for (uint32_t k = BATCH_ODDS_BUCKETS; k-- > 0 && batch > 0;) {
		uint64_t take = o->count[k] < batch ? o->count[k] : batch;

		sum += (double)take * (double)o->top[k];
		batch -= take;
	}
	return sum;
}

double batch_odds_over(const struct batch_odds *o, uint64_t batch,
		       uint64_t limit)
{
	double p[BATCH_ODDS_BUCKETS], y[BATCH_ODDS_BUCKETS], y_max = 0;
	double best = 0;        /* log of the bound at l = 0: odds 1 */
	uint32_t n = 0;

	if (o->records == 0 || batch == 0 ||
	    largest_sum(o, batch) <= (double)limit)
		return 0;
	if (limit == 0)
		return 1;
	/* sizes in units of @limit, with their shares of the records */
	for (uint32_t k = 0; k < BATCH_ODDS_BUCKETS; k++) {
		if (!o->count[k])
			continue;
		p[n] = (double)o->count[k] / (double)o->records;
		y[n] = (double)o->top[k] / (double)limit;
		if (y[n] > y_max)
			y_max = y[n];
		n++;
	}
	/* log bound: -l + batch ln M(l), M's log taken about its largest
	 * term so that no exponential overflows */
	for (int j = -40; j <= 200; j++) {
		double l = pow(2.0, j / 4.0);
		double sum = 0, f;

		for (uint32_t k = 0; k < n; k++)
			sum += p[k] * exp(l * (y[k] - y_max));
		f = -l + (double)batch * (l * y_max + log(sum));
		if (f > best)
			break;  /* convex in l, 0 at l = 0: past its least */
		best = f;
	}
	return exp(best);
}

uint64_t batch_odds_limit(const struct batch_odds *o, uint64_t batch,
			  double odds)
{
	double hi = largest_sum(o, batch), lo = hi / 64;

	if (hi >= 0x1p63)
		return UINT64_MAX;      /* no limit short of every byte */

	/* geometric bisection: within 1/64 in 12 steps from a range of
	 * 2^-6..1 */
	while (lo > 1 && batch_odds_over(o, batch, (uint64_t)lo) <= odds)
		lo /= 64;
	while (hi - lo > hi / 64) {
		double mid = sqrt(lo * hi);

		if (batch_odds_over(o, batch, (uint64_t)mid) <= odds)
			hi = mid;
		else
			lo = mid;
	}
	return (uint64_t)ceil(hi);
}
