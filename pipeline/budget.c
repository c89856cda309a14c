/*
 * budget.c - the loader's memory budget (memory_bytes): one arena, sized
 * at open, split into an io pool (blocks as read, then as decoded) and a
 * batch pool (each batch's tensors), both carved at run time by pool.c.
 *
 * Batch memory is taken when a batch's blocks are decoded, so it is what
 * the records need, and it is handed out strictly in batch order: a later
 * batch never holds memory an earlier one waits for, so a consumer that
 * takes batches in order always frees what the next one needs.  A batch
 * waiting for memory is the backpressure that stops the planner (the
 * slots it holds are not free).
 *
 * A batch that views its decoded blocks instead of copying them (issue
 * 12) is charged the same way: it keeps those cache entries pinned until
 * released, so their io-pool memory is its memory, out of the planner's
 * reach (cache_reclaimable()) until then.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
 * then the decode buffer when the block is compressed.  Blocks are at
 * most DLS_MAX_BLOCK_BYTES, so this cannot overflow. */
uint64_t block_io_bytes(const struct shard_block *blk)
{
	uint64_t n = align_up(blk->stored_size, IO_ALIGN) + IO_ALIGN;

	if (blk->codec == DLS_CODEC_ZSTD)
		n += align_up(blk->raw_size, IO_ALIGN);
	return n;
}

#ifdef SLUICE_TESTING
uint64_t budget_test_default_cap;
#endif

/* An eighth of the memory this process may use (the machine's, or its
 * control group's limit when smaller: a container), shared among the
 * ranks of this host: eight ranks must not pin the whole of it. */
static uint64_t default_budget(void)
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
	return cap / local_ranks();
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Typical sizes from the index, robust to the outliers that a mean would
 * spread over every block: the (lower) median of the blocks' io bytes,
 * the median record's raw bytes (each block's records weighed as its
 * average), the largest io bytes and their sum. */
struct block_sizes {
	uint64_t io_median, io_max, io_sum, record_median;
	uint64_t io_top_need;       /* the c->need largest io bytes, summed */
	uint64_t raw_top_one;       /* the batch_size largest raw sizes,
				       summed: no batch holds more */
	uint64_t raw_top_two;       /* the 2 x batch_size largest raw
				       sizes, summed: no two batches hold
				       more */
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

