/*
 * sampler_split.c - how ranks split an epoch's sequence, and what the
 * earlier jobs of an elastically resumed epoch leave of it.
 *
 * A job of W ranks over a sequence of len positions gives each rank a
 * part of P = floor(len / W) positions with drop_last (the tail that does
 * not fill every rank is dropped), else ceil(len / W), the last parts
 * wrapping to the sequence's start.
 *
 * Elastic resume.  A job that stopped after each rank consumed c
 * positions of its part leaves the positions nobody consumed: per part
 * [jP + c, (j + 1)P), and the dropped tail [WP, len) with drop_last.  In
 * sequence order they form the next job's sequence, which that job splits
 * across its own ranks the same way; each earlier job is one "level", and
 * a position of the newest sequence maps down through the levels to the
 * epoch's sequence in O(levels).  Positions a wrapped part consumed past
 * the end of its sequence are repeats (padding), not records consumed.
 * The remaining sequence keeps runs of the original one, so every rank
 * still reads mostly whole blocks and windows of its own.
 */
#include <errno.h>
#include <stdint.h>

#include "sampler.h"

static uint64_t part_length(uint64_t len, uint32_t world, int drop_last)
{
	return drop_last ? len / world : len / world + (len % world != 0);
}

void sampler_split(uint64_t len, uint32_t world, uint32_t batch,
		   int drop_last, uint64_t *per_rank, uint64_t *nbatches,
		   uint64_t *delivered)
{
	uint64_t part = part_length(len, world, drop_last);
	uint64_t nb = part / batch;

	if (!drop_last && part % batch)
		nb++;
	*per_rank = part;
	*nbatches = nb;
	*delivered = drop_last ? nb * batch : part;
}

/*
 * The shape of level @lv over a sequence of @len, and the length of what
 * it leaves.  Parts [jP, (j+1)P) for j < full_parts lie inside the
 * sequence; what follows them (the one partial part of a wrapped split,
 * or the dropped tail) is one run from rest_start to len.
 */
static int level_shape(const struct sampler_level *lv, uint64_t len,
		       struct sampler_level_shape *sh, uint64_t *left)
{
	uint64_t part, full, rest;

	if (lv->world == 0)
		return -EINVAL;
	part = part_length(len, lv->world, lv->drop_last);
	if (lv->consumed > part)
		return -EINVAL;
	full = part ? len / part : lv->world;
	if (full >= lv->world) {
		full = lv->world;
		rest = full * part; /* <= len here */
	} else {
		rest = full * part + lv->consumed;
		if (rest > len)
			rest = len;
	}
	sh->len = len;
	sh->part = part;
	sh->consumed = lv->consumed;
	sh->full_parts = full;
	sh->rest_start = rest;
	*left = full * (part - lv->consumed) + (len - rest);
	return 0;
}

/* Position @q of the sequence a level leaves -> position in the one it
 * split. */
uint64_t sampler_level_map(const struct sampler_level_shape *sh, uint64_t q)
{
	uint64_t piece = sh->part - sh->consumed;

	if (piece && q < sh->full_parts * piece)
		return (q / piece) * sh->part + sh->consumed + q % piece;
	return sh->rest_start + (q - sh->full_parts * piece);
}

int sampler_chain_shapes(uint64_t epoch_len, const struct sampler_level *levels,
			uint32_t nlevels, struct sampler_level_shape *shapes,
			uint64_t *len)
{
	*len = epoch_len;
	if (nlevels > SAMPLER_MAX_LEVELS || (nlevels && !levels))
		return -EINVAL;
	for (uint32_t i = 0; i < nlevels; i++)
		if (level_shape(&levels[i], *len, &shapes[i], len))
			return -EINVAL;
	return 0;
}

int sampler_chain_length(uint64_t epoch_len, const struct sampler_level *levels,
			 uint32_t nlevels, uint64_t *len)
{
	struct sampler_level_shape shapes[SAMPLER_MAX_LEVELS];

	return sampler_chain_shapes(epoch_len, levels, nlevels, shapes, len);
}
