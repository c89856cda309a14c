/*
 * ring.c - the io_ring's life: setup with its fallbacks, feeding queued
 * ops into the SQ, waking, teardown.  Submission is in submit.c,
 * completions in reap.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ring_private.h"
#include "ring_test.h"

/* Milliseconds of idleness before the SQPOLL thread sleeps. */
#define SQPOLL_IDLE_MS 100

const char *ring_errname(int err, char *buf, size_t len)
{
	const char *name = err < 0 ? strerrorname_np(-err) : NULL;

	if (name)
		snprintf(buf, len, "-%s", name);
	else
		snprintf(buf, len, "error %d", err);
	return buf;
}

/* Append a fallback reason, "; "-separated, truncated to fit. */
void ring_note(struct io_ring *r, const char *fmt, ...)
{
	char *f = r->info.fallbacks;
	size_t cap = sizeof(r->info.fallbacks), used = strlen(f);
	va_list ap;

	if (used && used + 2 < cap) {
		memcpy(f + used, "; ", 3);
		used += 2;
	}
	if (used + 1 >= cap)
		return;
	va_start(ap, fmt);
	vsnprintf(f + used, cap - used, fmt, ap);
	va_end(ap);
}

void ring_queue_push(struct ring_queue *q, struct ring_op *op)
{
	op->next = NULL;
	if (q->tail)
		q->tail->next = op;
	else
		q->head = op;
	q->tail = op;
}

void ring_queue_push_front(struct ring_queue *q, struct ring_op *op)
{
	op->next = q->head;
	q->head = op;
	if (!q->tail)
		q->tail = op;
}

struct ring_op *ring_queue_pop(struct ring_queue *q)
{
	struct ring_op *op = q->head;

	if (op) {
		q->head = op->next;
		if (!q->head)
			q->tail = NULL;
		op->next = NULL;
	}
	return op;
}

static bool transient(int ret)
{
	return ret == -EINTR || ret == -EAGAIN || ret == -EBUSY ||
	       ret == -ETIME;
}

/*
 * io_uring_enter: submit what is in the SQ and wait for @wait_nr CQEs.
 * Transient refusals (-EAGAIN, -EBUSY: the kernel is short of memory or
 * the CQ is full) leave the SQEs queued for the next call.
 */
int ring_enter(struct io_ring *r, unsigned wait_nr)
{
	int ret = wait_nr ? io_uring_submit_and_wait(&r->uring, wait_nr)
			  : io_uring_submit(&r->uring);

	if (ret < 0 && !transient(ret)) {
		r->fatal = ret;
		return ret;
	}
	return 0;
}

static struct io_uring_sqe *get_sqe(struct io_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);

	/* SQ full: the only reason for a second enter in one batch. */
	if (!sqe && ring_enter(r, 0) == 0)
		sqe = io_uring_get_sqe(&r->uring);
	return sqe;
}

static bool arm_wake(struct io_ring *r)
{
	struct io_uring_sqe *sqe;

	if (r->wake_armed)
		return true;
	sqe = get_sqe(r);
	if (!sqe)
		return false;
	io_uring_prep_read(sqe, r->wake_fd, &r->wake_value,
			   sizeof(r->wake_value), 0);
	io_uring_sqe_set_data64(sqe, RING_WAKE_TAG);
	r->wake_armed = true;
	return true;
}

static uint64_t align_down(uint64_t x, uint64_t a)
{
	return x - x % a;
}

/*
 * A slow device (read_delay_us): a timeout linked before the read, so
 * the read starts when it expires.  Its expiry counts as success and
 * posts no completion; only a failed one does (RING_DELAY_TAG, ignored:
 * the read after it then fails too, and says why).  Both SQEs go in one
 * submission, or the link would be cut.
 */
static bool prep_delay(struct io_ring *r)
{
	struct io_uring_sqe *sqe;

	if (io_uring_sq_space_left(&r->uring) < 2 && ring_enter(r, 0) < 0)
		return false;
	if (io_uring_sq_space_left(&r->uring) < 2)
		return false;   /* SQPOLL has not taken them yet: later */
	sqe = io_uring_get_sqe(&r->uring);
	io_uring_prep_timeout(sqe, &r->read_delay, 0,
			      IORING_TIMEOUT_ETIME_SUCCESS);
	io_uring_sqe_set_flags(sqe, IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS);
	io_uring_sqe_set_data64(sqe, RING_DELAY_TAG);
	return true;
}

