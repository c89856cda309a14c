/*
 * trace.c - a Chrome trace (chrome://tracing, Perfetto) of a bench run:
 * {"traceEvents": [...], "displayTimeUnit": "ms"} with "X" complete events
 * (ts and dur in microseconds from the start of the run), "C" counters,
 * and "M" thread_name metadata.  pid 1; one tid per track, and for
 * pipeline stages one tid per (stage, calling thread) so spans of
 * parallel workers never overlap on one lane.
 *
 * Events are kept in memory (bounded; what does not fit is counted and
 * reported in the file) and written once at the end, so tracing costs
 * the traced threads a lock and a copy, not a write.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sluice_cli.h"

#define TRACE_MAX_EVENTS (1u << 20)
#define TRACE_MAX_LANES 256
#define COUNTER_MAX_KEYS 4
#define TID_CONSUMER 1
#define TID_STAGE_BASE 100   /* stage s, lane k: 100 * (s + 1) + k */

static const char *const track_names[TRACK_COUNT] = {
	"read", "decode", "assemble", "copy", "consumer",
};

enum ev_kind { EV_SPAN, EV_COUNTER };

struct event {
	int kind;
	int tid;
	const char *name;        /* static text */
	uint64_t start_ns, end_ns, bytes;
	int nvalues;
	const char *keys[COUNTER_MAX_KEYS];
	double values[COUNTER_MAX_KEYS];
};

struct lane {
	pid_t os_tid;
	int stage;
	int tid;
};

struct trace {
	pthread_mutex_t mu;
	FILE *f;
	uint64_t t0;
	struct event *ev;
	uint64_t n, cap, dropped;
	struct lane lanes[TRACE_MAX_LANES];
	int nlanes;
	int lanes_per_stage[TRACK_COUNT];
};

int trace_open(const char *path, uint64_t t0_ns, struct trace **out)
{
	struct trace *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->f = fopen(path, "w");
	if (!t->f) {
		int e = errno;

		free(t);
		return -e;
	}
	pthread_mutex_init(&t->mu, NULL);
	t->t0 = t0_ns;
	*out = t;
	return 0;
}

/* A slot for one more event, or NULL (counted) when full.  Under mu. */
static struct event *push_locked(struct trace *t)
{
	if (t->n == t->cap) {
		uint64_t cap = t->cap ? 2 * t->cap : 4096;
		struct event *ev;

		if (cap > TRACE_MAX_EVENTS)
			cap = TRACE_MAX_EVENTS;
		ev = cap > t->cap ? realloc(t->ev, cap * sizeof(*ev)) : NULL;
		if (!ev) {
			t->dropped++;
			return NULL;
		}
		t->ev = ev;
		t->cap = cap;
	}
	return &t->ev[t->n++];
}

static void span_locked(struct trace *t, int tid, const char *name,
			uint64_t start_ns, uint64_t end_ns, uint64_t bytes)
{
	struct event *e = push_locked(t);

	if (!e)
		return;
	memset(e, 0, sizeof(*e));
	e->kind = EV_SPAN;
	e->tid = tid;
	e->name = name;
	e->start_ns = start_ns;
	e->end_ns = end_ns < start_ns ? start_ns : end_ns;
	e->bytes = bytes;
}

void trace_span(struct trace *t, int track, const char *name,
		uint64_t start_ns, uint64_t end_ns, uint64_t bytes)
{
	int tid;

	if (!t || track < 0 || track >= TRACK_COUNT)
		return;
	tid = track == TRACK_CONSUMER ? TID_CONSUMER
				      : TID_STAGE_BASE * (track + 1);
	pthread_mutex_lock(&t->mu);
	span_locked(t, tid, name, start_ns, end_ns, bytes);
	pthread_mutex_unlock(&t->mu);
}

void trace_counter(struct trace *t, const char *name, uint64_t ts_ns,
		   const char *const *keys, const double *values, int n)
{
	struct event *e;

	if (!t || n <= 0)
		return;
	if (n > COUNTER_MAX_KEYS)
		n = COUNTER_MAX_KEYS;
	pthread_mutex_lock(&t->mu);
	e = push_locked(t);
	if (e) {
		memset(e, 0, sizeof(*e));
		e->kind = EV_COUNTER;
		e->tid = TID_CONSUMER;
		e->name = name;
		e->start_ns = ts_ns;
		e->nvalues = n;
		for (int i = 0; i < n; i++) {
			e->keys[i] = keys[i];
			e->values[i] = values[i];
		}
	}
	pthread_mutex_unlock(&t->mu);
}

