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
 * and the sections' starts are read at open (load_layout, 8 bytes per
 * record and variable field), so a record still costs one read per field
 * and the batch's size is known when it is planned.  A block whose layout
 * is bad is read whole, which reports it.
 *
 * Memory: the io piece is the batch's io memory from planning until its
 * assembly ends (or until it is dropped), taken like a block's (evicting
 * unpinned cached blocks), so the budget holds: a batch whose ranges do
 * not fit waits for the batches in flight.  The record checksums are
 * loaded at open, 8 bytes per record, at most SLUICE_RANGE_SUMS_MAX in all;
 * shards past that (and v1/v2 shards) are read by block while verify is on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

/* Read the gap between two ranges rather than issue a second request:
 * on NVMe 16 KiB more of a read costs less than another command. */
#define RANGE_GAP (16u << 10)
/* ... but keep each read a reasonable size. */
#define RANGE_READ_MAX (4u << 20)

/* Small fields kept in memory (load_resident_fields). */
#define RANGE_RESIDENT_FIELD_MAX 64u         /* bytes per record */
#define RANGE_RESIDENT_MAX (64ull << 20)     /* all of them */
#define RANGE_RESIDENT_BLOCKS_MAX (1u << 16) /* a pread per block each */

/* One field of one record, to be read. */
struct range_piece {
	uint32_t file;
	uint32_t slot_index;    /* r * nfields + f */
	uint64_t offset, len;
};

static int any_variable(const struct shard_schema *sc)
{
	for (uint32_t f = 0; f < sc->nfields; f++)
		if (sc->fields[f].variable)
			return 1;
	return 0;
}

/*
 * Datasets with variable fields: read every raw block's layout (the
 * sections' starts, the variable fields' offsets tables) when it fits
 * SLUICE_RANGE_SUMS_MAX and the blocks are few enough to read quickly.
 * @return: 1 when loaded, 0 when the dataset is read by block, or a
 * negative code.
 */
static int load_layout(struct loader_core *c, char *err, size_t errlen)
{
	const struct dataset *ds = c->ds;
	const struct shard_schema *sc = &ds->schema;
	uint64_t nf = sc->nfields, tables = 0, bytes;

	for (uint32_t f = 0; f < sc->nfields; f++)
		tables += sc->fields[f].variable;
	/* records and blocks < 2^40 (the index's bounds): no overflow */
	bytes = 8 * (nf * c->nblocks +
		     tables * (ds->record_count + c->nblocks));
	if (c->nblocks > RANGE_RESIDENT_BLOCKS_MAX ||
	    bytes > SLUICE_RANGE_SUMS_MAX)
		return 0;
	c->range_layout_bytes = bytes;
	c->range_sec = malloc((size_t)(nf * c->nblocks * 8));
	if (!c->range_sec)
		return -ENOMEM;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		if (!sc->fields[f].variable)
			continue;
		c->range_offs[f] = malloc((size_t)((ds->record_count +
						   c->nblocks) * 8));
		if (!c->range_offs[f])
			return -ENOMEM;
	}
	for (uint32_t s = 0; s < ds->nshards; s++) {
		uint64_t base = c->shard_block_base[s];
		uint64_t *tab[DLS_MAX_FIELDS] = { 0 };
		int r;

		for (uint32_t f = 0; f < sc->nfields; f++)
			if (c->range_offs[f])
				tab[f] = c->range_offs[f] + ds->shard_first[s] +
					 base;
		r = shard_read_layout(sc, &ds->shards[s],
				      c->range_sec + base * nf, tab, err,
				      errlen);
		if (r < 0)
			return r;
	}
	return 1;
}

/* Where field @f of record @i of block @g lies in its file, and how long
 * it is. */
