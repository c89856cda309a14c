/*
 * run.c - the consumer loop shared by `sluice stream` and `sluice bench`:
 * open the loader, restore a saved state, take batches until the end of
 * the last epoch (or --stop-after-batches), save the state, and measure
 * what the consumer sees (next() waits, steps, CPU time, the counters).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sluice_cli.h"

#define PROGRESS_NS 200000000ull  /* redraw the TTY line at most 5x/s */

static double rusage_cpu_s(const struct rusage *ru)
{
	return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 +
	       (double)ru->ru_stime.tv_sec + ru->ru_stime.tv_usec / 1e6;
}

static int read_state(const char *path, struct sluice_state *st)
{
	char text[SLUICE_STATE_TEXT_MAX];
	char err[512];
	ssize_t n;
	int fd = file_open_regular(path, O_RDONLY, NULL, err, sizeof(err));

	if (fd < 0)
		return cli_error("%s", err);
	do
		n = read(fd, text, sizeof(text) - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		return cli_error("%s: %s", path, strerror(errno));
	text[n] = '\0';
	/* The file holds one line; the parser wants it without the newline. */
	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		text[--n] = '\0';
	if (sluice_state_parse(text, st))
		return cli_error("%s: not a sluice state line", path);
	return 0;
}

static int write_state(const char *path, const sluice_loader *ld)
{
	char text[SLUICE_STATE_TEXT_MAX];
	struct sluice_state st;
	FILE *f;
	int r;

	r = sluice_loader_state_get(ld, &st);
	if (!r)
		r = sluice_state_format(&st, text, sizeof(text));
	if (r < 0)
		return cli_error("cannot format the loader state: %s",
				 sluice_strerror(r));
	f = fopen(path, "w");
	if (!f)
		return cli_error("%s: %s", path, strerror(errno));
	fprintf(f, "%s\n", text);
	if (fclose(f))
		return cli_error("%s: %s", path, strerror(errno));
	return 0;
}

static void progress_line(const struct run_result *res, uint64_t epoch,
			  uint64_t epochs, const sluice_loader *ld,
			  uint64_t t0)
{
	struct sluice_stats st = { .size = sizeof(st) };
	double s = (double)(clock_ns() - t0) / 1e9;

	if (sluice_loader_stats(ld, &st) || s <= 0)
		return;
	fprintf(stderr,
		"\r\033[K" CLI_NAME ": epoch %llu/%llu  batch %llu  %.0f samples/s  %.3f GB/s read  wait %.0f%%",
		(unsigned long long)epoch + 1, (unsigned long long)epochs,
		(unsigned long long)res->batches, (double)st.records / s,
		(double)st.read.bytes / s / 1e9,
		100.0 * (double)st.consumer_wait_ns / 1e9 / s);
}

/* Counters derived from the public stats, once per batch: how many slots
 * were ready at this next(), and how many threads each stage kept busy
 * since the previous batch. */
static void trace_stats(struct trace *t, const sluice_loader *ld,
			struct sluice_stats *prev, uint64_t *prev_ns)
{
	static const char *const busy_keys[] = { "read", "decode",
						 "assemble", "copy" };
	static const char *const ready_key[] = { "ready" };
	struct sluice_stats st = { .size = sizeof(st) };
	uint64_t now = clock_ns();
	double dt = (double)(now - *prev_ns), busy[4], ready;

	if (sluice_loader_stats(ld, &st) || dt <= 0)
		return;
	busy[0] = (double)(st.read.busy_ns - prev->read.busy_ns) / dt;
	busy[1] = (double)(st.decode.busy_ns - prev->decode.busy_ns) / dt;
	busy[2] = (double)(st.assemble.busy_ns - prev->assemble.busy_ns) / dt;
	busy[3] = (double)(st.copy.busy_ns - prev->copy.busy_ns) / dt;
	ready = (double)(st.slot_occupancy_sum - prev->slot_occupancy_sum);
	trace_counter(t, "busy threads", now, busy_keys, busy, 4);
	trace_counter(t, "ready slots at next()", now, ready_key, &ready, 1);
	*prev = st;
	*prev_ns = now;
}

/*
 * The consumer's step on a GPU batch, as a training step sees it: every
 * tensor exported to the legacy default stream (PyTorch's default), which
 * orders the step after the batch's copy; the compute kernel on that
 * stream; then a wait for the stream, like a step ending in loss.item().
 * With no --compute-ms the wait alone: the consumer has the data when it
 * lets go of the batch.
 */
static int gpu_step(sluice_loader *ld, sluice_batch *b, double compute_ms)
{
	DLManagedTensor *t[2 * SLUICE_MAX_FIELDS];
	int n = sluice_batch_tensor_count(b), k, r = 0;

	if (n > (int)(sizeof(t) / sizeof(t[0])))
		n = (int)(sizeof(t) / sizeof(t[0]));
	for (k = 0; k < n; k++) {
		r = sluice_batch_tensor(b, sluice_batch_tensor_name(b, k), 0,
					&t[k]);
		if (r)
			break;
	}
	if (!r)
		r = sluice_loader_compute(ld, 0, compute_ms);
	for (int i = 0; i < k; i++)   /* the k exported */
		t[i]->deleter(t[i]);
	return r ? loader_error_exit(ld, r) : 0;
}

static int consume(sluice_loader *ld, const struct cli_opts *o,
		   struct trace *trace, run_batch_fn fn, void *ctx,
		   struct run_result *res, uint64_t t0)
{
	struct sluice_stats prev_stats;
	struct sluice_state st;
	uint64_t epoch, last_draw = 0, prev_ns = clock_ns();
	uint64_t compute_ns = (uint64_t)(o->compute_ms * 1e6);
	int on_gpu = sluice_loader_device(ld).device_type == kDLCUDA;
	int rc = 0;

	memset(&prev_stats, 0, sizeof(prev_stats));
	sluice_loader_state_get(ld, &st);
	epoch = res->first_epoch = st.epoch;
	while (epoch < o->epochs) {
		sluice_batch *b;
		uint64_t t_next = clock_ns(), t_got, t_done;
		int r = sluice_loader_next(ld, &b);

		t_got = clock_ns();
		if (r == SLUICE_EOF) {
			epoch++;
			continue;
		}
		if (r < 0)
			return loader_error_exit(ld, r);
		res->batches++;
		res->records += sluice_batch_size(b);
		if (fn)
			rc = fn(ctx, b);
		if (on_gpu && !rc)
			rc = gpu_step(ld, b, o->compute_ms);
		else if (compute_ns)
			busy_wait_ns(compute_ns);
		sluice_batch_release(b);
		t_done = clock_ns();
		if (trace) {
			trace_span(trace, TRACK_CONSUMER, "next", t_next, t_got,
				   0);
			trace_span(trace, TRACK_CONSUMER, "step", t_got, t_done,
				   0);
			trace_stats(trace, ld, &prev_stats, &prev_ns);
		}
		if (o->progress && t_done - last_draw >= PROGRESS_NS) {
			progress_line(res, epoch, o->epochs, ld, t0);
			last_draw = t_done;
		}
		if (rc)
			return rc;
		if (o->stop_after && res->batches >= o->stop_after) {
			res->stopped = 1;
			break;
		}
	}
	res->end_epoch = epoch;
	return 0;
}

/* The PCIe limit on the loader's own arena, after the run so that no
 * copy of the loader shares the link: copies of up to 256 MiB, 8 times
 * (about 2 GiB: tens of milliseconds at PCIe 4 or 5 speeds). */
#define H2D_PROBE_BYTES (256ull << 20)
#define H2D_PROBE_ITERS 8

static void measure_h2d(sluice_loader *ld, struct run_result *res)
{
	int r;

	res->h2d_bytes = H2D_PROBE_BYTES;
	r = sluice_loader_measure_h2d(ld, H2D_PROBE_BYTES, H2D_PROBE_ITERS,
				      &res->h2d_bps);
	if (r == -SLUICE_ENODEVICE)
		snprintf(res->h2d_note, sizeof(res->h2d_note),
			 "n/a (host device)");
	else if (r)
		sluice_loader_error(ld, res->h2d_note, sizeof(res->h2d_note));
}

/* Every fallback the loader took at open (no GPU under --device auto, no
 * O_DIRECT, unpinned memory, ...), said once on stderr, as Python's
 * RuntimeWarning and bench's report do: stdout may be --hash data. */
static void say_fallbacks(const sluice_loader *ld)
{
	struct sluice_stats st = { .size = sizeof(st) };

	if (sluice_loader_stats(ld, &st) == 0 && st.fallbacks[0])
		fprintf(stderr, CLI_NAME ": note: %s\n", st.fallbacks);
}

int run_loader(sluice_dataset *ds, const struct cli_opts *o,
	       struct trace *trace, run_batch_fn fn, void *ctx,
	       struct run_result *res)
{
	struct sluice_loader_config cfg = o->cfg;
	struct rusage ru0, ru1;
	sluice_loader *ld = NULL;
	uint64_t t0;
	int r, rc = 0;

	memset(res, 0, sizeof(*res));
	/* the run's last epoch reads nothing of the next */
	cfg.epochs = o->epochs;
	if (trace) {
		/* a span per read, decode, assembly part and copy */
		cfg.on_span = trace_on_span;
		cfg.on_span_ctx = trace;
	}
	t0 = clock_ns();
	if (o->nstreams)
		r = sluice_loader_open_streams(o->streams, o->nstreams, &cfg,
					       &ld);
	else
		r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		rc = loader_error_exit(ld, r);
		sluice_loader_close(ld);
		return rc;
	}
	/* Setup (allocating and pinning the arena, starting the device) is
	 * reported apart: the run is timed from the moment open returns,
	 * which is also when prefetching starts. */
	res->open_ns = clock_ns() - t0;
	getrusage(RUSAGE_SELF, &ru0);
	t0 = clock_ns();
	res->device = sluice_loader_device(ld);
	if (o->say_fallbacks)
		say_fallbacks(ld);
	res->batches_per_epoch = sluice_loader_batches(ld);
	if (o->state_in) {
		struct sluice_state st;

		rc = read_state(o->state_in, &st);
		if (!rc) {
			r = sluice_loader_state_set(ld, &st);
			if (r)
				rc = loader_error_exit(ld, r);
		}
		/* --epochs counts from epoch 0: a state at or past it
		 * would stream nothing and exit 0. */
		if (!rc && st.epoch >= o->epochs)
			rc = cli_error("%s: the state is at epoch %llu, and "
				       "--epochs %llu stops before it: nothing "
				       "to stream (raise --epochs)",
				       o->state_in,
				       (unsigned long long)st.epoch,
				       (unsigned long long)o->epochs);
	}
	if (!rc)
		rc = consume(ld, o, trace, fn, ctx, res, t0);
	res->wall_ns = clock_ns() - t0;
	getrusage(RUSAGE_SELF, &ru1);
	res->cpu_s = rusage_cpu_s(&ru1) - rusage_cpu_s(&ru0);
	res->stats.size = sizeof(res->stats);
	sluice_loader_stats(ld, &res->stats);
	res->skipped_blocks = sluice_loader_skipped(ld, res->skip_first,
						    sizeof(res->skip_first));
	if (!rc && o->measure_h2d)
		measure_h2d(ld, res);
	if (o->progress)
		fputs("\r\033[K", stderr);
	if (!rc && o->state_out)
		rc = write_state(o->state_out, ld);
	sluice_loader_close(ld);
	return rc;
}
