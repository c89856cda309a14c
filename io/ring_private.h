/*
 * ring_private.h - the insides of struct io_ring, shared by the io/ sources only.
 *
 * Reads the caller hands in are coalesced into runs (adjacent on disk
 * and in memory), and each run is cut into ring_ops: the whole run when
 * the file is O_DIRECT, pieces of IO_PIECE_BYTES when it is buffered,
 * so that the page cache's copies run on several kernel workers at once
 * (IOSQE_ASYNC) instead of one after another in the submitting thread.
 * An op is read by one SQE at a time (short reads resubmitted) and lives
 * on exactly one of: the pending queue (waiting for an SQE), the kernel
 * (an SQE in flight), the free list.  A read spans one op or several
 * (ops_left); when its last op finishes it goes on the done queue, to be
 * handed back.
 */
#ifndef SLUICE_IO_RING_PRIVATE_H
#define SLUICE_IO_RING_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <liburing.h>

#include "ring.h"

/* Largest registered iovec, and largest SQE (its len field is 32 bits). */
#define RING_IOVEC_MAX ((size_t)1 << 30)
#define RING_SQE_MAX ((uint64_t)1 << 30)
/* SQEs in flight per read of the queue depth (its pieces), and at most
 * in all. */
#define RING_PIECES_PER_READ 8u
#define RING_SQES_MAX 4096u
/* Buffered SQEs at least this long go to the kernel's workers
 * (IOSQE_ASYNC); shorter ones are copied inline, cheaper than a hand-off. */
#define RING_ASYNC_MIN_BYTES ((uint64_t)128 << 10)
/* -EAGAIN / -EINTR retries of one op before it fails. */
#define RING_RETRY_MAX 100
/* user_data of the eventfd read that io_ring_wake() completes, and of a
 * read's delay (read_delay_us), which posts a completion only when it
 * fails; ops are pointers and never this small. */
#define RING_WAKE_TAG ((uint64_t)1)
#define RING_DELAY_TAG ((uint64_t)2)

struct ring_op {
	struct ring_op *next;      /* in the queue or list it is on */
	struct ring_op *all_next;  /* every op ever made, for destroy */
	struct io_read **reads;    /* reads it covers (a part of each, or
				      all), by ascending offset */
	unsigned nreads, cap;
	uint32_t file;
	int buf_index;             /* registered iovec, -1: plain read */
	uint64_t offset, length;   /* the whole run */
	char *buf;
	uint64_t done;             /* bytes at the front known read */
	uint64_t sqe_start;        /* the SQE in flight: from here ... */
	uint64_t sqe_len;          /* ... this many bytes */
	unsigned attempts;         /* -EAGAIN / -EINTR retries so far */
};

struct ring_queue {
	struct ring_op *head, *tail;
};

struct io_ring {
	struct io_uring uring;
	bool uring_ok;
	int fatal;                 /* -errno: the ring itself failed */

	int *fds;                  /* per file; -1 when not open */
	bool *file_direct;         /* opened with O_DIRECT */
	uint32_t nfiles;

	/* file_set.c: at most max_open files open, in table slots */
	uint32_t max_open;         /* nfiles when every file stays open */
	char **paths;              /* owned copies, for reopening (or NULL) */
	int32_t *slot_of;          /* per file: its slot, -1 when closed */
	uint32_t *file_of;         /* per slot: its file */
	uint32_t *busy;            /* per file: SQEs prepared, not completed */
	uint8_t *referenced;       /* per slot: CLOCK's second-chance bit */
	uint32_t hand;
	uint64_t reopens;          /* files opened on demand (tests look) */

	char *arena;               /* registered buffers, when fixed */
	size_t arena_len;
	size_t iovec_len;          /* each registered iovec but the last */
	unsigned niovecs;

	struct io_ring_info info;