/* One SQE for what @op still has to read; @fd: ring_file_handle's. */
static bool prep_op(struct io_ring *r, struct ring_op *op, int fd)
{
	struct io_uring_sqe *sqe;
	uint64_t start = op->done, len;
	unsigned flags;

	if ((r->read_delay.tv_sec || r->read_delay.tv_nsec) && !prep_delay(r))
		return false;
	sqe = get_sqe(r);
	if (!sqe)
		return false;
	/* O_DIRECT needs an aligned restart: re-read the partial sector
	 * (op->offset and op->buf are aligned, so start is enough). */
	if (r->file_direct[op->file])
		start = align_down(start, r->info.alignment);
	len = op->length - start;
	if (len > RING_SQE_MAX)
		len = RING_SQE_MAX;
	if (op->buf_index >= 0)
		io_uring_prep_read_fixed(sqe, fd, op->buf + start,
					 (unsigned)len, op->offset + start,
					 op->buf_index);
	else
		io_uring_prep_read(sqe, fd, op->buf + start, (unsigned)len,
				   op->offset + start);
	flags = r->info.fixed_files ? IOSQE_FIXED_FILE : 0;
	/* A buffered read would be copied inline, in this thread, one
	 * after another: hand the long ones to the kernel's workers. */
	if (!r->file_direct[op->file] && len >= RING_ASYNC_MIN_BYTES)
		flags |= IOSQE_ASYNC;
	io_uring_sqe_set_flags(sqe, flags);
	io_uring_sqe_set_data(sqe, op);
	op->sqe_start = start;
	op->sqe_len = len;
	r->sqes++;
	return true;
}

/* Move pending ops into the SQ while the depth allows; keep wake armed. */
int ring_fill(struct io_ring *r)
{
	if (r->fatal)
		return r->fatal;
	arm_wake(r);
	while (r->pending.head && r->in_kernel < r->max_in_kernel) {
		struct ring_op *op = r->pending.head;
		int fd = ring_file_handle(r, op->file);

		if (fd == -EBUSY)
			break;  /* every open file is being read: wait */
		if (fd < 0) {
			ring_queue_pop(&r->pending);
			ring_op_finish(r, op, fd);
			continue;
		}
		if (!prep_op(r, op, fd))
			break;
		ring_queue_pop(&r->pending);
		r->in_kernel++;
		r->busy[op->file]++;
	}
	return r->fatal;
}

static int setup_uring(struct io_ring *r, const struct io_ring_config *cfg)
{
	struct io_uring_params p;
	char eb[64];
	int ret = -EINVAL;
	/* queue_depth counts reads; a buffered one is cut into pieces, and
	 * each piece needs an SQE of its own in flight, or pieces would
	 * take the depth: 64 x 2 MiB held 128 MiB in flight, whatever the
	 * budget (1.3 GB/s at 100 ms of latency, sluice bench
	 * --read-delay-us; bench/results/2026-11-26-data-path.md). */
	unsigned sqes = cfg->queue_depth > RING_SQES_MAX / RING_PIECES_PER_READ
		? RING_SQES_MAX : cfg->queue_depth * RING_PIECES_PER_READ;

	if (cfg->sqpoll) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_CLAMP | IORING_SETUP_SQPOLL;
		p.sq_thread_idle = SQPOLL_IDLE_MS;
		ret = io_uring_queue_init_params(sqes, &r->uring, &p);
		if (ret == 0)
			r->info.sqpoll = 1;
		else
			ring_note(r, "SQPOLL refused (%s): interrupt-driven "
				     "submission", ring_errname(ret, eb,
								sizeof(eb)));
	}
	if (ret < 0) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_CLAMP;
		ret = io_uring_queue_init_params(sqes, &r->uring, &p);
	}
	if (ret < 0)
		return ret;
	r->uring_ok = true;
	r->max_in_kernel = sqes < p.sq_entries ? sqes : p.sq_entries;
	r->on_landed = cfg->on_landed;
	r->on_landed_ctx = cfg->on_landed_ctx;
	r->read_delay.tv_sec = cfg->read_delay_us / 1000000;
	r->read_delay.tv_nsec = (long long)(cfg->read_delay_us % 1000000) *
				1000;
	return 0;
}


