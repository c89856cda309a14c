/*
 * ranges_open.c - what record-range reads (ranges.c) know from open:
 * which blocks are read by range, the zstd blocks' frames (load_frames),
 * where each record's fields lie in its block (the variable fields'
 * offsets tables and the sections' starts, read by load_layout), the
 * record checksums, the small fields kept in memory, and the io memory a
 * batch's ranges take.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_odds.h"
#include "loader.h"
#include "top_values.h"

/* Small fields kept in memory (load_resident_fields). */
#define RANGE_RESIDENT_FIELD_MAX 64u         /* bytes per record */
#define RANGE_RESIDENT_MAX (64ull << 20)     /* all of them */
#define RANGE_RESIDENT_BLOCKS_MAX (1u << 16) /* a pread per block each */

#ifdef SLUICE_TESTING
uint64_t ranges_test_in_place_min;
#define IN_PLACE_MIN (ranges_test_in_place_min ? ranges_test_in_place_min \
					       : RANGE_IN_PLACE_MIN)
#define AUTO_IN_PLACE_MIN (ranges_test_in_place_min \
			   ? ranges_test_in_place_min : RANGE_AUTO_IN_PLACE_MIN)
#else
#define IN_PLACE_MIN RANGE_IN_PLACE_MIN
#define AUTO_IN_PLACE_MIN RANGE_AUTO_IN_PLACE_MIN
#endif


static uint64_t dataset_raw_bytes(const struct loader_core *c);

/* The field read by range whatever else is kept in memory: the largest,
 * a variable one if there is one (record_bytes 0). */
static uint32_t largest_field(const struct shard_schema *sc)
{
	uint32_t largest = 0;

	for (uint32_t f = 1; f < sc->nfields; f++)
		if (!sc->fields[largest].variable &&
		    (sc->fields[f].variable || sc->fields[f].record_bytes >
					       sc->fields[largest].record_bytes))
			largest = f;
	return largest;
}

/*
 * Would host batches read records of at least @min bytes in place
 * (ranges_in_place_init), from the page cache?  A full shuffle's ranges
 * then need less io memory.  And from RANGE_AUTO_IN_PLACE_MIN up,
 * record ranges beat whole blocks in every shuffle, so range_reads auto
 * takes them: a page-cache copy straight into the batch and a checksum
 * while the cache holds it, where a block is copied into io memory,
 * checked, and copied again into the batch.  From disk (O_DIRECT), whole
 * blocks read in order stay.  What is cheap to tell is checked here,
 * what the open learns after (in_place_fits).
 */
static int in_place_likely(const struct loader_core *c, uint64_t min)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t largest = largest_field(sc);
	uint64_t bytes;

	if (c->has_zstd || (c->has_variable && c->cfg.pad_length) ||
	    c->cfg.on_error == SLUICE_ON_ERROR_SKIP ||
	    c->cfg.direct_io == SLUICE_DIRECT_IO_ON ||
	    c->nblocks > RANGE_RESIDENT_BLOCKS_MAX ||
	    env_off("SLUICE_RANGES_IN_PLACE") ||
	    device_offloads(c->cfg.device, c->cfg.device_id))
		return 0;
	/* a variable field's mean value is known once its layout is read
	 * (in_place_fits): until then, the blocks' bytes per record */
	bytes = !sc->fields[largest].variable
		? sc->fields[largest].record_bytes
		: c->ds->record_count
		? dataset_raw_bytes(c) / c->ds->record_count : 0;
	if (bytes < min)
		return 0;
	for (uint32_t f = 0; f < sc->nfields; f++)
		if (f != largest && (sc->fields[f].variable ||
		    sc->fields[f].record_bytes > RANGE_RESIDENT_FIELD_MAX))
			return 0;
	return shards_open_cached(c);
}

static uint64_t main_value_bytes(const struct loader_core *c);

/* Once the ranges are open: every record of every block read by range,
 * its one field not kept in memory at least @min bytes, on average where
 * it is variable. */
static int in_place_fits(const struct loader_core *c, uint64_t min)
{
	uint32_t m = c->ranges.main_field;

	if (!c->ranges.all || c->ranges.framed || c->ranges.resident[m] ||
	    main_value_bytes(c) < min)
		return 0;
	for (uint32_t f = 0; f < c->ds->schema.nfields; f++)
		if (f != m && !c->ranges.resident[f])
			return 0;
	return 1;
}

/*
 * A record read by range costs its frames, about a frame a field read
 * (the writer's frames hold 16 KiB or more): that pays where it is well
 * under the block a whole read costs, and not for small records in small
 * blocks, whose frames are their block's sections.
 */
static int frames_pay(const struct loader_core *c,
		      const struct block_frames *fr)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t fields = 0, raw = fr->raw[fr->n];

	/* those not kept in memory from open (load_resident_fields) */
	for (uint32_t f = 0; f < sc->nfields; f++)
		fields += sc->fields[f].variable ||
			  sc->fields[f].record_bytes > RANGE_RESIDENT_FIELD_MAX;
	if (fields == 0)
		fields = 1;
	return raw / fr->n * fields * 2 <= raw;
}

/*
 * zstd blocks of format v4: their seek tables (block_frames.c), so that a
 * record is read and decoded from the frames that hold it, within
 * SLUICE_RANGE_SUMS_MAX (16 bytes a frame); for range reads (@pay) only
 * those whose frames pay (frames_pay), for the layout all.  @return: 0
 * or a negative code; c->ranges.frames stays NULL when no block has
 * frames.
 */
