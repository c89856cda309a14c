/*
 * ranges.c - record-range reads (issue 12): a batch reads only its
 * records' bytes, not their blocks.
 *
 * Under full shuffle nearly every record of a batch lives in another
 * block, and reading the block for one record multiplies the I/O by the
 * block's record count.  In a raw block a record's fields lie at known
 * offsets (one range per field, in its field's section), so the planner
 * reads those ranges instead: sorted by file and offset, each widened to
 * the ring's direct-I/O alignment, and neighbours whose envelopes touch or
 * lie within RANGE_GAP of each other merged into one read; all of a
 * batch's reads go in one submission, into one piece of the io pool.  Once
 * they are back, the decode workers check each record against its
 * format-v3 checksum (in parallel parts), and the assembly gathers the
 * records into the batch like any other.
 *
 * Where every field is fixed-shape the offsets follow from the schema.  A
 * variable field's values are found through its block's offsets table,
 * and every section after it moves with that block's values: the tables
 * and the sections' starts are read at open (ranges_open.c, 8 bytes per
 * record and variable field), so a record still costs one read per field
 * and the batch's size is known when it is planned.  A block whose layout
 * is bad is read whole, which reports it.
 *
 * Host batches whose records have one field to read, the rest kept in
 * memory, read it in place instead: each record straight into the
 * batch's own memory, taken when the batch is planned, and checked there
 * by the worker that read it (in_place_take_locked, ranges_open.c's
 * ranges_in_place_init).  From framed blocks, where each record is
 * frames of its own (16 KiB or more), its frames are read into io memory
 * and decoded straight into its row, and checked there by the worker
 * that decoded it (frames_in_place): no copy, and the checksum reads
 * bytes the decoder just wrote.
 *
 * Memory: the io piece is the batch's io memory from planning until its
 * assembly ends (or until it is dropped), taken like a block's (evicting
 * unpinned cached blocks), so the budget holds: a batch whose ranges do
 * not fit waits for the batches in flight; with nothing in flight, one
 * that reads in place waits for its batch memory instead (defer_locked),
 * and another's reads are joined only where they touch (no_io_locked).
 * The record checksums are loaded at open, 8 bytes per record, at most
 * SLUICE_RANGE_SUMS_MAX in all; shards past that (and v1/v2 shards) are
 * read by block while verify is on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

int slot_ranges_init(struct loader_core *c, struct slot *s)
{
	uint32_t b = c->cfg.batch_size;

	if (!c->ranges.on)
		return 0;
	s->ranges.rec_block = malloc(b * sizeof(*s->ranges.rec_block));
	s->ranges.rec_src = malloc((size_t)c->ranges.max_reads *
				   sizeof(*s->ranges.rec_src));
	s->ranges.order = malloc((size_t)c->ranges.max_reads *
				 sizeof(*s->ranges.order));
	s->ranges.rec_bad = malloc(b);
	s->ranges.reads = calloc(c->ranges.max_reads, sizeof(*s->ranges.reads));
	if (c->ranges.framed)
		s->ranges.spans = calloc(c->ranges.max_reads,
					 sizeof(*s->ranges.spans));
	if (!s->ranges.rec_block || !s->ranges.rec_src || !s->ranges.order ||
	    !s->ranges.rec_bad || !s->ranges.reads ||
	    (c->ranges.framed && !s->ranges.spans))
		return -ENOMEM;
	return 0;
}

void slot_ranges_free(struct slot *s)
{
	free(s->ranges.rec_block);
	free(s->ranges.rec_src);
	free(s->ranges.order);
	free(s->ranges.rec_bad);
	free(s->ranges.reads);
	free(s->ranges.spans);
}

static int by_file_offset(const void *pa, const void *pb)
{
	const struct range_piece *a = pa, *b = pb;

	if (a->file != b->file)
		return a->file < b->file ? -1 : 1;
	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	return a->slot_index < b->slot_index ? -1 : 1;
}

/* The pieces of the slot's range records (rec_entry RANGE_ENTRY), in
 * c->ranges.pieces sorted by file and offset. */
static uint32_t collect_pieces(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t n = 0;

	for (uint32_t r = 0; r < s->count; r++) {
		if (s->rec_entry[r] != RANGE_ENTRY)
			continue;
		uint64_t g = s->ranges.rec_block[r];
		uint32_t shard;
		const struct shard_block *blk = loader_block(c, g, &shard);
		const struct block_frames *fr = range_frames(c, g);

		for (uint32_t f = 0; f < sc->nfields; f++) {
			struct range_piece *p = &c->ranges.pieces[n];
			uint64_t off, len;

			if (c->ranges.resident[f])
				continue;
			off = record_field_in_block(c, g, s->rec_in_block[r],
						    f, &len);
			if (len == 0) {
				/* an empty value: nothing to read */
				s->ranges.rec_src[(uint64_t)r * sc->nfields +
						  f] = 0;
				continue;
			}
			*p = (struct range_piece){
				.file = shard,
				.slot_index = r * sc->nfields + f,
				.offset = blk->offset + off,
				.len = len,
				.block = UINT64_MAX,
			};
			if (fr) {
				/* its frames' stored bytes */
				p->block = g;
				p->in_block = off;
				p->k0 = block_frame_of(fr, off);
				p->k1 = block_frame_of(fr, off + len - 1);
				p->offset = blk->offset + fr->at[p->k0];
				p->len = fr->at[p->k1 + 1] - fr->at[p->k0];
			}
			n++;
		}
	}
	qsort(c->ranges.pieces, n, sizeof(*c->ranges.pieces), by_file_offset);
	return n;
}