static uint64_t record_field_at(const struct loader_core *c, uint64_t g,
				uint32_t i, uint32_t f, uint64_t *len)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, g, &shard);
	uint64_t rb = sc->fields[f].record_bytes;

	if (!c->range_sec) {
		/* Field-major sections; the index's raw size covers them
		 * all (shard_parse). */
		*len = rb;
		return blk->offset + block_field_offset(sc, blk->record_count, f) +
		       (uint64_t)i * rb;
	}
	if (sc->fields[f].variable) {
		const uint64_t *o = c->range_offs[f] + c->block_first[g] + g + i;

		*len = o[1] - o[0];
		return blk->offset + c->range_sec[g * sc->nfields + f] + o[0];
	}
	*len = rb;
	return blk->offset + c->range_sec[g * sc->nfields + f] +
	       (uint64_t)i * rb;
}

/* Load the shards' record checksums, in shard order, within the cap. */
static int load_record_sums(struct loader_core *c, char *err, size_t errlen)
{
	const struct dataset *ds = c->ds;

	c->record_sums = calloc(ds->nshards ? ds->nshards : 1,
				sizeof(*c->record_sums));
	if (!c->record_sums)
		return -ENOMEM;
	c->record_sums_shards = ds->nshards;
	for (uint32_t s = 0; s < ds->nshards; s++) {
		const struct shard_file *sf = &ds->shards[s];
		uint64_t len = sf->record_sums_length;
		int r;

		if (len == 0)
			continue;
		/* len is record_count * 8, inside the file (shard_parse). */
		if (c->record_sums_bytes + len > SLUICE_RANGE_SUMS_MAX)
			break;
		c->record_sums[s] = malloc((size_t)len);
		if (!c->record_sums[s])
			return -ENOMEM;
		r = shard_read_record_sums(sf, c->record_sums[s], err, errlen);
		if (r < 0)
			return r;
		c->record_sums_bytes += len;
	}
	return 0;
}

/*
 * Small fixed fields (labels: a few bytes per record, in a section of
 * their own at the end of each block) would cost a read of a page per
 * record for a few bytes: read them at open instead, every record's,
 * when they fit RANGE_RESIDENT_MAX and the blocks are few enough to read
 * quickly; the record checksums still check them at every use.  The
 * largest field always stays read by range.
 */
static int load_resident_fields(struct loader_core *c, char *err,
				size_t errlen)
{
	const struct dataset *ds = c->ds;
	const struct shard_schema *sc = &ds->schema;
	uint64_t total = 0;
	uint32_t largest = 0;

	/* The largest: a variable field if there is one (record_bytes 0) */
	for (uint32_t f = 1; f < sc->nfields; f++)
		if (!sc->fields[largest].variable &&
		    (sc->fields[f].variable ||
		     sc->fields[f].record_bytes >
			     sc->fields[largest].record_bytes))
			largest = f;
	c->ranges_main_field = largest;
	if (c->nblocks > RANGE_RESIDENT_BLOCKS_MAX)
		return 0;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t rb = sc->fields[f].record_bytes, len;

		if (f == largest || sc->fields[f].variable ||
		    rb > RANGE_RESIDENT_FIELD_MAX ||
		    __builtin_mul_overflow(rb, ds->record_count, &len) ||
		    total + len > RANGE_RESIDENT_MAX)
			continue;
		c->range_resident[f] = malloc(len ? (size_t)len : 1);
		if (!c->range_resident[f])
			return -ENOMEM;
		total += len;
		for (uint32_t s = 0; s < ds->nshards; s++) {
			const uint64_t *sec = c->range_sec
				? c->range_sec + c->shard_block_base[s] *
							 sc->nfields
				: NULL;
			int r = shard_read_field(sc, &ds->shards[s], f, sec,
						 c->range_resident[f] +
							 ds->shard_first[s] * rb,
						 err, errlen);

			if (r < 0)
				return r;
		}
	}
	return 0;
}

/* The mean value bytes of variable field @f over the blocks read by
 * range. */
static uint64_t variable_mean(const struct loader_core *c, uint32_t f)
{
	uint64_t sum = 0, n = 0;

	for (uint64_t g = 0; g < c->nblocks; g++) {
		if (!range_block(c, g))
			continue;
		/* offsets[n] of block g: checked against its raw size */
		sum += c->range_offs[f][c->block_first[g + 1] + g];
		n += c->block_first[g + 1] - c->block_first[g];
	}
	return n ? sum / n : 0;
}

