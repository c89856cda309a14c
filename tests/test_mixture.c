/*
 * test_mixture.c - the sampler's mixture of streams: each epoch takes
 * exactly each stream's samples; every prefix of the epoch holds each
 * stream's share to within the stream count (so every batch is mixed in
 * proportion); a stream repeats (each record once per pass, passes
 * reshuffled) or subsamples (distinct records, another subset next epoch)
 * as its count asks; deterministic from seed and epoch; ranks and elastic
 * levels split the mixed sequence like a plain one.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "sluice.h"
#include "t.h"

#define NSTREAMS 3

struct mix {
	uint64_t nblocks;
	uint64_t first[64];
	struct sampler_stream_spec specs[NSTREAMS];
	uint64_t stream_first[NSTREAMS + 1]; /* records */
};

/* Stream 0: 10 blocks of 6 (60 records) taking 90: repeats 1.5 times;
 * stream 1: 5 blocks of 5 (25) taking 10: subsamples; stream 2: 15
 * blocks of uneven size taking exactly its records. */
static struct mix make_mix(void)
{
	struct mix m;
	uint64_t b = 0;
	static const uint64_t sizes2[15] = {3, 9, 1, 12, 7, 0, 5, 8, 2, 11,
					    6, 4, 10, 13, 9};

	memset(&m, 0, sizeof(m));
	for (int i = 0; i < 10; i++, b++)
		m.first[b + 1] = m.first[b] + 6;
	for (int i = 0; i < 5; i++, b++)
		m.first[b + 1] = m.first[b] + 5;
	for (int i = 0; i < 15; i++, b++)
		m.first[b + 1] = m.first[b] + sizes2[i];
	m.nblocks = b;
	m.specs[0] = (struct sampler_stream_spec){0, 10, 90};
	m.specs[1] = (struct sampler_stream_spec){10, 5, 10};
	m.specs[2] = (struct sampler_stream_spec){15, 15, m.first[30] - m.first[15]};
	m.stream_first[0] = 0;
	m.stream_first[1] = m.first[10];
	m.stream_first[2] = m.first[15];
	m.stream_first[3] = m.first[30];
	return m;
}

static int stream_of(const struct mix *m, uint64_t rec)
{
	for (int s = 0; s < NSTREAMS; s++)
		if (rec < m->stream_first[s + 1])
			return s;
	T_FAIL_AT("record %llu beyond the streams", (unsigned long long)rec);
	return -1;
}

/* The read-ahead's span at rank position @i names the record's block. */
static void check_span(const struct mix *m, const struct sampler *s,
		       uint64_t i, struct sampler_memo *memo)
{
	struct sampler_span sp;
	uint64_t rec = sampler_rank_record(s, i), b = 0;

	sampler_span(s, i, memo, &sp);
	T_EQ(sp.positions, 1);
	if (sp.nblocks == 0) {
		T_EQ(sp.record, rec);
		return;
	}
	while (m->first[b + 1] <= rec)
		b++;
	for (uint64_t k = 0; k < sp.nblocks; k++)
		if (sp.blocks[k] == b)
			return;
	T_FAIL_AT("position %llu: record %llu's block %llu not in its span",
		  (unsigned long long)i, (unsigned long long)rec,
		  (unsigned long long)b);
}

static uint64_t *epoch_sequence(const struct mix *m, int mode, uint64_t seed,
				uint64_t epoch, uint64_t *len)
{
	struct sampler s;
	struct sampler_config c = {
		.shuffle = mode, .window_blocks = 2, .seed = seed,
		.batch_size = 7, .drop_last = 0, .rank = 0, .world_size = 1,
	};
	uint64_t *g;

	T_EQ(sampler_init_streams(&s, &c, m->first, m->nblocks, m->specs,
				  NSTREAMS), 0);
	sampler_set_epoch(&s, epoch);
	*len = s.epoch_len;
	T_EQ(s.per_rank, s.epoch_len);
	/* a mixture's read-ahead goes position by position */
	for (uint64_t i = 0; i < s.per_rank; i++)
		check_span(m, &s, i, NULL);
	g = malloc(*len * 8);
	T_ASSERT(g);
	for (uint64_t i = 0; i < *len; i++) {
		g[i] = sampler_rank_record(&s, i);
		T_EQ(sampler_sequence_record(&s, i), g[i]);
	}
	/* batches are the same records */
	{
		uint64_t buf[7], at = 0;

		for (uint64_t k = 0; k < s.nbatches; k++) {
			uint32_t n = sampler_batch(&s, k, buf);

			for (uint32_t j = 0; j < n; j++)
				T_EQ(buf[j], g[at++]);
		}
		T_EQ(at, *len);
	}
	sampler_destroy(&s);
	return g;
}