int io_ring_create(struct io_ring **out, const char *const *paths,
		   uint32_t nfiles, void *arena, size_t arena_len,
		   const struct io_ring_config *cfg, char *err, size_t errlen)
{
	struct io_ring *r;
	char eb[64];
	int ret;

	if (err && errlen)
		err[0] = '\0';
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg || cfg->queue_depth == 0 || cfg->direct < -1 ||
	    cfg->direct > 1 || (nfiles && !paths) || (!arena && arena_len)) {
		if (err && errlen)
			snprintf(err, errlen, "io_ring: invalid arguments");
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->wake_fd = -1;
	ret = ring_open_files(r, paths, nfiles, cfg->direct, err, errlen);
	if (ret < 0)
		goto fail;
	ret = setup_uring(r, cfg);
	if (ret < 0) {
		if (err && errlen)
			snprintf(err, errlen, "io_uring setup failed: %s%s",
				 ring_errname(ret, eb, sizeof(eb)),
				 ret == -ENOSYS || ret == -EPERM
					 ? " (io_uring unavailable or disabled)"
					 : "");
		if (ret == -EPERM)
			ret = -ENOSYS;
		goto fail;
	}
	ring_register_files(r);
	if (cfg->plain_reads)
		ring_note(r, "buffer registration off (asked): plain reads");
	else
		ring_register_buffers(r, arena, arena_len);
	r->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (r->wake_fd < 0) {
		ret = -errno;
		if (err && errlen)
			snprintf(err, errlen, "eventfd: %s",
				 ring_errname(ret, eb, sizeof(eb)));
		goto fail;
	}
	ret = ring_fill(r);
	if (ret == 0)
		ret = ring_enter(r, 0);
	if (ret < 0) {
		if (err && errlen)
			snprintf(err, errlen, "io_uring submit failed: %s",
				 ring_errname(ret, eb, sizeof(eb)));
		goto fail;
	}
	*out = r;
	return 0;
fail:
	io_ring_destroy(r);
	return ret;
}

/* Wait until the kernel holds nothing of ours: buffers are the caller's
 * again and wake_value ours to free. */
static void drain_kernel(struct io_ring *r)
{
	if (r->wake_armed)
		(void)eventfd_write(r->wake_fd, 1);
	while (r->in_kernel > 0 || r->wake_armed) {
		struct io_uring_cqe *cqe;
		int ret = io_uring_submit_and_wait(&r->uring, 1);

		if (ret < 0 && !transient(ret))
			break;
		while (io_uring_peek_cqe(&r->uring, &cqe) == 0) {
			if (cqe->user_data == RING_WAKE_TAG)
				r->wake_armed = false;
			else if (cqe->user_data != RING_DELAY_TAG)
				r->in_kernel--;
			io_uring_cqe_seen(&r->uring, cqe);
		}
	}
}

void io_ring_destroy(struct io_ring *r)
{
	if (!r)
		return;
	if (r->uring_ok) {
		drain_kernel(r);
		if (r->info.fixed_buffers)
			io_uring_unregister_buffers(&r->uring);
		if (r->info.fixed_files)
			io_uring_unregister_files(&r->uring);
		io_uring_queue_exit(&r->uring);
	}
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	ring_close_files(r);
	while (r->all_ops) {
		struct ring_op *op = r->all_ops;

		r->all_ops = op->all_next;
		free(op->reads);
		free(op);
	}
	free(r->scratch);
	free(r);
}

void io_ring_get_info(const struct io_ring *r, struct io_ring_info *info)
{
	*info = r->info;
}

unsigned io_ring_in_flight(const struct io_ring *r)
{
	return r->in_flight;
}

void io_ring_wake(struct io_ring *r)
{
	/* Completes the armed READ on the eventfd; a counter that is
	 * already non-zero just stays so (wakes are not counted). */
	if (r && r->wake_fd >= 0)
		(void)eventfd_write(r->wake_fd, 1);
}

#ifdef SLUICE_TESTING
uint64_t io_ring_test_sqes(const struct io_ring *r)
{
	return r->sqes;
}

uint64_t io_ring_test_reopens(const struct io_ring *r)
{
	return r->reopens;
}
#endif
