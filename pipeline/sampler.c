/*
 * sampler.c - the epoch's record order: shuffle modes, streams, batches.
 *
 * Every rank computes the same global sequence from (seed, epoch) alone,
 * then keeps its contiguous part (sampler_split.c, which also maps the
 * sequence an elastic resume leaves), so ranks agree without talking to
 * each other.  Nothing is materialised per record: position -> record is
 *   none:   the identity;
 *   full:   a keyed Feistel permutation of [0, n) (permutation.c);
 *   block:  the epoch's shuffled block order, records in order: a binary
 *           search over the blocks' start positions;
 *   window: the same block order cut into windows of W blocks; a position
 *           inside a window goes through a Feistel permutation of that
 *           window's records, then to its block by binary search.
 * A mixture first deals each position to a stream (sequence_record).
 * Memory is two arrays of about nblocks words (block and window modes).
 *
 * Batches are consecutive runs of batch_size positions of the rank's
 * part: nbatches = per_rank / batch_size with drop_last (the rank then
 * delivers nbatches * batch_size records), else rounded up.
 */
#include "sampler.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

/* ------------------------------------------------------------------ */
/* Configuration                                                       */
/* ------------------------------------------------------------------ */

static int shuffles_blocks(int shuffle)
{
	return shuffle == SLUICE_SHUFFLE_BLOCK ||
	       shuffle == SLUICE_SHUFFLE_WINDOW;
}

static int config_valid(const struct sampler_config *cfg)
{
	if (cfg->batch_size == 0 || cfg->world_size == 0 ||
	    cfg->rank >= cfg->world_size)
		return 0;
	switch (cfg->shuffle) {
	case SLUICE_SHUFFLE_NONE:
	case SLUICE_SHUFFLE_BLOCK:
	case SLUICE_SHUFFLE_FULL:
		return 1;
	case SLUICE_SHUFFLE_WINDOW:
		return cfg->window_blocks > 0;
	default:
		return 0;
	}
}

/* n uint64_t, or NULL when the size overflows. */
static uint64_t *alloc_u64(uint64_t n)
{
	if (n > SIZE_MAX / sizeof(uint64_t))
		return NULL;
	/* never malloc(0): NULL must mean failure */
	return malloc(n ? (size_t)n * sizeof(uint64_t) : 1);
}

int sampler_init(struct sampler *s, const struct sampler_config *cfg,
		 const uint64_t *block_first, uint64_t nblocks)
{
	struct sampler_stream_spec all = {0, nblocks, 0};

	if (block_first && nblocks > 0)
		all.samples = block_first[nblocks] - block_first[0];
	return sampler_init_streams(s, cfg, block_first, nblocks, &all, 1);
}

int sampler_init_streams(struct sampler *s, const struct sampler_config *cfg,
			 const uint64_t *block_first, uint64_t nblocks,
			 const struct sampler_stream_spec *specs,
			 uint32_t nspecs)
{
	uint64_t n = 0, next_block = 0;

	if (!s)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	if (!cfg || !config_valid(cfg) || (nblocks > 0 && !block_first) ||
	    !specs || nspecs == 0)
		return -EINVAL;
	if (block_first) {
		if (block_first[0] != 0)
			return -EINVAL;
		for (uint64_t b = 0; b < nblocks; b++)
			if (block_first[b + 1] < block_first[b])
				return -EINVAL;
		n = block_first[nblocks];
	}

	s->cfg = *cfg;
	s->nblocks = nblocks;
	s->block_first = block_first;
	s->nrecords = n;
	s->nstreams = nspecs;
	s->streams = calloc(nspecs, sizeof(*s->streams));
	if (!s->streams)
		return -ENOMEM;
	for (uint32_t i = 0; i < nspecs; i++) {
		struct sampler_stream *st = &s->streams[i];
		const struct sampler_stream_spec *sp = &specs[i];

		if (sp->first_block != next_block ||
		    sp->nblocks > nblocks - next_block)
			goto invalid;
		next_block += sp->nblocks;
		st->first_block = sp->first_block;
		st->nblocks = sp->nblocks;
		st->first_record = block_first ? block_first[sp->first_block] : 0;
		st->records = (block_first ? block_first[next_block] : 0) -
			      st->first_record;
		st->samples = sp->samples;
		st->pos_base = sp->first_block + i;
		if ((st->samples && !st->records) ||
		    st->samples > UINT64_MAX - s->epoch_len)
			goto invalid;
		s->epoch_len += st->samples;
	}
	/* positions * samples + phase must fit 128 bits (sequence_record) */
	if (next_block != nblocks || s->epoch_len > (1ull << 62))
		goto invalid;
	if (shuffles_blocks(cfg->shuffle)) {
		if (nblocks > UINT64_MAX - nspecs)
			goto nomem;
		s->block_order = alloc_u64(nblocks);
		s->block_pos = alloc_u64(nblocks + nspecs);
		if (!s->block_order || !s->block_pos)
			goto nomem;
	}
	sampler_set_epoch(s, 0);
	return 0;
invalid:
	sampler_destroy(s);
	return -EINVAL;
nomem:
	sampler_destroy(s);
	return -ENOMEM;
}