/*
 * Coalesce the sorted pieces into reads (s->ranges.reads, buffer offsets from
 * 0), neighbours up to @gap apart, and point each record's fields at their
 * bytes.  A framed block's
 * pieces whose frames overlap are one span, read by one read and decoded
 * once, after the reads' bytes; with @rows (frames_in_place), each span
 * is one record's, decoded into its row, where rec_src points already.
 * @return: the bytes the reads and the spans take in buf.
 */
static uint64_t build_reads(struct loader_core *c, struct slot *s,
			    uint32_t npieces, int rows, uint64_t gap)
{
	uint64_t a = c->ring_info.alignment ? c->ring_info.alignment : 1;
	uint64_t total = 0;
	struct range_read *cur = NULL;
	struct range_span *span = NULL;

	s->ranges.nreads = 0;
	s->ranges.nspans = 0;
	for (uint32_t k = 0; k < npieces; k++) {
		const struct range_piece *p = &c->ranges.pieces[k];
		uint64_t start = p->offset & ~(a - 1);
		uint64_t end = align_up(p->offset + p->len, a);
		/* its frames overlap the span's: read and decoded with them */
		int joins = span && p->block == span->block &&
			    p->k0 <= span->k1 &&
			    cur == &s->ranges.reads[span->read];

		if (joins ||
		    (cur && cur->rd.file == p->file &&
		     start <= cur->rd.offset + cur->rd.length + gap &&
		     end - cur->rd.offset <= c->ranges.read_max)) {
			if (end > cur->rd.offset + cur->rd.length)
				cur->rd.length = end - cur->rd.offset;
		} else {
			if (cur)
				total += cur->rd.length;
			cur = &s->ranges.reads[s->ranges.nreads++];
			memset(cur, 0, sizeof(*cur));
			cur->rd.file = p->file;
			cur->rd.offset = start;
			cur->rd.length = end - start;
			cur->slot = s;
			cur->buf_off = total;
			cur->piece_lo = k;
			cur->span_lo = cur->span_hi = s->ranges.nspans;
		}
		cur->piece_hi = k + 1;
		s->ranges.order[k] = p->slot_index;
		if (p->offset + p->len - cur->rd.offset > cur->rd.min_length)
			cur->rd.min_length = p->offset + p->len - cur->rd.offset;
		if (p->block == UINT64_MAX) {
			s->ranges.rec_src[p->slot_index] =
				cur->buf_off + (p->offset - cur->rd.offset);
			continue;
		}
		if (!joins) {
			span = &s->ranges.spans[s->ranges.nspans++];
			*span = (struct range_span){
				.block = p->block, .k0 = p->k0, .k1 = p->k1,
				.read = (uint32_t)(cur - s->ranges.reads),
				.piece_lo = k,
				.stored_at = cur->buf_off +
					     (p->offset - cur->rd.offset),
			};
			cur->span_hi = s->ranges.nspans;
		} else if (p->k1 > span->k1) {
			span->k1 = p->k1;
		}
		span->piece_hi = k + 1;
		/* from the span's first decoded byte, until it has a place */
		if (!rows)
			s->ranges.rec_src[p->slot_index] = p->in_block -
				c->ranges.frames[p->block].raw[span->k0];
	}
	if (cur)
		total += cur->rd.length;
	for (uint32_t k = 0; k < s->ranges.nspans; k++) {
		struct range_span *sp = &s->ranges.spans[k];
		const struct block_frames *fr = &c->ranges.frames[sp->block];

		if (rows) {
			/* its record's row in host */
			sp->decoded_at =
				s->ranges.rec_src[s->ranges.order[sp->piece_lo]];
			continue;
		}
		total = align_up(total, 8);
		sp->decoded_at = total;
		total += fr->raw[sp->k1 + 1] - fr->raw[sp->k0];
		for (uint32_t q = sp->piece_lo; q < sp->piece_hi; q++)
			s->ranges.rec_src[s->ranges.order[q]] += sp->decoded_at;
	}
	return total;
}

/*
 * A batch whose every piece is its record's main field, read whole by a
 * worker (ranges.in_place): take its memory now and read each piece
 * straight to its place there, a read each.  Before, each went into io
 * memory, was checked from there and copied into the batch: on the VM,
 * a full shuffle of 16 KiB records 5.81 -> 7.05 GB/s, of 1 MiB records
 * 8.71 -> 16.16 (bench/results/2026-11-29-ranges-in-place.md).  Where
 * memory cannot be taken in batch order yet, the batch's ranges go
 * through io memory as before, or wait for the memory where io memory
 * has no room for them either (defer_locked).  Sets s->host_bytes.
 * @return: 1 when the batch reads in place.
 */
