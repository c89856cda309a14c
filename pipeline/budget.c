/*
 * budget.c - the loader's memory budget (memory_bytes), sized at open:
 * one arena, split into an io pool (blocks as read, then as decoded) and
 * a batch pool (each batch's tensors), both carved at run time by pool.c
 * (batch memory in batch order: batch_memory.c).
 *
 * What the loader wants comes from the index: io memory for the blocks
 * in flight and cached, batch memory for the batches in flight and the
 * one the consumer holds.  The default budget is that, capped by a share
 * of the machine; an explicit memory_bytes is taken as given, its surplus
 * caching blocks.  Where the budget is short of the want, each side gets
 * what the largest batch needs first and the io side gives up read-ahead
 * and cache.  What can never run is refused here, before the arena is
 * made resident, with the number to raise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch_odds.h"
#include "loader.h"
#include "budget_test.h"
#include "memory_limit.h"

#define IO_ALIGN 4096u
/* The default budget's cap: this share of the memory the process may
 * use.  It scales with the machine (16 GiB on a 128 GiB GPU host, where a
 * fixed 1 GiB held too little in flight and refused a window of 64 MiB
 * blocks); what the loader takes is still what the dataset needs. */
#define DEFAULT_BUDGET_SHARE 8

/* Read buffer (with room for direct I/O's alignment around the block),
 * then the decode buffer when the block is compressed; only the decode
 * buffer where a worker reads the block through a staging buffer
 * (c->zstd_fetched).  Blocks are at most DLS_MAX_BLOCK_BYTES, so this
 * cannot overflow. */
uint64_t block_io_bytes(const struct loader_core *c,
			const struct shard_block *blk)
{
	uint64_t n = align_up(blk->stored_size, IO_ALIGN) + IO_ALIGN;

	/* its frames decoded at assembly (framed.c) */
	if (blk->codec == DLS_CODEC_ZSTD && c->framed.sized)
		return framed_io_bytes(c, blk);
	/* read through a staging buffer: no room for its stored bytes */
	if (blk->codec == DLS_CODEC_ZSTD && c->zstd_fetched)
		return align_up(blk->raw_size, IO_ALIGN);
	if (blk->codec == DLS_CODEC_ZSTD)
		n += align_up(blk->raw_size, IO_ALIGN);
	return n;
}

#ifdef SLUICE_TESTING
uint64_t budget_test_default_cap;
#endif

/* An eighth of the memory this process may use (the machine's, or its
 * control group's limit when smaller: a container), shared among the
 * ranks of this host: eight ranks must not pin the whole of it.  On a GPU
 * at most an eighth of its memory as well (each rank has its own): the
 * device mirrors the arena, so memory_bytes is about what the loader
 * takes of the GPU, which the training job needs (16 GiB of a 24 GB GPU
 * on a 128 GiB host). */
static uint64_t default_budget(const struct loader_core *c)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && page > 0
		? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
	uint64_t cap;

	ram = memory_limit_bytes(ram, "/proc/self/cgroup", "/sys/fs/cgroup");
	cap = ram / DEFAULT_BUDGET_SHARE;
#ifdef SLUICE_TESTING
	if (budget_test_default_cap)
		cap = budget_test_default_cap;
#endif
	cap /= local_ranks();
	if (c->device_memory &&
	    c->device_memory / DEFAULT_BUDGET_SHARE < cap)
		cap = c->device_memory / DEFAULT_BUDGET_SHARE;
	return cap;
}

static uint64_t min3(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t m = a < b ? a : b;

	return m < c ? m : c;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Typical sizes from the index, robust to the outliers that a mean would
 * spread over every block: the (lower) median of the blocks' io bytes,
 * the median record's raw bytes (each block's records weighed as its
 * average), the largest io bytes and their sum.  The staging buffers
 * of c->zstd_fetched lie in the io memory beside every block: io_max,
 * io_top_need and io_sum count them, as every floor must. */
struct block_sizes {
	uint64_t io_median, io_max, io_sum, record_median;
	uint64_t stage;             /* those buffers (stage_fetch_want) */
	uint64_t io_top_need;       /* the c->need largest io bytes, summed */
	uint64_t raw_top_one;       /* the batch_records_max() largest raw
				       sizes, summed: no batch holds more */
	uint64_t raw_top_two;       /* twice as many: no two batches of
				       one epoch hold more */
	uint64_t values_one, values_two; /* the largest variable values of
				       batch_records_max() records, and of
				       twice as many: exact where the layout
				       is known, at their bounds elsewhere
				       (chunk_values_max) */
	uint64_t max_block;         /* global block with io_max */
};

struct per_record {
	uint64_t bytes, count;
};

static int cmp_per_record(const void *a, const void *b)
{
	return cmp_u64(&((const struct per_record *)a)->bytes,
		       &((const struct per_record *)b)->bytes);
}