		io[g] = block_io_bytes(blk);
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
	/* A batch's records come from at most batch_size blocks, and its
	 * records of one block hold at most that block's raw bytes. */
	qsort(raw, n, sizeof(*raw), cmp_u64);
	for (uint64_t k = 0; k < 2ull * c->cfg.batch_size && k < n; k++) {
		z->raw_top_two = add_sat(z->raw_top_two, raw[n - 1 - k]);
		if (k < c->cfg.batch_size)
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

/* The batch memory a budget wants: prefetch_depth + 1 typical batches
 * (@batch_fixed: a batch's bytes besides variable values), and room for
 * the two largest. */
static uint64_t batch_want_bytes(const struct loader_core *c,
				 const struct block_sizes *z,
				 uint64_t batch_fixed)
{
	uint64_t b = c->cfg.batch_size, records = c->ds->record_count;
	uint64_t per_batch, extra, want;

	/* The median record's variable bytes: its raw size less the fixed
	 * fields, which batch_fixed holds already. */
	per_batch = batch_fixed;
	if (!c->cfg.pad_length && z->record_median > fixed_record_bytes(c))
		per_batch = add_sat(per_batch,
				    mul_sat(b < records ? b : records,
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
	 * 20 times), but never more than the 2 x batch_size largest blocks
	 * hold (one outlier record costs its own size, not batch_size times
	 * it). */
	extra = mul_sat(largest_record_extra(c),
			2 * b < records ? 2 * b : records);
	if (extra && extra > z->raw_top_two)
		extra = z->raw_top_two;
	want = add_sat(mul_sat(c->cfg.prefetch_depth + (extra ? 2ull : 1ull),
			       per_batch),
		       extra);
	return add_sat(want, IO_ALIGN) & ~(uint64_t)(IO_ALIGN - 1);
}

/* The most @n batches (1 or 2) can take: every record at its largest
 * values, but never more than the n x batch_size largest blocks hold. */
static uint64_t batches_max_bytes(const struct loader_core *c,
				  const struct block_sizes *z,
				  uint64_t batch_fixed, uint64_t n)
{
	uint64_t b = n * c->cfg.batch_size, records = c->ds->record_count;
	uint64_t extra = mul_sat(largest_record_extra(c),
				 b < records ? b : records);
	uint64_t top = n == 1 ? z->raw_top_one : z->raw_top_two;

	if (extra > top)
		extra = top;
	return align_up(add_sat(mul_sat(n, batch_fixed), extra), IO_ALIGN);
}

/* A batch does not fit beside the io memory: -E2BIG under window shuffle,
 * where a smaller window's blocks may leave it room (loader_open.c's
 * shrink_window, for the default budget: 100 records of 280 KB fixed
 * each beside 24 blocks of 7.5 MB were refused under a 197 MB cap). */
static int batch_refused(const struct loader_core *c)
{
	return c->cfg.shuffle == SLUICE_SHUFFLE_WINDOW ? -E2BIG : -ENOSPC;
}

/*
 * An explicit memory_bytes (and no cache_bytes) holds every block beside
 * the batch memory it wants: budget_open() will give the cache that
 * surplus, and each block is read once.
 */
int budget_caches_dataset(const struct loader_core *c, uint64_t batch_fixed)
{
	uint64_t budget = c->cfg.memory_bytes & ~(uint64_t)(IO_ALIGN - 1);
	struct block_sizes z;

	if (!c->cfg.memory_bytes || c->cfg.cache_bytes || !c->nblocks ||
	    measure_blocks(c, &z))
		return 0;
	return add_sat(batch_want_bytes(c, &z, batch_fixed),
		       align_up(z.io_sum, IO_ALIGN)) <= budget;
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
	uint64_t budget, io_want, batch_want, big, cache;
	uint32_t big_field;
	char words[128];
	struct block_sizes z;
	struct device_config dc;
	size_t arena_len;
	uint32_t io_allocs;
	int r;

	r = measure_blocks(c, &z);
	if (r)
		return r;
	/* An explicit cache_bytes, at most what every block takes. */
	cache = c->cfg.cache_bytes < z.io_sum ? c->cfg.cache_bytes : z.io_sum;
	io_want = add_sat(mul_sat(*entries, z.io_median), z.io_max);
	/* At least a batch's blocks at once, which the checks below ask
	 * for: entries x the median falls short of that where a few blocks
	 * are much larger than the median (two values of 2 and 1.5 MiB
	 * among ten tiny ones, 4 blocks: the default took 2.1 MB of io
	 * memory, far below its cap, and refused the 3.7 its blocks take
	 * at once). */
	if (io_want < z.io_top_need)
		io_want = z.io_top_need;
	if (c->cfg.cache_bytes > io_want)
		io_want = c->cfg.cache_bytes;
	if (io_want > z.io_sum)
		io_want = z.io_sum;     /* the whole dataset fits */
	/* records read by their byte ranges (ranges.c) */
	io_want = add_sat(io_want, c->ranges.io_want);
	io_want = align_up(io_want ? io_want : IO_ALIGN, IO_ALIGN);

	batch_want = batch_want_bytes(c, &z, batch_fixed);

	if (c->cfg.memory_bytes) {
		budget = c->cfg.memory_bytes;
		if (cache && add_sat(cache, batch_fixed) > budget) {
			snprintf(err, errlen,
				 "cache_bytes %llu does not fit in memory_bytes %llu beside one batch (%llu bytes): raise memory_bytes or lower cache_bytes",
				 (unsigned long long)c->cfg.cache_bytes,
				 (unsigned long long)budget,
				 (unsigned long long)batch_fixed);
			return -ENOSPC;
		}
	} else {
		budget = default_budget();
		c->budget_wanted = 0;
		if (add_sat(io_want, batch_want) < budget ||
		    c->cfg.cache_bytes)     /* asked for: never capped */
			budget = add_sat(io_want, batch_want);
		else if (add_sat(io_want, batch_want) > budget)
			c->budget_wanted = add_sat(io_want, batch_want);
	}
	budget &= ~(uint64_t)(IO_ALIGN - 1);
	if (add_sat(io_want, batch_want) <= budget) {
		c->io_bytes = io_want;
		/* An explicit memory_bytes past what batches and the cache
		 * want is made resident all the same: it caches blocks (up
		 * to every one; not past an explicit cache_bytes, nor where
		 * every block is read by range), so that slow reads get
		 * read-ahead and a dataset that fits is read once.  Before,
		 * it all went to batch memory, which only a consumer holding
		 * more batches than the slots uses. */
		if (c->cfg.memory_bytes && !c->cfg.cache_bytes &&
		    !c->ranges.all) {
			uint64_t all = align_up(add_sat(z.io_sum,
							c->ranges.io_want),
						IO_ALIGN);
			uint64_t room = (budget - batch_want) &
					~(uint64_t)(IO_ALIGN - 1);
			uint64_t avg = c->nblocks ? z.io_sum / c->nblocks : 0;
			uint64_t held;

			c->io_bytes = room < all ? room : all;
			if (c->io_bytes < io_want)
				c->io_bytes = io_want;
			/* an entry for every block it holds */
			held = avg ? (c->io_bytes - c->ranges.io_want) / avg
				   : 0;
			if (held > c->nblocks)
				held = c->nblocks;
			if (held > *entries)
				*entries = held;
		}
		c->batch_bytes = budget - c->io_bytes;
	} else {
		/* Half each, but io at least what one batch's blocks take
		 * (its largest included) when that fits; and batches no
		 * more than they want.  (Half each always: a memory_bytes of
		 * 512M, 23 MiB short of the window shuffle's default, left
		 * io 256 MiB and batches 256 they never used, 2.8 GB/s
		 * against 4.2 with reads 20 ms late.) */
		uint64_t half = (budget / 2) & ~(uint64_t)(IO_ALIGN - 1);
		uint64_t floor = add_sat(mul_sat(c->need, z.io_median),
					 z.io_max);

		floor = align_up(floor < io_want ? floor : io_want, IO_ALIGN);
		c->io_bytes = io_want < half ? io_want
			    : floor > half ? floor : half;
		if (budget > batch_want &&
		    ((budget - batch_want) & ~(uint64_t)(IO_ALIGN - 1)) >
			    c->io_bytes)
			c->io_bytes = (budget - batch_want) &
				      ~(uint64_t)(IO_ALIGN - 1);
		if (c->io_bytes >= budget)
			c->io_bytes = z.io_max > half ? z.io_max : half;
		/* Batch memory for the two largest batches (the one a
		 * consumer holds and the next), else the largest, where it
		 * fits beside a batch's blocks and the range reads' want,
		 * else all but those: the io memory past them is read-ahead
		 * and cache, which a budget short of the want holds less
		 * of.  A floor of need x the median blocks and the largest
		 * (47.5 MB, where the 3 largest took 35.7) left the
		 * default's 49.4 MB cap 1.9 MB of batch memory and failed
		 * its first batch of 2.1; without the range reads' want, a
		 * full shuffle's batch of 14.7 MB of ranges found 8.3. */
		uint64_t io_min = align_up(add_sat(z.io_top_need,
						   c->ranges.io_want),
					   IO_ALIGN), keep = 0;

		for (uint64_t n = 2; n >= 1 && !keep; n--)
			if (add_sat(io_min, batches_max_bytes(c, &z,
							      batch_fixed,
							      n)) <= budget)
				keep = batches_max_bytes(c, &z, batch_fixed,
							 n);
		if (!keep && io_min < budget)
			keep = budget - io_min;
		if (keep && c->io_bytes > budget - keep)
			c->io_bytes = budget - keep;
		/* An explicit cache_bytes is honoured (it fits beside one
		 * batch: checked above), never cut to half the budget. */
		if (c->cfg.memory_bytes && cache && c->io_bytes < cache) {
			uint64_t most = (budget - batch_fixed) &
					~(uint64_t)(IO_ALIGN - 1);
			uint64_t want = align_up(cache, IO_ALIGN);

			c->io_bytes = want < most ? want : most;
		}
		c->batch_bytes = c->io_bytes < budget ? budget - c->io_bytes : 0;
	}
	if (c->nblocks && (z.io_max > c->io_bytes || c->batch_bytes == 0)) {
		uint32_t shard;
		const struct shard_block *blk = loader_block(c, z.max_block,
							     &shard);

		snprintf(err, errlen,
			 "%s: block %llu (records %llu..%llu): reading and decoding it takes %llu bytes, more than %s allows beside batch memory: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			 c->ds->shards[shard].path,
			 (unsigned long long)(z.max_block -
					      c->shard_block_base[shard]),
			 (unsigned long long)(c->block_first[z.max_block]),
			 (unsigned long long)(c->block_first[z.max_block] +
					      blk->record_count - 1),
			 (unsigned long long)z.io_max,
			 budget_words(c, budget, words, sizeof(words)));
		return -ENOSPC;
	}
	if (c->batch_bytes < batch_fixed) {
		snprintf(err, errlen,
			 "%s leaves %llu bytes for batches beside %llu of io memory (a batch can touch %llu blocks of up to %llu bytes, all in memory at once); one batch of %u records takes %llu bytes before any variable-length value: raise memory_bytes (sluice --memory, Python memory_bytes=), lower batch_size, or write smaller blocks (dlpack-shard --block-size)",
			 budget_words(c, budget, words, sizeof(words)),
			 (unsigned long long)c->batch_bytes,
			 (unsigned long long)c->io_bytes,
			 (unsigned long long)c->need,
			 (unsigned long long)z.io_max,
			 c->cfg.batch_size < c->sampler.per_rank
				 ? c->cfg.batch_size
				 : (uint32_t)c->sampler.per_rank,
			 (unsigned long long)batch_fixed);
		return batch_refused(c);
	}
	/* The batch that holds the largest value cannot fit: say so now,
	 * before device_open() maps and faults in the arena, rather than
	 * at that batch after the whole budget was made resident. */
	big = largest_value(c, &big_field);
	if (big && c->batch_bytes < add_sat(batch_fixed, big)) {
		snprintf(err, errlen,
			 "%s leaves %llu bytes for batches beside %llu of io memory; the batch holding the largest value of field %s (%llu bytes, as the shard headers say) needs at least %llu: raise memory_bytes (sluice --memory, Python memory_bytes=)",
			 budget_words(c, budget, words, sizeof(words)),
			 (unsigned long long)c->batch_bytes,
			 (unsigned long long)c->io_bytes,
			 c->ds->schema.fields[big_field].f.name,
			 (unsigned long long)big,
			 (unsigned long long)add_sat(batch_fixed, big));
		return batch_refused(c);
	}
	if (c->chunks.possible && !c->chunks.chunked &&
	    c->io_bytes < z.io_top_need) {
		/* the caller gathers batches by chunks instead (chunks.c) */
		snprintf(err, errlen,
			 "a batch's %llu blocks take up to %llu bytes of io memory at once, more than the %llu memory_bytes leaves",
			 (unsigned long long)c->need,
			 (unsigned long long)z.io_top_need,
			 (unsigned long long)c->io_bytes);
		return -ENOSPC;
	}
	if (!c->chunks.possible && c->io_bytes < z.io_top_need) {
		/* A batch could never have its blocks in memory at once: say
		 * so at open, not at that batch (the caller may shrink a
		 * shuffle window instead, loader_open.c). */
		snprintf(err, errlen,
			 "a batch's %llu blocks take up to %llu bytes of io memory at once, more than the %llu %s leaves: raise memory_bytes (sluice --memory, Python memory_bytes=)%s",
			 (unsigned long long)c->need,
			 (unsigned long long)z.io_top_need,
			 (unsigned long long)c->io_bytes,
			 budget_words(c, budget, words, sizeof(words)),
			 c->cfg.shuffle == SLUICE_SHUFFLE_WINDOW
				 ? ", lower window_blocks (--window)" : "");
		return -E2BIG;
	}
	c->io_batch_max = z.io_top_need;
	c->io_need_bytes = add_sat(mul_sat(c->need, z.io_median), z.io_max);
	if (c->io_need_bytes > c->io_bytes / 2)
		c->io_need_bytes = c->io_bytes / 2;

	dc = (struct device_config){
		.kind = c->cfg.device,
		.device_id = c->cfg.device_id,
		.arena_bytes = c->io_bytes + c->batch_bytes,
		.slots = c->cfg.prefetch_depth,
		.mirror_offset = c->io_bytes,
		.mirror_bytes = c->batch_bytes,
		.pageable = !!(sluice_loader_config_forced(&c->cfg) &
			       SLUICE_FORCE_PAGEABLE_COPIES),
		/* device gather: the io part mirrored too (gather.c) */
		.io_mirror_bytes = gather_wanted(c) ? c->io_bytes : 0,
		.gather_runs_max = gather_runs_max(c),
		.upload_lanes = c->cfg.decode_threads,
	};
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
	io_allocs = (uint32_t)*entries + (c->ranges.on ? c->slots_cap : 0);
	r = pool_init(&c->io_pool, c->io_bytes, IO_ALIGN, io_allocs);
	if (!r)
		r = pool_init(&c->views.pool, c->io_bytes, IO_ALIGN,
			      (uint32_t)*entries);
	if (!r)
		r = pool_init(&c->batch_pool, c->batch_bytes, SLOT_ALIGN,
			      c->slots_cap);
	return r;
}

void budget_close(struct loader_core *c)
{
	pool_destroy(&c->io_pool);
	pool_destroy(&c->views.pool);
	pool_destroy(&c->batch_pool);
}

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
		slot_ranges_release_locked(c, s);
		s->state = SLOT_READY;
		c->inflight--;
	}
}
