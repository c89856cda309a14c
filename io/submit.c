/*
 * submit.c - io_ring_submit: check a batch, coalesce reads that are
 * adjacent on disk and in memory into one op, queue the ops and submit
 * them with one io_uring_enter.
 */
#include <errno.h>
#include <stdlib.h>

#include "ring_private.h"

static struct ring_op *op_get(struct io_ring *r)
{
	struct ring_op *op = r->free_ops;

	if (op) {
		r->free_ops = op->next;
	} else {
		op = calloc(1, sizeof(*op));
		if (!op)
			return NULL;
		op->all_next = r->all_ops;
		r->all_ops = op;
	}
	op->next = NULL;
	op->nreads = 0;
	op->taken = 0;
	op->done = 0;
	op->attempts = 0;
	return op;
}

void ring_op_put(struct io_ring *r, struct ring_op *op)
{
	op->next = r->free_ops;
	r->free_ops = op;
}

static int op_add(struct ring_op *op, struct io_read *rd)
{
	if (op->nreads == op->cap) {
		unsigned cap = op->cap ? op->cap * 2 : 8;
		struct io_read **v = realloc(op->reads, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		op->reads = v;
		op->cap = cap;
	}
	op->reads[op->nreads++] = rd;
	return 0;
}

static int check_read(const struct io_ring *r, const struct io_read *rd)
{
	uint64_t a = r->info.alignment;

	if (!rd || rd->file >= r->nfiles || rd->min_length > rd->length ||
	    (rd->length && !rd->buf))
		return -EINVAL;
	/* The kernel takes a signed 64-bit offset. */
	if (rd->offset > INT64_MAX || rd->length > INT64_MAX - rd->offset ||
	    rd->length > UINTPTR_MAX - (uintptr_t)rd->buf)
		return -EINVAL;
	if (r->file_direct[rd->file] &&
	    (rd->offset % a || rd->length % a || (uintptr_t)rd->buf % a))
		return -EINVAL;
	return 0;
}

static int by_file_offset(const void *pa, const void *pb)
{
	const struct io_read *a = *(struct io_read *const *)pa;
	const struct io_read *b = *(struct io_read *const *)pb;

	if (a->file != b->file)
		return a->file < b->file ? -1 : 1;
	if (a->offset != b->offset)
		return a->offset < b->offset ? -1 : 1;
	if (a->buf != b->buf)
		return (uintptr_t)a->buf < (uintptr_t)b->buf ? -1 : 1;
	return 0;
}

/* May @b continue @op, whose last read is @last, in one SQE? */
static bool joins(const struct io_ring *r, const struct ring_op *op,
		  const struct io_read *last, const struct io_read *b)
{
	return b->file == op->file && b->length > 0 &&
	       last->offset + last->length == b->offset &&
	       (uintptr_t)last->buf + last->length == (uintptr_t)b->buf &&
	       op->length <= RING_SQE_MAX - b->length &&
	       ring_buffer_index(r, b->buf, b->length) == op->buf_index;
}

/* Ops for the sorted reads in r->scratch, onto @batch. */
static int build_ops(struct io_ring *r, unsigned n, struct ring_queue *batch)
{
	unsigned i = 0;

	while (i < n) {
		struct ring_op *op = op_get(r);
		struct io_read *rd = r->scratch[i++];

		if (!op)
			return -ENOMEM;
		ring_queue_push(batch, op);
		op->file = rd->file;
		op->offset = rd->offset;
		op->length = rd->length;
		op->buf = rd->buf;
		op->buf_index = rd->length
			? ring_buffer_index(r, rd->buf, rd->length) : -1;
		if (op_add(op, rd) < 0)
			return -ENOMEM;
		if (rd->length == 0)
			continue;
		while (i < n && joins(r, op, rd, r->scratch[i])) {
			rd = r->scratch[i++];
			if (op_add(op, rd) < 0)
				return -ENOMEM;
			op->length += rd->length;
		}
	}
	return 0;
}

int io_ring_submit(struct io_ring *r, struct io_read *const *reads,
		   unsigned n)
{
	struct ring_queue batch = { NULL, NULL };
	struct ring_op *op;
	int ret;

	if (!r || (n && !reads))
		return -EINVAL;
	if (r->fatal)
		return r->fatal;
	if (n == 0)
		return 0;
	for (unsigned i = 0; i < n; i++)
		if (check_read(r, reads[i]) < 0)
			return -EINVAL;
	if (n > r->scratch_cap) {
		struct io_read **s = realloc(r->scratch, n * sizeof(*s));

		if (!s)
			return -ENOMEM;
		r->scratch = s;
		r->scratch_cap = n;
	}
	for (unsigned i = 0; i < n; i++)
		r->scratch[i] = reads[i];
	qsort(r->scratch, n, sizeof(*r->scratch), by_file_offset);

	ret = build_ops(r, n, &batch);
	if (ret < 0) {
		/* Nothing taken: the reads stay the caller's. */
		while ((op = ring_queue_pop(&batch)))
			ring_op_put(r, op);
		return ret;
	}
	while ((op = ring_queue_pop(&batch))) {
		for (unsigned k = 0; k < op->nreads; k++) {
			op->reads[k]->result = 0;
			op->reads[k]->done = 0;
			op->reads[k]->attempts = 0;
		}
		if (op->length == 0)
			ring_op_finish(r, op, 0);
		else
			ring_queue_push(&r->pending, op);
	}
	r->in_flight += n;
	ret = ring_fill(r);
	return ret < 0 ? ret : ring_enter(r, 0);
}