static int measure_blocks(const struct loader_core *c, struct block_sizes *z)
{
	uint64_t n = c->nblocks, *io, *raw, seen = 0;
	struct per_record *rec;

	memset(z, 0, sizeof(*z));
	if (n == 0)
		return 0;
	io = malloc(n * sizeof(*io));
	raw = malloc(n * sizeof(*raw));
	rec = malloc(n * sizeof(*rec));
	if (!io || !raw || !rec) {
		free(io);
		free(raw);
		free(rec);
		return -ENOMEM;
	}
	for (uint64_t g = 0; g < n; g++) {
		uint32_t shard;
		const struct shard_block *blk = loader_block(c, g, &shard);

		io[g] = block_io_bytes(c, blk);
		raw[g] = blk->raw_size;
		rec[g].count = blk->record_count;
		rec[g].bytes = blk->record_count
			? (blk->raw_size + blk->record_count - 1) /
			  blk->record_count : 0;
		z->io_sum += io[g];
		if (io[g] > z->io_max) {
			z->io_max = io[g];
			z->max_block = g;
		}
	}
	qsort(io, n, sizeof(*io), cmp_u64);
	qsort(rec, n, sizeof(*rec), cmp_per_record);
	z->io_median = io[(n - 1) / 2];
	for (uint64_t k = 0; k < c->need && k < n; k++)
		z->io_top_need = add_sat(z->io_top_need, io[n - 1 - k]);
	z->stage = stage_fetch_want(c);
	z->io_max = add_sat(z->io_max, z->stage);
	z->io_top_need = add_sat(z->io_top_need, z->stage);
	z->io_sum = add_sat(z->io_sum, z->stage);
	/* A batch's records come from at most batch_records_max() blocks,
	 * and its records of one block hold at most that block's raw
	 * bytes. */
	qsort(raw, n, sizeof(*raw), cmp_u64);
	for (uint64_t k = 0; k < 2ull * batch_records_max(c) && k < n; k++) {
		z->raw_top_two = add_sat(z->raw_top_two, raw[n - 1 - k]);
		if (k < batch_records_max(c))
			z->raw_top_one = z->raw_top_two;
	}
	for (uint64_t k = 0; k < n; k++) {
		seen += rec[k].count;
		z->record_median = rec[k].bytes;
		if (seen * 2 >= c->ds->record_count)
			break;
	}
	free(io);
	free(raw);
	free(rec);
	if (chunk_values_max(c, batch_records_max(c), &z->values_one) ||
	    chunk_values_max(c, 2ull * batch_records_max(c), &z->values_two))
		return -ENOMEM;
	return 0;
}

static uint64_t fixed_record_bytes(const struct loader_core *c)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t n = 0;

	for (uint32_t f = 0; f < sc->nfields; f++)
		n += sc->fields[f].record_bytes;
	return n;
}

/* The bytes one record's variable values can add to a batch beyond the
 * typical: the headers' max_value_bytes, but never more than the largest
 * decoded block (a header may claim far more than any block holds). */
static uint64_t largest_record_extra(const struct loader_core *c)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t extra = 0;

	if (c->cfg.pad_length)
		return 0;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t m = sc->fields[f].max_value_bytes;

		if (sc->fields[f].variable)
			extra += m < c->ds->max_raw ? m : c->ds->max_raw;
	}
	return extra;
}

/* "memory_bytes N" as the caller gave it (with what whole pages leave of
 * it when that is less), or "the default memory_bytes N". */
static const char *budget_words(const struct loader_core *c, uint64_t budget,
				char *buf, size_t len)
{
	uint64_t asked = c->cfg.memory_bytes;

	if (!asked)
		snprintf(buf, len, "the default memory_bytes %llu",
			 (unsigned long long)budget);
	else if (asked != budget)
		snprintf(buf, len, "memory_bytes %llu (%llu in whole %u-byte "
			 "pages)", (unsigned long long)asked,
			 (unsigned long long)budget, (unsigned)IO_ALIGN);
	else
		snprintf(buf, len, "memory_bytes %llu",
			 (unsigned long long)asked);
	return buf;
}

/* The largest single value any batch must hold (the headers'
 * max_value_bytes, capped as largest_record_extra() caps them), and its
 * field in *@field. */
static uint64_t largest_value(const struct loader_core *c, uint32_t *field)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t big = 0;

	*field = 0;
	if (c->cfg.pad_length)
		return 0;
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t m = sc->fields[f].max_value_bytes;

		if (m > c->ds->max_raw)
			m = c->ds->max_raw;
		if (sc->fields[f].variable && m > big) {
			big = m;
			*field = f;
		}
	}
	return big;
}

/*
 * The most @n batches' (1 or 2) variable values take past batch_fixed:
 * every record at its largest values, but never more than the largest
 * blocks of as many records hold (one outlier record costs its own size,
 * not batch_size times it).  Two batches of one epoch hold distinct
 * records; the last of an epoch and the first of the next may hold the
 * same ones, which is what two batches are in a dataset of at most two
 * (3 records, one of 10 MB, held across epochs, went over the budget when
 * the two were bounded by its blocks once).  In a larger dataset the
 * largest records meeting at an epoch's boundary is left to the consumer's
 * mapped batches (batch_memory.c): bounding every pair by it took 40% more
 * memory for a dataset of rare values of MiBs.  A mixture whose stream
 * repeats its records may repeat them within a batch, which the blocks
 * then do not bound (10 records, one of 64 KiB, 1000 samples an epoch,
 * batch 4096: 6.6 MB refused by 0.53 MB of batch memory).  The largest
 * values themselves bound them too where the layout is known
 * (z->values_one; b blocks bound b records by every record they hold).
 * A batch gathered by chunks is granted each value's room (chunks.c),
 * which is what it takes.
 */
