/*
 * test_sampler.c - the sampler's contract, checked exhaustively over small
 * layouts: coverage, rank split, batching, shuffle-mode structure,
 * determinism.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "sluice.h"
#include "t.h"

/* ------------------------------------------------------------------ */
/* Layouts                                                             */
/* ------------------------------------------------------------------ */

struct layout {
	const char *name;
	uint64_t nblocks;
	uint64_t *first; /* nblocks + 1 */
};

static struct layout make_layout(const char *name, const uint64_t *sizes,
				 uint64_t nblocks)
{
	struct layout l = {name, nblocks, calloc(nblocks + 1, 8)};

	T_ASSERT(l.first);
	for (uint64_t b = 0; b < nblocks; b++)
		l.first[b + 1] = l.first[b] + sizes[b];
	return l;
}

static uint64_t layout_records(const struct layout *l)
{
	return l->first[l->nblocks];
}

static uint64_t *block_of_records(const struct layout *l)
{
	uint64_t n = layout_records(l);
	uint64_t *bo = malloc((n ? n : 1) * 8);

	T_ASSERT(bo);
	for (uint64_t b = 0; b < l->nblocks; b++)
		for (uint64_t r = l->first[b]; r < l->first[b + 1]; r++)
			bo[r] = b;
	return bo;
}

static struct sampler_config config(int shuffle, uint32_t w, uint64_t seed,
				    uint32_t batch, int drop_last,
				    uint32_t rank, uint32_t world)
{
	struct sampler_config c = {
		.shuffle = shuffle,
		.window_blocks = w,
		.seed = seed,
		.batch_size = batch,
		.drop_last = drop_last,
		.rank = rank,
		.world_size = world,
	};
	return c;
}

/* The global sequence of an epoch: rank 0 of 1, no drop. */
static uint64_t *global_sequence(const struct layout *l, int shuffle,
				 uint32_t w, uint64_t seed, uint64_t epoch)
{
	struct sampler s;
	struct sampler_config c = config(shuffle, w, seed, 1, 0, 0, 1);
	uint64_t n = layout_records(l);
	uint64_t *g = malloc((n ? n : 1) * 8);

	T_ASSERT(g);
	T_EQ(sampler_init(&s, &c, l->first, l->nblocks), 0);
	sampler_set_epoch(&s, epoch);
	T_EQ(s.per_rank, n);
	T_EQ(s.epoch, epoch);
	for (uint64_t i = 0; i < n; i++) {
		g[i] = sampler_rank_record(&s, i);
		T_EQ(sampler_sequence_record(&s, i), g[i]);
	}
	sampler_destroy(&s);
	return g;
}

/* This rank's part of the current epoch, materialised (caller frees). */
static uint64_t *rank_part(const struct sampler *s)
{
	uint64_t *o = malloc((s->per_rank ? s->per_rank : 1) * 8);

	T_ASSERT(o);
	for (uint64_t i = 0; i < s->per_rank; i++)
		o[i] = sampler_rank_record(s, i);
	return o;
}

/* ------------------------------------------------------------------ */
/* Structure of one global sequence                                    */
/* ------------------------------------------------------------------ */

static void check_permutation(const uint64_t *g, uint64_t n)
{
	unsigned char *seen = calloc(n ? n : 1, 1);

	T_ASSERT(seen);
	for (uint64_t i = 0; i < n; i++) {
		T_LT(g[i], n);
		T_EQ(seen[g[i]], 0);
		seen[g[i]] = 1;
	}
	free(seen);
}

/* Each non-empty block's records sit at consecutive positions, in order. */
static void check_blocks_contiguous(const struct layout *l, const uint64_t *g)
{
	uint64_t n = layout_records(l);
	uint64_t *pos = malloc((n ? n : 1) * 8);

	T_ASSERT(pos);
	for (uint64_t i = 0; i < n; i++)
		pos[g[i]] = i;
	for (uint64_t b = 0; b < l->nblocks; b++)
		for (uint64_t r = l->first[b] + 1; r < l->first[b + 1]; r++)
			T_EQ(pos[r], pos[r - 1] + 1);
	free(pos);
}