/* The lane of the calling thread within @stage, made on first use. */
static int lane_tid_locked(struct trace *t, int stage)
{
	pid_t me = (pid_t)syscall(SYS_gettid);

	for (int i = 0; i < t->nlanes; i++)
		if (t->lanes[i].os_tid == me && t->lanes[i].stage == stage)
			return t->lanes[i].tid;
	if (t->nlanes == TRACE_MAX_LANES ||
	    t->lanes_per_stage[stage] >= TID_STAGE_BASE - 1)
		return TID_STAGE_BASE * (stage + 1);  /* shared lane */
	t->lanes[t->nlanes] = (struct lane){
		.os_tid = me,
		.stage = stage,
		.tid = TID_STAGE_BASE * (stage + 1) +
		       ++t->lanes_per_stage[stage],
	};
	return t->lanes[t->nlanes++].tid;
}

void trace_on_span(void *ctx, enum sluice_stage stage, uint64_t start_ns,
		   uint64_t end_ns, uint64_t bytes)
{
	struct trace *t = ctx;

	if (!t || (int)stage < 0 || (int)stage >= TRACK_CONSUMER)
		return;
	pthread_mutex_lock(&t->mu);
	span_locked(t, lane_tid_locked(t, stage), track_names[stage],
		    start_ns, end_ns, bytes);
	pthread_mutex_unlock(&t->mu);
}

uint64_t trace_events(const struct trace *t)
{
	return t ? t->n : 0;
}

static double rel_us(const struct trace *t, uint64_t ns)
{
	return ns >= t->t0 ? (double)(ns - t->t0) / 1e3
			   : -(double)(t->t0 - ns) / 1e3;
}

static void write_thread_name(FILE *f, int tid, const char *name, int lane,
			      int sort)
{
	fprintf(f,
		",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s",
		tid, name);
	if (lane > 0)
		fprintf(f, " #%d", lane);
	fprintf(f, "\"}}");
	fprintf(f,
		",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
		tid, sort);
}

static void write_event(FILE *f, const struct trace *t, const struct event *e)
{
	if (e->kind == EV_SPAN) {
		fprintf(f,
			",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f",
			e->tid, e->name, rel_us(t, e->start_ns),
			(double)(e->end_ns - e->start_ns) / 1e3);
		if (e->bytes)
			fprintf(f, ",\"args\":{\"bytes\":%llu}",
				(unsigned long long)e->bytes);
		fputc('}', f);
		return;
	}
	fprintf(f,
		",\n{\"ph\":\"C\",\"pid\":1,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"args\":{",
		e->tid, e->name, rel_us(t, e->start_ns));
	for (int i = 0; i < e->nvalues; i++)
		fprintf(f, "%s\"%s\":%.6g", i ? "," : "", e->keys[i],
			e->values[i]);
	fputs("}}", f);
}

int trace_close(struct trace *t)
{
	FILE *f;
	int r = 0;

	if (!t)
		return 0;
	f = t->f;
	fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
	fputs("{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"sluice\"}}",
	      f);
	write_thread_name(f, TID_CONSUMER, "consumer", 0, 0);
	for (int s = 0; s < TRACK_CONSUMER; s++)
		write_thread_name(f, TID_STAGE_BASE * (s + 1), track_names[s],
				  0, TID_STAGE_BASE * (s + 1));
	for (int i = 0; i < t->nlanes; i++) {
		const struct lane *l = &t->lanes[i];

		write_thread_name(f, l->tid, track_names[l->stage],
				  l->tid % TID_STAGE_BASE, l->tid);
	}
	for (uint64_t i = 0; i < t->n; i++)
		write_event(f, t, &t->ev[i]);
	fprintf(f, "\n],\"otherData\":{\"dropped_events\":%llu}}\n",
		(unsigned long long)t->dropped);
	if (ferror(f))
		r = -EIO;
	if (fclose(f) && !r)
		r = -errno;
	pthread_mutex_destroy(&t->mu);
	free(t->ev);
	free(t);
	return r;
}