static uint64_t batches_extra_max(const struct loader_core *c,
				  const struct block_sizes *z, uint64_t n)
{
	uint64_t b = batch_records_max(c), largest = largest_record_extra(c);
	uint64_t one = mul_sat(largest, b), two = mul_sat(largest, 2 * b);

	if (sampler_repeats(&c->sampler))
		return mul_sat(n, one);
	if (c->chunks.chunked) {
		/* what a chunked batch is granted: its values' rooms */
		one = z->values_one;
		two = z->values_two;
	} else {
		one = min3(one, z->raw_top_one, z->values_one);
		two = min3(two, z->raw_top_two, z->values_two);
	}
	if (n == 1)
		return one;
	return c->ds->record_count > 2 * b ? two : mul_sat(2, one);
}

/* The batch memory a budget wants: prefetch_depth + 1 typical batches
 * (@batch_fixed: a batch's bytes besides variable values), and room for
 * the two largest and one more. */
static uint64_t batch_want_bytes(const struct loader_core *c,
				 const struct block_sizes *z,
				 uint64_t batch_fixed)
{
	uint64_t per_batch, extra, want;

	/* The median record's variable bytes: its raw size less the fixed
	 * fields, which batch_fixed holds already. */
	per_batch = batch_fixed;
	if (!c->cfg.pad_length && z->record_median > fixed_record_bytes(c))
		per_batch = add_sat(per_batch,
				    mul_sat(batch_records_max(c),
					    z->record_median -
						    fixed_record_bytes(c)));
	/* prefetch_depth batches and the one the consumer holds.  With
	 * variable values, one more: first-fit leaves those batches in the
	 * lowest prefetch_depth + 1 typical sizes, so that much room above
	 * them lets the largest batch in beside whichever one is held (else
	 * a held batch can split the pool where neither hole fits it:
	 * test_budget check_hold_previous).  Room then for the two largest
	 * batches, the one the consumer holds and the next: each is every
	 * record at its largest values (a batch of 8 images of up to 300 KB
	 * sized from the median image was refused; with room for one, a run
	 * of 40 such images held one batch at a time went over the budget
	 * 20 times): batches_extra_max().  And room for one more largest
	 * batch: the held one may lie anywhere in the pool, and only then
	 * is a hole beside it as long as the next batch, whatever its size
	 * (a skewed dataset's batches of 2 records of up to 8 MiB, the
	 * previous one held: 11.5 MB held mid-pool left holes of 11.3 and
	 * 10.4 for a batch of 13.9, which went over the budget). */
	extra = add_sat(batches_extra_max(c, z, 2), batches_extra_max(c, z, 1));
	want = add_sat(mul_sat(c->cfg.prefetch_depth + (extra ? 2ull : 1ull),
			       per_batch),
		       extra);
	return add_sat(want, IO_ALIGN) & ~(uint64_t)(IO_ALIGN - 1);
}

/* The most @n batches (1 or 2) can take. */
static uint64_t batches_max_bytes(const struct loader_core *c,
				  const struct block_sizes *z,
				  uint64_t batch_fixed, uint64_t n)
{
	return align_up(add_sat(mul_sat(n, batch_fixed),
				batches_extra_max(c, z, n)),
			IO_ALIGN);
}

/* A batch does not fit beside the io memory: -E2BIG under window shuffle,
 * where a smaller window's blocks may leave it room (loader_open.c's
 * shrink_window, for the default budget: 100 records of 280 KB fixed
 * each beside 24 blocks of 7.5 MB were refused under a 197 MB cap). */
static int batch_refused(const struct loader_core *c)
{
	return c->cfg.shuffle == SLUICE_SHUFFLE_WINDOW ? -E2BIG : -ENOSPC;
}

uint64_t budget_cap(const struct loader_core *c)
{
	return c->cfg.memory_bytes ? c->cfg.memory_bytes : default_budget(c);
}

/*
 * An explicit memory_bytes (and no cache_bytes), or else the default
 * budget's cap, holds every block beside the batch memory it wants:
 * budget_open() will give the cache that surplus (the default's, where
 * c->budget_takes_dataset), and each block is read once.
 */
int budget_caches_dataset(const struct loader_core *c, uint64_t batch_fixed)
{
	uint64_t budget = (c->cfg.memory_bytes ? c->cfg.memory_bytes
					       : default_budget(c)) &
			  ~(uint64_t)(IO_ALIGN - 1);
	struct block_sizes z;

	if (c->cfg.cache_bytes || !c->nblocks || measure_blocks(c, &z))
		return 0;
	return add_sat(batch_want_bytes(c, &z, batch_fixed),
		       align_up(z.io_sum, IO_ALIGN)) <= budget;
}

/* The io memory the loader wants: @entries median blocks and the
 * largest, at least a batch's blocks at once, an explicit cache_bytes, at
 * most every block; and the record ranges' (ranges.c). */