static int in_place_take_locked(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t t = 0;

	/* the batch's shapes, as measure_batch_locked will find them: a
	 * variable field (the main one, flat) holds its values' items,
	 * known from the offsets tables read at open */
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t items = 0;

		s->tensors[t++].shape[0] = s->count;
		if (!sc->fields[f].variable)
			continue;
		for (uint32_t r = 0; r < s->count; r++)
			items += range_len(c, s, r, f) /
				 sc->fields[f].unit_bytes;
		s->tensors[t - 1].shape[0] = (int64_t)items;
		s->tensors[t++].shape[0] = s->count + 1;
	}
	s->host_bytes = slot_place_tensors(c, s);
	return batch_memory_take_early_locked(c, s);
}

/* The tensor of field @f in a batch's layout. */
static uint32_t field_tensor(const struct loader_core *c, uint32_t f)
{
	uint32_t t = 0;

	for (uint32_t k = 0; k < f; k++)
		t += c->ds->schema.fields[k].variable ? 2 : 1;
	return t;
}

/* In place, each record's main field at its place in the batch: a fixed
 * field's row, a variable one's after the values before it (rec_src, an
 * offset in host). */
static void rows_in_place(struct loader_core *c, struct slot *s)
{
	uint32_t nf = c->ds->schema.nfields, m = c->ranges.main_field;
	uint64_t at = s->tensors[field_tensor(c, m)].offset;

	for (uint32_t r = 0; r < s->count; r++) {
		s->ranges.rec_src[(uint64_t)r * nf + m] = at;
		at += range_len(c, s, r, m);
	}
}

/* Framed blocks: is each of the @npieces sorted pieces frames of its own,
 * decoding to its bytes exactly, so that they may go straight into its
 * row?  (Records of 16 KiB or more are: block_frames.c cuts a frame at
 * the first record's end past 16 KiB.) */
static int pieces_own_frames(const struct loader_core *c,
			     const struct slot *s, uint32_t npieces)
{
	uint32_t nf = c->ds->schema.nfields;

	for (uint32_t k = 0; k < npieces; k++) {
		const struct range_piece *p = &c->ranges.pieces[k];
		const struct block_frames *fr;

		if (p->block == UINT64_MAX)
			return 0;
		fr = &c->ranges.frames[p->block];
		if (fr->raw[p->k0] != p->in_block ||
		    fr->raw[p->k1 + 1] - p->in_block !=
			    range_len(c, s, p->slot_index / nf,
				      p->slot_index % nf))
			return 0;
	}
	return 1;
}

/* In place: each sorted piece its own read, to its place in the batch:
 * a fixed field's row, a variable one's after the values before it. */
static void build_reads_in_place(struct loader_core *c, struct slot *s,
				 uint32_t npieces)
{
	rows_in_place(c, s);
	for (uint32_t k = 0; k < npieces; k++) {
		const struct range_piece *p = &c->ranges.pieces[k];
		struct range_read *rr = &s->ranges.reads[k];
		uint64_t row = s->ranges.rec_src[p->slot_index];

		*rr = (struct range_read){
			.rd = { .file = p->file, .offset = p->offset,
				.length = p->len, .min_length = p->len },
			.slot = s, .buf_off = row,
			.piece_lo = k, .piece_hi = k + 1,
			.span_lo = 0, .span_hi = 0,
		};
		s->ranges.order[k] = p->slot_index;
	}
	s->ranges.nreads = npieces;
	s->ranges.nspans = 0;
}

static int record_bad(const struct loader_core *c, const struct slot *s,
		      uint32_t r);
static void ranges_report_locked(struct loader_core *c, struct slot *s);

/* The slot's range records need no read: check them now (their bytes
 * are few). */
static void check_unread_locked(struct loader_core *c, struct slot *s)
{
	memset(s->ranges.rec_bad, 0, c->cfg.batch_size);
	s->ranges.verify_in_copy = 0;
	for (uint32_t r = 0; r < s->count; r++)
		if (s->rec_entry[r] == RANGE_ENTRY)
			s->ranges.rec_bad[r] = (uint8_t)record_bad(c, s, r);
	ranges_report_locked(c, s);
	atomic_fetch_add(&c->ranges.records, s->ranges.nranged);
}

/* ranges.device: the bytes the range records' resident fields take in
 * the slot's buffer, each field's values 8-aligned. */
static uint64_t resident_bytes(const struct loader_core *c,
			       const struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t n = 0;

	for (uint32_t f = 0; f < sc->nfields; f++)
		if (c->ranges.resident[f])
			n += align_up((uint64_t)s->ranges.nranged *
				      sc->fields[f].record_bytes, 8);
	return n;
}

/* ranges.device: copy the range records' resident fields after the
 * reads' bytes, where the device's gather finds them once uploaded
 * (gather_submit), and point the records at them. */
static void copy_resident(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t at = s->ranges.resident_off;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t rb = sc->fields[f].record_bytes;

		if (!c->ranges.resident[f])
			continue;
		for (uint32_t r = 0; r < s->count; r++) {
			if (s->rec_entry[r] != RANGE_ENTRY)
				continue;
			memcpy(s->ranges.buf + at,
			       c->ranges.resident[f] + s->indices[r] * rb, rb);
			s->ranges.rec_src[(uint64_t)r * sc->nfields + f] = at;
			at += rb;
		}
		at = align_up(at, 8);
	}
}

/* The slot's reads are built: hand them to c->submit, where they land
 * (in the batch's own memory, in place, else in buf). */