static void check_epoch(const struct mix *m, int mode, const uint64_t *g,
			uint64_t len)
{
	uint64_t total = 0, count[NSTREAMS] = {0};
	uint32_t *times = calloc(m->stream_first[NSTREAMS], 4);

	T_ASSERT(times);
	for (int s = 0; s < NSTREAMS; s++)
		total += m->specs[s].samples;
	T_EQ(len, total);
	for (uint64_t i = 0; i < len; i++) {
		int s = stream_of(m, g[i]);

		count[s]++;
		times[g[i]]++;
		/* evenly mixed: every prefix within NSTREAMS of its share */
		for (int t = 0; t < NSTREAMS; t++) {
			double share = (double)(i + 1) * m->specs[t].samples /
				       (double)total;
			double d = (double)count[t] - share;

			if (d > NSTREAMS || d < -NSTREAMS)
				T_FAIL_AT("mode %d: after %llu positions stream %d has %llu, share %.1f",
					  mode, (unsigned long long)i + 1, t,
					  (unsigned long long)count[t], share);
		}
	}
	for (int s = 0; s < NSTREAMS; s++) {
		uint64_t n = m->stream_first[s + 1] - m->stream_first[s];
		uint64_t want = m->specs[s].samples, once = 0, twice = 0;

		T_EQ(count[s], want);
		for (uint64_t r = m->stream_first[s]; r < m->stream_first[s + 1];
		     r++) {
			/* full passes, then part of one more */
			T_ASSERT(times[r] >= want / n);
			T_ASSERT(times[r] <= want / n + 1);
			once += times[r] == want / n;
			twice += times[r] == want / n + 1;
		}
		T_EQ(twice, want % n);
		(void)once;
	}
	/* stream 0's first pass (its first 60 samples) is every record of
	 * it once: a repeat starts only after a full pass */
	{
		uint32_t *seen = calloc(60, 4);
		uint64_t taken = 0;

		for (uint64_t i = 0; i < len && taken < 60; i++)
			if (stream_of(m, g[i]) == 0) {
				T_EQ(seen[g[i]], 0);
				seen[g[i]] = 1;
				taken++;
			}
		free(seen);
	}
	free(times);
}

static void test_epochs(void)
{
	struct mix m = make_mix();

	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		uint64_t n0, n1, n2;
		uint64_t *a = epoch_sequence(&m, mode, 4, 0, &n0);
		uint64_t *b = epoch_sequence(&m, mode, 4, 0, &n1);
		uint64_t *e1 = epoch_sequence(&m, mode, 4, 1, &n2);

		check_epoch(&m, mode, a, n0);
		check_epoch(&m, mode, e1, n2);
		T_ASSERT(memcmp(a, b, n0 * 8) == 0); /* deterministic */
		if (mode != SLUICE_SHUFFLE_NONE) {
			/* another epoch, another order; and stream 1's subset
			 * (10 of 25) changes */
			uint64_t diff = 0;
			uint32_t sub0[100] = {0}, sub1[100] = {0};

			T_ASSERT(memcmp(a, e1, n0 * 8) != 0);
			for (uint64_t i = 0; i < n0; i++) {
				if (stream_of(&m, a[i]) == 1)
					sub0[a[i] - m.stream_first[1]] = 1;
				if (stream_of(&m, e1[i]) == 1)
					sub1[e1[i] - m.stream_first[1]] = 1;
			}
			for (int r = 0; r < 25; r++)
				diff += sub0[r] != sub1[r];
			T_LT(0, diff);
		}
		free(a), free(b), free(e1);
	}
}

