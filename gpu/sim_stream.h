/*
 * sim_stream.h - private to gpu/: the simulated device's streams and
 * events (sim_stream.c), which sim_device.c queues its work on.
 * Functions named *_locked want sim_lock() held.
 */
#ifndef SLUICE_GPU_SIM_STREAM_H
#define SLUICE_GPU_SIM_STREAM_H

#include <stddef.h>
#include <stdint.h>

struct sim_stream;

struct sim_event {
	struct sim_stream *s;   /* NULL: never recorded, complete */
	uint64_t at;            /* complete once s->done >= at */
};

/* One contiguous piece an operation writes: from @src, zeros where
 * @zeros is set, or else poison when @src is NULL. */
struct sim_piece {
	uint8_t *dst;
	const uint8_t *src;
	size_t len;
	int zeros;
};

enum sim_op_kind { OP_COPY, OP_WAIT, OP_CALL };

struct sim_op {
	struct sim_op *next;
	enum sim_op_kind kind;
	struct sim_event ev;             /* OP_WAIT */
	void (*fn)(void *);              /* OP_CALL */
	void *arg;
	unsigned n;                      /* OP_COPY */
	struct sim_piece piece[];
};

void sim_lock(void);
void sim_unlock(void);

/* A stream with its own thread and delays (up to @delay_us, drawn from
 * @seed); NULL when out of memory or threads. */
struct sim_stream *sim_stream_open(uint64_t seed, unsigned delay_us);
/* Run what is queued, stop the thread (NULL ok). */
void sim_stream_close(struct sim_stream *s);
/* The stream a consumer's handle names, if in use. */
struct sim_stream *sim_stream_find_locked(int64_t h);

struct sim_op *sim_op_new(enum sim_op_kind kind, unsigned n);
void sim_enqueue_locked(struct sim_stream *s, struct sim_op *op);

/* An event at @s's latest queued operation. */
struct sim_event sim_record_locked(struct sim_stream *s);
int sim_event_done_locked(const struct sim_event *e);
/* Block the caller until @e completes (takes the lock). */
void sim_event_wait(const struct sim_event *e);
/* Queue on @waiter a wait for @e (nothing when complete). */
int sim_wait_event_locked(struct sim_stream *waiter, struct sim_event e);
/* Queue on @waiter a wait for every other stream in use but @skip. */
int sim_wait_all_locked(struct sim_stream *waiter,
			const struct sim_stream *skip);

#endif /* SLUICE_GPU_SIM_STREAM_H */
