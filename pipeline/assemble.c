/*
 * assemble.c - batch assembly: once a slot's blocks are decoded (or its
 * ranges read), size the batch, choose how it is placed (plan.c), take
 * its memory unless it is a view, carry the placement out (copy the
 * batch's runs, runs.c, from the decoded blocks into the slot's tensors,
 * or have the device gather them), then hand the slot to the copy stage
 * (slot_finish).
 *
 * Assembly is split into parts over disjoint record ranges so that all
 * workers copy at once; the variable fields' output offsets are computed
 * first (a cheap pass) so that every part knows where its bytes go.
 */
#include <errno.h>

#include "assemble_test.h"
#include "loader.h"

/* Drop the records whose block is corrupt (on_error=skip), keeping order. */
static uint32_t skip_failed_records(struct loader_core *c, struct slot *s)
{
	uint32_t kept = 0;

	for (uint32_t r = 0; r < s->count; r++) {
		if (s->rec_entry[r] == RANGE_ENTRY
			    ? !slot_ranges_keep(c, s, r, kept)
			    : c->cache.entries[s->rec_entry[r]].state ==
				      ENTRY_FAILED)
			continue;
		s->indices[kept] = s->indices[r];
		s->rec_entry[kept] = s->rec_entry[r];
		s->rec_in_block[kept] = s->rec_in_block[r];
		kept++;
	}
	return kept;
}

static int check_blocks_locked(struct loader_core *c, struct slot *s)
{
	int skip = 0;

	for (uint32_t k = 0; k < s->nentries; k++) {
		struct cache_entry *e = &c->cache.entries[s->entries[k]];

		if (e->state != ENTRY_FAILED)
			continue;
		if (!e->corrupt || c->cfg.on_error != SLUICE_ON_ERROR_SKIP)
			return e->error;
		skip = 1;
	}
	/* Records read by range that failed their checksum or read. */
	if (s->ranges.error)
		return s->ranges.error;
	for (uint32_t r = 0; r < s->count && s->ranges.nranged && !skip; r++) {
		if (s->rec_entry[r] != RANGE_ENTRY || !s->ranges.rec_bad[r])
			continue;
		if (c->cfg.on_error != SLUICE_ON_ERROR_SKIP)
			return -SLUICE_ECORRUPT;
		skip = 1;
	}
	if (skip) {
		uint32_t kept = skip_failed_records(c, s);

		s->delivered = kept;
	}
	return 0;
}

/* The global block of the slot's record @r. */
static uint64_t record_block(const struct loader_core *c,
			     const struct slot *s, uint32_t r)
{
	return s->rec_entry[r] == RANGE_ENTRY
		? s->ranges.rec_block[r]
		: c->cache.entries[s->rec_entry[r]].block;
}

/* The max_value_bytes of the shard a block belongs to: its own bound on
 * the values of variable field @f (verify checks the same). */
static uint64_t block_value_bound(const struct loader_core *c, uint64_t block,
				  uint32_t f)
{
	return c->ds->shards[c->block_shard[block]].max_value_bytes[f];
}

/* Fail the loader: record @index's value of field @f, in block @g, is
 * @len bytes, over the @bound its shard's header (and block) allow, or
 * (@moved) not the @bound its block's offsets table said at open (its
 * file changed since: chunks.c sized its room by it).  block_view_init()
 * refuses a value over its bound; batch memory is sized on the bound, so
 * the copies check again.  @return: -SLUICE_ECORRUPT. */
int value_over_bound_locked(struct loader_core *c, uint64_t g, uint64_t index,
			    uint32_t f, uint64_t len, uint64_t bound, int moved)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, g, &shard);

	loader_fail_locked(c, -SLUICE_ECORRUPT,
		"%s: block %llu: offset %llu: record %llu field %s: %llu bytes, %s %llu %s",
		c->ds->shards[shard].path,
		(unsigned long long)(g - c->shard_block_base[shard]),
		(unsigned long long)blk->offset, (unsigned long long)index,
		c->ds->schema.fields[f].f.name, (unsigned long long)len,
		moved ? "where its block's offsets table said" : "more than the",
		(unsigned long long)bound,
		moved ? "at open: the file changed since"
		      : "its shard's max_value_bytes allows");
	return -SLUICE_ECORRUPT;
}

