/*
 * budget.h - the loader's memory budget (budget.c): the arena split into
 * an io pool and a batch pool, and batch memory handed out in batch
 * order.  Its state (arena, io_pool, batch_pool, ...) stays in struct
 * loader_core (loader.h): every stage carves from it.
 */
#ifndef SLUICE_PIPELINE_BUDGET_H
#define SLUICE_PIPELINE_BUDGET_H

#include <stddef.h>
#include <stdint.h>

struct loader_core;
struct shard_block;
struct slot;

uint64_t block_io_bytes(const struct loader_core *c,
			const struct shard_block *blk);
int budget_open(struct loader_core *c, uint64_t *entries,
		uint64_t batch_fixed_bytes, char *err, size_t errlen);
int budget_caches_dataset(const struct loader_core *c,
			  uint64_t batch_fixed_bytes);
/* The most the budget may be: memory_bytes, or the default's cap. */
uint64_t budget_cap(const struct loader_core *c);
void budget_close(struct loader_core *c);
void batch_memory_grant_locked(struct loader_core *c);
int batch_memory_hoarded_locked(struct loader_core *c);
void batch_memory_release_begin(struct loader_core *c);
void batch_memory_release_end_locked(struct loader_core *c);
void batch_memory_free_locked(struct loader_core *c, struct slot *s);
int batch_memory_take_early_locked(struct loader_core *c, struct slot *s);
/* The memory of a batch over budget (batch_memory_hoarded_locked), if
 * it has any, back to the system. */
void slot_own_host_free(struct slot *s);
void batch_memory_drop_waiting_locked(struct loader_core *c);

#endif /* SLUICE_PIPELINE_BUDGET_H */
