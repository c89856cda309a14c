/*
 * top_values.c - the sum of the largest values offered, in memory for as
 * many values as are wanted: a min-heap of (bytes, count) that drops its
 * smallest entry once the others count enough without it.
 */
#include <errno.h>
#include <stdlib.h>

#include "top_values.h"

void top_values_init(struct top_values *t, uint64_t want)
{
	*t = (struct top_values){ .want = want };
}

void top_values_free(struct top_values *t)
{
	free(t->heap);
	t->heap = NULL;
	t->n = t->cap = t->count = 0;
}

static void swap(struct top_value *h, uint64_t a, uint64_t b)
{
	struct top_value x = h[a];

	h[a] = h[b];
	h[b] = x;
}

/* Drop the top, the smallest. */
static void pop(struct top_values *t)
{
	struct top_value *h = t->heap;
	uint64_t k = 0;

	t->count -= h[0].count;
	h[0] = h[--t->n];
	for (;;) {
		uint64_t l = 2 * k + 1, m = k;

		if (l < t->n && h[l].bytes < h[m].bytes)
			m = l;
		if (l + 1 < t->n && h[l + 1].bytes < h[m].bytes)
			m = l + 1;
		if (m == k)
			break;
		swap(h, k, m);
		k = m;
	}
}

int top_values_offer(struct top_values *t, uint64_t bytes, uint64_t count)
{
	uint64_t k;

	/* enough larger ones already */
	if (count == 0 ||
	    (t->n && t->count >= t->want && bytes <= t->heap[0].bytes))
		return 0;
	if (t->n == t->cap) {
		uint64_t cap = t->cap ? 2 * t->cap : 64;
		struct top_value *h = realloc(t->heap, cap * sizeof(*h));

		if (!h)
			return -ENOMEM;
		t->heap = h;
		t->cap = cap;
	}
	k = t->n++;
	t->heap[k] = (struct top_value){ bytes, count };
	t->count += count;
	for (; k && t->heap[(k - 1) / 2].bytes > t->heap[k].bytes;
	     k = (k - 1) / 2)
		swap(t->heap, k, (k - 1) / 2);
	/* the smallest is not needed once the others count @want */
	while (t->n > 1 && t->count - t->heap[0].count >= t->want)
		pop(t);
	return 0;
}

uint64_t top_values_sum(const struct top_values *t)
{
	uint64_t over = t->count > t->want ? t->count - t->want : 0, sum;

	if (t->n == 0)
		return 0;
	/* the top counts only as far as @want; the others count fewer
	 * than @want (offer pops the top otherwise) */
	sum = (t->heap[0].count - over) * t->heap[0].bytes;
	for (uint64_t k = 1; k < t->n; k++)
		sum += t->heap[k].bytes * t->heap[k].count;
	return sum;
}
