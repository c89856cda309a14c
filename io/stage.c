/*
 * stage.c - staged reads (io_read.stage): a buffered read's pieces land
 * in a small ring that its owner empties and releases as they arrive,
 * instead of in one large buffer.  The page cache's copy then writes
 * memory the CPU's cache still holds, and whatever reads the piece next
 * (the GPU's DMA, for the loader) finds it there.  submit.c cuts such a
 * read into pieces like any buffered run, queues the first stage_pieces
 * and keeps the rest on the read, in order; each ring_fill() moves those
 * that have room onto the pending queue.
 */
#include "ring_private.h"

/* Pieces of @rd whose room in the stage its owner released. */
static uint64_t pieces_released(const struct io_read *rd)
{
	uint64_t bytes = atomic_load_explicit(&rd->released,
					      memory_order_acquire);

	return bytes >= rd->length ? UINT64_MAX : bytes / IO_PIECE_BYTES;
}

void ring_stage_unlist(struct io_ring *r, struct io_read *rd)
{
	struct io_read **p = &r->staging;

	if (!rd->stage_listed)
		return;
	while (*p != rd)
		p = &(*p)->stage_next;
	*p = rd->stage_next;
	rd->stage_next = NULL;
	rd->stage_listed = 0;
}

void ring_stage_admit(struct io_ring *r)
{
	struct io_read *rd = r->staging;

	while (rd) {
		struct io_read *next = rd->stage_next;
		uint64_t room = pieces_released(rd);

		room = room > UINT64_MAX - rd->stage_pieces
			? UINT64_MAX : room + rd->stage_pieces;
		while (rd->stage_head && rd->stage_head->stage_k < room) {
			struct ring_op *op = rd->stage_head;

			rd->stage_head = op->next;
			ring_queue_push(&r->pending, op);
		}
		if (!rd->stage_head) {
			rd->stage_tail = NULL;
			ring_stage_unlist(r, rd);
		}
		rd = next;
	}
}

void ring_stage_drop(struct io_ring *r, struct io_read *rd)
{
	struct ring_op *op = rd->stage_head;

	rd->stage_head = rd->stage_tail = NULL;
	ring_stage_unlist(r, rd);
	while (op) {
		struct ring_op *next = op->next;

		ring_op_finish(r, op, 0);
		op = next;
	}
}

const uint8_t *io_read_at(const struct io_read *rd, uint64_t x, uint64_t *n)
{
	uint64_t at;

	if (!rd->staged) {
		*n = x < rd->length ? rd->length - x : 0;
		return (const uint8_t *)rd->buf + x;
	}
	/* to the end of the stage: the pieces after x's in the ring are
	 * the read's next ones until it wraps, so that its owner can take
	 * several in one go (one DMA and one wait, for the loader) */
	at = x / IO_PIECE_BYTES % rd->stage_pieces * IO_PIECE_BYTES +
	     x % IO_PIECE_BYTES;
	*n = (uint64_t)rd->stage_pieces * IO_PIECE_BYTES - at;
	if (x < rd->length && *n > rd->length - x)
		*n = rd->length - x;
	return (const uint8_t *)rd->stage + at;
}

void io_read_release(struct io_ring *r, struct io_read *rd, uint64_t bytes)
{
	atomic_store_explicit(&rd->released, bytes, memory_order_release);
	io_ring_wake(r);
}
