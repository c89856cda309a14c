/*
 * test_elastic.c - elastic resume in the sampler: jobs of different world
 * and batch sizes take turns within one epoch, each starting from what the
 * earlier ones left (the rule sluice_loader_state_set applies: a job that
 * consumed k batches of B leaves each rank's part after min(k * B, what
 * the rank delivers)).  Checked for every shuffle mode, with and without
 * drop_last, W in {1, 2, 3, 4, 8} and chains of three jobs:
 *   - every record is delivered exactly once across the chain (without
 *     drop_last, plus exactly the wrapped padding positions; with it, no
 *     repeats and at most the last job's tail and short batches missing);
 *   - each job's ranks get equal parts (same batch count);
 *   - window shuffle keeps locality: the blocks a job's ranks touch, added
 *     up, exceed the blocks touched at all by at most a few windows per
 *     rank and level;
 *   - a job that continues with the same shape is the uninterrupted run.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "sluice.h"
#include "t.h"

#define WINDOW 3

struct layout {
	uint64_t nblocks;
	uint64_t *first;
	uint64_t *block_of; /* per record */
};

static struct layout make_layout(uint64_t nblocks, uint64_t seed)
{
	struct layout l = {nblocks, calloc(nblocks + 1, 8), NULL};
	struct rng r;

	T_ASSERT(l.first);
	rng_seed(&r, seed, 77);
	for (uint64_t b = 0; b < nblocks; b++)
		l.first[b + 1] = l.first[b] + rng_below(&r, 12); /* some 0 */
	l.block_of = malloc((l.first[nblocks] + 1) * 8);
	T_ASSERT(l.block_of);
	for (uint64_t b = 0; b < nblocks; b++)
		for (uint64_t i = l.first[b]; i < l.first[b + 1]; i++)
			l.block_of[i] = b;
	return l;
}

/* The read-ahead's spans tile the rank's part, and every record of a
 * span lies in the blocks it names. */
static void check_spans(const struct layout *l, const struct sampler *s)
{
	uint64_t i = 0, spans = 0;
	struct sampler_memo memo;

	memset(&memo, 0, sizeof(memo));
	while (i < s->per_rank) {
		struct sampler_span sp;

		sampler_span(s, i, spans % 2 ? &memo : NULL, &sp);
		T_ASSERT(sp.positions >= 1);
		T_ASSERT(i + sp.positions <= s->per_rank);
		if (sp.nblocks == 0) {
			T_EQ(sp.positions, 1);
			T_EQ(sp.record, sampler_rank_record(s, i));
		}
		for (uint64_t k = 0; k < sp.positions; k++) {
			uint64_t b = l->block_of[sampler_rank_record(s, i + k)];
			uint64_t j = 0;

			if (sp.nblocks == 0)
				continue;
			while (j < sp.nblocks && sp.blocks[j] != b)
				j++;
			if (j == sp.nblocks)
				T_FAIL_AT("position %llu: block %llu not in its span",
					  (unsigned long long)(i + k),
					  (unsigned long long)b);
		}
		i += sp.positions;
		spans++;
	}
	/* runs are long where they can be: window and block spans cover
	 * more than one position on average */
	if (s->per_rank > 50 && (s->cfg.shuffle == SLUICE_SHUFFLE_WINDOW ||
				 s->cfg.shuffle == SLUICE_SHUFFLE_BLOCK ||
				 s->cfg.shuffle == SLUICE_SHUFFLE_NONE))
		T_LT(spans * 2, s->per_rank);
}

struct job {
	uint32_t world, batch;
	int drop;
	uint64_t stop;  /* batches each rank takes; UINT64_MAX: to the end */
};

struct tally {
	uint32_t *times;        /* per record */
	uint64_t padding;       /* wrapped positions delivered */
};

/*
 * Run @job after @levels, counting deliveries; returns the level it
 * leaves (consumed 0 when it took nothing).
 */
static struct sampler_level run_job(const struct layout *l, int mode,
				    uint64_t seed, uint64_t epoch,
				    const struct sampler_level *levels,
				    uint32_t nlevels, const struct job *job,
				    struct tally *t, uint64_t *nbatches_out)
{
	uint64_t nb = 0, delivered_per_rank = 0, blocks_sum = 0;
	uint64_t *buf = malloc(8ull * job->batch);
	unsigned char *touched_any = calloc(l->nblocks + 1, 1);
	unsigned char *touched = malloc(l->nblocks + 1);
	uint64_t any = 0, seq_len = 0, take = 0;