static uint64_t io_want_bytes(const struct loader_core *c,
			      const struct block_sizes *z, uint64_t entries)
{
	uint64_t want = add_sat(mul_sat(entries, z->io_median), z->io_max);

	/* At least a batch's blocks at once, which refuse_split() asks
	 * for: entries x the median falls short of that where a few blocks
	 * are much larger than the median (two values of 2 and 1.5 MiB
	 * among ten tiny ones, 4 blocks: the default took 2.1 MB of io
	 * memory, far below its cap, and refused the 3.7 its blocks take
	 * at once). */
	if (want < z->io_top_need)
		want = z->io_top_need;
	/* every record read by range (range_block): no block is read, but
	 * room for the largest, which every budget keeps (refused at open
	 * without it), and an explicit cache_bytes all the same; the
	 * ranges' own below */
	if (c->ranges.all && want > z->io_max)
		want = z->io_max;
	if (c->cfg.cache_bytes > want)
		want = c->cfg.cache_bytes;
	if (c->budget_takes_dataset)
		want = z->io_sum;
	if (want > z->io_sum)
		want = z->io_sum;       /* the whole dataset fits */
	want = add_sat(want, c->ranges.io_want);
	return align_up(want ? want : IO_ALIGN, IO_ALIGN);
}

/*
 * The budget in *@budget, whole pages: an explicit memory_bytes, refused
 * when it cannot hold an explicit cache_bytes (@cache) beside one batch;
 * else the default: what the loader wants (@want), capped by
 * default_budget() unless cache_bytes was asked for (c->budget_wanted
 * says what the cap cut, for loader_stats.c's "memory binds").
 */
/* The io memory an explicit cache_bytes can have of @budget (whole pages)
 * beside one batch's fixed bytes: whole pages too. */
static uint64_t cache_room(uint64_t budget, uint64_t batch_fixed)
{
	return budget > batch_fixed
		? (budget - batch_fixed) & ~(uint64_t)(IO_ALIGN - 1) : 0;
}

static int budget_bytes(struct loader_core *c, uint64_t want, uint64_t cache,
			uint64_t batch_fixed, uint64_t *budget, char *err,
			size_t errlen)
{
	uint64_t b;

	if (c->cfg.memory_bytes) {
		/* in whole pages, as split_short() gives the cache its io
		 * memory (a cache_bytes of 471632 in memory_bytes of 474146,
		 * beside 2 KiB of batch, was taken and got 466944) */
		uint64_t pages = c->cfg.memory_bytes &
				 ~(uint64_t)(IO_ALIGN - 1);

		b = c->cfg.memory_bytes;
		if (cache &&
		    align_up(cache, IO_ALIGN) > cache_room(pages, batch_fixed)) {
			snprintf(err, errlen,
				 "cache_bytes %llu does not fit in memory_bytes %llu beside one batch (%llu bytes): raise memory_bytes or lower cache_bytes",
				 (unsigned long long)c->cfg.cache_bytes,
				 (unsigned long long)b,
				 (unsigned long long)batch_fixed);
			return -ENOSPC;
		}
	} else {
		b = default_budget(c);
		c->budget_wanted = 0;
		if (want < b || c->cfg.cache_bytes)    /* asked: not capped */
			b = want;
		else if (want > b)
			c->budget_wanted = want;
	}
	*budget = b & ~(uint64_t)(IO_ALIGN - 1);
	return 0;
}

/*
 * The budget holds what the loader wants.  An explicit memory_bytes past
 * it is made resident all the same: it caches blocks (up to every one;
 * not past an explicit cache_bytes, nor where every block is read by
 * range), so that slow reads get read-ahead and a dataset that fits is
 * read once, and *@entries rises to as many blocks as it holds.  (It all
 * went to batch memory once, which only a consumer holding more batches
 * than the slots uses.)
 */
static void split_surplus(struct loader_core *c, const struct block_sizes *z,
			  uint64_t budget, uint64_t io_want,
			  uint64_t batch_want, uint64_t *entries)
{
	c->io_bytes = io_want;
	if (c->cfg.memory_bytes && !c->cfg.cache_bytes && !c->ranges.all) {
		uint64_t all = align_up(add_sat(z->io_sum, c->ranges.io_want),
					IO_ALIGN);
		uint64_t room = (budget - batch_want) &
				~(uint64_t)(IO_ALIGN - 1);
		uint64_t avg = c->nblocks ? (z->io_sum - z->stage) /
					    c->nblocks : 0;
		uint64_t held;

		c->io_bytes = room < all ? room : all;
		if (c->io_bytes < io_want)
			c->io_bytes = io_want;
		held = avg ? (c->io_bytes - c->ranges.io_want) / avg : 0;
		if (held > c->nblocks)
			held = c->nblocks;
		if (held > *entries)
			*entries = held;
	}
	c->batch_bytes = budget - c->io_bytes;
}

