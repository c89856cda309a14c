/*
 * reap.c - completions: short reads resubmitted, -EAGAIN/-EINTR retried,
 * EOF and errors settled per read over all its pieces, reads handed back.
 */
#include <errno.h>

#include "ring_private.h"

/* @rd's last piece finished: its result from what its pieces read. */
static void read_settle(struct io_ring *r, struct io_read *rd)
{
	if (rd->short_at == rd->length)
		rd->result = (int64_t)rd->length;
	else if (rd->err < 0)
		rd->result = rd->err;
	else    /* end of file */
		rd->result = rd->short_at >= rd->min_length
			? (int64_t)rd->short_at : -ENODATA;
	rd->done = rd->short_at;
	atomic_store_explicit(&rd->landed, rd->done, memory_order_release);
	rd->done_next = NULL;
	if (r->done_tail)
		r->done_tail->done_next = rd;
	else
		r->done_head = rd;
	r->done_tail = rd;
}

/*
 * @op's part of @rd is read.  Pieces are IO_PIECE_BYTES from
 * piece_origin; @rd's landed rises over those now read in order.  A
 * piece more than 64 beyond the first missing one is not tracked, and
 * an O_DIRECT read is one op: their bytes land when the read settles.
 * @return: whether landed rose.
 */
static bool piece_landed(const struct io_ring *r, struct io_read *rd,
			 const struct ring_op *op)
{
	uint64_t k = (op->offset - rd->piece_origin) / IO_PIECE_BYTES;
	uint64_t end = rd->offset + rd->length, to;

	if (r->file_direct[op->file] || k < rd->piece_next ||
	    k - rd->piece_next >= 64)
		return false;
	rd->pieces_early |= 1ull << (k - rd->piece_next);
	if (!(rd->pieces_early & 1))
		return false;
	while (rd->pieces_early & 1) {
		rd->pieces_early >>= 1;
		rd->piece_next++;
	}
	to = rd->piece_origin + rd->piece_next * IO_PIECE_BYTES;
	atomic_store_explicit(&rd->landed, (to < end ? to : end) - rd->offset,
			      memory_order_release);
	return true;
}

/*
 * @op is over, having read op->done bytes from its start: each read it
 * covers learns where its part stopped short (@err when negative, else
 * end of file), if it did; a part read completely succeeds whatever
 * happened later in the op.  A read whose last op this was is settled.
 */
void ring_op_finish(struct io_ring *r, struct ring_op *op, int err)
{
	uint64_t read_end = op->offset + op->done;

	for (unsigned k = 0; k < op->nreads; k++) {
		struct io_read *rd = op->reads[k];
		uint64_t lo = rd->offset > op->offset ? rd->offset : op->offset;
		uint64_t hi = rd->offset + rd->length;
		bool rose = false;

		if (hi > op->offset + op->length)
			hi = op->offset + op->length;
		if (read_end >= hi) {
			rose = piece_landed(r, rd, op);
		} else {
			uint64_t miss = (read_end > lo ? read_end : lo) -
					rd->offset;

			if (miss < rd->short_at)
				rd->short_at = miss;
			if (err < 0 && rd->err == 0)
				rd->err = err;
		}
		if (op->attempts > rd->attempts)
			rd->attempts = op->attempts;
		if (--rd->ops_left == 0)
			read_settle(r, rd);
		else if (rose && r->on_landed)
			r->on_landed(r->on_landed_ctx, rd);
	}
	ring_op_put(r, op);
}

static void op_completed(struct io_ring *r, struct ring_op *op, int res)
{
	uint64_t end;

#ifdef SLUICE_TESTING
	ring_fault_apply(op->file, op->offset + op->sqe_start, op->sqe_len,
			 &res);
#endif
	if (res == -EAGAIN || res == -EINTR) {
		if (++op->attempts > RING_RETRY_MAX) {
			ring_op_finish(r, op, res);
			return;
		}
		ring_queue_push_front(&r->pending, op);
		return;
	}
	if (res < 0) {
		ring_op_finish(r, op, res);
		return;
	}
	if ((uint64_t)res > op->sqe_len) {  /* cannot happen; never trust */
		ring_op_finish(r, op, -EIO);
		return;
	}
	end = op->sqe_start + (uint64_t)res;
	/* Nothing new: end of file (an O_DIRECT restart re-reads the
	 * partial sector before it, so "nothing new" rather than 0). */
	if (res == 0 || end <= op->done) {
		ring_op_finish(r, op, 0);
		return;
	}
	op->done = end;
	if (op->done >= op->length)
		ring_op_finish(r, op, 0);
	else
		ring_queue_push_front(&r->pending, op);  /* short read */
}

/* Handle every CQE there is; @woken when io_ring_wake's read completed. */
static void drain_cqes(struct io_ring *r, bool *woken)
{
	struct io_uring_cqe *cqe;

	while (io_uring_peek_cqe(&r->uring, &cqe) == 0) {
		uint64_t tag = cqe->user_data;
		int res = cqe->res;

		io_uring_cqe_seen(&r->uring, cqe);
		if (tag == RING_WAKE_TAG) {
			r->wake_armed = false;
			if (res > 0)
				*woken = true;
			continue;
		}
		if (tag == RING_DELAY_TAG)
			continue;       /* its read says what went wrong */
		r->in_kernel--;
		r->busy[((struct ring_op *)(uintptr_t)tag)->file]--;
		op_completed(r, (struct ring_op *)(uintptr_t)tag, res);
	}
}

static unsigned take_done(struct io_ring *r, struct io_read **out,
			  unsigned max)
{
	unsigned got = 0;

	while (got < max && r->done_head) {
		out[got++] = r->done_head;
		r->done_head = r->done_head->done_next;
	}
	if (!r->done_head)
		r->done_tail = NULL;
	r->in_flight -= got;
	return got;
}

int io_ring_reap(struct io_ring *r, struct io_read **done, unsigned max,
		 unsigned min_complete)
{
	bool woken = false;
	unsigned got = 0;
	int ret;

	if (!r || (max && !done))
		return -EINVAL;
	if (min_complete > max)
		min_complete = max;
	for (;;) {
		drain_cqes(r, &woken);
		ret = ring_fill(r);  /* resubmissions, queued reads, wake */
		if (got < max)
			got += take_done(r, done + got, max - got);
		if (ret < 0 || got >= min_complete || woken)
			break;
		ret = ring_enter(r, 1);
		if (ret < 0)
			break;
	}
	/* Resubmissions and the re-armed wake must reach the kernel. */
	if (ret == 0 && io_uring_sq_ready(&r->uring))
		ret = ring_enter(r, 0);
	return got ? (int)got : ret;
}
