/*
 * chunks.c - batches assembled a few blocks at a time (issue 12).
 *
 * Under full shuffle a batch's records live in as many blocks as it has
 * records; pinning them all at once (as the planner does for other
 * batches) needs batch_size blocks of io memory: a gigabyte for batch 256
 * of 4 MiB blocks.  A record's row in the batch is known before its block
 * is read, so such a batch takes its batch memory first (in batch order,
 * as budget.c requires), sorts its rows by block, and walks them in
 * chunks: the next c->need blocks are pinned all at once, read and
 * decoded; the assembly copies their rows into place (runs.c, in block
 * order); the blocks are unpinned and the next chunk goes.  io memory
 * then holds a chunk's blocks per batch in flight, not a batch's.  The
 * price: a block is read again for every batch that needs it once it has
 * left the cache, so chunks are only used when a batch's blocks do not
 * fit the budget (loader_open.c asks budget_open() first); raw data of
 * format v3 has record-range reads (ranges.c) instead.
 *
 * A variable field's values are not in memory before their blocks are
 * read, so each takes room for its length where the layout read at open
 * knows it (ranges_layout_open: raw blocks and v4 zstd frames), else for
 * its bound (its shard's max_value_bytes, at most its block's raw bytes:
 * v3 zstd blocks): the batch memory is granted for every value at its
 * room, each chunk copies its values to their room's place and notes
 * their lengths, and the last one moves them down into place
 * (chunk_compact).  With pad_length the rows are fixed-shape already.
 *
 * A chunk's blocks are claimed all or none, and a claimed chunk needs
 * nothing else to finish (its batch has its memory), so chunks never wait
 * on each other.  Records whose block fails (on_error=skip) would move
 * the rows after them: such loaders, and those reading record ranges
 * (ranges.c), pin whole batches as before.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"
#include "top_values.h"

/* Blocks pinned per chunk: enough for every worker to decode a few at
 * once; more only costs io memory. */
#define CHUNK_BLOCKS_PER_WORKER 4u
#define CHUNK_BLOCKS_MIN 8u

void chunks_init(struct loader_core *c)
{
	c->chunks.possible = !c->ranges.on &&
			     c->cfg.on_error != SLUICE_ON_ERROR_SKIP &&
			     c->ds->schema.nfields > 0;
}

/* Blocks a chunk may pin: the cache is sized for this many (c->need). */
uint64_t chunk_blocks(const struct loader_core *c)
{
	uint64_t n = (uint64_t)c->cfg.decode_threads * CHUNK_BLOCKS_PER_WORKER;

	return n < CHUNK_BLOCKS_MIN ? CHUNK_BLOCKS_MIN : n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

#define ROW_BITS 24     /* batch_size <= 1 << 24 (loader_config.c) */
#define ROW_MASK ((1ull << ROW_BITS) - 1)

/* The bytes a value of variable field @f in block @g may hold: its
 * shard's max_value_bytes, never more than the block's raw bytes. */
static uint64_t value_bound(const struct loader_core *c, uint64_t g,
			    uint32_t f)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, g, &shard);
	uint64_t most = c->ds->shards[shard].max_value_bytes[f];

	return most < blk->raw_size ? most : blk->raw_size;
}

/* The same in the field's items. */
static uint64_t value_bound_items(const struct loader_core *c, uint64_t g,
				  uint32_t f)
{
	return value_bound(c, g, f) / c->ds->schema.fields[f].unit_bytes;
}

/* Block @g's values of field @f have the lengths its layout said at
 * open. */
static int value_length_known(const struct loader_core *c, uint64_t g,
			      uint32_t f)
{
	return c->ranges.offs[f] && block_tables_known(c, g);
}

/* The items field @f's value of record @i of block @g takes room for:
 * its length where the layout read at open knows it, else its bound. */
static uint64_t value_room_items(const struct loader_core *c, uint64_t g,
				 uint32_t i, uint32_t f)
{
	uint64_t len;

	if (!value_length_known(c, g, f))
		return value_bound_items(c, g, f);
	record_field_in_block(c, g, i, f, &len);
	return len / c->ds->schema.fields[f].unit_bytes;
}

