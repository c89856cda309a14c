/*
 * view.h - batches that view their decoded block instead of copying it
 * (view.c): the state each slot and the loader keep for them, and their
 * functions.
 */
#ifndef SLUICE_PIPELINE_VIEW_H
#define SLUICE_PIPELINE_VIEW_H

#include <stdint.h>

#include "dlpack_shard.h"
#include "pool.h"

struct loader_core;
struct slot;

/* A slot's, while it is a view (place PLACE_VIEW): its tensors' data,
 * field f's in data[f] (fixed-shape fields only: tensor f is field f). */
struct slot_view {
	uint8_t *data[DLS_MAX_FIELDS];
};

/* The loader's: views (view.c) */
struct loader_views {
	int on;                     /* batches may view blocks (view.c) */
	uint32_t entries;           /* entries viewed by batches [mu] */
	uint64_t bytes;             /* their io memory [mu] */
	struct pool pool;           /* the io pool with only their memory
				       taken: where views leave room [mu] */
};

void views_init(struct loader_core *c);
int slot_viewable_locked(const struct loader_core *c, const struct slot *s);
void slot_view_locked(struct loader_core *c, struct slot *s);
void slot_unview_locked(struct loader_core *c, struct slot *s);

#endif /* SLUICE_PIPELINE_VIEW_H */