void sampler_destroy(struct sampler *s)
{
	if (!s)
		return;
	free(s->block_order);
	free(s->block_pos);
	free(s->streams);
	s->block_order = NULL;
	s->block_pos = NULL;
	s->streams = NULL;
	s->nstreams = 0;
	s->per_rank = 0;
	s->nbatches = 0;
}

/* This job's split of what the earlier levels left. */
static void split_current(struct sampler *s)
{
	uint64_t delivered;

	sampler_split(s->seq_len, s->cfg.world_size, s->cfg.batch_size,
		      s->cfg.drop_last, &s->per_rank, &s->nbatches,
		      &delivered);
}

/* Stream @i's blocks in a shuffled order, with their positions. */
static void shuffle_blocks(struct sampler *s, const struct sampler_stream *st,
			   struct rng *r)
{
	uint64_t *order = s->block_order + st->first_block;
	uint64_t *pos = s->block_pos + st->pos_base;

	for (uint64_t j = 0; j < st->nblocks; j++)
		order[j] = st->first_block + j;
	for (uint64_t i = st->nblocks; i > 1; i--) {
		uint64_t j = rng_below(r, i);
		uint64_t t = order[i - 1];

		order[i - 1] = order[j];
		order[j] = t;
	}
	pos[0] = 0;
	for (uint64_t j = 0; j < st->nblocks; j++) {
		uint64_t b = order[j];

		pos[j + 1] = pos[j] + (s->block_first[b + 1] - s->block_first[b]);
	}
}

/* The shuffle of @epoch: keys, interleave phases, block orders. */
static void shuffle_epoch(struct sampler *s, uint64_t epoch)
{
	uint64_t left = s->epoch_len;
	struct rng r;

	rng_seed(&r, s->cfg.seed, epoch);
	s->window_key = rng_next(&r);
	for (uint32_t i = 0; i < s->nstreams; i++) {
		struct sampler_stream *st = &s->streams[i];

		st->key = rng_next(&r);
		st->phase = rng_below(&r, left);
		left -= st->samples;
		if (s->cfg.shuffle == SLUICE_SHUFFLE_FULL)
			perm_init(&st->perm, st->records, st->key);
		if (shuffles_blocks(s->cfg.shuffle))
			shuffle_blocks(s, st, &r);
	}
}

void sampler_set_epoch(struct sampler *s, uint64_t epoch)
{
	s->generation++;        /* memos of the old order are stale */
	s->epoch = epoch;
	s->nlevels = 0;
	s->seq_len = s->epoch_len;
	shuffle_epoch(s, epoch);
	split_current(s);
}

