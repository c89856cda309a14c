/*
 * reap.c - completions: short reads resubmitted, -EAGAIN/-EINTR retried,
 * EOF and errors settled per constituent read, reads handed back.
 */
#include <errno.h>

#include "ring_private.h"

/*
 * Settle every read of @op from what is known read (op->done): a read
 * covered completely succeeds whatever happened later in the run; else
 * @err when negative, else (end of file) the bytes it got when they reach
 * its min_length, -ENODATA when not.
 */
void ring_op_finish(struct io_ring *r, struct ring_op *op, int err)
{
	for (unsigned k = 0; k < op->nreads; k++) {
		struct io_read *rd = op->reads[k];
		uint64_t rel = rd->offset - op->offset;
		uint64_t got = op->done > rel ? op->done - rel : 0;

		if (got > rd->length)
			got = rd->length;
		if (got == rd->length)
			rd->result = (int64_t)got;
		else if (err < 0)
			rd->result = err;
		else
			rd->result = got >= rd->min_length ? (int64_t)got
							   : -ENODATA;
		rd->done = got;
		rd->attempts = op->attempts;
	}
	ring_queue_push(&r->done, op);
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
		r->in_kernel--;
		r->busy[((struct ring_op *)(uintptr_t)tag)->file]--;
		op_completed(r, (struct ring_op *)(uintptr_t)tag, res);
	}
}

static unsigned take_done(struct io_ring *r, struct io_read **out,
			  unsigned max)
{
	unsigned got = 0;

	while (got < max && r->done.head) {
		struct ring_op *op = r->done.head;

		while (got < max && op->taken < op->nreads)
			out[got++] = op->reads[op->taken++];
		if (op->taken == op->nreads) {
			ring_queue_pop(&r->done);
			ring_op_put(r, op);
		}
	}
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