/* The io memory a batch cannot do without: a batch's blocks at once and
 * one batch's range reads.  Batches gathered by chunks read as little as
 * one block at once (with 2 blocks of 48.5 MB asked for, 89.8 MB left a
 * batch 5.8 and was refused, where 60.7 was taken); with every block
 * read by range, none (14 values of up to 124 KB in one zstd block,
 * batch 2, memory_bytes 1.6 MB: counting it left batches 135 KB, and a
 * batch of 186 KB failed, where 0.94 MB without ranges streamed).  The
 * ranges' want, room for prefetch_depth batches at their values' mean,
 * left a window shuffle of values of up to 1.2 MB read in place, batch
 * 16, 9.6 MB of batch memory under a 49.4 MB cap, and its batch of 13.7
 * failed at next(); one batch at the largest values leaves it 19.1. */
static uint64_t io_min_bytes(const struct loader_core *c,
			     const struct block_sizes *z)
{
	uint64_t blocks = c->ranges.all ? 0
			  : c->chunks.chunked ? z->io_max : z->io_top_need;
	uint64_t least = add_sat(blocks, c->ranges.io_least);

	/* every block read by range: still the largest block's room, which
	 * refuse_split() asks of every budget (and the ranges' none where
	 * they are read in place) */
	if (c->ranges.all && least < z->io_max)
		least = z->io_max;
	return align_up(least, IO_ALIGN);
}

/* The batch memory refuse_split() asks for at least: the largest batch,
 * and one batch beside the largest value as the headers bound it. */
static uint64_t batches_least_bytes(const struct loader_core *c,
				    const struct block_sizes *z,
				    uint64_t batch_fixed)
{
	uint32_t field;
	uint64_t one = batches_max_bytes(c, z, batch_fixed, 1);
	uint64_t big = add_sat(batch_fixed, largest_value(c, &field));

	return one > big ? one : big;
}

/*
 * The batch memory a budget short of the want keeps: the two largest
 * batches (the one a consumer holds and the next), else the largest,
 * where that fits beside a batch's blocks and one batch's range reads,
 * else all but those; 0 when not even they fit (refuse_split() says so).
 * A floor of need x the median blocks and the largest (47.5 MB, where
 * the 3 largest took 35.7) left the default's 49.4 MB cap 1.9 MB of
 * batch memory and failed its first batch of 2.1; without the range
 * reads' want, a full shuffle's batch of 14.7 MB of ranges found 8.3.
 */
static uint64_t batch_keep_bytes(const struct loader_core *c,
				 const struct block_sizes *z, uint64_t budget,
				 uint64_t batch_fixed)
{
	uint64_t io_min = io_min_bytes(c, z);

	for (uint64_t n = 2; n >= 1; n--) {
		uint64_t batches = batches_max_bytes(c, z, batch_fixed, n);

		if (batches && add_sat(io_min, batches) <= budget)
			return batches;
	}
	return io_min < budget ? budget - io_min : 0;
}

/*
 * The budget is short of the want: half each, but io at least what one
 * batch's blocks take (its largest included) when that fits, and batches
 * no more than they want; then batches keep batch_keep_bytes(), the io
 * memory past a batch's blocks being read-ahead and cache, which a short
 * budget holds less of.  (Half each always: a memory_bytes of 512M, 23
 * MiB short of the window shuffle's default, left io 256 MiB and batches
 * 256 they never used, 2.8 GB/s against 4.2 with reads 20 ms late.)  An
 * explicit cache_bytes (@cache) is honoured, never cut to half the
 * budget: budget_bytes() checked that it fits beside one batch.
 */
static void split_short(struct loader_core *c, const struct block_sizes *z,
			uint64_t budget, uint64_t io_want, uint64_t batch_want,
			uint64_t batch_fixed, uint64_t cache)
{
	uint64_t half = (budget / 2) & ~(uint64_t)(IO_ALIGN - 1);
	uint64_t floor = add_sat(mul_sat(c->need, z->io_median), z->io_max);
	uint64_t least = io_min_bytes(c, z), keep;

	floor = align_up(floor < io_want ? floor : io_want, IO_ALIGN);
	c->io_bytes = io_want < half ? io_want : floor > half ? floor : half;
	if (budget > batch_want &&
	    ((budget - batch_want) & ~(uint64_t)(IO_ALIGN - 1)) > c->io_bytes)
		c->io_bytes = (budget - batch_want) & ~(uint64_t)(IO_ALIGN - 1);
	if (c->io_bytes >= budget) {
		/* the floor does not fit: at least a batch's blocks where
		 * they do (a window of 5 MB blocks under 12 MiB: 10 MB, where
		 * half of it made the window chunked), and a batch's fixed
		 * bytes beside them (a full shuffle's ranges' least left 4
		 * KiB of 1.26 MB for batches and was refused, where 1.25 MB,
		 * short of them, ran) */
		c->io_bytes = least < budget && least > half &&
			      budget - least >= batch_fixed ? least
			      : z->io_max > half ? z->io_max : half;
	}
	keep = batch_keep_bytes(c, z, budget, batch_fixed);
	if (keep && c->io_bytes > budget - keep)
		c->io_bytes = budget - keep;
	/* and at least what a batch cannot do without, where the largest
	 * batch fits beside it: half of a window's 7.3 MB left a batch's
	 * ranges 3.1 MB of 3.15 */
	if (c->io_bytes < least && least < budget &&
	    budget - least >= batches_least_bytes(c, z, batch_fixed))
		c->io_bytes = least;
	if (c->cfg.memory_bytes && cache && c->io_bytes < cache) {
		uint64_t most = cache_room(budget, batch_fixed);
		uint64_t want = align_up(cache, IO_ALIGN);

		c->io_bytes = want < most ? want : most;
	}
	c->batch_bytes = c->io_bytes < budget ? budget - c->io_bytes : 0;
}

