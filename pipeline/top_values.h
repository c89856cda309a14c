/*
 * top_values.h - the sum of the @want largest of many values, some
 * offered many at once, in memory for @want of them (top_values.c): how
 * the budget bounds a batch's variable values without sorting every
 * record of the dataset (chunks.c).
 */
#ifndef SLUICE_PIPELINE_TOP_VALUES_H
#define SLUICE_PIPELINE_TOP_VALUES_H

#include <stdint.h>

/* @count values of @bytes each. */
struct top_value {
	uint64_t bytes, count;
};

/* A min-heap, the smallest on top, whose counts sum to at least @want
 * once that many were offered, and whose entries past the top count
 * fewer than @want. */
struct top_values {
	struct top_value *heap;
	uint64_t n, cap, count, want;
};

void top_values_init(struct top_values *t, uint64_t want);
/* Offer @count values of @bytes (< 2^34 each).  @return: 0 or -ENOMEM. */
int top_values_offer(struct top_values *t, uint64_t bytes, uint64_t count);
/* The bytes of the @want largest values offered (all, when fewer were);
 * @want < 2^25, so the sum cannot overflow. */
uint64_t top_values_sum(const struct top_values *t);
void top_values_free(struct top_values *t);

#endif /* SLUICE_PIPELINE_TOP_VALUES_H */