static void submit_reads_locked(struct loader_core *c, struct slot *s,
				unsigned *nsubmit)
{
	for (uint32_t k = 0; k < s->ranges.nreads; k++) {
		struct range_read *rr = &s->ranges.reads[k];

		rr->rd.buf = (s->ranges.in_place && !s->ranges.frames_in_place
			      ? s->host : s->ranges.buf) + rr->buf_off;
		rr->rd.user = NULL;
		c->submit[(*nsubmit)++] = &rr->rd;
	}
	s->ranges.reads_pending = s->ranges.nreads;
	s->pending++;            /* all of its ranges, as one */
	atomic_fetch_add(&c->ranges.reads, s->ranges.nreads);
	atomic_fetch_add(&c->ranges.records, s->ranges.nranged);
	if (s->ranges.in_place)
		atomic_fetch_add(&c->ranges.records_in_place,
				 s->ranges.nranged);
	if (s->ranges.frames_in_place)
		atomic_fetch_add(&c->framed.records, s->ranges.nranged);
}

/*
 * A batch that could read in place but cannot take its memory yet, and
 * whose ranges io memory cannot hold either, with nothing in flight to
 * free any: it waits for its batch memory like any batch (the io thread
 * plans it as SLOT_MEMORY), and reads in place once it has it
 * (ranges_read_granted_locked).  Only a batch with no block to read
 * whole, whose grant then nothing else can race, and whose memory the
 * batch pool can hold.  Failing it instead refused values of 0, 5 or 10
 * MB, batch 16, shuffle block, whose largest batch fit the default's
 * cap: each batch's 100 MB of ranges found io memory half of the budget
 * (budget sweep 242).
 */
static void defer_locked(struct slot *s)
{
	s->ranges.awaits_memory = 1;
	s->ranges.in_place = 0;
	s->ranges.nreads = 0;
	s->ranges.nspans = 0;
}

/* The io memory the slot's reads take, neighbours joined up to @gap
 * apart, and its resident fields' for the device (copy_resident). */
static uint64_t reads_len(struct loader_core *c, struct slot *s,
			  uint32_t npieces, uint64_t gap)
{
	uint64_t len = build_reads(c, s, npieces, s->ranges.frames_in_place,
				   gap);

	if (c->ranges.device) {
		s->ranges.resident_off = align_up(len, 8);
		s->ranges.resident_len = resident_bytes(c, s);
		len = s->ranges.resident_off + s->ranges.resident_len;
	}
	return len;
}

/*
 * The slot's ranges (@len bytes) find no io memory.  @return: 0 (wait
 * for the batches in flight), -EAGAIN (nothing in flight: compact the io
 * memory and plan again), 1 (deferred: s->ranges.awaits_memory; or its
 * reads, no longer joined over gaps, took io memory: *@len), -ENOSPC
 * (the loader failed).
 */
static int no_io_locked(struct loader_core *c, struct slot *s,
			uint32_t npieces, int in_place, uint64_t *len)
{
	/* the batch memory it took, back (nothing waits for it: it took
	 * it only as every batch before it had theirs) */
	batch_memory_free_locked(c, s);
	if (c->inflight || c->ahead.inflight)
		return 0;
	/* the batch's own blocks, pinned before, may split the free
	 * memory: the caller drops every cached block and plans it once
	 * more (first fit: its blocks go first, the ranges after them) */
	if (!c->plan_compacted)
		return -EAGAIN;
	if (in_place && !c->ranges.framed && s->nentries == 0 &&
	    s->host_bytes <= c->batch_pool.size) {
		defer_locked(s);
		return 1;
	}
	/* Neighbours joined only where their reads touch: the reads then
	 * take the ranges' own bytes, which the budget's odds count (joined
	 * over 16 KiB gaps, a full shuffle's batch of 32 records of 8 KiB
	 * took 438 KB, where 278 KB of io memory held their 262). */
	if (!s->ranges.in_place) {
		uint32_t joined = s->ranges.nreads;
		uint64_t exact = reads_len(c, s, npieces, 0);

		if (s->ranges.nreads > joined &&
		    !cache_alloc_io(c, exact, &s->ranges.off)) {
			*len = exact;
			return 1;
		}
	}
	if (in_place && s->host_bytes > c->batch_pool.size)
		loader_fail_locked(c, -ENOSPC,
			"batch %llu of epoch %llu: its %u records take %llu bytes, more than the %llu bytes of batch memory memory_bytes allows (and their ranges more than its %llu bytes of io memory): raise memory_bytes (sluice --memory, Python memory_bytes=)",
			(unsigned long long)c->plan_batch,
			(unsigned long long)c->plan_epoch, s->ranges.nranged,
			(unsigned long long)s->host_bytes,
			(unsigned long long)c->batch_pool.size,
			(unsigned long long)c->io_bytes);
	else
		loader_fail_locked(c, -ENOSPC,
			"batch %llu of epoch %llu: its %u records read by range take %llu bytes of io memory, more than the %llu bytes memory_bytes leaves beside the cached blocks it needs: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			(unsigned long long)c->plan_batch,
			(unsigned long long)c->plan_epoch, s->ranges.nranged,
			(unsigned long long)*len,
			(unsigned long long)c->io_bytes);
	return -ENOSPC;
}