/* Batches gathered by chunks take each variable value's bound (chunks.c):
 * refuse at open the budget whose batch memory cannot hold the largest
 * such batch, rather than at that batch.  @return: 0, -ENOSPC, -ENOMEM. */
static int refuse_chunks(struct loader_core *c, uint64_t budget,
			 uint64_t batch_fixed, char *err, size_t errlen)
{
	uint64_t values, most;
	char words[128];
	int r = chunk_values_max(c, batch_records_max(c), &values);

	if (r)
		return r;
	most = add_sat(batch_fixed, values);
	if (c->batch_bytes >= most)
		return 0;
	snprintf(err, errlen,
		 "%s leaves %llu bytes for batches beside %llu of io memory; a batch's blocks do not fit at once, and a batch gathered a chunk of blocks at a time takes room for each value at its shard's max_value_bytes: up to %llu bytes: raise memory_bytes (sluice --memory, Python memory_bytes=) or lower batch_size",
		 budget_words(c, budget, words, sizeof(words)),
		 (unsigned long long)c->batch_bytes,
		 (unsigned long long)c->io_bytes, (unsigned long long)most);
	return -ENOSPC;
}

/*
 * A full shuffle whose records are read by range plans a batch with
 * room for twice its ranges at the records' mean sizes (ranges_open.c),
 * so a batch of many large values could find neither io nor batch
 * memory enough, and fail at next() mid-epoch (a cap of 99 MB, values of
 * up to 16 MiB in a fifth of 567 records, batch 16: its batch 4 needed
 * 62 MB of ranges).  Refuse at open where the odds that a batch does
 * not fit are above BATCH_ODDS_REFUSED; below them, the largest batch
 * may not fit, as long as the batches all but never come near it
 * (2,000 values, 80 of them 256 KiB, batch 64, under a 12 MiB cap).
 * @return: 0, -ENOSPC, -ENOMEM.
 */
static int refuse_ranges_odds(struct loader_core *c, uint64_t budget,
			      uint64_t batch_fixed, char *err,
			      size_t errlen)
{
	uint64_t io = c->io_bytes > c->ranges.stage_want
		      ? c->io_bytes - c->ranges.stage_want : 0;
	uint64_t values;
	char words[128];
	double odds;
	int r;

	if (!c->ranges.all)
		return 0;
	odds = ranges_batch_odds(c, io, c->batch_bytes - batch_fixed);
	if (odds <= BATCH_ODDS_REFUSED)
		return 0;
	r = chunk_values_max(c, batch_records_max(c), &values);
	if (r)
		return r;
	snprintf(err, errlen,
		 "%s leaves %llu bytes of io memory for record ranges and %llu for batches; a full shuffle's batch of %u records drawn at random does not fit them with odds up to %.2g a batch, more than one in a million (its largest batch takes up to %llu bytes of values): raise memory_bytes (sluice --memory, Python memory_bytes=) or lower batch_size",
		 budget_words(c, budget, words, sizeof(words)),
		 (unsigned long long)io,
		 (unsigned long long)c->batch_bytes, batch_records_max(c),
		 odds, (unsigned long long)values);
	return -ENOSPC;
}

/*
 * Every record read by range, batches drawn at random but not with a
 * full shuffle's odds (refuse_ranges_odds()): under a window shuffle, or
 * a full one of a mixture.  Refuse at open a split that cannot hold the
 * largest batch, as its values' lengths put it, in batch memory, or one
 * batch's ranges at their largest in io memory (a window of 16 values
 * of up to 256 KiB beside a 4.2 MB block: memory_bytes of 5.3 to 7.3 MB
 * were taken, and batch 0 failed at next()).  Not in file or block
 * order, whose batches are runs of neighbours, far below those bounds
 * (runs of 1.5 MB values among empty ones, batch 16: 6 MB a batch, 18
 * as the bound puts it).  @most: the largest batch.  @return: 0 or
 * -ENOSPC.
 */
static int refuse_ranges_least(struct loader_core *c,
			       const struct block_sizes *z, uint64_t budget,
			       uint64_t most, char *err, size_t errlen)
{
	uint64_t least = io_min_bytes(c, z);
	char words[128];

	if (!c->ranges.all || c->ranges.odds ||
	    c->cfg.shuffle <= SLUICE_SHUFFLE_BLOCK ||
	    ((!c->ranges.layout_all || c->batch_bytes >= most) &&
	     c->io_bytes >= least))
		return 0;
	budget_words(c, budget, words, sizeof(words));
	if (c->ranges.layout_all && c->batch_bytes < most)
		snprintf(err, errlen,
			 "%s leaves %llu bytes for batches beside %llu of io memory; its largest batch of records read by range takes up to %llu: raise memory_bytes (sluice --memory, Python memory_bytes=) or lower batch_size",
			 words, (unsigned long long)c->batch_bytes,
			 (unsigned long long)c->io_bytes,
			 (unsigned long long)most);
	else
		snprintf(err, errlen,
			 "%s leaves %llu bytes of io memory beside %llu for batches; a batch of %u records read by range takes up to %llu of it: raise memory_bytes (sluice --memory, Python memory_bytes=) or lower batch_size",
			 words, (unsigned long long)c->io_bytes,
			 (unsigned long long)c->batch_bytes,
			 batch_records_max(c), (unsigned long long)least);
	return -ENOSPC;
}

