/*
 * plan.h - how a batch is placed (plan.c): the one choice each batch gets
 * once its blocks are decoded.  The runs the placements that move bytes
 * carry out are runs.h's.
 */
#ifndef SLUICE_PIPELINE_PLAN_H
#define SLUICE_PIPELINE_PLAN_H

struct loader_core;
struct slot;

enum batch_place {
	PLACE_UNSET = 0,        /* not chosen yet */
	PLACE_VIEW,             /* the tensors alias its one decoded block:
				   no memory, no copy (view.c) */
	PLACE_GATHER,           /* the device copies runs of uploaded
				   blocks into it (gather.c) */
	PLACE_COPY,             /* the CPU copies its records into batch
				   memory, in parallel parts, but rows a
				   block decoded in place (assemble.c) */
	PLACE_CHUNKS,           /* the CPU copies a chunk of blocks' records
				   at a time, as each chunk lands (chunks.c) */
	PLACE_FAILED,           /* nothing to place: it delivers its error */
};

/*
 * The placement for @s, whose blocks are decoded (or ranges read) and
 * whose records are counted: a batch without memory is viewed if it can
 * be, and PLACE_UNSET says it needs memory first; with memory, it is
 * gathered or copied.  Chunked batches are PLACE_CHUNKS throughout. [mu]
 */
enum batch_place place_choose_locked(const struct loader_core *c,
				     const struct slot *s);

#endif /* SLUICE_PIPELINE_PLAN_H */
