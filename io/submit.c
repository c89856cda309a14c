/*
 * submit.c - io_ring_submit: check a batch, coalesce reads that are
 * adjacent on disk and in memory into runs, cut each run into ops (see
 * ring_private.h), queue them and submit with one io_uring_enter.
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

/* May @b continue the run [@first, @last] of @len bytes in one SQE? */
static bool joins(const struct io_ring *r, const struct io_read *first,
		  const struct io_read *last, uint64_t len,
		  const struct io_read *b)
{
	return b->file == first->file && b->length > 0 &&
	       last->offset + last->length == b->offset &&
	       (uintptr_t)last->buf + last->length == (uintptr_t)b->buf &&
	       len <= RING_SQE_MAX - b->length &&
	       ring_buffer_index(r, b->buf, b->length) ==
		       ring_buffer_index(r, first->buf, first->length);
}

/* The end of the run that starts at scratch[@i]: one past its last read;
 * its bytes in *@len. */
static unsigned run_end(const struct io_ring *r, unsigned i, unsigned n,
			uint64_t *len)
{
	const struct io_read *first = r->scratch[i], *last = first;

	*len = first->length;
	if (first->length == 0)
		return i + 1;
	while (++i < n && joins(r, first, last, *len, r->scratch[i])) {
		last = r->scratch[i];
		*len += last->length;
	}
	return i;
}

/* Ops for the run scratch[@i, @j) of @len bytes, onto @batch: one, or
 * pieces of IO_PIECE_BYTES when the file is buffered.  Each read
 * counts the ops that cover it (ops_left). */
static int emit_run(struct io_ring *r, unsigned i, unsigned j, uint64_t len,
		    struct ring_queue *batch)
{
	const struct io_read *first = r->scratch[i];
	uint64_t piece = r->file_direct[first->file] ? len : IO_PIECE_BYTES;
	int buf_index = len ? ring_buffer_index(r, first->buf, len) : -1;
	uint64_t pos = 0;

	do {
		struct ring_op *op = op_get(r);
		uint64_t n = len - pos < piece ? len - pos : piece;

		if (!op)
			return -ENOMEM;
		ring_queue_push(batch, op);
		op->file = first->file;
		op->offset = first->offset + pos;
		op->length = n;
		op->buf = (char *)first->buf + pos;
		op->buf_index = buf_index;
		/* Reads are in offset order: skip those that end before
		 * this piece, take those that start inside it. */
		while (i < j && len &&
		       r->scratch[i]->offset + r->scratch[i]->length <=
			       op->offset)
			i++;
		for (unsigned k = i; k < j; k++) {
			struct io_read *rd = r->scratch[k];

			if (len && rd->offset >= op->offset + n)
				break;
			if (op_add(op, rd) < 0)
				return -ENOMEM;
			if (rd->ops_left++ == 0)
				rd->piece_origin = op->offset;
		}
		pos += n;
	} while (pos < len);
	return 0;
}

/* Ops for the sorted reads in r->scratch, onto @batch. */
static int build_ops(struct io_ring *r, unsigned n, struct ring_queue *batch)
{
	unsigned i = 0;

	while (i < n) {
		uint64_t len;
		unsigned j = run_end(r, i, n, &len);
		int ret = emit_run(r, i, j, len, batch);

		if (ret < 0)
			return ret;
		i = j;
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

	for (unsigned i = 0; i < n; i++) {
		struct io_read *rd = reads[i];

		rd->result = 0;
		rd->done = 0;
		rd->attempts = 0;
		rd->ops_left = 0;
		rd->err = 0;
		rd->short_at = rd->length;
		rd->piece_next = 0;
		rd->pieces_early = 0;
		atomic_store_explicit(&rd->landed, 0, memory_order_relaxed);
		rd->done_next = NULL;
	}
	ret = build_ops(r, n, &batch);
	if (ret < 0) {
		/* Nothing taken: the reads stay the caller's. */
		while ((op = ring_queue_pop(&batch)))
			ring_op_put(r, op);
		return ret;
	}
	while ((op = ring_queue_pop(&batch))) {
		if (op->length == 0)
			ring_op_finish(r, op, 0);
		else
			ring_queue_push(&r->pending, op);
	}
	r->in_flight += n;
	ret = ring_fill(r);
	return ret < 0 ? ret : ring_enter(r, 0);
}
