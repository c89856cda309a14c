/*
 * batch_memory.c - batch memory handed out at run time from the batch
 * pool that budget.c sized: strictly in batch order, so a later batch
 * never holds memory an earlier one waits for, and a consumer that takes
 * batches in order always frees what the next one needs.  A batch
 * waiting for memory is the backpressure that stops the planner (the
 * slots it holds are not free).
 *
 * A batch that views its decoded blocks instead of copying them (issue
 * 12) is charged the same way: it keeps those cache entries pinned until
 * released, so their io-pool memory is its memory, out of the planner's
 * reach (cache_reclaimable()) until then.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loader.h"
#include "budget_test.h"

static struct slot *fifo_at(const struct loader_core *c, uint32_t k)
{
	return c->slots[c->fifo[(c->fifo_head + k) % c->slots_cap]];
}

/* Give memory to the batches waiting for it, in batch order.  Not after
 * sluice_loader_close(): no worker is left to assemble them, and the
 * dataset their blocks and schema belong to may be closed already (a
 * batch the consumer releases later must not touch it). */
void batch_memory_grant_locked(struct loader_core *c)
{
	if (c->stop)
		return;
	for (uint32_t k = 0; k < c->fifo_len; k++) {
		struct slot *s = fifo_at(c, k);

		if (s->has_mem)
			continue;
		if (s->state != SLOT_MEMORY ||
		    pool_alloc(&c->batch_pool, s->host_bytes, &s->mem_off))
			return;
		s->host = c->arena + c->io_bytes + s->mem_off;
		s->has_mem = 1;
		slot_continue_assembly_locked(c, s);
	}
}

/* A batch being planned (not yet in the fifo) takes its memory now, so
 * that its bytes can land in place (direct.c, ranges.c): only if every
 * batch before it has its memory, which keeps memory handed out in batch
 * order.  s->host_bytes is set.  @return: 1 when taken, else 0. */
int batch_memory_take_early_locked(struct loader_core *c, struct slot *s)
{
	uint64_t off;

	for (uint32_t k = 0; k < c->fifo_len; k++)
		if (!fifo_at(c, k)->has_mem)
			return 0;
	if (pool_alloc(&c->batch_pool, s->host_bytes, &off))
		return 0;
	s->mem_off = off;
	s->host = c->arena + c->io_bytes + off;
	s->has_mem = 1;
	return 1;
}

/*
 * next() waits for the head batch, which waits for memory: every batch
 * before it was delivered and none after it holds any, so the consumer
 * holds all of it.  On the host the batch gets memory of its own, outside
 * the budget (the consumer chose to keep its batches; freed on release);
 * CUDA batches have device memory only inside the budget: -EDEADLK.
 * Unless a release is on its way (another thread dropped a batch's last
 * reference and, on CUDA, waits for its copy): then the memory is coming
 * and next() waits for it.
 * @return: 0 (nothing to do, or done), 1 (wait for the release),
 *	-EDEADLK, -ENOMEM.
 */
int batch_memory_hoarded_locked(struct loader_core *c)
{
	struct slot *s;
	uint64_t len;
	void *map;

	if (c->fifo_len == 0)
		return 0;
	s = fifo_at(c, 0);
	if (s->state != SLOT_MEMORY || s->has_mem)
		return 0;
	if (atomic_load(&c->releasing)) {
		c->waits_for_release++;
		return 1;
	}
	if (c->dev_info.caps & DEVICE_CAP_MIRROR)
		return -EDEADLK;
	/* Mapped, not malloc'd: freed, it leaves the process.  malloc
	 * keeps freed blocks of this size (its mmap threshold rises to
	 * them): a consumer that held every other batch of 25 MB peaked
	 * at 707 MB of RSS under a 99 MB budget over two epochs (125 MB
	 * mapped). */
	len = align_up(s->host_bytes ? s->host_bytes : 1,
		       (uint64_t)sysconf(_SC_PAGESIZE));
	map = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		return -ENOMEM;
	s->host = map;
	s->own_host = len;
	s->has_mem = 1;
	atomic_fetch_add(&c->over_budget, 1);
	slot_continue_assembly_locked(c, s);
	return 0;
}

#ifdef SLUICE_TESTING
void (*budget_test_release_hook)(struct loader_core *c);
#endif

/* A batch's last reference is gone; its memory comes back in
 * batch_memory_release_end_locked(), after CUDA's copy is done.  Counted
 * from here so that next() does not take the wait for hoarding. */
void batch_memory_release_begin(struct loader_core *c)
{
	atomic_fetch_add(&c->releasing, 1);
#ifdef SLUICE_TESTING
	if (budget_test_release_hook)
		budget_test_release_hook(c);
#endif
}

/* The memory is back (and granted): next() may decide again. */
void batch_memory_release_end_locked(struct loader_core *c)
{
	atomic_fetch_sub(&c->releasing, 1);
	pthread_cond_broadcast(&c->ready_cv);
}

/* The caller made sure no copy still reads the memory. */
void batch_memory_free_locked(struct loader_core *c, struct slot *s)
{
	if (!s->has_mem)
		return;
	if (s->place == PLACE_VIEW)
		slot_unview_locked(c, s);
	else if (s->own_host)
		slot_own_host_free(s);
	else if (s->host)
		pool_free(&c->batch_pool, s->mem_off, s->host_bytes);
	s->host = NULL;
	s->has_mem = 0;
}

void slot_own_host_free(struct slot *s)
{
	if (!s->own_host)
		return;
	(void)munmap(s->host, s->own_host);
	s->host = NULL;
	s->own_host = 0;
}

/* Stop the batches still waiting for memory (an epoch restart drops
 * them): their blocks are unpinned, and they count as done, holding no
 * memory. */
void batch_memory_drop_waiting_locked(struct loader_core *c)
{
	for (uint32_t k = 0; k < c->fifo_len; k++) {
		struct slot *s = fifo_at(c, k);

		if (s->state != SLOT_MEMORY || s->has_mem)
			continue;
		for (uint32_t e = 0; e < s->nentries; e++)
			cache_unpin(c, s->entries[e]);
		s->nentries = 0;
		s->ranges.awaits_memory = 0;
		slot_ranges_release_locked(c, s);
		s->state = SLOT_READY;
		c->inflight--;
	}
}