int ranges_open(struct loader_core *c, char *err, size_t errlen)
{
	const struct shard_schema *sc = &c->ds->schema;
	int want, any = 0, r;

	switch (c->cfg.range_reads) {
	case SLUICE_RANGE_READS_AUTO:
		want = c->cfg.shuffle == SLUICE_SHUFFLE_FULL;
		break;
	case SLUICE_RANGE_READS_ON:
		want = 1;
		break;
	case SLUICE_RANGE_READS_OFF:
		want = 0;
		break;
	default:
		snprintf(err, errlen, "invalid range_reads %d",
			 (int)c->cfg.range_reads);
		return -EINVAL;
	}
	if (!want || sc->nfields == 0 || c->nblocks == 0)
		return 0;
	if (any_variable(sc)) {
		r = load_layout(c, err, errlen);
		if (r <= 0)
			return r;   /* 0: too many blocks or records */
	}
	if (c->cfg.verify) {
		r = load_record_sums(c, err, errlen);
		if (r < 0)
			return r;
	}
	c->ranges_max_reads = c->cfg.batch_size * sc->nfields;
	c->ranges = 1;
	c->ranges_all = 1;
	for (uint64_t g = 0; g < c->nblocks; g++) {
		if (range_block(c, g))
			any = 1;
		else
			c->ranges_all = 0;
	}
	if (!any) {
		c->ranges = c->ranges_all = 0;  /* v1/v2 shards, zstd blocks */
		return 0;
	}
	r = load_resident_fields(c, err, errlen);
	if (r < 0)
		return r;
	/* Each batch in flight reads at most a page more than each of its
	 * ranges on both sides: a variable field's, of its average value
	 * (what the blocks read by range hold), and room for its largest
	 * value once. */
	for (uint32_t f = 0; f < sc->nfields; f++) {
		/* record_bytes < 2^34 (a block's limit): no overflow */
		uint64_t env = align_up(sc->fields[f].record_bytes, 4096) + 4096;

		if (sc->fields[f].variable)
			env = align_up(variable_mean(c, f), 4096) + 4096;
		if (!c->range_resident[f])
			c->ranges_io_want += env;
	}
	if (__builtin_mul_overflow(c->ranges_io_want,
				   (uint64_t)c->cfg.batch_size *
					   c->cfg.prefetch_depth,
				   &c->ranges_io_want))
		c->ranges_io_want = UINT64_MAX;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t big = 0;

		for (uint32_t k = 0; sc->fields[f].variable &&
				     k < c->ds->nshards; k++)
			if (c->ds->shards[k].max_value_bytes[f] > big)
				big = c->ds->shards[k].max_value_bytes[f];
		if (__builtin_add_overflow(c->ranges_io_want, big,
					   &c->ranges_io_want))
			c->ranges_io_want = UINT64_MAX;
	}
	c->range_pieces = malloc(c->ranges_max_reads *
				 sizeof(*c->range_pieces));
	if (!c->range_pieces)
		return -ENOMEM;
	return 0;
}

void ranges_close(struct loader_core *c)
{
	for (uint32_t f = 0; f < DLS_MAX_FIELDS; f++) {
		free(c->range_resident[f]);
		c->range_resident[f] = NULL;
	}
	/* Not c->ds: the core may outlive the dataset (a consumer holding
	 * tensors after close). */
	for (uint32_t s = 0; c->record_sums && s < c->record_sums_shards; s++)
		free(c->record_sums[s]);
	free(c->record_sums);
	free(c->range_pieces);
	free(c->range_sec);
	for (uint32_t f = 0; f < DLS_MAX_FIELDS; f++) {
		free(c->range_offs[f]);
		c->range_offs[f] = NULL;
	}
	c->range_sec = NULL;
	c->record_sums = NULL;
	c->range_pieces = NULL;
}

