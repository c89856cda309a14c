/*
 * direct.c - zstd blocks decompressed straight into their batch (issue
 * 12): no scratch buffer, no copy.
 *
 * With one fixed-shape field a decoded block is its records' rows, one
 * after another, exactly as the batch's tensor holds them.  When every
 * record of a block goes, in order, into one batch, and nothing else
 * needs the block, the planner gives that batch its memory at once (in
 * batch order, as budget.c requires, or not at all) and points the
 * block's decode at the rows; assembly then finds the rows in place.
 *
 * The entry's decoded bytes live in the batch's memory, which returns to
 * the budget when the batch is released: the entry is never served from
 * the cache again (forget), and a later claim of the block reads it anew
 * (cache.c).  With on_error=skip a batch may lose records and its rows
 * move, so direct decoding is off then.
 */
#include <stdlib.h>

#include "loader.h"

/* Could a batch take a zstd block whole: one fixed field, no skips (and
 * for direct_likely, records in order and blocks no larger than a
 * batch). */
static int direct_possible(const struct loader_core *c)
{
	const struct shard_schema *sc = &c->ds->schema;

	return c->has_zstd && sc->nfields == 1 && !sc->fields[0].variable &&
	       c->cfg.on_error != SLUICE_ON_ERROR_SKIP;
}

int direct_likely(const struct loader_core *c)
{
	return direct_possible(c) && c->cfg.shuffle <= SLUICE_SHUFFLE_BLOCK &&
	       c->nblocks &&
	       c->ds->record_count / c->nblocks <= c->cfg.batch_size;
}

void direct_init(struct loader_core *c)
{
	/* When the cache holds every block, decoding a block into its
	 * batch would cost a read and a decompression of it every epoch
	 * instead of a copy (cache.c). */
	c->direct.on = direct_possible(c) && !c->cache.all;
	if (c->direct.on) {
		/* without it, no direct decoding: nothing fails */
		c->direct.ahead_recs = malloc(c->cfg.batch_size *
					      sizeof(*c->direct.ahead_recs));
		c->direct.on = c->direct.ahead_recs != NULL;
	}
}

/* Row @r of a batch's tensor (at a SLOT_ALIGN offset) is 8-aligned, as
 * block_view_init() wants a decoded block: rows of 525 bytes put every
 * block starting at an odd row at an odd address, and its decode failed
 * with -EINVAL ("block 2: offset 28672: Invalid argument"). */
static int row_aligned(const struct loader_core *c, uint64_t r)
{
	return r * c->ds->schema.fields[0].record_bytes % 8 == 0;
}

/*
 * Block @g starts at record @r of batch @batch (not planned yet), which
 * takes it whole, in order, so that direct_plan_locked() will decode it
 * into that batch: the read-ahead leaves such blocks to the planner.
 * The batch's records are computed once per batch (c->ahead_recs).
 */
int direct_would_take(struct loader_core *c, uint64_t batch, uint32_t r,
		      uint64_t g)
{
	uint64_t first = c->block_first[g], n = c->block_first[g + 1] - first;
	uint32_t shard;

	if (!c->direct.on || c->cfg.shuffle > SLUICE_SHUFFLE_BLOCK ||
	    loader_block(c, g, &shard)->codec != DLS_CODEC_ZSTD ||
	    !row_aligned(c, r))
		return 0;
	if (!c->direct.ahead_recs_valid ||
	    c->direct.ahead_recs_pass != c->plan_pass ||
	    c->direct.ahead_recs_batch != batch) {
		c->direct.ahead_recs_count =
			sampler_batch(&c->sampler, batch, c->direct.ahead_recs);
		c->direct.ahead_recs_pass = c->plan_pass;
		c->direct.ahead_recs_batch = batch;
		c->direct.ahead_recs_valid = 1;
	}
	if (r + n > c->direct.ahead_recs_count)
		return 0;
	for (uint64_t k = 0; k < n; k++)
		if (c->direct.ahead_recs[r + k] != first + k)
			return 0;
	return 1;
}

/* Records [r, r + n) of @s are all of entry @i's block, in order. */
static int whole_block_at(const struct loader_core *c, const struct slot *s,
			  uint32_t i, uint32_t r, uint32_t *n)
{
	const struct cache_entry *e = &c->cache.entries[i];
	uint32_t count = (uint32_t)(c->block_first[e->block + 1] -
				    c->block_first[e->block]);

	if (s->rec_in_block[r] != 0 || r + count > s->count)
		return 0;
	for (uint32_t k = 0; k < count; k++)
		if (s->rec_entry[r + k] != i || s->rec_in_block[r + k] != k)
			return 0;
	*n = count;
	return 1;
}

/*
 * @s is planned (entries pinned, not yet read, not yet in the fifo):
 * point the decode of each zstd block it alone needs whole at its rows.
 * Takes the batch's memory when at least one block qualifies.
 */
void direct_plan_locked(struct loader_core *c, struct slot *s)
{
	uint64_t rb = c->ds->schema.fields[0].record_bytes;
	int any = 0;

	if (!c->direct.on || s->count == 0)
		return;
	for (uint32_t k = 0; k < s->nentries; k++)
		c->cache.entries[s->entries[k]].direct_slot = NULL;
	for (uint32_t r = 0; r < s->count;) {
		uint32_t i = s->rec_entry[r], n = 1, shard;
		struct cache_entry *e = &c->cache.entries[i];

		if (e->state == ENTRY_EMPTY && e->refs == 1 &&
		    loader_block(c, e->block, &shard)->codec == DLS_CODEC_ZSTD &&
		    whole_block_at(c, s, i, r, &n) && row_aligned(c, r)) {
			e->direct_row = r;
			e->direct_slot = s;
			any = 1;
		}
		r += n;
	}
	if (!any)
		return;
	s->tensors[0].shape[0] = s->count;
	s->host_bytes = slot_place_tensors(c, s);
	if (!batch_memory_take_early_locked(c, s)) {
		for (uint32_t k = 0; k < s->nentries; k++)
			c->cache.entries[s->entries[k]].direct_slot = NULL;
		return;
	}
	for (uint32_t k = 0; k < s->nentries; k++) {
		struct cache_entry *e = &c->cache.entries[s->entries[k]];

		if (e->direct_slot != s)
			continue;
		e->direct = s->host + s->tensors[0].offset +
			    (uint64_t)e->direct_row * rb;
		e->forget = 1;
	}
}
