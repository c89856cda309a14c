/*
 * view.c - batches that view their decoded block instead of copying it
 * (issue 12).
 *
 * When every field is fixed-shape and a batch's records are neighbours in
 * one block (shuffle none or block, a batch that does not straddle two
 * blocks), each field's records are one contiguous run of the decoded
 * block, already laid out as the tensor [B, *shape]: the batch's tensors
 * point there and nothing is copied.  The batch keeps its cache entry
 * pinned until released, so the block's io memory is its memory, out of
 * the planner's reach (budget.c).  To keep the planner able to plan the
 * next batch whatever the consumer holds, views take at most the entries
 * and io memory beyond two batches' worth; past that batches are copied
 * as before.
 *
 * A viewed block is shared: the consumer may write into its batch's
 * tensors.  Its records are the batch's own within an epoch (a mixture
 * whose stream repeats is the exception: no views there); so that no
 * other batch sees such writes, an entry is viewed only by batches of one
 * pass and only when no batch of a later pass claimed it, and a later
 * pass's claim reads the block again into another entry (cache.c).
 * Within its pass the entry stays cached after its last view goes: the
 * pass's next batches take the block's other records, which no consumer
 * has seen (dropping it re-read and re-decoded every block that a fast
 * consumer released before the planner reached its next batch).
 *
 * CUDA batches are copied to the device from the batch pool, which the
 * device mirrors; views stay on the host device.
 */
#include "loader.h"

void views_init(struct loader_core *c)
{
	/* A cache that holds every block keeps them clean for the next
	 * epochs: a viewed block would be read again each pass (cache.c). */
	c->views.on = !(c->dev_info.caps & DEVICE_CAP_MIRROR) &&
		      !c->cache.all && !c->has_variable && !c->framed.on;
	/* A stream that repeats within an epoch delivers some records
	 * twice in one pass: a later batch would read (or view) the rows a
	 * consumer wrote into.  Such mixtures copy every batch; their
	 * batches mix streams and rarely sit in one block anyway. */
	for (uint32_t i = 0; i < c->sampler.nstreams; i++)
		if (c->sampler.streams[i].samples > c->sampler.streams[i].records)
			c->views.on = 0;
}

/* The writable address of the decoded bytes (e->raw is the same, const). */
static uint8_t *decoded_base(const struct loader_core *c,
			     const struct cache_entry *e)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);

	return e->scratch ? e->scratch
			  : e->stored + (blk->offset - e->rd.offset);
}

/*
 * Views leave the planner two batches' worth of entries and io memory,
 * and one gap between viewed blocks that takes any batch's blocks
 * (io_batch_max): when the planner is stuck with nothing in flight, the
 * views are all that holds io memory, and first-fit puts a batch's blocks
 * in that gap if nowhere lower (else views pinned at scattered offsets
 * could leave no hole for a large block: -ENOSPC, test_views
 * check_views_leave_room).
 */
static int room_for_view(const struct loader_core *c,
			 const struct cache_entry *e)
{
	if (e->view_refs)
		return 1;
	return (uint64_t)c->views.entries + 1 + 2 * c->need <=
		       c->cache.nentries &&
	       c->views.bytes + e->mem_len + 2 * c->io_need_bytes <=
		       c->io_bytes &&
	       pool_longest_free_after(&c->views.pool, e->mem_off,
				       e->mem_len) >= c->io_batch_max;
}

/* The slot's blocks are decoded and sized: can its tensors view its
 * block?  Every record of it, in order, from one block of this pass's,
 * with room left for the planner (plan.c asks). */
int slot_viewable_locked(const struct loader_core *c, const struct slot *s)
{
	const struct cache_entry *e;
	uint32_t first;

	if (!c->views.on || s->nentries != 1 || s->count == 0 ||
	    s->delivered != s->count || s->has_mem || s->ranges.nranged)
		return 0;
	e = &c->cache.entries[s->entries[0]];
	/* A batch of another pass (another epoch, or this one restarted)
	 * may hold the block too, and its consumer may have written into it. */
	if (e->state != ENTRY_READY || !room_for_view(c, e) ||
	    e->claim_pass != s->pass ||
	    (e->view_refs && e->view_pass != s->pass))
		return 0;
	first = s->rec_in_block[0];
	for (uint32_t r = 1; r < s->count; r++)
		if (s->rec_in_block[r] != first + r)
			return 0;
	return 1;
}

/* Make the viewable slot @s view its block: ready, its entry pinned. */
void slot_view_locked(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	struct cache_entry *e = &c->cache.entries[s->entries[0]];
	uint8_t *base = decoded_base(c, e);

	for (uint32_t f = 0; f < sc->nfields; f++)
		s->view.data[f] = base + (e->view.data[f] - e->raw) +
				  (uint64_t)s->rec_in_block[0] *
					  sc->fields[f].record_bytes;
	if (e->view_refs++ == 0) {
		c->views.entries++;
		c->views.bytes += e->mem_len;
		e->view_pass = s->pass;
		/* free there: the entry's memory is its own */
		(void)pool_take(&c->views.pool, e->mem_off, e->mem_len);
	}
	e->exposed = 1;
	s->place = PLACE_VIEW;
	s->host = NULL;
	s->has_mem = 1;
	s->state = SLOT_READY;
	if (--c->inflight == 0)
		io_ring_wake(c->ring);
	pthread_cond_broadcast(&c->ready_cv);
}

/* The batch is released (or dropped): unpin its block. */
void slot_unview_locked(struct loader_core *c, struct slot *s)
{
	for (uint32_t k = 0; k < s->nentries; k++) {
		struct cache_entry *e = &c->cache.entries[s->entries[k]];

		if (--e->view_refs == 0) {
			c->views.entries--;
			c->views.bytes -= e->mem_len;
			pool_free(&c->views.pool, e->mem_off, e->mem_len);
		}
		cache_unpin(c, s->entries[k]);
	}
	s->nentries = 0;
	s->place = PLACE_UNSET;
}