	unsigned max_in_kernel;    /* SQEs in flight at most: queue_depth x
				      RING_PIECES_PER_READ, as granted */
	struct __kernel_timespec read_delay; /* zero: reads not delayed */
	void (*on_landed)(void *ctx, struct io_read *rd);
	void *on_landed_ctx;
	unsigned in_kernel;        /* data SQEs prepared and not completed */
	unsigned in_flight;        /* reads held (io_ring_in_flight) */
	struct ring_queue pending;
	struct io_read *done_head, *done_tail; /* settled, to hand back */
	struct ring_op *free_ops, *all_ops;

	struct io_read **scratch;  /* io_ring_submit's sorted view */
	unsigned scratch_cap;

	int wake_fd;               /* eventfd written by io_ring_wake */
	bool wake_armed;           /* its READ SQE is in the ring */
	uint64_t wake_value;       /* where that READ lands */

	uint64_t sqes;             /* data SQEs prepared (tests look) */
};

/* ring.c */
void ring_note(struct io_ring *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
const char *ring_errname(int err, char *buf, size_t len);
void ring_queue_push(struct ring_queue *q, struct ring_op *op);
void ring_queue_push_front(struct ring_queue *q, struct ring_op *op);
struct ring_op *ring_queue_pop(struct ring_queue *q);
int ring_fill(struct io_ring *r);
int ring_enter(struct io_ring *r, unsigned wait_nr);

/* files.c: open with O_DIRECT where allowed; register.
 * ring_open_regular: open(@path, @flags) that never blocks on a FIFO:
 * a descriptor, -errno, -EISDIR, or -SLUICE_EFORMAT for a file that is
 * not regular (a FIFO, socket or device). */
int ring_open_regular(const char *path, int flags);
int ring_open_files(struct io_ring *r, const char *const *paths,
		    uint32_t nfiles, int direct, char *err, size_t errlen);
void ring_register_files(struct io_ring *r);
void ring_close_files(struct io_ring *r);

/* file_set.c: files [0, @max_open) are open in slots [0, @max_open). */
int ring_file_set_init(struct io_ring *r, uint32_t max_open);
void ring_file_set_free(struct io_ring *r);
/* The descriptor (or fixed-table slot) for a read of @file, opening it in
 * place of an idle file when it is closed.  -EBUSY: every open file has
 * reads in the kernel (wait for one); -errno: it cannot be opened. */
int ring_file_handle(struct io_ring *r, uint32_t file);

/* nofile.c: raise RLIMIT_NOFILE's soft limit (toward the hard one) so
 * that @nfiles more descriptors fit.  @return: how many of them may be
 * open at once (@nfiles, or fewer when the hard limit is lower), or
 * -EMFILE with both limits in @err when not even a few fit.
 * ring_nofile_hint: " (RLIMIT_NOFILE soft S, hard H)" for messages. */
int64_t ring_reserve_fds(struct io_ring *r, uint32_t nfiles, char *err,
			 size_t errlen);
const char *ring_nofile_hint(char *buf, size_t len);

/* residency.c: pages of @fd in the page cache (cachestat, else mincore). */
int file_cached_pages(int fd, uint64_t *cached, uint64_t *total);

/* buffers.c: the arena as registered iovecs. */
void ring_register_buffers(struct io_ring *r, void *arena, size_t len);
int ring_buffer_index(const struct io_ring *r, const void *buf,
		      uint64_t len);

/* submit.c */
void ring_op_put(struct io_ring *r, struct ring_op *op);

/* reap.c */
void ring_op_finish(struct io_ring *r, struct ring_op *op, int err);

/* fault.c: SLUICE_TESTING only. */
#ifdef SLUICE_TESTING
void ring_fault_apply(uint32_t file, uint64_t offset, uint64_t length,
		      int *res);
size_t ring_test_iovec_max(void);
int ring_test_no_cachestat(void);
uint32_t ring_test_dio_alignment(void);
#endif

#endif /* SLUICE_IO_RING_PRIVATE_H */