/*
 * The slot's records are assigned (rec_entry RANGE_ENTRY for those read
 * by range, rec_block set): plan their reads into io memory and append
 * them to c->submit.  @return: 1 when planned (or none to read, or to be
 * read once the batch has its memory: s->ranges.awaits_memory), 0 when
 * the io memory is not free yet (the caller undoes its plan and waits),
 * -EAGAIN when nothing is in flight to free it (the caller compacts the
 * io memory and plans again), -ENOSPC when it never will be (the loader
 * failed).
 */
int ranges_plan_locked(struct loader_core *c, struct slot *s,
		       unsigned *nsubmit)
{
	uint32_t npieces;
	uint64_t len;
	int in_place;

	s->ranges.len = 0;
	s->ranges.buf = NULL;
	s->ranges.resident_len = 0;
	s->ranges.failed = 0;
	s->ranges.error = 0;
	s->ranges.reads_pending = 0;
	s->ranges.awaits_memory = 0;
	if (s->ranges.nranged == 0)
		return 1;
	npieces = collect_pieces(c, s);
	/* framed: in place where each record's frames are its own, read
	 * into io memory and decoded into its row */
	s->ranges.frames_in_place = 0;
	in_place = npieces && c->ranges.in_place &&
		   (!c->ranges.framed || pieces_own_frames(c, s, npieces));
	s->ranges.in_place = in_place && in_place_take_locked(c, s);
	if (s->ranges.in_place && !c->ranges.framed) {
		build_reads_in_place(c, s, npieces);
		len = 0;        /* no io memory: every byte is in place */
	} else {
		s->ranges.frames_in_place = s->ranges.in_place;
		if (s->ranges.frames_in_place)
			rows_in_place(c, s);
		len = reads_len(c, s, npieces, RANGE_GAP);
	}
	/* Every value empty, every other field kept since open: nothing
	 * to read (nor to upload), and no completion to wait for. */
	if (s->ranges.nreads == 0 && s->ranges.resident_len == 0) {
		check_unread_locked(c, s);
		return 1;
	}
	if (len && cache_alloc_io(c, len, &s->ranges.off)) {
		int r = no_io_locked(c, s, npieces, in_place, &len);

		if (r <= 0 || s->ranges.awaits_memory)
			return r;
	}
	s->ranges.len = len;
	s->ranges.buf = len ? c->arena + s->ranges.off : NULL;
	memset(s->ranges.rec_bad, 0, c->cfg.batch_size);
	if (c->ranges.device)
		copy_resident(c, s);
	if (s->ranges.nreads == 0) {
		check_unread_locked(c, s);
		return 1;
	}
	submit_reads_locked(c, s, nsubmit);
	return 1;
}

/* A deferred batch (defer_locked) has its memory: its reads are for the
 * io thread to submit (ranges_read_granted_locked). */
void ranges_memory_granted_locked(struct loader_core *c, struct slot *s)
{
	s->state = SLOT_WAITING;
	s->ranges.awaits_memory = 2;
	c->ranges.granted++;
	io_ring_wake(c->ring);
}

/* The io thread: the first deferred batch that has its memory now, its
 * reads in place appended to c->submit.  @return: 1 when there was one
 * (its reads go in one submission, as a planned batch's do), else 0. */
int ranges_read_granted_locked(struct loader_core *c, unsigned *nsubmit)
{
	for (uint32_t k = 0; c->ranges.granted && k < c->fifo_len; k++) {
		struct slot *s = c->slots[c->fifo[(c->fifo_head + k) %
						  c->slots_cap]];
		uint32_t npieces;

		if (s->ranges.awaits_memory != 2)
			continue;
		s->ranges.awaits_memory = 0;
		c->ranges.granted--;
		npieces = collect_pieces(c, s);
		s->ranges.in_place = 1;
		build_reads_in_place(c, s, npieces);
		memset(s->ranges.rec_bad, 0, c->cfg.batch_size);
		submit_reads_locked(c, s, nsubmit);
		return 1;
	}
	return 0;
}

/* Give the slot's range memory back (its assembly is over, or it was
 * dropped). */
void slot_ranges_release_locked(struct loader_core *c, struct slot *s)
{
	if (s->ranges.len)
		pool_free(&c->io_pool, s->ranges.off, s->ranges.len);
	s->ranges.len = 0;
	s->ranges.buf = NULL;
}

static void report_bad_locked(struct loader_core *c, const struct slot *s,
			      uint32_t r);

/* Every range is checked: count the records' bytes, report the bad ones,
 * then the slot goes on like one whose blocks are all decoded. */
static void ranges_checked_locked(struct loader_core *c, struct slot *s)
{
	ranges_report_locked(c, s);
	if (--s->pending == 0)
		slot_assemble_locked(c, s);
}

static void ranges_report_locked(struct loader_core *c, struct slot *s)
{
	uint64_t bytes = 0;

	/* "decoded": what the records hold, as a block's raw bytes are */
	for (uint32_t r = 0; r < s->count; r++) {
		if (s->rec_entry[r] != RANGE_ENTRY)
			continue;
		for (uint32_t f = 0; f < c->ds->schema.nfields; f++) {
			const uint8_t *p;
			uint64_t len;

			range_field(c, s, r, f, &p, &len);
			bytes += len;
		}
	}
	atomic_fetch_add(&c->st_decode.bytes, bytes);
	for (uint32_t r = 0; r < s->count; r++)
		if (s->rec_entry[r] == RANGE_ENTRY && s->ranges.rec_bad[r])
			report_bad_locked(c, s, r);
}

