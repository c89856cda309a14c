/*
 * batch_odds.h - how likely a batch of records drawn at random takes more
 * than some bytes (batch_odds.c): a bound from the records' sizes, so
 * that the budget can refuse at open a full shuffle whose batches would
 * often not fit, and take one whose largest batch does not fit but whose
 * batches all but never come near it.
 */
#ifndef SLUICE_PIPELINE_BATCH_ODDS_H
#define SLUICE_PIPELINE_BATCH_ODDS_H

#include <stdint.h>

/* The odds of a batch not fitting above which the budget refuses a
 * full shuffle at open (budget.c): past them, a long job would fail at
 * some batch rather than at open. */
#define BATCH_ODDS_REFUSED 1e-6

/* Record sizes, as a histogram of 64 buckets an octave, each with the
 * largest size it was given. */
#define BATCH_ODDS_BUCKETS (64 + 58 * 64)

struct batch_odds {
	uint64_t count[BATCH_ODDS_BUCKETS];
	uint64_t top[BATCH_ODDS_BUCKETS];
	uint64_t records;
};

void batch_odds_init(struct batch_odds *o);
/* @count records of @bytes each. */
void batch_odds_add(struct batch_odds *o, uint64_t bytes, uint64_t count);
/* An upper bound on the odds that @batch records drawn at random without
 * replacement take more than @limit bytes together, in [0, 1]: 0 when
 * even the @batch largest fit. */
double batch_odds_over(const struct batch_odds *o, uint64_t batch,
		       uint64_t limit);
/* The least bytes, within 1/64, for which those odds are at most @odds
 * (at most the @batch largest sizes' sum). */
uint64_t batch_odds_limit(const struct batch_odds *o, uint64_t batch,
			  double odds);

#endif /* SLUICE_PIPELINE_BATCH_ODDS_H */
