/*
 * test_job_order.c - the decode workers' job queues: the jobs that
 * finish batches (assembly parts, range checks) come before block
 * decodes, whatever order they were queued in, and each kind keeps its
 * own order.  Behind the read-ahead's decodes, a batch whose blocks were
 * ready waited for all of them, and the workers idled together while the
 * planner refilled the slots (the effect is a rate: bench/ab_builds.sh
 * measures it; this checks the order that gives it).
 */
#include "t.h"

#include <pthread.h>
#include <stdlib.h>

#include "loader.h"     /* -Ipipeline */

static void push(struct loader_core *c, int kind, uint32_t id)
{
	jobs_push_locked(c, (struct job){ kind, id, 0, 1 });
}

static void expect(struct loader_core *c, int kind, uint32_t id)
{
	struct job j;

	T_EQ(jobs_pop_locked(c, &j), 1);
	T_EQ(j.kind, kind);
	T_EQ(j.id, id);
}

int main(void)
{
	struct loader_core *c = calloc(1, sizeof(*c));

	T_ASSERT(c);
	pthread_cond_init(&c->work_cv, NULL);
	c->decode_jobs.cap = 4;
	c->batch_jobs.cap = 3;
	c->decode_jobs.ring = calloc(c->decode_jobs.cap, sizeof(struct job));
	c->batch_jobs.ring = calloc(c->batch_jobs.cap, sizeof(struct job));
	T_ASSERT(c->decode_jobs.ring && c->batch_jobs.ring);

	/* Several rounds, so that both rings wrap around. */
	for (uint32_t round = 0; round < 5; round++) {
		struct job j;

		push(c, JOB_DECODE, 10 + round);
		push(c, JOB_DECODE, 20 + round);
		push(c, JOB_ASSEMBLE, 30 + round);
		push(c, JOB_DECODE, 40 + round);
		push(c, JOB_RANGES, 50 + round);
		expect(c, JOB_ASSEMBLE, 30 + round);
		expect(c, JOB_RANGES, 50 + round);
		expect(c, JOB_DECODE, 10 + round);
		/* a batch job queued later still goes first */
		push(c, JOB_ASSEMBLE, 60 + round);
		expect(c, JOB_ASSEMBLE, 60 + round);
		expect(c, JOB_DECODE, 20 + round);
		expect(c, JOB_DECODE, 40 + round);
		T_EQ(jobs_pop_locked(c, &j), 0);
	}
	printf("ok: batch-finishing jobs before decodes, each kind in order\n");
	free(c->decode_jobs.ring);
	free(c->batch_jobs.ring);
	pthread_cond_destroy(&c->work_cv);
	free(c);
	return 0;
}