static int load_frames(struct loader_core *c, int pay, char *err,
		       size_t errlen)
{
	const struct dataset *ds = c->ds;
	uint64_t bytes = 0;
	int any = 0;

	for (uint32_t s = 0; s < ds->nshards; s++)
		any |= ds->shards[s].version > DLS_VERSION_SINGLE_FRAME;
	if (!any || c->nblocks > RANGE_RESIDENT_BLOCKS_MAX)
		return 0;
	c->ranges.frames = calloc((size_t)c->nblocks,
				  sizeof(*c->ranges.frames));
	if (!c->ranges.frames)
		return -ENOMEM;
	c->ranges.nframes = c->nblocks;
	for (uint32_t s = 0; s < ds->nshards; s++) {
		struct block_frames *fr = c->ranges.frames +
					  c->shard_block_base[s];
		int r = shard_read_frames(&ds->shards[s], fr, &bytes, err,
					  errlen);

		if (r < 0)
			return r;
		if (bytes > SLUICE_RANGE_SUMS_MAX) {
			/* the rest are read whole */
			for (uint64_t b = 0; b < ds->shards[s].block_count; b++)
				block_frames_free(&fr[b]);
			break;
		}
	}
	for (uint64_t g = 0; g < c->nblocks; g++) {
		if (!c->ranges.frames[g].n)
			continue;
		if (!pay || frames_pay(c, &c->ranges.frames[g])) {
			c->ranges.framed++;
		} else {
			block_frames_free(&c->ranges.frames[g]);
			c->ranges.frames_unpaid++;
		}
	}
	return 0;
}

/* Block @g's frames (format v4 zstd), or NULL: its bytes lie in the file
 * as they are (raw). */
const struct block_frames *range_frames(const struct loader_core *c,
					 uint64_t g)
{
	return c->ranges.frames && c->ranges.frames[g].n
		? &c->ranges.frames[g] : NULL;
}

/*
 * Datasets with variable fields: read every raw or framed block's layout
 * (the sections' starts, the variable fields' offsets tables) when it fits
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
	c->ranges.sec = malloc((size_t)(nf * c->nblocks * 8));
	if (!c->ranges.sec)
		return -ENOMEM;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		if (!sc->fields[f].variable)
			continue;
		c->ranges.offs[f] = malloc((size_t)((ds->record_count +
						    c->nblocks) * 8));
		if (!c->ranges.offs[f])
			return -ENOMEM;
	}
	for (uint32_t s = 0; s < ds->nshards; s++) {
		uint64_t base = c->shard_block_base[s];
		uint64_t *tab[DLS_MAX_FIELDS] = { 0 };
		int r;

		for (uint32_t f = 0; f < sc->nfields; f++)
			if (c->ranges.offs[f])
				tab[f] = c->ranges.offs[f] +
					 ds->shard_first[s] + base;
		r = shard_read_layout(sc, &ds->shards[s],
				      c->ranges.frames ? c->ranges.frames + base
						       : NULL,
				      c->ranges.sec + base * nf, tab, err,
				      errlen);
		if (r < 0)
			return r;
	}
	c->ranges.layout_read = 1;
	return 1;
}

/* Where field @f of record @i of block @g lies in its decoded block, and
 * how long it is. */
uint64_t record_field_in_block(const struct loader_core *c, uint64_t g,
			       uint32_t i, uint32_t f, uint64_t *len)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, g, &shard);
	uint64_t rb = sc->fields[f].record_bytes;

	if (!c->ranges.sec) {
		/* Field-major sections; the index's raw size covers them
		 * all (shard_parse). */
		*len = rb;
		return block_field_offset(sc, blk->record_count, f) +
		       (uint64_t)i * rb;
	}
	if (sc->fields[f].variable) {
		const uint64_t *o = c->ranges.offs[f] + c->block_first[g] +
				    g + i;

		*len = o[1] - o[0];
		return c->ranges.sec[g * sc->nfields + f] + o[0];
	}
	*len = rb;
	return c->ranges.sec[g * sc->nfields + f] + (uint64_t)i * rb;
}

/* Where field @f of record @i of block @g lies in its file (a framed
 * block's: the frame that holds its first byte), and how long it is. */
uint64_t record_field_at(const struct loader_core *c, uint64_t g,
			 uint32_t i, uint32_t f, uint64_t *len)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, g, &shard);
	const struct block_frames *fr = range_frames(c, g);
	uint64_t at = record_field_in_block(c, g, i, f, len);

	if (fr)
		at = fr->at[block_frame_of(fr, at)];
	return blk->offset + at;
}