/*
 * Size the batch: every tensor's batch dimension, or the items its
 * variable values hold, then its bytes.  A batch that could never fit the
 * batch memory is an error naming its largest value.
 */
static int measure_batch_locked(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t t = 0, n = s->delivered, big_r = 0, big_f = 0;
	uint64_t big_len = 0;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		const struct shard_field *fd = &sc->fields[f];
		struct tensor_desc *td = &s->tensors[t++];
		uint64_t items = 0;

		td->shape[0] = n;
		if (!fd->variable)
			continue;
		struct tensor_desc *aux = &s->tensors[t++];

		aux->shape[0] = c->cfg.pad_length ? n : n + 1;
		for (uint32_t r = 0; r < n; r++) {
			uint64_t g = record_block(c, s, r);
			const uint8_t *p;
			uint64_t len;

			/* ranges.c's were checked at open, as here */
			slot_record_field(c, s, r, f, &p, &len);
			if (len > block_value_bound(c, g, f))
				return value_over_bound_locked(c, g,
					s->indices[r], f, len,
					block_value_bound(c, g, f), 0);
			if (len > big_len) {
				big_len = len;
				big_r = r;
				big_f = f;
			}
			items += len / fd->unit_bytes;
		}
		if (!c->cfg.pad_length)
			td->shape[0] = (int64_t)items;
	}
	s->host_bytes = slot_place_tensors(c, s);
	if (s->host_bytes > c->batch_pool.size) {
		uint32_t shard = big_len
			? c->block_shard[record_block(c, s, big_r)] : 0;

		loader_fail_locked(c, -ENOSPC,
			"batch %llu of epoch %llu needs %llu bytes, more than the %llu bytes of batch memory memory_bytes allows; its largest value: %s: record %llu field %s, %llu bytes: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			(unsigned long long)s->batch,
			(unsigned long long)s->epoch,
			(unsigned long long)s->host_bytes,
			(unsigned long long)c->batch_pool.size,
			c->ds->nshards ? c->ds->shards[shard].path : "-",
			(unsigned long long)(big_len ? s->indices[big_r] : 0),
			sc->fields[big_f].f.name,
			(unsigned long long)big_len);
		return -ENOSPC;
	}
	return 0;
}

/* The offsets (in items of shape[1:]) or lengths of variable fields,
 * written into the batch's memory. */
static void write_variable_index(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t t = 0, n = s->delivered;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		const struct shard_field *fd = &sc->fields[f];

		t++;
		if (!fd->variable)
			continue;
		int64_t *out = (int64_t *)(void *)(s->host +
						   s->tensors[t++].offset);
		uint64_t items = 0;

		if (!c->cfg.pad_length)
			out[0] = 0;
		for (uint32_t r = 0; r < n; r++) {
			const uint8_t *p;
			uint64_t len;

			slot_record_field(c, s, r, f, &p, &len);
			len /= fd->unit_bytes;
			if (c->cfg.pad_length) {
				/* The true length: the values past pad_length
				 * are cut, and counted, not hidden. */
				out[r] = (int64_t)len;
				if (len > c->cfg.pad_length)
					s->truncated += len - c->cfg.pad_length;
			} else {
				items += len;
				out[r + 1] = (int64_t)items;
			}
		}
	}
}

static void slot_finish(struct loader_core *c, struct slot *s);

/*
 * All of the slot's pinned blocks are decoded (or failed).  A whole
 * batch: size it, then view its block, or ask for its memory; assembly
 * goes on in slot_continue_assembly_locked() once the memory is granted
 * (at once, or when batches are released).  A batch assembled by chunks
 * had its memory first: its current chunk is ready to copy (chunks.c).
 */