/*
 * Refuse at open a split that no batch could run in, rather than at that
 * batch after the whole budget was made resident: the largest block
 * beside any batch memory, one batch's fixed bytes, the batch that holds
 * the largest value, a batch's blocks at once (unless batches are
 * gathered a chunk of blocks at a time).  -E2BIG under a window shuffle:
 * the caller may halve the window; then, or else, it may gather by
 * chunks (loader_open.c).
 */
static int refuse_split(struct loader_core *c, const struct block_sizes *z,
			uint64_t budget, uint64_t batch_fixed, char *err,
			size_t errlen)
{
	uint64_t big, most;
	uint32_t big_field;
	char words[128];
	int r;

	budget_words(c, budget, words, sizeof(words));
	if (c->nblocks && (z->io_max > c->io_bytes || c->batch_bytes == 0)) {
		uint32_t shard;
		const struct shard_block *blk = loader_block(c, z->max_block,
							     &shard);

		snprintf(err, errlen,
			 "%s: block %llu (records %llu..%llu): reading and decoding it takes %llu bytes (%llu of them the workers' staging buffers), more than %s allows beside batch memory: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			 c->ds->shards[shard].path,
			 (unsigned long long)(z->max_block -
					      c->shard_block_base[shard]),
			 (unsigned long long)(c->block_first[z->max_block]),
			 (unsigned long long)(c->block_first[z->max_block] +
					      blk->record_count - 1),
			 (unsigned long long)z->io_max,
			 (unsigned long long)z->stage, words);
		return -ENOSPC;
	}
	if (c->batch_bytes < batch_fixed) {
		snprintf(err, errlen,
			 "%s leaves %llu bytes for batches beside %llu of io memory (a batch can touch %llu blocks of up to %llu bytes, all in memory at once); one batch of %u records takes %llu bytes before any variable-length value: raise memory_bytes (sluice --memory, Python memory_bytes=), lower batch_size, or write smaller blocks (dlpack-shard --block-size)",
			 words, (unsigned long long)c->batch_bytes,
			 (unsigned long long)c->io_bytes,
			 (unsigned long long)c->need,
			 (unsigned long long)z->io_max,
			 batch_records_max(c),
			 (unsigned long long)batch_fixed);
		return batch_refused(c);
	}
	big = largest_value(c, &big_field);
	if (big && c->batch_bytes < add_sat(batch_fixed, big)) {
		snprintf(err, errlen,
			 "%s leaves %llu bytes for batches beside %llu of io memory; the batch holding the largest value of field %s (%llu bytes, as the shard headers say) needs at least %llu: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			 words, (unsigned long long)c->batch_bytes,
			 (unsigned long long)c->io_bytes,
			 c->ds->schema.fields[big_field].f.name,
			 (unsigned long long)big,
			 (unsigned long long)add_sat(batch_fixed, big));
		return batch_refused(c);
	}
	r = refuse_ranges_odds(c, budget, batch_fixed, err, errlen);
	if (r)
		return r;
	if (c->chunks.chunked)
		return refuse_chunks(c, budget, batch_fixed, err, errlen);
	/* Its largest batch, as the layout sizes it, does not fit beside a
	 * batch's blocks: a smaller window, or chunks, leave it room
	 * (loader_open.c); nothing does where a batch takes one block (a
	 * dataset of one block of 37 records, batch 100, a 49 MB cap: 17
	 * MB of batch memory beside its 32 MB block, and batch 0 failed at
	 * next()).  Only where the layout is known: a bound from the
	 * headers may be far above any batch, and chunks take room for
	 * it.  Not for record ranges, whose batches are drawn at random:
	 * their odds are refuse_ranges_odds()'s. */
	most = batches_max_bytes(c, z, batch_fixed, 1);
	if (c->ranges.layout_all && c->batch_bytes < most &&
	    (c->need == 1 ? !c->ranges.all : c->chunks.possible)) {
		snprintf(err, errlen,
			 "%s leaves %llu bytes for batches beside %llu of io memory (a batch's %llu block%s at once); its largest batch takes up to %llu: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			 words, (unsigned long long)c->batch_bytes,
			 (unsigned long long)c->io_bytes,
			 (unsigned long long)c->need, c->need == 1 ? "" : "s",
			 (unsigned long long)most);
		return batch_refused(c);
	}
	r = refuse_ranges_least(c, z, budget, most, err, errlen);
	if (r)
		return r;
	if (c->io_bytes >= z->io_top_need)
		return 0;
	snprintf(err, errlen,
		 "a batch's %llu blocks take up to %llu bytes of io memory at once, more than the %llu %s leaves: raise memory_bytes (sluice --memory, Python memory_bytes=)%s",
		 (unsigned long long)c->need,
		 (unsigned long long)z->io_top_need,
		 (unsigned long long)c->io_bytes, words,
		 c->cfg.shuffle == SLUICE_SHUFFLE_WINDOW
			 ? ", lower window_blocks (--window)" : "");
	return -E2BIG;
}