int slot_ranges_init(struct loader_core *c, struct slot *s)
{
	uint32_t b = c->cfg.batch_size;

	if (!c->ranges)
		return 0;
	s->rec_block = malloc(b * sizeof(*s->rec_block));
	s->rec_src = malloc((size_t)c->ranges_max_reads * sizeof(*s->rec_src));
	s->rec_bad = malloc(b);
	s->rreads = calloc(c->ranges_max_reads, sizeof(*s->rreads));
	if (!s->rec_block || !s->rec_src || !s->rec_bad || !s->rreads)
		return -ENOMEM;
	return 0;
}

void slot_ranges_free(struct slot *s)
{
	free(s->rec_block);
	free(s->rec_src);
	free(s->rec_bad);
	free(s->rreads);
}

/* Block @g is read by range: raw, its layout known (load_layout), and its
 * records' checksums at hand unless verify is off. */
int range_block(const struct loader_core *c, uint64_t g)
{
	uint32_t shard;
	const struct shard_block *blk;

	if (!c->ranges)
		return 0;
	blk = loader_block(c, g, &shard);
	return blk->codec == DLS_CODEC_RAW &&
	       (!c->range_sec ||
		c->range_sec[g * c->ds->schema.nfields] != UINT64_MAX) &&
	       (!c->cfg.verify || c->record_sums[shard]);
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

/* The pieces of the slot's range records (rec_entry RANGE_ENTRY). */
static uint32_t collect_pieces(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t n = 0;

	for (uint32_t r = 0; r < s->count; r++) {
		if (s->rec_entry[r] != RANGE_ENTRY)
			continue;
		for (uint32_t f = 0; f < sc->nfields; f++) {
			uint64_t off, len;

			if (c->range_resident[f])
				continue;
			off = record_field_at(c, s->rec_block[r],
					      s->rec_in_block[r], f, &len);
			if (len == 0) {
				/* an empty value: nothing to read */
				s->rec_src[(uint64_t)r * sc->nfields + f] = 0;
				continue;
			}
			c->range_pieces[n++] = (struct range_piece){
				.file = c->block_shard[s->rec_block[r]],
				.slot_index = r * sc->nfields + f,
				.offset = off,
				.len = len,
			};
		}
	}
	return n;
}

/*
 * Coalesce the sorted pieces into reads (s->rreads, buffer offsets from
 * 0) and point each record's fields at their bytes.  @return: the bytes
 * the reads take.
 */
static uint64_t build_reads(struct loader_core *c, struct slot *s,
			    uint32_t npieces)
{
	uint64_t a = c->ring_info.alignment ? c->ring_info.alignment : 1;
	uint64_t total = 0;
	struct range_read *cur = NULL;

	s->nrreads = 0;
	for (uint32_t k = 0; k < npieces; k++) {
		const struct range_piece *p = &c->range_pieces[k];
		uint64_t start = p->offset & ~(a - 1);
		uint64_t end = align_up(p->offset + p->len, a);

		if (cur && cur->rd.file == p->file &&
		    start <= cur->rd.offset + cur->rd.length + RANGE_GAP &&
		    end - cur->rd.offset <= RANGE_READ_MAX) {
			if (end > cur->rd.offset + cur->rd.length)
				cur->rd.length = end - cur->rd.offset;
		} else {
			if (cur)
				total += cur->rd.length;
			cur = &s->rreads[s->nrreads++];
			memset(cur, 0, sizeof(*cur));
			cur->rd.file = p->file;
			cur->rd.offset = start;
			cur->rd.length = end - start;
			cur->slot = s;
			cur->buf_off = total;
		}
		if (p->offset + p->len - cur->rd.offset > cur->rd.min_length)
			cur->rd.min_length = p->offset + p->len - cur->rd.offset;
		s->rec_src[p->slot_index] = cur->buf_off +
					    (p->offset - cur->rd.offset);
	}
	if (cur)
		total += cur->rd.length;
	return total;
}

static int record_bad(const struct loader_core *c, const struct slot *s,
		      uint32_t r);
static void ranges_report_locked(struct loader_core *c, struct slot *s);

/*
 * The slot's records are assigned (rec_entry RANGE_ENTRY for those read
 * by range, rec_block set): plan their reads into io memory and append
 * them to c->submit.  @return: 1 when planned (or none to read), 0 when
 * the io memory is not free yet (the caller undoes its plan and waits),
 * -ENOSPC when it never will be (the loader failed).
 */
int ranges_plan_locked(struct loader_core *c, struct slot *s,
		       unsigned *nsubmit)
{
	uint32_t npieces;
	uint64_t len;

	s->range_len = 0;
	s->range_buf = NULL;
	s->range_failed = 0;
	s->range_error = 0;
	s->rreads_pending = 0;
	if (s->nranged == 0)
		return 1;
	npieces = collect_pieces(c, s);
	qsort(c->range_pieces, npieces, sizeof(*c->range_pieces),
	      by_file_offset);
	len = build_reads(c, s, npieces);
	if (s->nrreads == 0) {
		/* Every value empty, every other field kept since open:
		 * nothing to read, and no completion to wait for.  Check
		 * the records now (their bytes are few). */
		memset(s->rec_bad, 0, c->cfg.batch_size);
		s->verify_in_copy = 0;
		for (uint32_t r = 0; r < s->count; r++)
			if (s->rec_entry[r] == RANGE_ENTRY)
				s->rec_bad[r] = (uint8_t)record_bad(c, s, r);
		ranges_report_locked(c, s);
		atomic_fetch_add(&c->range_records, s->nranged);
		return 1;
	}
	if (cache_alloc_io(c, len, &s->range_off)) {
		if (c->inflight == 0 && c->ahead_inflight == 0) {
			loader_fail_locked(c, -ENOSPC,
				"batch %llu of epoch %llu: its %u records read by range take %llu bytes of io memory, more than the %llu bytes memory_bytes leaves beside the cached blocks it needs: raise memory_bytes (sluice --memory, Python memory_bytes=)",
				(unsigned long long)c->plan_batch,
				(unsigned long long)c->plan_epoch,
				s->nranged, (unsigned long long)len,
				(unsigned long long)c->io_bytes);
			return -ENOSPC;
		}
		return 0;
	}
	s->range_len = len;
	s->range_buf = c->arena + s->range_off;
	memset(s->rec_bad, 0, c->cfg.batch_size);
	for (uint32_t k = 0; k < s->nrreads; k++) {
		struct range_read *rr = &s->rreads[k];

		rr->rd.buf = s->range_buf + rr->buf_off;
		rr->rd.user = NULL;
		c->submit[(*nsubmit)++] = &rr->rd;
	}
	s->rreads_pending = s->nrreads;
	s->pending++;            /* all of its ranges, as one */
	atomic_fetch_add(&c->range_reads, s->nrreads);
	atomic_fetch_add(&c->range_records, s->nranged);
	return 1;
}

/* Give the slot's range memory back (its assembly is over, or it was
 * dropped). */
void slot_ranges_release_locked(struct loader_core *c, struct slot *s)
{
	if (s->range_len)
		pool_free(&c->io_pool, s->range_off, s->range_len);
	s->range_len = 0;
	s->range_buf = NULL;
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
		if (s->rec_entry[r] == RANGE_ENTRY && s->rec_bad[r])
			report_bad_locked(c, s, r);
}

/* Record @r failed its checksum or its read: say which, where. */
static void report_bad_locked(struct loader_core *c, const struct slot *s,
			      uint32_t r)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, s->rec_block[r],
						     &shard);
	uint64_t len, at = record_field_at(c, s->rec_block[r],
					   s->rec_in_block[r], 0, &len);

	loader_block_failed_locked(c, -SLUICE_ECORRUPT, 1,
		"%s: block %llu: offset %llu: record %llu: %s",
		c->ds->shards[shard].path,
		(unsigned long long)(s->rec_block[r] -
				     c->shard_block_base[shard]),
		(unsigned long long)at,
		(unsigned long long)(blk->first_record + s->rec_in_block[r]),
		s->range_failed
			? "read failed or record checksum mismatch (corrupt record)"
			: "record checksum mismatch (corrupt record)");
}

