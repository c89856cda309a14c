/*
 * jobs.h - the decode workers' jobs (decode.c): what one is, and the
 * bounded rings the loader queues them in.
 */
#ifndef SLUICE_PIPELINE_JOBS_H
#define SLUICE_PIPELINE_JOBS_H

#include <stdint.h>

struct loader_core;

enum job_kind { JOB_DECODE, JOB_ASSEMBLE, JOB_RANGES, JOB_RANGES_DECODE,
		JOB_STREAM, JOB_FETCH };

struct job {
	int kind;
	uint32_t id;            /* entry (decode, fetch) or slot (assemble) */
	uint32_t part, parts;
};

/* A ring of jobs, bounded by construction (loader_open.c sizes it). */
struct job_queue {
	struct job *ring;
	uint32_t cap, head, len;
};

void jobs_push_locked(struct loader_core *c, struct job j);
int jobs_pop_locked(struct loader_core *c, struct job *j);

#endif /* SLUICE_PIPELINE_JOBS_H */