/*
 * The most @records records' variable values take at their rooms, as a
 * chunked batch is granted (size_tensors): for each field, the largest
 * @records rooms, so that budget_open() can size batch memory and refuse
 * at open what a batch could be refused later; exact where the layout is
 * known, an upper bound on any batch's values anyway.  0 with pad_length.
 * @return: 0, or -ENOMEM.
 */
int chunk_values_max(const struct loader_core *c, uint64_t records,
		     uint64_t *bytes)
{
	const struct shard_schema *sc = &c->ds->schema;
	int r = 0;

	*bytes = 0;
	if (!c->has_variable || c->cfg.pad_length || c->nblocks == 0)
		return 0;
	for (uint32_t f = 0; f < sc->nfields && !r; f++) {
		struct top_values t;
		uint64_t unit = sc->fields[f].unit_bytes;

		if (!sc->fields[f].variable)
			continue;
		top_values_init(&t, records);
		for (uint64_t g = 0; g < c->nblocks && !r; g++) {
			uint32_t shard;
			uint32_t n = loader_block(c, g, &shard)->record_count;

			if (!value_length_known(c, g, f)) {
				r = top_values_offer(&t, value_bound_items(c, g, f) *
						      unit, n);
				continue;
			}
			for (uint32_t i = 0; i < n && !r; i++)
				r = top_values_offer(&t, value_room_items(c, g, i,
								   f) * unit,
					      1);
		}
		*bytes += top_values_sum(&t);
		top_values_free(&t);
	}
	return r;
}

/* The global block of the record at sorted position @p. */
static uint64_t row_block(const struct slot *s, uint32_t p)
{
	return s->chunk.rows[p] >> ROW_BITS;
}

/* The batch dimension of every tensor; a variable field's values (without
 * pad_length) hold every record's at its room. */
static void size_tensors(struct loader_core *c, struct slot *s,
			 uint32_t count)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t t = 0;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		struct tensor_desc *values = &s->tensors[t++];
		uint64_t items = 0;

		values->shape[0] = count;
		if (!sc->fields[f].variable)
			continue;
		s->tensors[t++].shape[0] = c->cfg.pad_length ? count
							     : count + 1;
		if (c->cfg.pad_length)
			continue;
		/* batch_size x blocks of at most 2^34 bytes: no overflow */
		for (uint32_t p = 0; p < count; p++)
			items += value_room_items(c, row_block(s, p),
				s->rec_in_block[chunk_row(s, p)], f);
		values->shape[0] = (int64_t)items;
	}
}

/*
 * Plan @s, holding @count records of batch c->plan_batch: its rows are
 * known, and the room its variable values may take, so it asks for its
 * batch memory now; chunks_claim_locked() pins its blocks once it has it.
 * Its rows are sorted by block, so that each chunk takes all of a block's
 * rows and a block is read once per batch while it is cached.
 * @return: 0, or -ENOSPC when one batch is larger than the batch memory.
 */
int chunk_plan_locked(struct loader_core *c, struct slot *s, uint32_t count)
{
	for (uint32_t r = 0; r < count; r++) {
		uint64_t g = loader_block_of(c, s->indices[r]);

		s->rec_in_block[r] = (uint32_t)(s->indices[r] -
						c->block_first[g]);
		s->chunk.rows[r] = g << ROW_BITS | r;
	}
	qsort(s->chunk.rows, count, sizeof(*s->chunk.rows), cmp_u64);
	size_tensors(c, s, count);
	s->host_bytes = slot_place_tensors(c, s);
	if (s->host_bytes > c->batch_pool.size) {
		loader_fail_locked(c, -ENOSPC,
			"batch %llu of epoch %llu needs %llu bytes%s, more than the %llu bytes of batch memory memory_bytes allows: raise memory_bytes (sluice --memory, Python memory_bytes=) or lower batch_size",
			(unsigned long long)c->plan_batch,
			(unsigned long long)c->plan_epoch,
			(unsigned long long)s->host_bytes,
			c->has_variable && !c->cfg.pad_length
				? " with every value at its shard's max_value_bytes (a batch assembled a chunk of blocks at a time holds each value's bound)"
				: "",
			(unsigned long long)c->batch_pool.size);
		return -ENOSPC;
	}
	s->count = count;
	s->delivered = count;
	s->truncated = 0;
	s->nentries = 0;
	s->pending = 0;
	s->ranges.nranged = 0;
	s->chunk.lo = s->chunk.hi = 0;
	s->chunk.chunked = 1;
	return 0;
}