/*
 * Window locality.  Cut the sequence at every point where all blocks seen
 * since the last cut are complete: this is the finest split into runs of
 * whole blocks, and a split into windows of at most W whole blocks exists
 * exactly when every such run holds at most W blocks.  Returns the largest
 * number of blocks in one run (so callers can see mixing happened).
 */
static uint64_t check_window_locality(const struct layout *l,
				      const uint64_t *g, uint32_t w)
{
	uint64_t n = layout_records(l);
	uint64_t *bo = block_of_records(l);
	uint64_t *left = malloc((l->nblocks ? l->nblocks : 1) * 8);
	uint64_t open = 0, run_blocks = 0, max_run = 0;

	T_ASSERT(left);
	for (uint64_t b = 0; b < l->nblocks; b++)
		left[b] = l->first[b + 1] - l->first[b];
	for (uint64_t i = 0; i < n; i++) {
		uint64_t b = bo[g[i]];

		if (left[b] == l->first[b + 1] - l->first[b]) {
			open++; /* first record of b */
			run_blocks++;
		}
		T_ASSERT(left[b] > 0);
		if (--left[b] == 0)
			open--;
		if (open == 0) {
			T_ASSERT(run_blocks <= w);
			if (run_blocks > max_run)
				max_run = run_blocks;
			run_blocks = 0;
		}
	}
	T_EQ(open, 0);
	free(left);
	free(bo);
	return max_run;
}