/* Load the shards' record checksums, in shard order, within the cap. */
static int load_record_sums(struct loader_core *c, char *err, size_t errlen)
{
	const struct dataset *ds = c->ds;

	c->ranges.record_sums = calloc(ds->nshards ? ds->nshards : 1,
				       sizeof(*c->ranges.record_sums));
	if (!c->ranges.record_sums)
		return -ENOMEM;
	c->ranges.record_sums_shards = ds->nshards;
	for (uint32_t s = 0; s < ds->nshards; s++) {
		const struct shard_file *sf = &ds->shards[s];
		uint64_t len = sf->record_sums_length;
		int r;

		if (len == 0)
			continue;
		/* len is record_count * 8, inside the file (shard_parse). */
		if (c->ranges.record_sums_bytes + len > SLUICE_RANGE_SUMS_MAX)
			break;
		c->ranges.record_sums[s] = malloc((size_t)len);
		if (!c->ranges.record_sums[s])
			return -ENOMEM;
		r = shard_read_record_sums(sf, c->ranges.record_sums[s], err,
					   errlen);
		if (r < 0)
			return r;
		c->ranges.record_sums_bytes += len;
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
	uint32_t largest = largest_field(sc);

	c->ranges.main_field = largest;
	if (c->nblocks > RANGE_RESIDENT_BLOCKS_MAX)
		return 0;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t rb = sc->fields[f].record_bytes, len;

		if (f == largest || sc->fields[f].variable ||
		    rb > RANGE_RESIDENT_FIELD_MAX ||
		    __builtin_mul_overflow(rb, ds->record_count, &len) ||
		    total + len > RANGE_RESIDENT_MAX)
			continue;
		c->ranges.resident[f] = malloc(len ? (size_t)len : 1);
		if (!c->ranges.resident[f])
			return -ENOMEM;
		total += len;
		for (uint32_t s = 0; s < ds->nshards; s++) {
			const uint64_t *sec = c->ranges.sec
				? c->ranges.sec + c->shard_block_base[s] *
							 sc->nfields
				: NULL;
			int r = shard_read_field(sc, &ds->shards[s], f,
						 c->ranges.frames
							 ? c->ranges.frames +
							   c->shard_block_base[s]
							 : NULL,
						 sec,
						 c->ranges.resident[f] +
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
		sum += c->ranges.offs[f][c->block_first[g + 1] + g];
		n += c->block_first[g + 1] - c->block_first[g];
	}
	return n ? sum / n : 0;
}

/* The main field's bytes a record: its mean value where variable. */
static uint64_t main_value_bytes(const struct loader_core *c)
{
	const struct shard_field *fd =
		&c->ds->schema.fields[c->ranges.main_field];

	return fd->variable ? variable_mean(c, c->ranges.main_field)
			    : fd->record_bytes;
}

/* The blocks' decoded bytes, all of them. */
static uint64_t dataset_raw_bytes(const struct loader_core *c)
{
	uint64_t sum = 0;
	uint32_t shard;

	for (uint64_t g = 0; g < c->nblocks; g++)
		sum += loader_block(c, g, &shard)->raw_size;
	return sum;
}

/* The framed blocks' mean frame, decoded, and their stored bytes per
 * thousand decoded, rounded up. */
static void framed_sizes(const struct loader_core *c, uint64_t *raw,
			 uint64_t *stored_permille)
{
	uint64_t frames = 0, raw_sum = 0, stored_sum = 0;

	*raw = 0;
	*stored_permille = 1000;
	for (uint64_t g = 0; g < c->nblocks && c->ranges.framed; g++) {
		const struct block_frames *fr = range_frames(c, g);

		if (!fr)
			continue;
		frames += fr->n;
		raw_sum += fr->raw[fr->n];
		stored_sum += fr->at[fr->n];
	}
	if (frames == 0 || raw_sum == 0)
		return;
	*raw = raw_sum / frames;
	/* stored < 2^34 a block, blocks < 2^16: no overflow */
	*stored_permille = (stored_sum * 1000 + raw_sum - 1) / raw_sum;
}

/* The io memory a range of @value bytes takes in a batch's reads, at
 * most: a page more on both sides; a framed block's, its frames (of
 * @frame_raw bytes decoded on average, @stored_permille of that stored)
 * read and then decoded beside them.  @value < 2^34: no overflow. */
static uint64_t range_room(const struct loader_core *c, uint64_t value,
			   uint64_t frame_raw, uint64_t stored_permille)
{
	uint64_t room = align_up(value, 4096) + 4096, span;

	if (!c->ranges.framed)
		return room;
	span = value > frame_raw ? value : frame_raw;
	span = align_up(span, 8) +
	       align_up(span * stored_permille / 1000, 4096) + 4096;
	return span > room ? span : room;
}

/* What a full shuffle's batches read by range are drawn from. */
struct ranges_odds {
	struct batch_odds ranges;   /* each record's ranges, at their length */
	struct batch_odds values;   /* each record's variable values */
	uint64_t ranges_top, values_top; /* the largest batch's, exactly */
};

/*
 * Every record's ranges and values, for the odds that a batch drawn at
 * random does not fit (ranges_batch_odds): where every block is read by
 * range under a full shuffle of one dataset, its lengths known from the
 * offsets tables read at open.  A range is counted at what its read
 * takes at least: its length, and in a framed block its frames' share
 * too (read, then decoded beside them).  So the odds for the ranges are
 * those of a batch that surely does not fit; reads take up to a page
 * more on both sides (range_room()), which counted here refused a
 * dataset that streams (2,000 values of 10 bytes, whose neighbours
 * share their pages, and 40 of 256 KiB, batch 512: odds of 0.24).
 * Records read @in_place take no io memory: their ranges never count.
 * @return: 0 or -ENOMEM.
 */
static int ranges_odds_open(struct loader_core *c, int in_place)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t batch = batch_records_max(c);
	struct top_values top_ranges, top_values;
	uint64_t frame_raw, stored_permille;
	struct ranges_odds *o;
	int r = 0;

	if (!c->ranges.all || c->cfg.shuffle != SLUICE_SHUFFLE_FULL ||
	    c->sampler.nstreams > 1)
		return 0;
	framed_sizes(c, &frame_raw, &stored_permille);
	o = malloc(sizeof(*o));
	if (!o)
		return -ENOMEM;
	batch_odds_init(&o->ranges);
	batch_odds_init(&o->values);
	top_values_init(&top_ranges, batch);
	top_values_init(&top_values, batch);
	for (uint64_t g = 0; g < c->nblocks && !r; g++) {
		uint32_t shard;
		uint32_t n = loader_block(c, g, &shard)->record_count;
		/* stored bytes per thousand decoded, read beside them */
		uint64_t frames = range_frames(c, g) ? stored_permille : 0;

		for (uint32_t i = 0; i < n && !r; i++) {
			uint64_t ranges = 0, values = 0;

			for (uint32_t f = 0; f < sc->nfields; f++) {
				uint64_t len = sc->fields[f].record_bytes;

				if (sc->fields[f].variable) {
					record_field_in_block(c, g, i, f, &len);
					values += len;
				}
				/* len < 2^34: no overflow */
				if (!c->ranges.resident[f])
					ranges += len + len * frames / 1000;
			}
			if (c->cfg.pad_length)
				values = 0;     /* rows of a fixed shape */
			batch_odds_add(&o->ranges, ranges, 1);
			batch_odds_add(&o->values, values, 1);
			r = top_values_offer(&top_ranges, ranges, 1);
			if (!r)
				r = top_values_offer(&top_values, values, 1);
		}
	}
	/* read in place, a batch's ranges need no io memory: it waits for
	 * its batch memory where they find none (ranges.c's defer_locked) */
	o->ranges_top = in_place ? 0 : top_values_sum(&top_ranges);
	o->values_top = top_values_sum(&top_values);
	top_values_free(&top_ranges);
	top_values_free(&top_values);
	if (r) {
		free(o);
		return r;
	}
	c->ranges.odds = o;
	return 0;
}

/*
 * The odds, bounded above (batch_odds.c), that a full shuffle's batch
 * does not fit with nothing else in flight: its record ranges surely
 * more than @io bytes (ranges_odds_open), or its variable values more
 * than @values.  Odds for one batch: a job of many batches meets them
 * that many times over.  0 where the batches are not drawn at random
 * from every record (other shuffles, mixtures) or not every block is
 * read by range: the budget's other bounds hold there.
 */
double ranges_batch_odds(const struct loader_core *c, uint64_t io,
			 uint64_t values)
{
	const struct ranges_odds *o = c->ranges.odds;
	uint64_t batch = batch_records_max(c);
	double odds = 0;

	if (!o)
		return 0;
	/* the histograms count sizes up to 1/64 high: the exact largest
	 * batch first */
	if (o->ranges_top > io)
		odds += batch_odds_over(&o->ranges, batch, io);
	if (o->values_top > values)
		odds += batch_odds_over(&o->values, batch, values);
	return odds < 1 ? odds : 1;
}

/* Blocks whose layout is read at open for their fetches: a pread per
 * block and variable field, about 0.1 ms each from a cold NVMe disk. */
#define FETCH_LAYOUT_BLOCKS_MAX 4096u

/*
 * Without record ranges: a raw block fetched to the device (stage.c)
 * leaves the host no copy of its variable fields' offsets tables, which
 * its batches are sized and gathered by.  The layout says where they lie,
 * so that each part's worker copies them out of its staging buffer
 * (fetch.c), and the decode checks them against it (decode.c).  Without
 * it the blocks are read into their io memory by the ring.
 */
static int fetch_layout_open(struct loader_core *c, char *err,
			     size_t errlen)
{
	const struct dataset *ds = c->ds;
	uint64_t nf = ds->schema.nfields;

	if (!c->has_variable || c->nblocks == 0 ||
	    c->nblocks > FETCH_LAYOUT_BLOCKS_MAX ||
	    c->cfg.device_gather == SLUICE_DEVICE_GATHER_OFF ||
	    !device_offloads(c->cfg.device, c->cfg.device_id))
		return 0;
	/* the sections' starts only (at most 1 MiB): a table lies before
	 * its values; the decode reads and checks the tables themselves */
	c->ranges.sec = malloc((size_t)(nf * c->nblocks * 8));
	if (!c->ranges.sec)
		return -ENOMEM;
	for (uint32_t s = 0; s < ds->nshards; s++) {
		int r = shard_read_layout(&ds->schema, &ds->shards[s], NULL,
					  c->ranges.sec +
						  c->shard_block_base[s] * nf,
					  NULL, err, errlen);

		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * A budget too short for the largest batch beside its blocks, as the
 * headers bound it (budget.c), sizes batches by their values' true
 * lengths instead: read the layout now where range reads did not (a
 * pread per block; fetch_layout_open's section starts are read again
 * with the offsets tables).  A dataset 1.1 GB in 512-record batches, whose first
 * batch holds nearly all of it, got 441 MB of batch memory beside every
 * block under a 1.58 GB cap and failed at batch 0; gathered by chunks
 * with each value at its bound it needed 8.5 GB.  @return: 1 when every
 * block's layout is known (c->ranges.layout_all), 0 when some are not
 * (zstd blocks of format v3, unpaid frames, too many blocks), or a
 * negative code.
 */
int ranges_layout_open(struct loader_core *c, char *err, size_t errlen)
{
	int r;

	if (!c->has_variable || c->cfg.pad_length || c->nblocks == 0)
		return 0;
	if (!c->ranges.layout_read) {
		free(c->ranges.sec);
		c->ranges.sec = NULL;
		if (!c->ranges.frames) {
			r = load_frames(c, 0, err, errlen);
			if (r < 0)
				return r;
		}
		r = load_layout(c, err, errlen);
		if (r <= 0)
			return r;
	}
	for (uint64_t g = 0; g < c->nblocks; g++)
		if (!block_tables_known(c, g))
			return 0;
	c->ranges.layout_all = 1;
	return 1;
}

/* Where block @g's offsets tables lie is known since open (load_layout,
 * fetch_layout_open), or it has none. */
int block_tables_known(const struct loader_core *c, uint64_t g)
{
	return !c->has_variable ||
	       (c->ranges.sec &&
		c->ranges.sec[g * c->ds->schema.nfields] != UINT64_MAX);
}

/* A fetched block's view (@v of @raw, its io memory, where only its
 * offsets tables were copied) has the layout read at open: else its
 * tables are not the bytes those copies took, and the block is refused.
 * @return: 0 or -SLUICE_ECORRUPT. */
int block_tables_check(const struct loader_core *c, uint64_t g,
		       const uint8_t *raw, const struct block_view *v)
{
	const uint64_t *sec = c->ranges.sec + g * c->ds->schema.nfields;

	for (uint32_t f = 0; f < c->ds->schema.nfields; f++)
		if ((uint64_t)(v->data[f] - raw) != sec[f])
			return -SLUICE_ECORRUPT;
	return 0;
}

int ranges_open(struct loader_core *c, uint64_t batch_fixed, char *err,
		size_t errlen)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t frame_raw, stored_permille, batch_want, record_most = 0;
	uint64_t value_most = 0;
	int want, any = 0, r, in_place = 0;
	uint64_t in_flight = c->cfg.prefetch_depth;

	switch (c->cfg.range_reads) {
	case SLUICE_RANGE_READS_AUTO:
		if (c->cfg.shuffle == SLUICE_SHUFFLE_FULL) {
			in_place = in_place_likely(c, IN_PLACE_MIN);
			want = 1;
			break;
		}
		in_place = in_place_likely(c, AUTO_IN_PLACE_MIN);
		c->ranges.for_in_place = in_place;
		want = in_place;
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
		return fetch_layout_open(c, err, errlen);
	r = load_frames(c, 1, err, errlen);
	if (r < 0)
		return r;
	if (c->has_variable) {
		r = load_layout(c, err, errlen);
		if (r <= 0)
			return r;   /* 0: too many blocks or records */
	}
	if (c->cfg.verify) {
		r = load_record_sums(c, err, errlen);
		if (r < 0)
			return r;
	}
	c->ranges.max_reads = c->cfg.batch_size * sc->nfields;
	c->ranges.read_max = RANGE_READ_MAX;
	c->ranges.on = 1;
	c->ranges.all = 1;
	for (uint64_t g = 0; g < c->nblocks; g++) {
		if (range_block(c, g))
			any = 1;
		else
			c->ranges.all = 0;
	}
	if (!any) {
		/* v1/v2 shards, zstd blocks without frames */
		c->ranges.on = c->ranges.all = c->ranges.for_in_place = 0;
		return 0;
	}
	r = load_resident_fields(c, err, errlen);
	if (r < 0)
		return r;
	if (in_place && !in_place_fits(c, c->ranges.for_in_place
						  ? AUTO_IN_PLACE_MIN
						  : IN_PLACE_MIN)) {
		in_place = 0;
		/* blocks then, as range_reads auto has always read them */
		if (c->ranges.for_in_place) {
			ranges_close(c);
			memset(&c->ranges, 0, sizeof(c->ranges));
			return fetch_layout_open(c, err, errlen);
		}
	}
	/* Read in place, batches in flight hold their records in batch
	 * memory: io memory is for the ranges of a batch that cannot take
	 * its memory yet, in batch order (in_place_take_locked), one at a
	 * time, where one batch's fixed rows always fit.  Variable values
	 * keep room for several batches at their mean sizes (and the odds
	 * below): one batch at the mean refused 16 values of 1.5 MB among
	 * empty ones while the consumer held the last batch. */
	if (in_place && !sc->fields[c->ranges.main_field].variable)
		in_flight = 1;
	/* Each batch in flight reads at most a page more than each of its
	 * ranges on both sides: a variable field's, of its average value
	 * (what the blocks read by range hold), and room for its largest
	 * value once.  A framed block's range is its frames, read and then
	 * decoded beside them. */
	framed_sizes(c, &frame_raw, &stored_permille);
	for (uint32_t f = 0; f < sc->nfields; f++) {
		/* record_bytes < 2^34 (a block's limit): no overflow */
		uint64_t value = sc->fields[f].variable ? variable_mean(c, f)
			: sc->fields[f].record_bytes;

		if (!c->ranges.resident[f])
			c->ranges.io_want += range_room(c, value, frame_raw,
							stored_permille);
	}
	if (__builtin_mul_overflow(c->ranges.io_want,
				   (uint64_t)batch_records_max(c),
				   &batch_want))
		batch_want = UINT64_MAX;
	if (__builtin_mul_overflow(batch_want, in_flight,
				   &c->ranges.io_want))
		c->ranges.io_want = UINT64_MAX;
	/* One batch's ranges, each value at its field's largest: the least
	 * a budget short of io_want keeps for them (budget.c) */
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t big = 0;

		for (uint32_t k = 0; sc->fields[f].variable &&
				     k < c->ds->nshards; k++)
			if (c->ds->shards[k].max_value_bytes[f] > big)
				big = c->ds->shards[k].max_value_bytes[f];
		if (!c->ranges.resident[f])
			record_most = add_sat(record_most, range_room(c,
				sc->fields[f].variable ? big
				: sc->fields[f].record_bytes,
				frame_raw, stored_permille));
		if (big > value_most)
			value_most = big;
		/* framed: what its frames decode to, and the frames */
		if (c->ranges.framed && big)
			big += big * stored_permille / 1000 + frame_raw;
		if (__builtin_add_overflow(c->ranges.io_want, big,
					   &c->ranges.io_want))
			c->ranges.io_want = UINT64_MAX;
		if (__builtin_add_overflow(batch_want, big, &batch_want))
			batch_want = UINT64_MAX;
	}
	/* (none where the one field read is read in place: a batch that
	 * finds no room for its ranges waits for its batch memory, ranges.c's
	 * defer_locked) */
	c->ranges.io_least = in_place ? 0
			     : mul_sat(record_most, batch_records_max(c));
	c->ranges.budget_in_place = in_place;
	/* Under a full shuffle, io memory enough for a batch of many large
	 * values: the odds of one whose ranges do not fit, with nothing else
	 * in flight, below half of BATCH_ODDS_REFUSED (budget.c refuses at
	 * open above it).  6,311 values, 32 of them up to 16 MiB, batch 256:
	 * 96 MB at the mean sizes, odds up to 1.4e-5. */
	r = ranges_odds_open(c, in_place);
	if (r)
		return r;
	if (c->ranges.odds && !in_place) {
		uint64_t least = batch_odds_limit(&c->ranges.odds->ranges,
						  batch_records_max(c),
						  BATCH_ODDS_REFUSED / 2);

		if (least > c->ranges.io_want)
			c->ranges.io_want = least;
	}
	/* A budget (memory_bytes, or the default's cap) that cannot hold
	 * twice a batch's ranges, as the records' mean sizes put them,
	 * beside its batch memory: whole blocks, gathered by chunks within
	 * it where they fit, rather than a refusal at the first batch whose
	 * records are larger than the mean (6,000 zstd values of up to 64
	 * KiB in 64 KiB blocks, batch 256, memory_bytes 4 MiB: its ranges
	 * take 12 MB).  Bounding them by the largest values instead refused
	 * 2,000 values, 80 of them 256 KiB, batch 64, under a 12 MiB cap,
	 * which stream (test_budget check_capped_ranges).  Not where read in
	 * place, whose ranges take batch memory only (a full shuffle of 16
	 * KiB records, batch 256, memory_bytes 12M: 0.20 GB/s reading a
	 * block a record), as long as the budget holds a batch of the largest
	 * values (3 values of up to 22.6 MB under a 49 MB cap failed at
	 * next(), where blocks by chunks were refused at open). */
	if (c->cfg.range_reads == SLUICE_RANGE_READS_AUTO &&
	    !(in_place && add_sat(batch_fixed,
				  mul_sat(value_most, batch_records_max(c))) <=
			  budget_cap(c)) &&
	    (batch_want > UINT64_MAX / 4 ||
	     2 * batch_want > budget_cap(c) ||
	     batch_fixed > budget_cap(c) - 2 * batch_want)) {
		ranges_close(c);
		memset(&c->ranges, 0, sizeof(c->ranges));
		c->ranges.off_why = "the budget holds too few batches of record ranges";
		return fetch_layout_open(c, err, errlen);
	}
	/* Where the ranges may go to a device (ranges_device_init): the
	 * staging buffers beside them (stage_ranges_want), if there is one
	 * to open (device_offloads: the device opens later, with the
	 * arena) */
	if (c->ranges.all &&
	    c->cfg.device_gather != SLUICE_DEVICE_GATHER_OFF &&
	    ranges_device_suits(c) &&
	    device_offloads(c->cfg.device, c->cfg.device_id)) {
		/* and each batch's resident fields copied beside its ranges
		 * (ranges.c's copy_resident): < 2^6 bytes a record each */
		uint64_t tail = 0;

		for (uint32_t f = 0; f < sc->nfields; f++)
			if (c->ranges.resident[f])
				tail += align_up(sc->fields[f].record_bytes *
						 batch_records_max(c), 8) + 8;
		c->ranges.stage_want = stage_ranges_want(c);
		if (__builtin_add_overflow(c->ranges.io_want,
					   c->ranges.stage_want +
						   tail * c->cfg.prefetch_depth,
					   &c->ranges.io_want))
			c->ranges.io_want = UINT64_MAX;
		c->ranges.io_least = add_sat(c->ranges.io_least,
					     c->ranges.stage_want + tail);
	}
	/* (a full shuffle's odds raise io_want: one batch at the largest
	 * values is less where the batch is small, and holds every batch's
	 * ranges; keeping the want instead refused skewed values of up to
	 * 2 MB, batch 1, at 4.75 MB, where 4.5 streamed:
	 * tests/test_budget_monotone.sh) */
	if (c->ranges.io_least > c->ranges.io_want)
		c->ranges.io_least = c->ranges.io_want;
	c->ranges.pieces = malloc(c->ranges.max_reads *
				  sizeof(*c->ranges.pieces));
	if (!c->ranges.pieces)
		return -ENOMEM;
	return 0;
}

void ranges_close(struct loader_core *c)
{
	for (uint32_t f = 0; f < DLS_MAX_FIELDS; f++) {
		free(c->ranges.resident[f]);
		c->ranges.resident[f] = NULL;
	}
	/* Not c->ds: the core may outlive the dataset (a consumer holding
	 * tensors after close). */
	for (uint32_t s = 0;
	     c->ranges.record_sums && s < c->ranges.record_sums_shards; s++)
		free(c->ranges.record_sums[s]);
	free(c->ranges.record_sums);
	free(c->ranges.pieces);
	free(c->ranges.odds);
	c->ranges.odds = NULL;
	free(c->ranges.sec);
	for (uint64_t g = 0; c->ranges.frames && g < c->ranges.nframes; g++)
		block_frames_free(&c->ranges.frames[g]);
	free(c->ranges.frames);
	c->ranges.frames = NULL;
	for (uint32_t f = 0; f < DLS_MAX_FIELDS; f++) {
		free(c->ranges.offs[f]);
		c->ranges.offs[f] = NULL;
	}
	c->ranges.sec = NULL;
	c->ranges.record_sums = NULL;
	c->ranges.pieces = NULL;
	c->ranges.layout_read = c->ranges.layout_all = 0;
}

/* Block @g is read by range: raw or in frames (v4 zstd), its layout
 * known (load_layout), and its records' checksums at hand unless verify
 * is off. */
int range_block(const struct loader_core *c, uint64_t g)
{
	uint32_t shard;
	const struct shard_block *blk;

	if (!c->ranges.on)
		return 0;
	blk = loader_block(c, g, &shard);
	return (blk->codec == DLS_CODEC_RAW || range_frames(c, g)) &&
	       (!c->ranges.sec ||
		c->ranges.sec[g * c->ds->schema.nfields] != UINT64_MAX) &&
	       (!c->cfg.verify || c->ranges.record_sums[shard]);
}

/*
 * A full shuffle that reads blocks whole reads a block for nearly every
 * record, unless the cache holds the dataset: that is what such a
 * loader's speed is, so stats.fallbacks says which blocks and why.  (A
 * full shuffle of zstd data 2.5 times its capped budget delivered 0.07
 * GB/s against the window shuffle's 1.56, reading 21 times the bytes it
 * delivered: 16 KB records in 1 MiB blocks, on the 2-core VM.)
 */
void ranges_whole_note(struct loader_core *c)
{
	uint64_t whole = 0, zstd = 0, records = 0;
	const char *why;

	c->ranges.whole_note[0] = '\0';
	if (c->cfg.shuffle != SLUICE_SHUFFLE_FULL || c->cache.all)
		return;
	for (uint64_t g = 0; g < c->nblocks; g++) {
		uint32_t shard;
		const struct shard_block *blk = loader_block(c, g, &shard);

		if (range_block(c, g))
			continue;
		whole++;
		records += blk->record_count;
		zstd += blk->codec == DLS_CODEC_ZSTD;
	}
	if (whole == 0 || records < 2 * whole)  /* a record a block: no loss */
		return;
	if (c->cfg.range_reads == SLUICE_RANGE_READS_OFF)
		why = "range_reads off";
	else if (c->ranges.off_why)
		why = c->ranges.off_why;
	else if (zstd && !c->ranges.frames)
		why = c->nblocks > RANGE_RESIDENT_BLOCKS_MAX
			? "zstd blocks too many to read their frames at open"
			: "zstd blocks of format v3 or older, one frame each: shards written by this dlpack-shard are read record by record";
	else if (zstd && c->ranges.frames_unpaid)
		why = "zstd blocks whose frames are most of their block: small records in small blocks, which a larger --block-size makes worth reading by frame";
	else if (zstd)
		why = "zstd blocks without a sound seek table, or too many frames to keep";
	else if (!c->ranges.on)
		why = "too many blocks or records to index their variable fields at open";
	else
		why = "no record checksums: shards of format v3 (this dlpack-shard) are read record by record, or --no-verify";
	snprintf(c->ranges.whole_note, sizeof(c->ranges.whole_note),
		 "full shuffle reads a whole block for each record of %llu of %llu blocks (%s): about %llu records a block, up to that many times the bytes",
		 (unsigned long long)whole, (unsigned long long)c->nblocks,
		 why, (unsigned long long)(records / whole));
}

/* The longest value of field @f: a fixed field's size, a variable
 * field's largest in any shard, as the headers bound it (a block whose
 * layout holds a longer one is read whole: block_layout.c). */
static uint64_t field_value_max(const struct loader_core *c, uint32_t f)
{
	uint64_t most = 0;

	if (!c->ds->schema.fields[f].variable)
		return c->ds->schema.fields[f].record_bytes;
	for (uint32_t s = 0; s < c->ds->nshards; s++)
		if (c->ds->shards[s].max_value_bytes[f] > most)
			most = c->ds->shards[s].max_value_bytes[f];
	return most;
}

/*
 * Before the device opens: could the range records go to the device
 * through the staging buffers (ranges_device_init)?  Each record is
 * checked from the one read that holds it, so every field but the
 * largest is kept resident (or nothing is checked).
 */
int ranges_device_suits(const struct loader_core *c)
{
	/* frames are decoded on the host, into the batch's io memory */
	if (!c->ranges.on || c->ranges.framed)
		return 0;
	for (uint32_t f = 0; f < c->ds->schema.nfields; f++) {
		if (c->ranges.resident[f])
			continue;
		if (c->cfg.verify && f != c->ranges.main_field)
			return 0;
		/* within a staging buffer, at the usual alignment (what the
		 * ring asks for is checked once it is open) */
		if (align_up(field_value_max(c, f), DLS_DEFAULT_ALIGNMENT) +
			    DLS_DEFAULT_ALIGNMENT > stage_buffer_nominal())
			return 0;
	}
	return 1;
}

/*
 * Once the staging buffers and the ring are set: full shuffle's ranges
 * take the blocks' fast path to the device (fetch.c).  Read into the
 * batch's io memory, a page-cache copy writes memory the CPU's cache does
 * not hold, and the batch is then copied once more on the host: on the
 * H100 host a full shuffle of 1 MiB records delivered 13.8 GB/s, 0.34x
 * the window shuffle, with 4.4 threads assembling
 * (bench/results/2026-11-27-h100-defaults.md).  Through a staging buffer
 * a range is read while the cache holds it, checked there, and uploaded to
 * the io mirror at its offset in the batch's io memory (never written);
 * the device gathers the batch.  Every field's range must fit a buffer
 * (a variable field's longest value, as the headers bound it), and every
 * file be read by pread(2): none O_DIRECT (a DMA, not a copy), none that
 * the ring may close.
 */
void ranges_device_init(struct loader_core *c)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t a = c->ring_info.alignment ? c->ring_info.alignment : 1;

	c->ranges.device = 0;
	c->ranges.device_lost = NULL;
	if (!ranges_device_suits(c) || !c->gather.on)
		return;
	/* else the batches with such records are copied on the CPU after
	 * all: stats.fallbacks says why */
	if (!c->stage.on) {
		c->ranges.device_lost = c->stage.off_why;
		return;
	}
	for (uint32_t f = 0; f < sc->nfields; f++)
		if (!c->ranges.resident[f] &&
		    align_up(field_value_max(c, f), a) + a >
			    c->stage.buffer_bytes) {
			c->ranges.device_lost =
				"a value longer than a staging buffer";
			return;
		}
	for (uint32_t s = 0; s < c->ds->nshards; s++)
		if (io_ring_pread_fd(c->ring, s) < 0) {
			c->ranges.device_lost =
				"shards the ring opens on demand (more than RLIMIT_NOFILE) or reads by O_DIRECT";
			return;
		}
	c->ranges.device = 1;
	c->ranges.read_max = c->stage.buffer_bytes;
}

/*
 * Once the ring is open: may host batches read their records' main field
 * straight into their memory (ranges.c's in_place_take_locked)?  The
 * records' bytes then land where the batch wants them, and the worker
 * that read them checks them while its cache holds them: no io memory,
 * no copy, no second pass over memory to check them.  Only where that is
 * the whole story: every field but the main one kept since open; a
 * variable main one unpadded, every block read by range (a value's place
 * follows the values before it); each shard read buffered by the workers
 * (fetch.c), which need no alignment, unless its blocks are framed,
 * whose frames land in io memory and are decoded into the batch (a
 * batch whose records do not each have frames of their own goes through
 * io memory: ranges.c's pieces_own_frames); no records
 * dropped (skip), which would move the rest; no chunks, which take their
 * memory their own way.  SLUICE_RANGES_IN_PLACE=0 turns it off for benchmarks' A/B.
 */
void ranges_in_place_init(struct loader_core *c)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t m = c->ranges.main_field;

	c->ranges.in_place = 0;
	c->ranges.in_place_off = NULL;
	if (!c->ranges.on || c->ranges.device)
		return;
	for (uint32_t f = 0; f < sc->nfields; f++)
		if (f != m && !c->ranges.resident[f])
			c->ranges.in_place_off =
				"fields other than the largest read by range";
	/* a variable value's place in the batch follows every value
	 * before it: all read by range, none cut short or padded */
	if (sc->fields[m].variable && (c->cfg.pad_length || !c->ranges.all))
		c->ranges.in_place_off = c->cfg.pad_length
			? "variable values padded" : "blocks read whole too";
	if (c->ranges.in_place_off)
		return;
	/* (frames land in io memory, and are decoded into the batch) */
	for (uint32_t s = 0; !c->ranges.framed && s < c->ds->nshards; s++)
		if (io_ring_pread_fd(c->ring, s) < 0)
			c->ranges.in_place_off =
				"shards read by O_DIRECT or opened on demand";
	if (c->ranges.in_place_off)
		return;
	c->ranges.in_place_off =
		c->ranges.resident[m] ? "no field read by range"
		: main_value_bytes(c) < IN_PLACE_MIN
		? "records shorter than 4 KiB (reads joined)"
		: c->cfg.on_error == SLUICE_ON_ERROR_SKIP
		? "on_error=skip moves records"
		: c->chunks.chunked ? "chunked batches"
		: env_off("SLUICE_RANGES_IN_PLACE")
		? "SLUICE_RANGES_IN_PLACE=0" : NULL;
	c->ranges.in_place = c->ranges.in_place_off == NULL;
}