void slot_assemble_locked(struct loader_core *c, struct slot *s)
{
	int r;

	if (s->chunk.chunked) {
		s->place = PLACE_CHUNKS;
		chunk_ready_locked(c, s);
		return;
	}
	s->place = PLACE_UNSET;
	s->delivered = s->count;
	s->truncated = 0;
	r = check_blocks_locked(c, s);
	if (!r)
		r = measure_batch_locked(c, s);
	if (r) {
		/* No memory: the error is all this batch will deliver. */
		if (!s->error)
			s->error = r;
		s->state = SLOT_ASSEMBLING;
		batch_memory_free_locked(c, s);   /* direct.c's, if any */
		s->place = PLACE_FAILED;
		s->has_mem = 1;
		s->host = NULL;
		s->parts_left = 1;
		jobs_push_locked(c, (struct job){ JOB_ASSEMBLE, s->id, 0, 0 });
		return;
	}
	if (place_choose_locked(c, s) == PLACE_VIEW) {
		slot_view_locked(c, s);
		return;
	}
	if (s->has_mem) {
		/* direct.c took its memory when it was planned */
		slot_continue_assembly_locked(c, s);
		return;
	}
	s->state = SLOT_MEMORY;
	batch_memory_grant_locked(c);
	/* Still waiting: if the consumer holds all the memory, only next()
	 * can resolve it (budget.c). */
	if (!s->has_mem)
		pthread_cond_broadcast(&c->ready_cv);
}

/* The batch has its memory: gather it or copy the records in, in
 * parallel parts; a batch assembled by chunks starts claiming them
 * instead. */
void slot_continue_assembly_locked(struct loader_core *c, struct slot *s)
{
	if (s->ranges.awaits_memory) {
		/* nothing read yet: its reads go first (ranges.c) */
		ranges_memory_granted_locked(c, s);
		return;
	}
	s->state = SLOT_ASSEMBLING;
	s->place = place_choose_locked(c, s);
	/* stage.c fetches blocks only where every batch is gathered */
	if (s->place == PLACE_COPY && stage_slot_uses_locked(c, s)) {
		loader_fail_locked(c, -EIO,
			"internal error: batch %llu of epoch %llu would be copied by the CPU from a block whose bytes went only to the device (a fetched block)",
			(unsigned long long)s->batch,
			(unsigned long long)s->epoch);
		return;
	}
	if (s->place == PLACE_CHUNKS) {
		chunk_begin_locked(c, s);
		io_ring_wake(c->ring);  /* to claim its chunks (chunks.c) */
		return;
	}
	write_variable_index(c, s);
	/* Gathered batches only build their run table: one part.  Copies
	 * take enough records per part to amortise the hand-off. */
	assemble_jobs_push_locked(c, s, s->place == PLACE_GATHER
						? 1 : s->delivered / 32);
}

/* Queue slot @s's assembly as @parts jobs (1 to one per worker). */
void assemble_jobs_push_locked(struct loader_core *c, struct slot *s,
			       uint32_t parts)
{
	if (parts > c->nworkers)
		parts = c->nworkers;
	if (parts == 0)
		parts = 1;
	s->parts_left = parts;
	for (uint32_t p = 0; p < parts; p++)
		jobs_push_locked(c, (struct job){ JOB_ASSEMBLE, s->id, p, parts });
}

/* Runs a copying part makes and carries out at a time: on its stack. */
#define COPY_RUNS 256u

/* A frame of the slot's run @bad did not decode (@err): fail the batch
 * naming its block, found by where its bytes lie. */
static void frame_failed(struct loader_core *c, struct slot *s,
			 const struct batch_run *bad, int err)
{
	core_lock(c);
	for (uint32_t k = 0; k < s->nentries; k++) {
		const struct cache_entry *e = &c->cache.entries[s->entries[k]];
		uint32_t shard;
		const struct shard_block *blk;

		if (!e->frame_at || bad->src < e->frames)
			continue;
		blk = loader_block(c, e->block, &shard);
		if (bad->src >= e->frames + blk->stored_size)
			continue;
		loader_fail_locked(c, err,
			"%s: block %llu: offset %llu: a record's zstd frame at offset %llu does not decode to its %llu bytes: %s (corrupt block)",
			c->ds->shards[shard].path,
			(unsigned long long)(e->block -
					     c->shard_block_base[shard]),
			(unsigned long long)blk->offset,
			(unsigned long long)(blk->offset +
					     (uint64_t)(bad->src - e->frames)),
			(unsigned long long)bad->len, sluice_strerror(err));
		break;
	}
	if (!s->error)
		s->error = err;
	pthread_mutex_unlock(&c->mu);
}

