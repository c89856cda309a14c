/*
 * pool.h - a first-fit allocator over a region of the pinned arena (offsets,
 * not pointers), with every bookkeeping array allocated at init: the
 * loader carves io buffers and batch memory out of the arena at run time
 * without calling malloc.
 */
#ifndef SLUICE_PIPELINE_POOL_H
#define SLUICE_PIPELINE_POOL_H

#include <stdint.h>

struct pool_extent {
	uint64_t off, len;
};

struct pool {
	uint64_t size;              /* bytes managed */
	uint64_t align;             /* every offset and length, a power of 2 */
	uint64_t used;              /* bytes handed out */
	uint32_t nfree, cap;        /* free extents, sorted by offset */
	struct pool_extent *free;
};

/* Manage [0, @size) for at most @max_allocs live allocations.  0 or
 * -ENOMEM. */
int pool_init(struct pool *p, uint64_t size, uint64_t align,
	      uint32_t max_allocs);
void pool_destroy(struct pool *p);

/* @len rounded up to the pool's alignment: what an allocation takes. */
uint64_t pool_round(const struct pool *p, uint64_t len);

/*
 * pool_alloc - the lowest free range of @len bytes (rounded up), so that
 * the pages a loader touches stay few when its batches are small.
 * @return: 0 with *@off set, or -ENOSPC (no free range that long).
 */
int pool_alloc(struct pool *p, uint64_t len, uint64_t *off);

/* Return [@off, @off + @len) (the @len given to pool_alloc). */
void pool_free(struct pool *p, uint64_t off, uint64_t len);

/* Take [@off, @off + @len) (rounded up), which must be free: a pool that
 * mirrors where another one's long-lived allocations lie.  0 or -ENOSPC
 * (not free). */
int pool_take(struct pool *p, uint64_t off, uint64_t len);

/* The longest free range there would be after pool_take(@off, @len):
 * the longest now when @len is 0 or that range is not free. */
uint64_t pool_longest_free_after(const struct pool *p, uint64_t off,
				 uint64_t len);

#endif /* SLUICE_PIPELINE_POOL_H */