/* Pin the blocks of the rows from s->chunk.lo on (in block order), at
 * most c->need of them and io_need_bytes of io memory, and read those
 * not cached.  @return: 1 when
 * claimed, 0 when entries or io memory are short (nothing is pinned). */
static int claim_chunk_locked(struct loader_core *c, struct slot *s,
			      unsigned *nsubmit)
{
	uint32_t p = s->chunk.lo, shard;
	uint64_t last = UINT64_MAX, bytes = 0;

	s->nentries = 0;
	for (; p < s->count; p++) {
		uint64_t g = s->chunk.rows[p] >> ROW_BITS;
		uint32_t r = chunk_row(s, p), e;

		if (g != last) {
			/* at most c->need blocks and io_need_bytes (at most
			 * half the io memory), or one block: a chunk fits
			 * beside any other */
			uint64_t len = block_io_bytes(c, loader_block(c, g, &shard));

			if (s->nentries == c->need ||
			    (s->nentries && bytes + len > c->io_need_bytes))
				break;
			bytes += len;
			if (cache_claim(c, g, 0, &e) < 0) {
				for (uint32_t k = 0; k < s->nentries; k++)
					cache_unpin(c, s->entries[k]);
				s->nentries = 0;
				return 0;
			}
			s->entries[s->nentries++] = e;
			last = g;
		}
		s->rec_entry[r] = s->entries[s->nentries - 1];
	}
	s->chunk.hi = p;
	s->pending = 0;
	slot_await_entries_locked(c, s, nsubmit);
	c->chunks.inflight++;
	if (s->pending == 0)
		chunk_ready_locked(c, s);
	return 1;
}

/*
 * Claim the next chunk of every batch that has its memory and no chunk
 * in flight, in batch order; the reads go to c->submit.  When a chunk
 * cannot get its blocks with no other chunk or read-ahead in flight, the
 * cached blocks may split the io memory: they are dropped once, then the
 * chunk fails -ENOSPC.
 */
void chunks_claim_locked(struct loader_core *c, unsigned *nsubmit)
{
	for (uint32_t k = 0; k < c->fifo_len && !c->failed; k++) {
		struct slot *s = c->slots[c->fifo[(c->fifo_head + k) %
						  c->slots_cap]];

		if (!s->chunk.chunked || s->state != SLOT_ASSEMBLING ||
		    s->chunk.busy || s->chunk.lo >= s->count)
			continue;
		if (claim_chunk_locked(c, s, nsubmit)) {
			s->chunk.busy = 1;
			continue;
		}
		if (c->chunks.inflight || c->ahead.inflight)
			return;    /* their blocks come back: wait */
		cache_evict_all(c);
		if (claim_chunk_locked(c, s, nsubmit)) {
			s->chunk.busy = 1;
			continue;
		}
		loader_fail_locked(c, -ENOSPC,
			"batch %llu of epoch %llu: %llu blocks of its records do not fit at once in the %llu bytes of io memory memory_bytes leaves: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			(unsigned long long)s->batch,
			(unsigned long long)s->epoch,
			(unsigned long long)c->need,
			(unsigned long long)c->io_bytes);
		return;
	}
}

/*
 * The batch has its memory, before its first chunk: each variable
 * field's offsets put every value at its room's place (runs.c copies
 * there; chunk_compact() moves them down once all are in).
 */
void chunk_begin_locked(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t t = 0;

	if (c->cfg.pad_length)
		return;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		int64_t *index;
		uint64_t at = 0;

		t++;
		if (!sc->fields[f].variable)
			continue;
		index = (int64_t *)(void *)(s->host + s->tensors[t++].offset);
		/* in row order, which chunk_compact() relies on */
		for (uint32_t r = 0; r < s->count; r++) {
			index[r] = (int64_t)at;
			at += value_room_items(c,
				loader_block_of(c, s->indices[r]),
				s->rec_in_block[r], f);
		}
	}
}

/*
 * The values of the chunk's rows, now that their blocks are decoded:
 * each within its room (a larger one would run into the next value's:
 * value_over_bound_locked()), its items noted for chunk_compact(),
 * or with pad_length its length written, as assemble.c's
 * write_variable_index() does for whole batches.
 * @return: 0 or -SLUICE_ECORRUPT.
 */