/* Record @r failed its checksum or its read: say which, where. */
static void report_bad_locked(struct loader_core *c, const struct slot *s,
			      uint32_t r)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, s->ranges.rec_block[r],
						     &shard);
	uint64_t len, at = record_field_at(c, s->ranges.rec_block[r],
					   s->rec_in_block[r], 0, &len);

	loader_block_failed_locked(c, -SLUICE_ECORRUPT, 1,
		"%s: block %llu: offset %llu: record %llu: %s",
		c->ds->shards[shard].path,
		(unsigned long long)(s->ranges.rec_block[r] -
				     c->shard_block_base[shard]),
		(unsigned long long)at,
		(unsigned long long)(blk->first_record + s->rec_in_block[r]),
		s->ranges.rec_bad[r] == RANGE_BAD_READ
			? "read failed: file truncated"
		: s->ranges.rec_bad[r] == RANGE_BAD_FRAME
			? "a zstd frame of it does not decode to its seek table's size (corrupt block)"
			: "record checksum mismatch (corrupt record)");
}

static void ranges_landed_locked(struct loader_core *c, struct slot *s);

/* Queue @parts jobs of @kind for @s, at least one and at most one per
 * worker.  @return: how many. */
static uint32_t push_parts_locked(struct loader_core *c, struct slot *s,
				  enum job_kind kind, uint32_t parts)
{
	if (parts > c->nworkers)
		parts = c->nworkers;
	if (parts == 0)
		parts = 1;
	for (uint32_t p = 0; p < parts; p++)
		jobs_push_locked(c, (struct job){ kind, s->id, p, parts });
	return parts;
}

int range_read_done_locked(struct loader_core *c, struct io_read *rd)
{
	struct range_read *rr = (struct range_read *)(void *)rd;
	struct slot *s = rr->slot;
	uint32_t undecoded;

	if (rd->result >= 0) {
		loader_span(c, SLUICE_STAGE_READ, rr->submit_ns, now_ns(),
			    (uint64_t)rd->result);
		atomic_fetch_add(&c->st_read.bytes, (uint64_t)rd->result);
		atomic_fetch_add(&c->st_read.ops, 1);
	} else {
		/* A file shorter than its index says is damaged data (its
		 * records are skippable); anything else is fatal. */
		rr->error = (int)rd->result;
		s->ranges.failed = 1;
		if (rr->error != -ENODATA && !s->ranges.error) {
			s->ranges.error = rr->error;
			loader_fail_locked(c, rr->error,
					   "%s: offset %llu: read failed: %s",
					   c->ds->shards[rd->file].path,
					   (unsigned long long)rd->offset,
					   strerror(-rr->error));
		}
	}
	if (--s->ranges.reads_pending > 0)
		return 0;
	undecoded = 0;
	for (uint32_t k = 0; k < s->ranges.nreads; k++)
		if (!s->ranges.reads[k].decoded)
			undecoded += s->ranges.reads[k].span_hi -
				     s->ranges.reads[k].span_lo;
	if (undecoded) {
		/* the framed blocks' frames the ring read: each span a few
		 * frames, enough of them per part to amortise the hand-off */
		s->ranges.spans_parts_left =
			push_parts_locked(c, s, JOB_RANGES_DECODE, undecoded / 8);
		return 1;
	}
	ranges_landed_locked(c, s);
	return 1;
}

/* Every range of @s is in its buffer (and decoded): check the records,
 * in the copy or in parts before it. */
static void ranges_landed_locked(struct loader_core *c, struct slot *s)
{
	/* checked where their workers read them (ranges_check_fetched) */
	if (c->ranges.device || s->ranges.in_place) {
		s->ranges.verify_in_copy = 0;
		ranges_checked_locked(c, s);
		return;
	}
	/* A bad record fails the batch (on_error=fail): check each right
	 * before its copy, while its bytes are in the cache.  With skip the
	 * records are checked first, since a dropped one moves the rest. */
	s->ranges.verify_in_copy = c->cfg.verify && !s->ranges.failed &&
				   c->cfg.on_error != SLUICE_ON_ERROR_SKIP;
	if ((!c->cfg.verify && !s->ranges.failed) || s->ranges.verify_in_copy) {
		ranges_checked_locked(c, s);
		return;
	}
	/* Enough records per part to amortise the hand-off. */
	s->ranges.parts_left = push_parts_locked(c, s, JOB_RANGES,
						 s->ranges.nranged / 32);
}

/* Mark the records with a piece in span @sp bad (@why), under the lock:
 * a record's pieces may lie in spans other parts decode. */
static void span_bad(struct loader_core *c, struct slot *s,
		     const struct range_span *sp, enum range_bad why)
{
	uint32_t nf = c->ds->schema.nfields;

	core_lock(c);
	for (uint32_t k = sp->piece_lo; k < sp->piece_hi; k++)
		s->ranges.rec_bad[s->ranges.order[k] / nf] = (uint8_t)why;
	s->ranges.failed = 1;
	pthread_mutex_unlock(&c->mu);
}

/* Range record @r against its record checksum, its main field's bytes
 * at @main (NULL: where range_field() finds them).  @return: 0, or
 * RANGE_BAD_SUM. */