	T_ASSERT(buf && touched_any && touched);
	for (uint32_t r = 0; r < job->world; r++) {
		struct sampler s;
		struct sampler_config c = {
			.shuffle = mode, .window_blocks = WINDOW, .seed = seed,
			.batch_size = job->batch, .drop_last = job->drop,
			.rank = r, .world_size = job->world,
		};
		uint64_t pos = 0, part, nbat, deliv;

		T_EQ(sampler_init(&s, &c, l->first, l->nblocks), 0);
		T_EQ(sampler_resume(&s, epoch, levels, nlevels), 0);
		sampler_split(s.seq_len, job->world, job->batch, job->drop,
			      &part, &nbat, &deliv);
		T_EQ(s.per_rank, part);
		T_EQ(s.nbatches, nbat);
		if (r == 0) {
			nb = s.nbatches;
			delivered_per_rank = deliv;
			seq_len = s.seq_len;
			take = job->stop < nb ? job->stop : nb;
		}
		T_EQ(s.nbatches, nb); /* equal parts */
		check_spans(l, &s);
		memset(touched, 0, l->nblocks + 1);
		for (uint64_t k = 0; k < take; k++) {
			uint32_t n = sampler_batch(&s, k, buf);

			for (uint32_t i = 0; i < n; i++, pos++) {
				uint64_t b = l->block_of[buf[i]];

				T_LT(buf[i], l->first[l->nblocks]);
				t->times[buf[i]]++;
				if ((uint64_t)r * s.per_rank + pos >= s.seq_len)
					t->padding++;
				if (!touched[b]) {
					touched[b] = 1;
					blocks_sum++;
				}
				if (!touched_any[b]) {
					touched_any[b] = 1;
					any++;
				}
			}
		}
		sampler_destroy(&s);
	}
	/* locality: a rank's part is nlevels + 1 runs of the epoch's
	 * sequence at most, each cut at both ends inside a window */
	if (mode == SLUICE_SHUFFLE_WINDOW || mode == SLUICE_SHUFFLE_BLOCK) {
		uint64_t slack = (uint64_t)job->world * (nlevels + 1) * 2 *
				 (mode == SLUICE_SHUFFLE_WINDOW ? WINDOW : 1);

		if (blocks_sum > any + slack)
			T_FAIL_AT("read amplification: %llu block reads for "
				  "%llu blocks (world %u, %u levels)",
				  (unsigned long long)blocks_sum,
				  (unsigned long long)any, job->world, nlevels);
	}
	(void)seq_len;
	free(buf);
	free(touched);
	free(touched_any);
	*nbatches_out = nb;
	{
		uint64_t used = take * job->batch;

		if (used > delivered_per_rank)
			used = delivered_per_rank;
		return (struct sampler_level){job->world, job->drop, used};
	}
}

/* A chain of jobs through one epoch; checks the coverage rules. */
static void run_chain(const struct layout *l, int mode, uint64_t seed,
		      const struct job *jobs, int njobs)
{
	uint64_t n = l->first[l->nblocks], total = 0, missing = 0, repeats = 0;
	struct sampler_level levels[SAMPLER_MAX_LEVELS];
	uint32_t nlevels = 0;
	struct tally t = {calloc(n + 1, 4), 0};
	const struct job *last = &jobs[njobs - 1];

	T_ASSERT(t.times);
	for (int j = 0; j < njobs; j++) {
		uint64_t nb;
		struct sampler_level lv = run_job(l, mode, seed, 5, levels,
						  nlevels, &jobs[j], &t, &nb);

		if (j + 1 < njobs && lv.consumed > 0)
			levels[nlevels++] = lv;
	}
	for (uint64_t i = 0; i < n; i++) {
		total += t.times[i];
		missing += t.times[i] == 0;
		repeats += t.times[i] > 1 ? t.times[i] - 1 : 0;
	}
	/* a record comes again only as a wrapped (padding) position */
	if (repeats != t.padding)
		T_FAIL_AT("%llu repeats, %llu padding (mode %d, jobs %u/%u/%d/%llu %u/%u/%d/%llu %u/%u/%d)",
			  (unsigned long long)repeats,
			  (unsigned long long)t.padding, mode, jobs[0].world,
			  jobs[0].batch, jobs[0].drop,
			  (unsigned long long)jobs[0].stop, jobs[1].world,
			  jobs[1].batch, jobs[1].drop,
			  (unsigned long long)jobs[1].stop, jobs[2].world,
			  jobs[2].batch, jobs[2].drop);
	if (!last->drop) {
		/* everything, and repeats only for wrapped positions */
		T_EQ(missing, 0);
		T_EQ(total, n + t.padding);
	} else {
		uint64_t bound = (last->world - 1) +
				 (uint64_t)last->world * (last->batch - 1);

		T_EQ(total + missing, n + t.padding);
		T_ASSERT(missing <= bound);
	}
	free(t.times);
}