/* Map the arena (device_open: the io part, then the batch part, which
 * the device mirrors; the io part too where batches are gathered there,
 * gather.c) and set up the pools that carve it. */
static int arena_open(struct loader_core *c, uint64_t entries, char *err,
		      size_t errlen)
{
	struct device_config dc = {
		.kind = c->cfg.device,
		.device_id = c->cfg.device_id,
		.arena_bytes = c->io_bytes + c->batch_bytes,
		.slots = c->cfg.prefetch_depth,
		.mirror_offset = c->io_bytes,
		.mirror_bytes = c->batch_bytes,
		.pageable = !!(sluice_loader_config_forced(&c->cfg) &
			       SLUICE_FORCE_PAGEABLE_COPIES),
		.io_mirror_bytes = gather_wanted(c) ? c->io_bytes : 0,
		.gather_runs_max = gather_runs_max(c),
		.upload_lanes = c->cfg.decode_threads,
	};
	size_t arena_len;
	uint32_t io_allocs;
	int r;

	r = device_open(&dc, &c->dev, err, errlen);
	if (r)
		return r;
	device_get_info(c->dev, &c->dev_info);
	c->arena = device_arena(c->dev, &arena_len);
	/* The io pool's live allocations: a block per cache entry, and a
	 * range buffer per batch in flight when records are read by range
	 * (ranges.c), freed in whatever order their assemblies end.  Sized
	 * for the entries alone, out-of-order frees split the free space
	 * into more extents than pool_free() has room for. */
	io_allocs = (uint32_t)entries + (c->ranges.on ? c->slots_cap : 0);
	r = pool_init(&c->io_pool, c->io_bytes, IO_ALIGN, io_allocs);
	if (!r)
		r = pool_init(&c->views.pool, c->io_bytes, IO_ALIGN,
			      (uint32_t)entries);
	if (!r)
		r = pool_init(&c->batch_pool, c->batch_bytes, SLOT_ALIGN,
			      c->slots_cap);
	return r;
}

/*
 * Size the arena and map it (device_open), then set up both pools.
 * @entries: cache entries (each one io pool allocation); @batch_fixed:
 * what a full batch takes besides variable values (slot_layout()).
 * Default budget: what the index says prefetch_depth + 1 typical batches
 * (one more with variable values) and the cache need, plus the two
 * largest batches and the largest block, capped at default_budget(); an
 * explicit cache_bytes is not capped.  Given memory_bytes: exactly that,
 * refused when it cannot hold an explicit cache_bytes beside one batch;
 * what batches do not want caches blocks, and *@entries rises to as many
 * as that io memory holds.
 */
int budget_open(struct loader_core *c, uint64_t *entries,
		uint64_t batch_fixed, char *err, size_t errlen)
{
	uint64_t budget, io_want, batch_want, cache;
	struct block_sizes z;
	int r;

	for (int pass = 0;; pass++) {
		r = measure_blocks(c, &z);
		if (r)
			return r;
		/* An explicit cache_bytes, at most what every block takes. */
		cache = c->cfg.cache_bytes < z.io_sum ? c->cfg.cache_bytes
						       : z.io_sum;
		io_want = io_want_bytes(c, &z, *entries);
		batch_want = batch_want_bytes(c, &z, batch_fixed);
		r = budget_bytes(c, add_sat(io_want, batch_want), cache,
				 batch_fixed, &budget, err, errlen);
		if (r || pass || add_sat(io_want, batch_want) <= budget ||
		    add_sat(io_min_bytes(c, &z),
			    batches_max_bytes(c, &z, batch_fixed, 1)) <= budget)
			break;
		/* short, even of the largest batch beside its blocks as the
		 * headers bound it: size batches by their values' lengths */
		r = ranges_layout_open(c, err, errlen);
		if (r <= 0)
			break;
	}
	if (r < 0)
		return r;
	if (add_sat(io_want, batch_want) <= budget)
		split_surplus(c, &z, budget, io_want, batch_want, entries);
	else
		split_short(c, &z, budget, io_want, batch_want, batch_fixed,
			    cache);
	r = refuse_split(c, &z, budget, batch_fixed, err, errlen);
	if (r)
		return r;
	c->io_batch_max = z.io_top_need;
	c->io_need_bytes = add_sat(mul_sat(c->need, z.io_median), z.io_max);
	if (c->io_need_bytes > c->io_bytes / 2)
		c->io_need_bytes = c->io_bytes / 2;
	return arena_open(c, *entries, err, errlen);
}

void budget_close(struct loader_core *c)
{
	pool_destroy(&c->io_pool);
	pool_destroy(&c->views.pool);
	pool_destroy(&c->batch_pool);
}