static int record_sum_bad(const struct loader_core *c, const struct slot *s,
			  uint32_t r, const uint8_t *main)
{
	const struct shard_schema *sc = &c->ds->schema;
	const uint8_t *ptr[DLS_MAX_FIELDS];
	uint64_t len[DLS_MAX_FIELDS];
	uint32_t shard;
	const struct shard_block *blk;

	for (uint32_t f = 0; f < sc->nfields; f++)
		range_field(c, s, r, f, &ptr[f], &len[f]);
	if (main)
		ptr[c->ranges.main_field] = main;
	blk = loader_block(c, s->ranges.rec_block[r], &shard);
	return record_checksum(sc->nfields, ptr, len) !=
	       c->ranges.record_sums[shard][blk->first_record +
					    s->rec_in_block[r]]
	       ? RANGE_BAD_SUM : 0;
}

/* frames_in_place: check record @r, its main field just decoded into
 * its row (its other fields are resident: ranges_in_place_init), while
 * the cache holds it.  One worker decodes each record's span: the lock
 * taken after orders the mark before the batch's report. */
static void check_decoded(struct loader_core *c, struct slot *s, uint32_t r)
{
	s->ranges.rec_bad[r] = (uint8_t)record_sum_bad(c, s, r, NULL);
}

/* Decode span @sp of @s where its read left it, or mark its records bad:
 * its read failed, or its frames do not decode to their table's sizes.
 * frames_in_place: into its record's row, and checked there.  @return:
 * the time the check took (verify's, by the wall clock). */
static uint64_t span_decode(struct loader_core *c, struct slot *s,
			    const struct range_span *sp, ZSTD_DCtx *dctx)
{
	const struct block_frames *fr = &c->ranges.frames[sp->block];
	uint8_t *into = (s->ranges.frames_in_place ? s->host : s->ranges.buf) +
			sp->decoded_at;

	if (s->ranges.reads[sp->read].error ||
	    s->ranges.reads[sp->read].rd.result < 0)
		span_bad(c, s, sp, RANGE_BAD_READ);
	else if (!dctx || block_frames_decode(dctx, fr, sp->k0, sp->k1,
					      s->ranges.buf + sp->stored_at,
					      into) < 0)
		span_bad(c, s, sp, RANGE_BAD_FRAME);
	else if (s->ranges.frames_in_place && c->cfg.verify) {
		uint64_t t0 = now_ns();

		check_decoded(c, s, s->ranges.order[sp->piece_lo] /
				    c->ds->schema.nfields);
		return now_ns() - t0;
	}
	return 0;
}

/*
 * The worker that read @rr decodes its spans at once, while their bytes
 * are in its cache (fetch_ranges, unlocked; the lock it takes next orders
 * this before the batch goes on).  Timed by the wall clock, counted as
 * decompress CPU: a thread CPU clock is a system call, and this runs
 * once a record (the scheduler's accounting those calls take was 2% of
 * a full shuffle's profile on the VM).  @return: the time it took.
 */
uint64_t ranges_decode_read(struct loader_core *c, struct range_read *rr,
			    ZSTD_DCtx *dctx)
{
	struct slot *s = rr->slot;
	uint64_t t0, checks = 0;

	if (rr->span_lo == rr->span_hi)
		return 0;
	t0 = now_ns();
	for (uint32_t k = rr->span_lo; k < rr->span_hi; k++)
		checks += span_decode(c, s, &s->ranges.spans[k], dctx);
	rr->decoded = 1;
	t0 = now_ns() - t0;
	atomic_fetch_add(&c->cpu_decompress_ns, t0 - checks);
	atomic_fetch_add(&c->cpu_verify_ns, checks);
	atomic_fetch_add(&c->st_decode.busy_ns, t0);
	return t0;
}

/*
 * A decode worker decodes part @j.part of the slot's spans that their
 * reads' workers did not (ring reads): each span's frames from their
 * stored bytes to their place after the reads' bytes.  Bad spans mark
 * their records; the checks after report them.
 */
void ranges_decode_part(struct loader_core *c, struct job j,
			ZSTD_DCtx *dctx)
{
	struct slot *s = c->slots[j.id];
	uint32_t lo = (uint32_t)((uint64_t)s->ranges.nspans * j.part / j.parts);
	uint32_t hi = (uint32_t)((uint64_t)s->ranges.nspans * (j.part + 1) /
				 j.parts);
	uint64_t cpu0 = thread_cpu_ns(), t0 = now_ns(), checks = 0, cpu;

	for (uint32_t k = lo; k < hi; k++) {
		const struct range_span *sp = &s->ranges.spans[k];

		if (!s->ranges.reads[sp->read].decoded)
			checks += span_decode(c, s, sp, dctx);
	}
	cpu = thread_cpu_ns() - cpu0;
	atomic_fetch_add(&c->cpu_decompress_ns, cpu > checks ? cpu - checks : 0);
	atomic_fetch_add(&c->cpu_verify_ns, checks);
	atomic_fetch_add(&c->st_decode.busy_ns, now_ns() - t0);
	core_lock(c);
	if (--s->ranges.spans_parts_left == 0)
		ranges_landed_locked(c, s);
	pthread_mutex_unlock(&c->mu);
}

