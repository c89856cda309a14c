/*
 * plan.c - how a batch is placed, chosen in one place.
 *
 * What is read, and where it lands, is planned before the bytes arrive:
 * records read by range (ranges.c), zstd blocks decoded straight into
 * their batch (direct.c), and, for the whole loader, batches built a
 * chunk of blocks at a time (chunks.c).  With the batch's bytes in hand,
 * place_choose_locked() picks how they become the batch, and
 * run_assemble() (assemble.c) carries that out:
 *   view    the tensors point into the one decoded block that holds the
 *           batch's records in order: nothing moves (view.c);
 *   gather  a run table of the blocks' rows goes to the device, whose
 *           kernel copies them from the uploaded blocks (gather.c);
 *   copy    decode workers copy the records in parallel parts;
 *   chunks  the same, a chunk of blocks at a time (chunks.c).
 * A view costs nothing, so it comes first; it also needs no batch memory,
 * which is why the choice has two moments: before memory, "view or not",
 * and once memory is granted, "gather or copy".
 */
#include "loader.h"

enum batch_place place_choose_locked(const struct loader_core *c,
				     const struct slot *s)
{
	if (s->chunk.chunked)
		return PLACE_CHUNKS;
	if (!s->has_mem)
		return slot_viewable_locked(c, s) ? PLACE_VIEW : PLACE_UNSET;
	return slot_gathers(c, s) ? PLACE_GATHER : PLACE_COPY;
}

uint32_t block_run(const struct slot *s, uint32_t r, uint32_t hi)
{
	uint32_t e = s->rec_entry[r], n = 1;

	while (r + n < hi && s->rec_entry[r + n] == e &&
	       s->rec_in_block[r + n] == s->rec_in_block[r] + n)
		n++;
	return n;
}