static int note_values_locked(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t t = 0, k = 0;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		const struct shard_field *fd = &sc->fields[f];
		int64_t *index;

		t++;
		if (!fd->variable)
			continue;
		index = (int64_t *)(void *)(s->host + s->tensors[t++].offset);
		for (uint32_t p = s->chunk.lo; p < s->chunk.hi; p++) {
			uint32_t r = chunk_row(s, p);
			uint64_t g = row_block(s, p), len;
			uint64_t room = value_room_items(c, g,
				s->rec_in_block[r], f) * fd->unit_bytes;
			const uint8_t *v;

			slot_record_field(c, s, r, f, &v, &len);
			if (len > room ||
			    (len != room && value_length_known(c, g, f)))
				return value_over_bound_locked(c, g,
					s->indices[r], f, len, room,
					value_length_known(c, g, f));
			len /= fd->unit_bytes;
			if (!c->cfg.pad_length) {
				s->chunk.items[(uint64_t)r * c->nvariable + k] =
					len;
				continue;
			}
			index[r] = (int64_t)len;
			if (len > c->cfg.pad_length)
				s->truncated += len - c->cfg.pad_length;
		}
		k++;
	}
	return 0;
}

/* The chunk's blocks are decoded (or failed): copy its records into
 * their rows, in parallel parts; a failed block fails the batch. */
void chunk_ready_locked(struct loader_core *c, struct slot *s)
{
	uint32_t parts = (s->chunk.hi - s->chunk.lo) / 32;

	for (uint32_t k = 0; k < s->nentries; k++) {
		const struct cache_entry *e = &c->cache.entries[s->entries[k]];

		if (e->state == ENTRY_FAILED && !s->error)
			s->error = e->error;
	}
	if (!s->error && c->has_variable)
		s->error = note_values_locked(c, s);
	if (s->error) {
		s->parts_left = 1;
		jobs_push_locked(c, (struct job){ JOB_ASSEMBLE, s->id, 0, 0 });
		return;
	}
	assemble_jobs_push_locked(c, s, parts);
}

/*
 * The chunk's records are in their rows: unpin its blocks.  @return: 1
 * when the batch is done (the caller finishes it), 0 when the I/O thread
 * claims the next chunk.  The blocks go back before chunks.inflight
 * drops: the I/O thread takes "no chunk in flight" to mean that no io
 * memory will come back, and would fail a claim that only had to wait
 * for this chunk's.
 */
int chunk_done_locked(struct loader_core *c, struct slot *s)
{
	for (uint32_t k = 0; k < s->nentries; k++)
		cache_unpin(c, s->entries[k]);
	s->nentries = 0;
	c->chunks.inflight--;
	s->chunk.busy = 0;
	if (s->error || s->chunk.hi >= s->count) {
		s->chunk.lo = s->count;
		return 1;
	}
	s->chunk.lo = s->chunk.hi;
	return 0;
}

uint32_t chunk_row(const struct slot *s, uint32_t p)
{
	return (uint32_t)(s->chunk.rows[p] & ROW_MASK);
}

/*
 * Every chunk is in: move each variable field's values down from their
 * bounds' places, in row order (each lands at or before where it is, and
 * before the next one's), and write the true offsets and item count.
 * The batch keeps the memory of the bounds, and its copy to the device
 * moves only the tensors' bytes.
 */
void chunk_compact(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t t = 0, k = 0;

	if (!c->has_variable || c->cfg.pad_length)
		return;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		struct tensor_desc *values = &s->tensors[t++];
		uint64_t unit = sc->fields[f].unit_bytes, at = 0;
		uint8_t *base = s->host + values->offset;
		int64_t *index;

		if (!sc->fields[f].variable)
			continue;
		index = (int64_t *)(void *)(s->host + s->tensors[t++].offset);
		for (uint32_t r = 0; r < s->count; r++) {
			uint64_t n = s->chunk.items[(uint64_t)r *
						    c->nvariable + k];

			memmove(base + at * unit, base + index[r] * unit,
				n * unit);
			index[r] = (int64_t)at;
			at += n;
		}
		index[s->count] = (int64_t)at;
		values->shape[0] = (int64_t)at;
		values->bytes = tensor_bytes(values);
		k++;
	}
}
