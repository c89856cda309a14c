/*
 * view.h - batches that view their decoded block instead of copying it
 * (view.c): the loader's state for them and its functions.  A slot's
 * (viewed, view[]) stays in struct slot (loader.h): it is sized by the
 * tensors a batch holds.
 */
#ifndef SLUICE_PIPELINE_VIEW_H
#define SLUICE_PIPELINE_VIEW_H

#include <stdint.h>

#include "pool.h"

struct loader_core;
struct slot;

/* The loader's: views (view.c) */
struct loader_views {
	int on;                     /* batches may view blocks (view.c) */
	uint32_t entries;           /* entries viewed by batches [mu] */
	uint64_t bytes;             /* their io memory [mu] */
	struct pool pool;           /* the io pool with only their memory
				       taken: where views leave room [mu] */
};

void views_init(struct loader_core *c);
int slot_view_locked(struct loader_core *c, struct slot *s);
void slot_unview_locked(struct loader_core *c, struct slot *s);

#endif /* SLUICE_PIPELINE_VIEW_H */