int sampler_resume(struct sampler *s, uint64_t epoch,
		   const struct sampler_level *levels, uint32_t nlevels)
{
	struct sampler_level_shape shapes[SAMPLER_MAX_LEVELS];
	uint64_t len;

	if (sampler_chain_shapes(s->epoch_len, levels, nlevels, shapes, &len))
		return -EINVAL;
	sampler_set_epoch(s, epoch);
	if (nlevels) {
		memcpy(s->levels, levels, nlevels * sizeof(*levels));
		memcpy(s->shapes, shapes, nlevels * sizeof(*shapes));
	}
	s->nlevels = nlevels;
	s->seq_len = len;
	split_current(s);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Positions -> records                                                */
/* ------------------------------------------------------------------ */

/* Largest j in [lo, hi) with pos[j] <= p (pos[lo] <= p). */
static uint64_t find_block(const uint64_t *pos, uint64_t lo, uint64_t hi,
			   uint64_t p)
{
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (pos[mid] <= p)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static const struct perm *memo_perm(const struct sampler *s,
				    struct sampler_memo_slot *memo,
				    uint32_t stream,
				    uint64_t round, uint64_t window,
				    uint64_t n, uint64_t key)
{
	if (!memo->valid || memo->generation != s->generation ||
	    memo->stream != stream || memo->round != round ||
	    memo->window != window) {
		perm_init(&memo->perm, n, key);
		memo->stream = stream;
		memo->round = round;
		memo->window = window;
		memo->generation = s->generation;
		memo->valid = 1;
	}
	return &memo->perm;
}

/* Sample @j of a stream -> its position in the stream's epoch order.
 * Repeat *@round (j / records) of block and window orders starts about
 * 0.618 of the way further on each time. */
static uint64_t stream_position(const struct sampler *s,
				const struct sampler_stream *st, uint64_t j,
				uint64_t *round)
{
	uint64_t n = st->records, p = j % n;

	*round = j / n;
	if (*round > 0 && (s->cfg.shuffle == SLUICE_SHUFFLE_BLOCK ||
			   s->cfg.shuffle == SLUICE_SHUFFLE_WINDOW)) {
		uint64_t step = (uint64_t)(((unsigned __int128)n *
					    0x9E3779B97F4A7C15ull) >> 64);

		p = (uint64_t)(((unsigned __int128)*round * step + p) % n);
	}
	return p;
}

/* Window shuffle: the window (blocks [first, end) of the stream's order)
 * holding stream position @p, its permutation in @memo. */
static void find_window(const struct sampler *s, uint32_t i, uint64_t p,
			uint64_t round, struct sampler_memo_slot *memo)
{
	const struct sampler_stream *st = &s->streams[i];
	const uint64_t *pos = s->block_pos + st->pos_base;
	uint32_t wb = s->cfg.window_blocks;
	uint64_t b, w, first, end, key;

	if (memo->valid && memo->generation == s->generation &&
	    memo->stream == i && memo->round == round &&
	    memo->lo <= p && p < memo->hi)
		return;
	b = find_block(pos, 0, st->nblocks, p);
	w = b / wb;
	first = w * wb;
	end = st->nblocks - first > wb ? first + wb : st->nblocks;
	key = s->window_key ^
	      perm_mix64(w ^ perm_mix64(((uint64_t)i << 40) ^ round));
	memo_perm(s, memo, i, round, w, pos[end] - pos[first], key);
	memo->first = first;
	memo->end = end;
	memo->lo = pos[first];
	memo->hi = pos[end];
}

/*
 * Sample @j of stream @i in this epoch -> global record.  A repeat of
 * the stream (j >= records) starts its order elsewhere (block, window)
 * or uses a fresh permutation (full).
 */
static uint64_t stream_record(const struct sampler *s, uint32_t i,
			      uint64_t j, struct sampler_memo *memos)
{
	struct sampler_memo_slot *memo =
		&memos->slot[i % SAMPLER_MEMO_SLOTS];
	const struct sampler_stream *st = &s->streams[i];
	const uint64_t *pos, *order;
	uint64_t round, p = stream_position(s, st, j, &round);
	uint64_t b, first, end, t, key;

	if (s->cfg.shuffle == SLUICE_SHUFFLE_NONE)
		return st->first_record + p;
	if (s->cfg.shuffle == SLUICE_SHUFFLE_FULL) {
		if (round == 0)
			return st->first_record + perm_apply(&st->perm, p);
		key = perm_mix64(st->key ^ perm_mix64(round));
		return st->first_record +
		       perm_apply(memo_perm(s, memo, i, round, 0, st->records,
					    key), p);
	}
	pos = s->block_pos + st->pos_base;
	order = s->block_order + st->first_block;
	if (s->cfg.shuffle == SLUICE_SHUFFLE_BLOCK) {
		b = find_block(pos, 0, st->nblocks, p);
		return s->block_first[order[b]] + (p - pos[b]);
	}
	/* window: a permutation of the window's records */
	find_window(s, i, p, round, memo);
	first = memo->first;
	end = memo->end;
	t = pos[first] + perm_apply(&memo->perm, p - pos[first]);
	b = find_block(pos, first, end, t);
	return s->block_first[order[b]] + (t - pos[b]);
}

/*
 * Position @p of the epoch -> (stream, its sample *@j).  The streams are
 * dealt out one after another: stream 0 takes samples[0] of all
 * positions, spread evenly (position q is its iff floor((q * m + phase)
 * / len) steps there, a Bresenham line, so every run of positions holds
 * its share to within one), stream 1 the same among the positions left,
 * and so on.  O(streams), no memory.
 */
static uint32_t deal(const struct sampler *s, uint64_t p, uint64_t *j)
{
	uint64_t len = s->epoch_len;

	for (uint32_t i = 0; i + 1 < s->nstreams; i++) {
		const struct sampler_stream *st = &s->streams[i];
		uint64_t before, rem;

		/* one division, in 64 bits when p * samples + phase fits
		 * (phase < len <= 2^62) */
		if (p < (1ull << 31) && st->samples < (1ull << 31)) {
			uint64_t a = p * st->samples + st->phase;

			before = a / len;
			rem = a % len;
		} else {
			unsigned __int128 a = (unsigned __int128)p *
					      st->samples + st->phase;

			before = (uint64_t)(a / len);
			rem = (uint64_t)(a % len);
		}
		/* samples <= len, so the next step crosses at most one
		 * multiple of len: position p is this stream's */
		if (rem >= len - st->samples) {
			*j = before;
			return i;
		}
		p -= before;            /* among the positions left */
		len -= st->samples;
	}
	*j = p;
	return s->nstreams - 1;
}

static uint64_t sequence_record(const struct sampler *s, uint64_t p,
				struct sampler_memo *memo)
{
	uint64_t j;
	uint32_t i = deal(s, p, &j);

	return stream_record(s, i, j, memo);
}

uint64_t sampler_sequence_record(const struct sampler *s, uint64_t p)
{
	struct sampler_memo memo;

	memset(&memo, 0, sizeof(memo));
	return sequence_record(s, p, &memo);
}

static uint64_t rank_record(const struct sampler *s, uint64_t i,
			    struct sampler_memo *memo)
{
	/* rank * per_rank <= len + world: no overflow for any len we hold */
	uint64_t p = (uint64_t)s->cfg.rank * s->per_rank + i;

	if (p >= s->seq_len)
		p %= s->seq_len; /* the wrapped tail of a part */
	for (uint32_t l = s->nlevels; l-- > 0;)
		p = sampler_level_map(&s->shapes[l], p);
	return sequence_record(s, p, memo);
}

/* Rank position @i -> epoch position; *@run: how many positions from @i
 * on map to consecutive epoch positions (within every level's piece, the
 * rank's part and before the wrap). */
static uint64_t rank_position(const struct sampler *s, uint64_t i,
			      uint64_t *run)
{
	uint64_t p = (uint64_t)s->cfg.rank * s->per_rank + i;
	uint64_t len = s->seq_len;

	if (p >= len)
		p %= len;
	*run = len - p;
	if (s->per_rank - i < *run)
		*run = s->per_rank - i;
	for (uint32_t l = s->nlevels; l-- > 0;) {
		const struct sampler_level_shape *sh = &s->shapes[l];
		uint64_t piece = sh->part - sh->consumed, left;

		if (piece && p < sh->full_parts * piece)
			left = piece - p % piece;
		else
			left = sh->len - sh->rest_start -
			       (p - sh->full_parts * piece);
		if (left < *run)
			*run = left;
		p = sampler_level_map(sh, p);
	}
	return p;
}

void sampler_span(const struct sampler *s, uint64_t i,
		  struct sampler_memo *memo, struct sampler_span *out)
{
	const struct sampler_stream *st = &s->streams[0];
	uint64_t run, p = rank_position(s, i, &run), b, w, first, end;
	const uint64_t *pos;
	uint32_t wb = s->cfg.window_blocks;
	struct sampler_memo local;

	memset(out, 0, sizeof(*out));
	out->positions = 1;
	if (!memo) {
		memset(&local, 0, sizeof(local));
		memo = &local;
	}
	if (s->cfg.shuffle == SLUICE_SHUFFLE_FULL) {
		out->record = sequence_record(s, p, memo);
		return;
	}
	if (s->nstreams > 1 || st->samples != st->records) {
		/* one position, but its stream's whole block or window:
		 * no permutation needed to know which blocks (a lone stream
		 * that repeats needs its rounds too: its positions run past
		 * its records) */
		uint64_t j, round, q;
		uint32_t k = deal(s, p, &j);
		struct sampler_memo_slot *slot =
			&memo->slot[k % SAMPLER_MEMO_SLOTS];

		st = &s->streams[k];
		q = stream_position(s, st, j, &round);
		if (s->cfg.shuffle == SLUICE_SHUFFLE_NONE) {
			out->one = find_block(s->block_first, st->first_block,
					      st->first_block + st->nblocks,
					      st->first_record + q);
			out->blocks = &out->one;
			out->nblocks = 1;
			return;
		}
		pos = s->block_pos + st->pos_base;
		if (s->cfg.shuffle == SLUICE_SHUFFLE_BLOCK) {
			first = find_block(pos, 0, st->nblocks, q);
			end = first + 1;
		} else {
			find_window(s, k, q, round, slot);
			first = slot->first;
			end = slot->end;
		}
		out->blocks = s->block_order + st->first_block + first;
		out->nblocks = end - first;
		return;
	}
	if (s->cfg.shuffle == SLUICE_SHUFFLE_NONE) {
		b = find_block(s->block_first, 0, s->nblocks, p);
		out->one = b;
		out->blocks = &out->one;
		out->nblocks = 1;
		end = s->block_first[b + 1] - p;
		out->positions = end < run ? end : run;
		return;
	}
	pos = s->block_pos + st->pos_base;
	b = find_block(pos, 0, st->nblocks, p);
	if (s->cfg.shuffle == SLUICE_SHUFFLE_BLOCK) {
		first = b;
		end = b + 1;
	} else {
		w = b / wb;
		first = w * wb;
		end = st->nblocks - first > wb ? first + wb : st->nblocks;
	}
	out->blocks = s->block_order + st->first_block + first;
	out->nblocks = end - first;
	out->positions = pos[end] - p < run ? pos[end] - p : run;
}

uint64_t sampler_rank_record(const struct sampler *s, uint64_t i)
{
	struct sampler_memo memo;

	memset(&memo, 0, sizeof(memo));
	return rank_record(s, i, &memo);
}

int sampler_repeats(const struct sampler *s)
{
	for (uint32_t k = 0; k < s->nstreams; k++)
		if (s->streams[k].samples > s->streams[k].records)
			return 1;
	return 0;
}

uint32_t sampler_batch_count(const struct sampler *s, uint64_t k)
{
	uint64_t left;

	if (k >= s->nbatches)
		return 0;
	left = s->per_rank - k * s->cfg.batch_size; /* k < nbatches */
	return left < s->cfg.batch_size ? (uint32_t)left : s->cfg.batch_size;
}

uint32_t sampler_batch(const struct sampler *s, uint64_t k, uint64_t *out)
{
	struct sampler_memo memo;

	memset(&memo, 0, sizeof(memo));
	uint32_t count = sampler_batch_count(s, k);
	uint64_t off = k * s->cfg.batch_size;

	for (uint32_t i = 0; i < count; i++)
		out[i] = rank_record(s, off + i, &memo);
	return count;
}