static void test_chains(void)
{
	static const uint32_t worlds[] = {1, 2, 3, 4, 8};
	static const int modes[] = {SLUICE_SHUFFLE_NONE, SLUICE_SHUFFLE_BLOCK,
				    SLUICE_SHUFFLE_WINDOW, SLUICE_SHUFFLE_FULL};
	struct layout layouts[3] = {make_layout(40, 1), make_layout(7, 2),
				    make_layout(1, 3)};
	uint64_t chains = 0;

	for (int li = 0; li < 3; li++)
	for (int m = 0; m < 4; m++)
	for (int d1 = 0; d1 < 2; d1++)
	for (int d2 = 0; d2 < 2; d2++)
	for (size_t w1 = 0; w1 < 5; w1++)
	for (size_t w2 = 0; w2 < 5; w2++)
	for (size_t w3 = 0; w3 < 5; w3++) {
		/* drop_last the same through the chain (d1 == d2), or
		 * switched for the last job */
		struct job jobs[3] = {
			{worlds[w1], 4, d1, 3},
			{worlds[w2], 3, d1, 2 + (uint64_t)w3},
			{worlds[w3], 5, d2, UINT64_MAX},
		};

		run_chain(&layouts[li], modes[m], 11 + li, jobs, 3);
		/* a stop in the first batch, and past the end */
		jobs[0].stop = 1;
		jobs[1].stop = 1000;
		run_chain(&layouts[li], modes[m], 12, jobs, 3);
		chains += 2;
	}
	T_LT(1000, chains);
	for (int li = 0; li < 3; li++) {
		free(layouts[li].first);
		free(layouts[li].block_of);
	}
}

/* Continuing with the same shape is not a new level: the test's rule
 * and the sampler agree with one uninterrupted job; and a level that
 * consumed nothing changes nothing. */
static void test_zero_level(void)
{
	struct layout l = make_layout(30, 9);
	struct sampler a, b;
	struct sampler_config c = {
		.shuffle = SLUICE_SHUFFLE_WINDOW, .window_blocks = WINDOW,
		.seed = 3, .batch_size = 4, .drop_last = 0, .rank = 1,
		.world_size = 3,
	};
	struct sampler_level zero[2] = {{4, 0, 0}, {2, 1, 0}};

	T_EQ(sampler_init(&a, &c, l.first, l.nblocks), 0);
	T_EQ(sampler_init(&b, &c, l.first, l.nblocks), 0);
	sampler_set_epoch(&a, 2);
	T_EQ(sampler_resume(&b, 2, zero, 2), 0);
	T_EQ(a.nbatches, b.nbatches);
	for (uint64_t i = 0; i < a.per_rank; i++)
		T_EQ(sampler_rank_record(&a, i), sampler_rank_record(&b, i));

	/* invalid levels are refused and leave the sampler as it was */
	{
		struct sampler_level bad[2] = {{0, 0, 1}, {2, 0, 1}};
		struct sampler_level over = {2, 0, l.first[30]};
		struct sampler_level many[SAMPLER_MAX_LEVELS + 1];

		memset(many, 0, sizeof(many));
		for (int i = 0; i <= SAMPLER_MAX_LEVELS; i++)
			many[i].world = 1;
		T_EQ(sampler_resume(&b, 7, bad, 2), -EINVAL);
		T_EQ(sampler_resume(&b, 7, &over, 1), -EINVAL);
		T_EQ(sampler_resume(&b, 7, many, SAMPLER_MAX_LEVELS + 1),
		     -EINVAL);
		T_EQ(sampler_resume(&b, 7, NULL, 1), -EINVAL);
		T_EQ(b.epoch, 2);
		T_EQ(sampler_resume(&b, 7, many, SAMPLER_MAX_LEVELS), 0);
	}
	sampler_destroy(&a);
	sampler_destroy(&b);
	free(l.first);
	free(l.block_of);
}

int main(void)
{
	test_zero_level();
	test_chains();
	return 0;
}
