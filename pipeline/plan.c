/*
 * plan.c - how a batch is placed, chosen in one place.
 *
 * What is read, and where it lands, is planned before the bytes arrive:
 * records read by range (ranges.c), zstd blocks decoded straight into
 * their batch (direct.c), and, for the whole loader, batches built a
 * chunk of blocks at a time (chunks.c).  With the batch's bytes in hand,
 * place_choose_locked() picks how they become the batch, and
 * run_assemble() (assemble.c) carries that out.  Every placement but the
 * view moves the batch's runs, {source, destination, length}, all made
 * by runs.c; what differs is who moves them:
 *   view    the tensors point into the one decoded block that holds the
 *           batch's records in order: nothing moves (view.c);
 *   gather  the device: the run table goes to it, and its kernel copies
 *           the runs from the uploaded blocks (gather.c);
 *   copy    the decode workers' memcpy, in parallel parts, but rows a
 *           block decoded in place (direct.c);
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