static void check_mode_structure(const struct layout *l, const uint64_t *g,
				 int shuffle, uint32_t w)
{
	uint64_t n = layout_records(l);

	check_permutation(g, n);
	switch (shuffle) {
	case SLUICE_SHUFFLE_NONE:
		for (uint64_t i = 0; i < n; i++)
			T_EQ(g[i], i);
		break;
	case SLUICE_SHUFFLE_BLOCK:
		check_blocks_contiguous(l, g);
		break;
	case SLUICE_SHUFFLE_WINDOW:
		check_window_locality(l, g, w);
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------------ */
/* Rank split and batches                                              */
/* ------------------------------------------------------------------ */

/*
 * All ranks of one config: counts follow the documented formulas, rank r
 * holds positions [r * per_rank, (r + 1) * per_rank) of the global sequence
 * (wrapping), and the batches tile the delivered prefix of that part.
 */
static void check_split(const struct layout *l, const uint64_t *g,
			int shuffle, uint32_t w, uint64_t seed,
			uint64_t epoch, uint32_t batch, int drop_last,
			uint32_t world)
{
	uint64_t n = layout_records(l);
	uint64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
	uint64_t nbatches = drop_last ? per_rank / batch
				      : (per_rank + batch - 1) / batch;
	uint64_t delivered = drop_last ? nbatches * batch : per_rank;
	uint64_t *times = calloc(n ? n : 1, 8);
	uint64_t total = 0;

	T_ASSERT(times);
	for (uint32_t r = 0; r < world; r++) {
		struct sampler s;
		struct sampler_config c =
			config(shuffle, w, seed, batch, drop_last, r, world);
		uint64_t got = 0, *first = malloc(8ull * batch);
		uint32_t count;

		T_ASSERT(first);
		T_EQ(sampler_init(&s, &c, l->first, l->nblocks), 0);
		T_EQ(s.nrecords, n);
		sampler_set_epoch(&s, epoch);
		T_EQ(s.per_rank, per_rank);
		T_EQ(s.nbatches, nbatches);
		for (uint64_t i = 0; i < per_rank; i++)
			T_EQ(sampler_rank_record(&s, i),
			     g[(r * per_rank + i) % n]);
		for (uint64_t k = 0; k < nbatches; k++) {
			count = sampler_batch(&s, k, first);
			T_EQ(count, sampler_batch_count(&s, k));
			T_ASSERT(count > 0 && count <= batch);
			if (k + 1 < nbatches || drop_last)
				T_EQ(count, batch);
			for (uint32_t j = 0; j < count; j++) {
				T_EQ(first[j], sampler_rank_record(&s, got + j));
				times[first[j]]++;
			}
			got += count;
		}
		T_EQ(got, delivered);
		T_EQ(sampler_batch_count(&s, nbatches), 0);
		T_EQ(sampler_batch(&s, nbatches, first), 0);
		free(first);
		total += got;
		sampler_destroy(&s);
		sampler_destroy(&s); /* twice is harmless */
	}

	/* Coverage over all ranks' batches. */
	if (drop_last) {
		/* a subset: no duplicates, exactly the first
		 * world * per_rank positions minus each rank's short batch */
		T_EQ(total, world * delivered);
		for (uint64_t i = 0; i < n; i++)
			T_ASSERT(times[i] <= 1);
		if (delivered == per_rank)
			for (uint64_t i = 0; i < world * per_rank; i++)
				T_EQ(times[g[i]], 1);
	} else {
		/* everything once, plus the wrapped start of the sequence */
		uint64_t extra = world * per_rank - n;

		T_EQ(total, world * per_rank);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t expect = 1 + (extra / n) + (i < extra % n);

			T_EQ(times[g[i]], expect);
		}
	}
	free(times);
}

static int differs(const uint64_t *a, const uint64_t *b, uint64_t n)
{
	return n && memcmp(a, b, n * 8) != 0;
}

static void test_layout(const struct layout *l)
{
	static const int modes[] = {SLUICE_SHUFFLE_NONE, SLUICE_SHUFFLE_BLOCK,
				    SLUICE_SHUFFLE_WINDOW,
				    SLUICE_SHUFFLE_FULL};
	static const uint32_t windows[] = {1, 2, 3, 1000};
	uint64_t n = layout_records(l);
	uint32_t batches[] = {1, 3, 7, 64, (uint32_t)(n ? n : 1),
			      (uint32_t)n + 5};
	uint32_t worlds[] = {1, 2, 3, 4, 7, (uint32_t)n + 2};

	for (size_t m = 0; m < 4; m++) {
		size_t nw = modes[m] == SLUICE_SHUFFLE_WINDOW ? 4 : 1;

		for (size_t wi = 0; wi < nw; wi++) {
			uint32_t w = windows[wi];
			uint64_t *g0 = global_sequence(l, modes[m], w, 7, 0);
			uint64_t *g1 = global_sequence(l, modes[m], w, 7, 1);
			uint64_t *again = global_sequence(l, modes[m], w, 7, 0);

			/* same seed and epoch, same order */
			T_ASSERT(!differs(g0, again, n));
			check_mode_structure(l, g0, modes[m], w);
			check_mode_structure(l, g1, modes[m], w);
			for (size_t bi = 0; bi < 6; bi++)
				for (int drop = 0; drop < 2; drop++)
					for (size_t wo = 0; wo < 6; wo++) {
						check_split(l, g0, modes[m], w,
							    7, 0, batches[bi],
							    drop, worlds[wo]);
						check_split(l, g1, modes[m], w,
							    7, 1, batches[bi],
							    drop, worlds[wo]);
					}
			free(g0);
			free(g1);
			free(again);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Determinism and variation on a larger dataset                       */
/* ------------------------------------------------------------------ */

static void test_variation(void)
{
	/* 64 blocks of uneven sizes, 2000+ records */
	uint64_t sizes[64];
	struct layout l;
	struct sampler s;
	struct sampler_config c;
	uint64_t n, *part;

	for (int b = 0; b < 64; b++)
		sizes[b] = 10 + (uint64_t)(b * 37 % 53);
	l = make_layout("variation", sizes, 64);
	n = layout_records(&l);

	for (int mode = SLUICE_SHUFFLE_BLOCK; mode <= SLUICE_SHUFFLE_FULL;
	     mode++) {
		uint64_t *a = global_sequence(&l, mode, 4, 1, 0);
		uint64_t *e1 = global_sequence(&l, mode, 4, 1, 1);
		uint64_t *s2 = global_sequence(&l, mode, 4, 2, 0);
		uint64_t *ident = global_sequence(&l, SLUICE_SHUFFLE_NONE,
						  4, 1, 0);

		T_ASSERT(differs(a, e1, n));
		T_ASSERT(differs(a, s2, n));
		T_ASSERT(differs(a, ident, n));
		if (mode == SLUICE_SHUFFLE_WINDOW) {
			/* records of several blocks really are mixed */
			T_ASSERT(check_window_locality(&l, a, 4) > 1);
		}

		/* set_epoch carries nothing over: revisiting an epoch on a
		 * used sampler gives the fresh sampler's order */
		c = config(mode, 4, 1, 5, 0, 0, 1);
		T_EQ(sampler_init(&s, &c, l.first, l.nblocks), 0);
		part = rank_part(&s); /* init computes epoch 0 */
		T_ASSERT(!differs(part, a, n));
		free(part);
		sampler_set_epoch(&s, 1);
		part = rank_part(&s);
		T_ASSERT(!differs(part, e1, n));
		free(part);
		sampler_set_epoch(&s, 9);
		sampler_set_epoch(&s, 0);
		part = rank_part(&s);
		T_ASSERT(!differs(part, a, n));
		free(part);
		sampler_destroy(&s);

		free(a);
		free(e1);
		free(s2);
		free(ident);
	}

	/* window mode with W >= nblocks mixes the whole dataset */
	{
		uint64_t *g = global_sequence(&l, SLUICE_SHUFFLE_WINDOW, 64,
					      3, 0);
		uint64_t runs = check_window_locality(&l, g, 64);

		T_ASSERT(runs > 32);
		free(g);
	}
	free(l.first);
}

/* A bigger full shuffle: still a permutation, reasonably fast. */
static void test_large(void)
{
	uint64_t first[3] = {0, 600000, 1000000};
	struct layout l = {"large", 2, first};
	uint64_t *g = global_sequence(&l, SLUICE_SHUFFLE_FULL, 0, 11, 5);
	uint64_t fixed = 0;

	check_permutation(g, 1000000);
	for (uint64_t i = 0; i < 1000000; i++)
		fixed += g[i] == i;
	T_LT(fixed, 20); /* a random permutation has ~1 fixed point */
	free(g);

	g = global_sequence(&l, SLUICE_SHUFFLE_WINDOW, 1, 11, 5);
	T_EQ(check_window_locality(&l, g, 1), 1);
	free(g);
}

/* ------------------------------------------------------------------ */
/* Config validation and the generator                                 */
/* ------------------------------------------------------------------ */

static void test_config(void)
{
	uint64_t first[4] = {0, 3, 3, 10};
	uint64_t bad_order[3] = {0, 5, 4};
	uint64_t bad_start[2] = {1, 5};
	struct sampler s;
	struct sampler_config c;

	c = config(SLUICE_SHUFFLE_NONE, 0, 0, 0, 0, 0, 1);
	T_EQ(sampler_init(&s, &c, first, 3), -EINVAL);
	sampler_destroy(&s); /* a failed init is destroyable */
	c = config(SLUICE_SHUFFLE_NONE, 0, 0, 4, 0, 0, 0);
	T_EQ(sampler_init(&s, &c, first, 3), -EINVAL);
	c = config(SLUICE_SHUFFLE_NONE, 0, 0, 4, 0, 2, 2);
	T_EQ(sampler_init(&s, &c, first, 3), -EINVAL);
	c = config(SLUICE_SHUFFLE_WINDOW, 0, 0, 4, 0, 0, 1);
	T_EQ(sampler_init(&s, &c, first, 3), -EINVAL);
	c = config(SLUICE_SHUFFLE_FULL + 1, 1, 0, 4, 0, 0, 1);
	T_EQ(sampler_init(&s, &c, first, 3), -EINVAL);
	c = config(-1, 1, 0, 4, 0, 0, 1);
	T_EQ(sampler_init(&s, &c, first, 3), -EINVAL);
	c = config(SLUICE_SHUFFLE_BLOCK, 0, 0, 4, 0, 0, 1);
	T_EQ(sampler_init(&s, &c, bad_order, 2), -EINVAL);
	T_EQ(sampler_init(&s, &c, bad_start, 1), -EINVAL);
	T_EQ(sampler_init(&s, &c, NULL, 1), -EINVAL);
	T_EQ(sampler_init(&s, NULL, first, 3), -EINVAL);
	T_EQ(sampler_init(NULL, &c, first, 3), -EINVAL);
	sampler_destroy(NULL);

	/* W = 0 is fine outside window mode; an empty dataset too */
	T_EQ(sampler_init(&s, &c, first, 3), 0);
	T_EQ(s.nbatches, 3);
	sampler_destroy(&s);
	T_EQ(sampler_init(&s, &c, NULL, 0), 0);
	T_EQ(s.per_rank, 0);
	T_EQ(s.nbatches, 0);
	sampler_set_epoch(&s, 3);
	sampler_destroy(&s);

	/* more ranks than records with drop_last: nothing to deliver */
	c = config(SLUICE_SHUFFLE_FULL, 0, 0, 4, 1, 5, 11);
	T_EQ(sampler_init(&s, &c, first, 3), 0);
	T_EQ(s.per_rank, 0);
	T_EQ(s.nbatches, 0);
	sampler_destroy(&s);
}

static void test_rng(void)
{
	struct rng a, b;
	uint64_t counts[3] = {0, 0, 0};
	int same = 0;

	rng_seed(&a, 42, 0);
	rng_seed(&b, 42, 0);
	for (int i = 0; i < 100; i++)
		T_EQ(rng_next(&a), rng_next(&b));
	rng_seed(&a, 1, 0);
	rng_seed(&b, 0, 1);
	for (int i = 0; i < 100; i++)
		same += rng_next(&a) == rng_next(&b);
	T_EQ(same, 0);

	rng_seed(&a, 9, 9);
	for (int i = 0; i < 1000; i++)
		T_EQ(rng_below(&a, 1), 0);
	for (int i = 0; i < 1000; i++)
		T_ASSERT(rng_below(&a, UINT64_MAX) < UINT64_MAX);
	/* (2^63 + 1): the rejection zone is nearly half, still terminates */
	for (int i = 0; i < 1000; i++)
		T_ASSERT(rng_below(&a, (1ull << 63) + 1) <= (1ull << 63));
	for (int i = 0; i < 30000; i++)
		counts[rng_below(&a, 3)]++;
	for (int i = 0; i < 3; i++) {
		/* fixed seed, so deterministic; a bias would show here */
		T_LT(9500, counts[i]);
		T_LT(counts[i], 10500);
	}
}

int main(void)
{
	static const uint64_t uneven[] = {5, 1, 17, 3, 8, 0, 2, 11, 1, 6};
	static const uint64_t one_block[] = {37};
	static const uint64_t one_record[] = {1};
	static const uint64_t even[] = {10, 10, 10, 10, 10, 10, 10, 10,
					10, 10, 10, 10};
	struct layout layouts[4];

	layouts[0] = make_layout("uneven", uneven, 10);
	layouts[1] = make_layout("one block", one_block, 1);
	layouts[2] = make_layout("one record", one_record, 1);
	layouts[3] = make_layout("even", even, 12);

	test_rng();
	test_config();
	for (int i = 0; i < 4; i++) {
		test_layout(&layouts[i]);
		free(layouts[i].first);
	}
	test_variation();
	test_large();
	return 0;
}
