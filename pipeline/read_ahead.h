/*
 * read_ahead.h - blocks read before any batch is planned that needs them
 * (read_ahead.c): the state the loader keeps for it, and its functions.
 */
#ifndef SLUICE_PIPELINE_READ_AHEAD_H
#define SLUICE_PIPELINE_READ_AHEAD_H

#include <stdatomic.h>
#include <stdint.h>

#include "sampler.h"

struct loader_core;

/* Block reads of the current window (read_ahead.c) [mu]. */
struct read_ahead_window {
	uint64_t start_ns, reads, fastest_ns;
};

/* The loader's read-ahead [mu]: blocks of batches not yet planned, so
 * that every decode worker has a block to work on even when one block
 * feeds many batches (more than the slots hold) */
struct read_ahead {
	uint64_t batch;             /* scan position: batch, record in it */
	uint32_t rec;
	uint32_t inflight;          /* read-ahead blocks not yet decoded */
	uint32_t max;               /* at open: two per decode worker */
	_Atomic uint32_t limit;     /* now: at least max, more
				       where reads are slow (read_ahead.c;
				       stats read it without mu) */
	struct read_ahead_window window;
	struct sampler_memo memo;   /* the scan's window permutation */
	struct sampler_memo plan_memo; /* the planner's (mark_plan_span) */
};

/* ahead.max and ahead.limit, once the decode threads are known. */
void read_ahead_open(struct loader_core *c);
/* A block read took @latency_ns, back at @now. */
void read_ahead_sample_locked(struct loader_core *c, uint64_t latency_ns,
			      uint64_t now);
/* Claim and queue read-ahead reads onto c->submit. */
void read_ahead_locked(struct loader_core *c, unsigned *nsubmit);

#endif /* SLUICE_PIPELINE_READ_AHEAD_H */