/* Ranks split the mixed epoch; an elastic level over it as well. */
static void test_ranks_and_levels(void)
{
	struct mix m = make_mix();

	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		uint64_t len, *g = epoch_sequence(&m, mode, 9, 2, &len);
		struct sampler_level lv = {3, 0, 11};
		uint32_t *times = calloc(len * 4, 4);
		uint64_t consumed_pos[200] = {0};

		T_ASSERT(times);
		/* a 3-rank job took 11 each, a 2-rank job takes the rest */
		for (uint32_t r = 0; r < 3; r++) {
			struct sampler s;
			struct sampler_config c = {
				.shuffle = mode, .window_blocks = 2, .seed = 9,
				.batch_size = 11, .rank = r, .world_size = 3,
			};

			T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks,
						  m.specs, NSTREAMS), 0);
			sampler_set_epoch(&s, 2);
			for (uint64_t i = 0; i < 11; i++) {
				uint64_t p = r * s.per_rank + i;

				T_EQ(sampler_rank_record(&s, i), g[p]);
				consumed_pos[p] = 1;
			}
			sampler_destroy(&s);
		}
		for (uint32_t r = 0; r < 2; r++) {
			struct sampler s;
			struct sampler_config c = {
				.shuffle = mode, .window_blocks = 2, .seed = 9,
				.batch_size = 5, .rank = r, .world_size = 2,
			};

			T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks,
						  m.specs, NSTREAMS), 0);
			T_EQ(sampler_resume(&s, 2, &lv, 1), 0);
			T_EQ(s.seq_len, len - 33);
			for (uint64_t i = 0; i < s.per_rank; i++) {
				uint64_t rec = sampler_rank_record(&s, i);
				uint64_t p = 0;

				if (r * s.per_rank + i >= s.seq_len)
					continue; /* wrapped padding */

				/* it is one of the positions not consumed */
				while (p < len && (g[p] != rec || consumed_pos[p] == 1))
					p++;
				T_LT(p, len);
				consumed_pos[p] = 1;
			}
			sampler_destroy(&s);
		}
		for (uint64_t p = 0; p < len; p++)
			T_EQ(consumed_pos[p], 1);
		free(times);
		free(g);
	}
}

/* The read-ahead's memo, kept across epochs and shuffle modes' windows,
 * gives what a fresh computation gives. */
static void test_memo(void)
{
	struct mix m = make_mix();

	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++) {
		struct sampler s;
		struct sampler_config c = {
			.shuffle = mode, .window_blocks = 2, .seed = 5,
			.batch_size = 7, .rank = 0, .world_size = 1,
		};
		struct sampler_memo memo;

		memset(&memo, 0, sizeof(memo));
		T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks, m.specs,
					  NSTREAMS), 0);
		for (uint64_t e = 0; e < 3; e++) {
			sampler_set_epoch(&s, e);
			for (uint64_t i = 0; i < s.per_rank; i++)
				check_span(&m, &s, i, &memo);
		}
		sampler_destroy(&s);
	}
}

static void test_invalid(void)
{
	struct mix m = make_mix();
	struct sampler s;
	struct sampler_config c = {
		.shuffle = SLUICE_SHUFFLE_FULL, .batch_size = 4, .world_size = 1,
	};
	struct sampler_stream_spec bad[NSTREAMS];

	memcpy(bad, m.specs, sizeof(bad));
	bad[1].first_block = 11; /* a gap */
	T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks, bad, NSTREAMS),
	     -EINVAL);
	memcpy(bad, m.specs, sizeof(bad));
	bad[2].nblocks = 14; /* does not reach the end */
	T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks, bad, NSTREAMS),
	     -EINVAL);
	T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks, bad, 0),
	     -EINVAL);
	/* samples from an empty stream (block 20 holds 0 records) */
	{
		struct sampler_stream_spec empty[3] = {
			{0, 20, 5}, {20, 1, 1}, {21, 9, 3}};

		T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks, empty,
					  3), -EINVAL);
		empty[1].samples = 0; /* taking nothing from it is fine */
		T_EQ(sampler_init_streams(&s, &c, m.first, m.nblocks, empty,
					  3), 0);
		T_EQ(s.epoch_len, 8);
		sampler_destroy(&s);
	}
}

int main(void)
{
	test_epochs();
	test_ranks_and_levels();
	test_memo();
	test_invalid();
	return 0;
}