void range_read_done_locked(struct loader_core *c, struct io_read *rd)
{
	struct range_read *rr = (struct range_read *)(void *)rd;
	struct slot *s = rr->slot;
	uint32_t parts;

	if (rd->result >= 0) {
		loader_span(c, SLUICE_STAGE_READ, rr->submit_ns, now_ns(),
			    (uint64_t)rd->result);
		atomic_fetch_add(&c->st_read.bytes, (uint64_t)rd->result);
		atomic_fetch_add(&c->st_read.ops, 1);
	} else {
		/* A file shorter than its index says is damaged data (its
		 * records are skippable); anything else is fatal. */
		rr->error = (int)rd->result;
		s->range_failed = 1;
		if (rr->error != -ENODATA && !s->range_error) {
			s->range_error = rr->error;
			loader_fail_locked(c, rr->error,
					   "%s: offset %llu: read failed: %s",
					   c->ds->shards[rd->file].path,
					   (unsigned long long)rd->offset,
					   strerror(-rr->error));
		}
	}
	if (--s->rreads_pending > 0)
		return;
	/* A bad record fails the batch (on_error=fail): check each right
	 * before its copy, while its bytes are in the cache.  With skip the
	 * records are checked first, since a dropped one moves the rest. */
	s->verify_in_copy = c->cfg.verify && !s->range_failed &&
			    c->cfg.on_error != SLUICE_ON_ERROR_SKIP;
	if ((!c->cfg.verify && !s->range_failed) || s->verify_in_copy) {
		ranges_checked_locked(c, s);
		return;
	}
	/* Enough records per part to amortise the hand-off. */
	parts = s->nranged / 32;
	if (parts > c->nworkers)
		parts = c->nworkers;
	if (parts == 0)
		parts = 1;
	s->rparts_left = parts;
	for (uint32_t p = 0; p < parts; p++)
		jobs_push_locked(c, (struct job){ JOB_RANGES, s->id, p, parts });
}