/* Copy the runs of positions [lo, hi) of the slot (its records, or a
 * chunk's rows), a few at a time (runs.c), decoding records' frames
 * (framed.c) with @dctx.  @return: the bytes of the batch they make,
 * copied or found in place; *@decode_ns: the time frames took. */
static uint64_t copy_part(struct loader_core *c, struct slot *s, uint32_t lo,
			  uint32_t hi, ZSTD_DCtx *dctx, uint64_t *verify_ns,
			  uint64_t *decode_ns)
{
	struct batch_run runs[COPY_RUNS];
	struct runs_copied done = { 0 };
	struct run_cursor cur;
	uint32_t n;
	int r = 0;

	runs_start(s, lo, hi, &cur);
	while (!r && (n = runs_next(c, s, &cur, runs, COPY_RUNS)) > 0)
		r = runs_copy(s->host, runs, n, dctx, &done);
	if (r)
		frame_failed(c, s, done.bad, r);
	if (done.frames)
		atomic_fetch_add(&c->framed.records, done.frames);
	*verify_ns = cur.verify_ns;
	*decode_ns = done.decode_ns;
	/* the runs that did not move: the batch's bytes all the same */
	return done.bytes + cur.in_place;
}

/* The last part is done: unpin the blocks, start the device copy, and
 * make the slot visible to the consumer. */
static void slot_finish(struct loader_core *c, struct slot *s)
{
	char dev_msg[256] = "";
	const char *step = "copy";
	int r = 0, idle;

	/* Before its blocks are unpinned: an upload into their io memory
	 * then waits for this gather (gather.c). */
	if (s->place == PLACE_GATHER && !s->error) {
		r = gather_submit(c, s, &step);
		if (r)
			device_last_error(c->dev, dev_msg, sizeof(dev_msg));
	}
	core_lock(c);
	for (uint32_t k = 0; k < s->nentries; k++)
		cache_unpin(c, s->entries[k]);
	s->nentries = 0;
	slot_ranges_release_locked(c, s);
	pthread_mutex_unlock(&c->mu);
	io_ring_wake(c->ring);     /* entries are free again */

	if (!s->error && s->place != PLACE_GATHER &&
	    (c->dev_info.caps & DEVICE_CAP_MIRROR)) {
		struct slot_range used[LOADER_MAX_TENSORS];
		uint64_t t0 = now_ns(), bytes = 0;

		for (uint32_t k = 0; k < c->tensors_per_batch; k++) {
			used[k].offset = s->tensors[k].offset;
			used[k].len = tensor_bytes(&s->tensors[k]);
			bytes += used[k].len;
		}
		r = device_copy_slot_ranges(c->dev, s->id, s->host, used,
					    c->tensors_per_batch);
		if (r)
			device_last_error(c->dev, dev_msg, sizeof(dev_msg));
		loader_span(c, SLUICE_STAGE_COPY, t0, now_ns(), bytes);
		atomic_fetch_add(&c->st_copy.busy_ns, now_ns() - t0);
		atomic_fetch_add(&c->st_copy.bytes, bytes);
		atomic_fetch_add(&c->st_copy.ops, 1);
	}
	core_lock(c);
	if (r)
		loader_fail_locked(c, r, "%s of batch %llu on the device failed%s%s",
				   step, (unsigned long long)s->batch,
				   dev_msg[0] ? ": " : "", dev_msg);
	if (s->error)
		loader_fail_locked(c, s->error, "batch %llu failed",
				   (unsigned long long)s->batch);
	s->state = SLOT_READY;
	/* The planner may wait for nothing to be in flight to tell a batch
	 * that can never fit from one that waits for memory. */
	idle = --c->inflight == 0;
	pthread_cond_broadcast(&c->ready_cv);
	pthread_mutex_unlock(&c->mu);
	if (idle)
		io_ring_wake(c->ring);
}

#ifdef SLUICE_TESTING
void (*assemble_test_finish_hook)(struct loader_core *c);
#endif

/* Bytes the copy of the slot's records [0, @r) writes: their fixed rows
 * and, per variable field, the values before record @r, which the
 * field's offsets tensor holds (written before the parts start). */