/* Did the read holding ranges.buf offset @off fail? */
static int range_lost(const struct slot *s, uint64_t off)
{
	uint32_t lo = 0, hi = s->ranges.nreads;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (s->ranges.reads[mid].buf_off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return s->ranges.reads[lo].error != 0;
}

/* Range record @r: 0, or why it is bad (enum range_bad). */
static int record_bad(const struct loader_core *c, const struct slot *s,
		      uint32_t r)
{
	const struct shard_schema *sc = &c->ds->schema;
	const uint64_t *src = &s->ranges.rec_src[(uint64_t)r * sc->nfields];
	/* a framed block's record was marked as its frames were decoded */
	int framed = range_frames(c, s->ranges.rec_block[r]) != NULL;

	if (s->ranges.rec_bad[r])
		return s->ranges.rec_bad[r];
	/* an empty value was not read; in place, a failed read's records
	 * were marked as it came back */
	for (uint32_t f = 0; !framed && s->ranges.failed &&
			     !s->ranges.in_place && f < sc->nfields; f++)
		if (!c->ranges.resident[f] && range_len(c, s, r, f) &&
		    range_lost(s, src[f]))
			return RANGE_BAD_READ;
	return c->cfg.verify ? record_sum_bad(c, s, r, NULL) : 0;
}

/*
 * Assembly (s->verify_in_copy): check range record @r before its copy.
 * @return: 0, or -SLUICE_ECORRUPT after failing the loader with the
 * record's file and offset.
 */
int range_record_check(struct loader_core *c, struct slot *s, uint32_t r)
{
	int bad = record_bad(c, s, r);

	if (!bad)
		return 0;
	core_lock(c);
	s->ranges.rec_bad[r] = (uint8_t)bad;
	report_bad_locked(c, s, r);
	if (!s->error)
		s->error = -SLUICE_ECORRUPT;
	pthread_mutex_unlock(&c->mu);
	return -SLUICE_ECORRUPT;
}

/* A decode worker checks records [lo, hi) of the slot's range records. */
void ranges_verify_part(struct loader_core *c, struct job j)
{
	struct slot *s = c->slots[j.id];
	uint32_t lo = (uint32_t)((uint64_t)s->count * j.part / j.parts);
	uint32_t hi = (uint32_t)((uint64_t)s->count * (j.part + 1) / j.parts);
	uint64_t cpu0 = thread_cpu_ns();
	int last;

	for (uint32_t r = lo; r < hi; r++)
		if (s->rec_entry[r] == RANGE_ENTRY)
			s->ranges.rec_bad[r] = (uint8_t)record_bad(c, s, r);
	atomic_fetch_add(&c->cpu_verify_ns, thread_cpu_ns() - cpu0);
	core_lock(c);
	last = --s->ranges.parts_left == 0;
	if (last)
		ranges_checked_locked(c, s);
	pthread_mutex_unlock(&c->mu);
}

/*
 * on_error=skip: move the range bookkeeping of record @from to @to (the
 * caller compacts the slot's records).  @return: 0 when @from is a bad
 * range record, to be dropped; else 1.
 */
uint32_t slot_ranges_keep(const struct loader_core *c, struct slot *s,
			  uint32_t from, uint32_t to)
{
	uint32_t nf = c->ds->schema.nfields;

	if (s->rec_entry[from] != RANGE_ENTRY)
		return 1;
	if (s->ranges.rec_bad[from])
		return 0;
	if (from != to) {
		s->ranges.rec_block[to] = s->ranges.rec_block[from];
		s->ranges.rec_bad[to] = 0;
		memmove(&s->ranges.rec_src[(uint64_t)to * nf],
			&s->ranges.rec_src[(uint64_t)from * nf],
			nf * sizeof(uint64_t));
	}
	return 1;
}

/*
 * ranges.device or in place: @rr's bytes are in @bytes, just read by a
 * worker (fetch.c): a staging buffer on its way to the io mirror, or the
 * batch's own row.  Check the records whose largest field it holds,
 * while the cache holds them (their other fields are resident:
 * ranges_device_suits, ranges_in_place_init).  A failed
 * read (!@read_ok) loses every record with a field in it (with verify
 * off, a record's fields may lie in several reads, so those marks are
 * made under the lock).  Otherwise each record is checked from the one
 * read that holds its largest field, by one worker; the lock taken after
 * orders the marks before the batch's report.
 */
void ranges_check_fetched(struct loader_core *c, struct range_read *rr,
			  const uint8_t *bytes, int read_ok)
{
	const struct shard_schema *sc = &c->ds->schema;
	struct slot *s = rr->slot;

	if (read_ok && !c->cfg.verify)
		return;
	if (!read_ok) {
		core_lock(c);
		for (uint32_t k = rr->piece_lo; k < rr->piece_hi; k++)
			s->ranges.rec_bad[s->ranges.order[k] / sc->nfields] =
				RANGE_BAD_READ;
		pthread_mutex_unlock(&c->mu);
		return;
	}
	for (uint32_t k = rr->piece_lo; k < rr->piece_hi; k++) {
		uint32_t r = s->ranges.order[k] / sc->nfields;

		/* its one piece read: the largest field (the others are
		 * resident) */
		s->ranges.rec_bad[r] = (uint8_t)record_sum_bad(c, s, r,
			bytes + (s->ranges.rec_src[s->ranges.order[k]] -
				 rr->buf_off));
	}
}