/* Did the read holding range_buf offset @off fail? */
static int range_lost(const struct slot *s, uint64_t off)
{
	uint32_t lo = 0, hi = s->nrreads;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (s->rreads[mid].buf_off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return s->rreads[lo].error != 0;
}

static int record_bad(const struct loader_core *c, const struct slot *s,
		      uint32_t r)
{
	const struct shard_schema *sc = &c->ds->schema;
	const uint64_t *src = &s->rec_src[(uint64_t)r * sc->nfields];
	const uint8_t *ptr[DLS_MAX_FIELDS];
	uint64_t len[DLS_MAX_FIELDS];
	uint32_t shard;
	const struct shard_block *blk;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		range_field(c, s, r, f, &ptr[f], &len[f]);
		/* an empty value was not read */
		if (!c->range_resident[f] && s->range_failed && len[f] &&
		    range_lost(s, src[f]))
			return 1;
	}
	if (!c->cfg.verify)
		return 0;
	blk = loader_block(c, s->rec_block[r], &shard);
	return record_checksum(sc->nfields, ptr, len) !=
	       c->record_sums[shard][blk->first_record + s->rec_in_block[r]];
}

/*
 * Assembly (s->verify_in_copy): check range record @r before its copy.
 * @return: 0, or -SLUICE_ECORRUPT after failing the loader with the
 * record's file and offset.
 */
int range_record_check(struct loader_core *c, struct slot *s, uint32_t r)
{
	if (!record_bad(c, s, r))
		return 0;
	pthread_mutex_lock(&c->mu);
	s->rec_bad[r] = 1;
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
			s->rec_bad[r] = (uint8_t)record_bad(c, s, r);
	atomic_fetch_add(&c->cpu_verify_ns, thread_cpu_ns() - cpu0);
	pthread_mutex_lock(&c->mu);
	last = --s->rparts_left == 0;
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
	if (s->rec_bad[from])
		return 0;
	if (from != to) {
		s->rec_block[to] = s->rec_block[from];
		s->rec_bad[to] = 0;
		memmove(&s->rec_src[(uint64_t)to * nf],
			&s->rec_src[(uint64_t)from * nf], nf * sizeof(uint64_t));
	}
	return 1;
}