static uint64_t bytes_before(const struct loader_core *c,
			     const struct slot *s, uint32_t r)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t bytes = 0;
	uint32_t t = 0;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		const struct shard_field *fd = &sc->fields[f];

		t++;
		if (!fd->variable) {
			bytes += (uint64_t)r * fd->record_bytes;
			continue;
		}
		bytes += (uint64_t)((const int64_t *)(const void *)
			 (s->host + s->tensors[t++].offset))[r] *
			 fd->unit_bytes;
	}
	return bytes;
}

/*
 * The first record of part @part of @parts of the slot's copy.  Parts
 * take equal bytes rather than equal records where values vary in size
 * (without pad_length): with 16 parts of 16 records each, one part of
 * large values would finish long after the others, and the batch with
 * it.  A value is never split, so a part may still take one large value.
 */
static uint32_t copy_part_start(const struct loader_core *c,
				const struct slot *s, uint32_t part,
				uint32_t parts)
{
	uint32_t n = s->delivered, lo = 0, hi = n;
	uint64_t want;

	if (!c->has_variable || c->cfg.pad_length || part == 0 ||
	    part == parts)
		return (uint32_t)((uint64_t)n * part / parts);
	/* a batch's bytes fit its memory: times parts (at most the
	 * workers), far from overflow */
	want = bytes_before(c, s, n) * part / parts;
	/* the first record whose copy starts at or past @want */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (bytes_before(c, s, mid) < want)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void run_assemble(struct loader_core *c, struct job j, ZSTD_DCtx *dctx)
{
	struct slot *s = c->slots[j.id];
	int last, next_chunk;

	if (j.parts) {
		/* a chunk's rows (positions in chunk.rows, chunks.c), or
		 * the whole batch's */
		int chunks = s->place == PLACE_CHUNKS;
		uint32_t base = chunks ? s->chunk.lo : 0;
		uint32_t n = chunks ? s->chunk.hi - base : s->delivered;
		/* a chunk's rows are all fixed-shape */
		uint32_t lo = chunks
			? base + (uint32_t)((uint64_t)n * j.part / j.parts)
			: copy_part_start(c, s, j.part, j.parts);
		uint32_t hi = chunks
			? base + (uint32_t)((uint64_t)n * (j.part + 1) / j.parts)
			: copy_part_start(c, s, j.part + 1, j.parts);
		uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns(), verify = 0;
		uint64_t bytes = 0, decode = 0;

		/* No copy reads this memory any more: it returned to the
		 * budget only after its last copy (batch.c, loader.c). */
		if (s->place == PLACE_GATHER)
			bytes = gather_plan(c, s);  /* the device copies */
		else
			bytes = copy_part(c, s, lo, hi, dctx, &verify,
					  &decode);
		atomic_fetch_add(&c->st_assemble.bytes, bytes);
		uint64_t t1 = now_ns(), cpu = thread_cpu_ns() - cpu0;

		/* Checksums checked while copying (ranges.c) are verify's,
		 * frames decoded (framed.c) decompress's */
		if (verify > cpu)
			verify = cpu;
		if (decode > cpu - verify)
			decode = cpu - verify;
		atomic_fetch_add(&c->cpu_verify_ns, verify);
		atomic_fetch_add(&c->cpu_decompress_ns, decode);
		atomic_fetch_add(&c->cpu_assemble_ns, cpu - verify - decode);

		loader_span(c, SLUICE_STAGE_ASSEMBLE, t0, t1, bytes);
		atomic_fetch_add(&c->st_assemble.busy_ns, t1 - t0);
		atomic_fetch_add(&c->st_assemble.ops, 1);
	}
	core_lock(c);
	last = --s->parts_left == 0;
	next_chunk = last && s->chunk.chunked && !chunk_done_locked(c, s);
	pthread_mutex_unlock(&c->mu);
	if (next_chunk) {
		io_ring_wake(c->ring);  /* the I/O thread claims it */
	} else if (last) {
		if (s->chunk.chunked && !s->error)
			chunk_compact(c, s);
#ifdef SLUICE_TESTING
		if (assemble_test_finish_hook)
			assemble_test_finish_hook(c);
#endif
		slot_finish(c, s);
	}
}
