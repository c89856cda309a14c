/*
 * limits.c - what the machine allows on this dataset, measured without the
 * loader on the shards and blocks the loader reads (the library's block
 * table, sluice_tools.h):
 *   disk: every byte of every shard file read once with raw io_uring reads
 *         (1 MiB, from one thread and ring per online CPU, queue depth 8
 *         each, like fio's numjobs: page-cache reads are CPU copies, and
 *         one thread's copies were the loader's hidden ceiling; O_DIRECT
 *         when the loader read that way and the filesystem takes it,
 *         else buffered; files opened in turn, so that a dataset of more
 *         shards than RLIMIT_NOFILE allows is read too) - the ceiling for
 *         the loader's reads;
 *   cpu:  one thread doing what a decode worker does to a sample of the
 *         blocks (up to 64 MiB stored): XXH3 verify, ZSTD_decompressDCtx
 *         for zstd blocks, and the memcpy of the decoded bytes (the
 *         scatter into the batch slot), each timed on its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zstd.h>

#include "dlpack_shard.h"
#include "sluice_cli.h"
#include "sluice_xxh3.h"

#define DISK_BLOCK (1u << 20)
#define DISK_QD 8u              /* per thread */
/* Buffers: DISK_QD MiB per thread, so 256 MiB at most. */
#define DISK_THREADS_MAX 32u
#define DISK_ALIGN 4096u
#define CPU_SAMPLE_BYTES (64ull << 20)
#define CPU_MIN_SECONDS 0.2   /* repeat small samples for a stable time */
#define CPU_MAX_PASSES 1000
#define CPU_MAX_RAW (1ull << 30)
/* Threads that run the CPU probe at once, each with its own decode and
 * copy buffers: at most this many, and their buffers at most a quarter
 * of the RAM. */
#define CPU_THREADS_MAX 32u

void shards_summarize(const sluice_dataset *ds, struct shard_set *s)
{
	memset(s, 0, sizeof(*s));
	s->d = dataset_table(ds);
	s->records = s->d->record_count;
	s->blocks = s->d->block_count;
	s->max_stored = s->d->max_stored;
	s->max_raw = s->d->max_raw;
	for (uint32_t i = 0; i < s->d->nshards; i++) {
		const struct shard_file *sf = &s->d->shards[i];

		s->stored_bytes += sf->stored_bytes;
		s->raw_bytes += sf->raw_bytes;
		s->file_bytes += sf->file_size;
		for (uint64_t b = 0; b < sf->block_count; b++)
			s->zstd_blocks += sf->blocks[b].codec == DLS_CODEC_ZSTD;
	}
}

int drop_page_cache(void)
{
	int fd, r = 0;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "3\n", 2) != 2)
		r = -errno;
	close(fd);
	return r;
}

/* ------------------------------------------------------------------ */
/* Disk                                                                */
/* ------------------------------------------------------------------ */

struct disk_read {
	uint32_t file;
	uint64_t offset;
	uint32_t length;
	void *buf;
};

/* What the threads share, under mu: the next piece, the open files. */
struct disk_probe {
	pthread_mutex_t mu;
	int *fds;               /* -1: not open (yet, or any more) */
	uint32_t *inflight;     /* per file: its reads in the kernel */
	uint32_t nfiles;
	const struct shard_set *s;
	int want_direct;
	uint32_t next_file;
	uint64_t next_offset;
	uint64_t bytes;
	int error;              /* the first thread's error */
	struct disk_limit *out;
	char *err;
	size_t errlen;
};

/* One reading thread: its own ring and buffers. */
struct disk_worker {
	struct disk_probe *p;
	struct io_uring ring;
	struct disk_read rds[DISK_QD];
	pthread_t thread;
};

/* Open shard @i, with O_DIRECT when wanted, unless the file refuses it;
 * an error (the file's, not the refusal) goes to p->err.  Under mu. */
static int open_file(struct disk_probe *p, uint32_t i)
{
	const char *path = p->s->d->shards[i].path;
	char why[512];
	int fd = file_open_regular(path, O_RDONLY |
				   (p->want_direct ? O_DIRECT : 0), NULL,
				   why, sizeof(why));

	if (fd == -EINVAL && p->want_direct) {
		fd = file_open_regular(path, O_RDONLY, NULL, why, sizeof(why));
		if (p->out->direct)
			snprintf(p->out->note, sizeof(p->out->note),
				 "O_DIRECT refused on %s: buffered reads (page cache may serve them)",
				 path);
		p->out->direct = 0;
	}
	if (fd < 0) {
		if (p->errlen && !p->err[0])
			snprintf(p->err, p->errlen, "%s", why);
		return fd;
	}
	p->fds[i] = fd;
	return 0;
}

/* A file is closed once its last piece is queued and none is in flight:
 * files are read in order, so at most threads x DISK_QD + 1 are open at
 * once.  Under mu. */
static void maybe_close(struct disk_probe *p, uint32_t i)
{
	if (p->inflight[i] || p->fds[i] < 0 ||
	    (i == p->next_file &&
	     p->next_offset < p->s->d->shards[i].file_size))
		return;
	close(p->fds[i]);
	p->fds[i] = -1;
}

/* The next 1 MiB piece to read, in file order, its file opened: 1; 0 when
 * none is left; a negative errno when the file does not open.  Under mu. */
static int next_piece(struct disk_probe *p, struct disk_read *rd)
{
	while (p->next_file < p->nfiles) {
		uint64_t size = p->s->d->shards[p->next_file].file_size;

		if (p->next_offset < size) {
			uint64_t left = size - p->next_offset;
			int r;

			if (p->fds[p->next_file] < 0 &&
			    (r = open_file(p, p->next_file)) < 0)
				return r;

			rd->file = p->next_file;
			rd->offset = p->next_offset;
			/* O_DIRECT wants whole aligned lengths; a read past
			 * EOF simply comes back short. */
			rd->length = left < DISK_BLOCK
				? (uint32_t)((left + DISK_ALIGN - 1) &
					     ~(uint64_t)(DISK_ALIGN - 1))
				: DISK_BLOCK;
			p->next_offset += rd->length;
			return 1;
		}
		p->next_file++;
		p->next_offset = 0;
	}
	return 0;
}

/* Under mu (the descriptor and the count are shared). */
static void queue_read(struct disk_worker *w, struct disk_read *rd)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	/* Never NULL: at most DISK_QD reads are in flight. */
	io_uring_prep_read(sqe, w->p->fds[rd->file], rd->buf, rd->length,
			   rd->offset);
	io_uring_sqe_set_data(sqe, rd);
	w->p->inflight[rd->file]++;
}

/* A completion: count it, continue a short read that is not at EOF,
 * retry -EAGAIN/-EINTR.  @return: 1 when @rd is free again, 0 when it was
 * requeued, or a negative errno.  Under mu. */
static int reap(struct disk_worker *w, struct disk_read *rd, int res)
{
	struct disk_probe *p = w->p;
	uint64_t size = p->s->d->shards[rd->file].file_size;

	p->inflight[rd->file]--;
	if (res == -EAGAIN || res == -EINTR) {
		queue_read(w, rd);
		return 0;
	}
	if (res < 0)
		return res;
	p->bytes += (uint64_t)res;
	if ((uint32_t)res < rd->length && rd->offset + (uint64_t)res < size) {
		if (res == 0)
			return -EIO;  /* the file shrank under us */
		rd->offset += (uint64_t)res;
		rd->length -= (uint32_t)res;
		queue_read(w, rd);
		return 0;
	}
	return 1;
}

/* Keep DISK_QD pieces in flight until none is left; after an error
 * (here or in another thread) queue no more, wait for what the kernel
 * holds (it lands in our buffers), and return it. */
static int run_reads(struct disk_worker *w)
{
	struct disk_probe *p = w->p;
	struct disk_read *free_list[DISK_QD];
	uint32_t nfree = 0, inflight = 0;
	int err = 0;

	for (uint32_t i = 0; i < DISK_QD; i++)
		free_list[nfree++] = &w->rds[i];
	for (;;) {
		struct io_uring_cqe *cqe;
		int r;

		pthread_mutex_lock(&p->mu);
		while (!err && !p->error && nfree > 0) {
			r = next_piece(p, free_list[nfree - 1]);
			if (r <= 0) {
				err = r;
				break;
			}
			queue_read(w, free_list[--nfree]);
			inflight++;
		}
		pthread_mutex_unlock(&p->mu);
		if (inflight == 0)
			return err;
		r = io_uring_submit_and_wait(&w->ring, 1);
		if (r < 0 && r != -EINTR)
			return r;      /* the ring is broken: nothing will land */
		pthread_mutex_lock(&p->mu);
		while (io_uring_peek_cqe(&w->ring, &cqe) == 0) {
			struct disk_read *rd = io_uring_cqe_get_data(cqe);

			r = err ? 1 : reap(w, rd, cqe->res);
			if (err)
				p->inflight[rd->file]--;
			io_uring_cqe_seen(&w->ring, cqe);
			if (r < 0 && !err)
				err = r;
			if (r != 0) {
				maybe_close(p, rd->file);
				free_list[nfree++] = rd;
				inflight--;
			}
		}
		if (err && !p->error)
			p->error = err;
		pthread_mutex_unlock(&p->mu);
	}
}

static void *disk_worker_main(void *arg)
{
	struct disk_worker *w = arg;
	int r = run_reads(w);

	pthread_mutex_lock(&w->p->mu);
	if (r < 0 && !w->p->error)
		w->p->error = r;
	pthread_mutex_unlock(&w->p->mu);
	return NULL;
}

/* CPU seconds of this process so far, its threads and its io_uring
 * workers (which belong to it) together. */
static double process_cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

int limit_disk(const struct shard_set *s, uint32_t threads, int direct,
	       struct disk_limit *out, char *err, size_t errlen)
{
	struct disk_probe p = { .s = s, .nfiles = s->d->nshards, .out = out,
				.want_direct = direct, .err = err,
				.errlen = errlen };
	struct disk_worker *w;
	uint8_t *bufs = NULL;
	uint32_t started = 0;
	uint64_t t0;
	int r;

	memset(out, 0, sizeof(*out));
	if (errlen)
		err[0] = '\0';
	if (threads == 0)
		threads = 1;
	if (threads > DISK_THREADS_MAX)
		threads = DISK_THREADS_MAX;
	out->block_bytes = DISK_BLOCK;
	out->queue_depth = DISK_QD;
	out->threads = threads;
	out->direct = direct;
	p.fds = malloc((p.nfiles ? p.nfiles : 1) * sizeof(int));
	p.inflight = calloc(p.nfiles ? p.nfiles : 1, sizeof(*p.inflight));
	w = calloc(threads, sizeof(*w));
	r = posix_memalign((void **)&bufs, DISK_ALIGN,
			   (size_t)threads * DISK_QD * DISK_BLOCK);
	if (!p.fds || !p.inflight || !w || r) {
		if (!r)
			free(bufs);
		free(p.fds);
		free(p.inflight);
		free(w);
		return -ENOMEM;
	}
	pthread_mutex_init(&p.mu, NULL);
	for (uint32_t i = 0; i < p.nfiles; i++)
		p.fds[i] = -1;
	for (uint32_t t = 0; t < threads; t++) {
		w[t].p = &p;
		for (uint32_t i = 0; i < DISK_QD; i++)
			w[t].rds[i].buf = bufs + ((size_t)t * DISK_QD + i) *
							 DISK_BLOCK;
	}
	for (uint32_t t = 0; t < threads && !r; t++) {
		r = io_uring_queue_init(DISK_QD, &w[t].ring, 0);
		if (r)
			snprintf(err, errlen, "io_uring_queue_init: %s",
				 strerror(-r));
		else
			started++;
	}
	if (!r) {
		uint32_t running = 0;
		double cpu0 = process_cpu_s();

		t0 = clock_ns();
		for (uint32_t t = 0; t < threads; t++)
			if (pthread_create(&w[t].thread, NULL,
					   disk_worker_main, &w[t]) == 0)
				running++;
			else
				break;
		for (uint32_t t = 0; t < running; t++)
			pthread_join(w[t].thread, NULL);
		out->seconds = (double)(clock_ns() - t0) / 1e9;
		out->cpu_s = process_cpu_s() - cpu0;
		out->bytes = p.bytes;
		out->threads = running;
		r = running ? p.error : -EAGAIN;
		if (r && errlen && !err[0]) /* else: a file did not open */
			snprintf(err, errlen, "disk probe read: %s",
				 strerror(-r));
	}
	for (uint32_t t = 0; t < started; t++)
		io_uring_queue_exit(&w[t].ring);
	for (uint32_t i = 0; i < p.nfiles; i++)
		if (p.fds[i] >= 0)
			close(p.fds[i]);
	pthread_mutex_destroy(&p.mu);
	free(p.fds);
	free(p.inflight);
	free(w);
	free(bufs);
	return r;
}

/* ------------------------------------------------------------------ */
/* CPU: verify, decompress, copy                                       */
/* ------------------------------------------------------------------ */

struct sample_block {
	uint8_t *stored;
	uint64_t stored_size, raw_size;
	uint32_t codec;
};

/* Blocks spread evenly over the dataset until CPU_SAMPLE_BYTES. */
static int load_sample(const struct shard_set *s, struct sample_block **out,
		       uint32_t *count, char *err, size_t errlen)
{
	uint64_t step = 1, taken = 0, g = 0;
	struct sample_block *v;
	uint32_t n = 0;
	int r = 0;

	if (s->stored_bytes > CPU_SAMPLE_BYTES && s->blocks > 0)
		step = (s->stored_bytes + CPU_SAMPLE_BYTES - 1) /
		       CPU_SAMPLE_BYTES;
	v = calloc(s->blocks ? s->blocks : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint32_t f = 0; f < s->d->nshards && !r && taken < CPU_SAMPLE_BYTES;
	     f++) {
		const struct shard_file *si = &s->d->shards[f];
		int fd = file_open_regular(si->path, O_RDONLY, NULL, err,
					   errlen);

		if (fd < 0) {
			r = fd;
			break;
		}
		for (uint64_t b = 0; b < si->block_count && !r; b++, g++) {
			const struct shard_block *bl = &si->blocks[b];
			struct sample_block *sb = &v[n];

			if (g % step || bl->raw_size > CPU_MAX_RAW ||
			    taken >= CPU_SAMPLE_BYTES)
				continue;
			sb->stored = malloc(bl->stored_size ? bl->stored_size
							    : 1);
			if (!sb->stored) {
				r = -ENOMEM;
				break;
			}
			if (pread(fd, sb->stored, bl->stored_size,
				  (off_t)bl->offset) !=
			    (ssize_t)bl->stored_size) {
				free(sb->stored);
				snprintf(err, errlen, "%s: short read at %llu",
					 si->path,
					 (unsigned long long)bl->offset);
				r = -EIO;
				break;
			}
			sb->stored_size = bl->stored_size;
			sb->raw_size = bl->raw_size;
			sb->codec = bl->codec;
			taken += bl->stored_size;
			n++;
		}
		close(fd);
	}
	*out = v;
	*count = n;
	return r;
}

enum cpu_step { STEP_VERIFY, STEP_DECOMPRESS, STEP_COPY };

/* One pass of @step over the sample.  @return: 0 or -SLUICE_EZSTD. */
static int cpu_pass(const struct sample_block *v, uint32_t n, int step,
		    ZSTD_DCtx *dctx, uint8_t *raw, uint8_t *dst,
		    uint64_t *sink)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct sample_block *b = &v[i];

		if (step == STEP_VERIFY) {
			*sink ^= XXH3_64bits(b->stored, b->stored_size);
		} else if (step == STEP_DECOMPRESS) {
			size_t got;

			if (b->codec != DLS_CODEC_ZSTD)
				continue;
			got = ZSTD_decompressDCtx(dctx, raw, b->raw_size,
						  b->stored, b->stored_size);
			if (ZSTD_isError(got) || got != b->raw_size)
				return -SLUICE_EZSTD;
		} else {
			/* The scatter copy reads decoded bytes: the stored
			 * ones for raw blocks. */
			const uint8_t *src = b->codec == DLS_CODEC_ZSTD
						     ? raw : b->stored;

			memcpy(dst, src, b->raw_size);
			*sink ^= dst[b->raw_size ? b->raw_size - 1 : 0];
		}
	}
	return 0;
}

/* Seconds per pass of @step, repeating small samples. */
static int time_step(const struct sample_block *v, uint32_t n, int step,
		     ZSTD_DCtx *dctx, uint8_t *raw, uint8_t *dst,
		     double *seconds)
{
	uint64_t sink = 0, t0 = clock_ns(), t;
	int passes = 0, r;

	do {
		r = cpu_pass(v, n, step, dctx, raw, dst, &sink);
		if (r)
			return r;
		passes++;
		t = clock_ns() - t0;
	} while ((double)t / 1e9 < CPU_MIN_SECONDS && passes < CPU_MAX_PASSES);
	/* Keep the results alive so no pass is optimised away. */
	__asm__ volatile("" : : "r"(sink) : "memory");
	*seconds = (double)t / 1e9 / passes;
	return 0;
}

/* The steps' start line: every probe thread that started waits there
 * for the others (how many is known once they are all created). */
struct step_line {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t parties, waiting, generation;
	int counted;            /* parties is set */
};

static void step_line_wait(struct step_line *l)
{
	uint32_t gen;

	pthread_mutex_lock(&l->mu);
	while (!l->counted)
		pthread_cond_wait(&l->cv, &l->mu);
	gen = l->generation;
	if (++l->waiting == l->parties) {
		l->waiting = 0;
		l->generation++;
		pthread_cond_broadcast(&l->cv);
	} else {
		while (gen == l->generation)
			pthread_cond_wait(&l->cv, &l->mu);
	}
	pthread_mutex_unlock(&l->mu);
}

/* One of the probe's threads: each step timed while every thread runs
 * it, so that they share the memory bandwidth and caches as the loader's
 * workers do. */
struct cpu_worker {
	pthread_t thread;
	struct step_line *line;
	const struct sample_block *v;
	uint32_t n;
	uint8_t *raw, *dst;
	double seconds[3];      /* per pass, by enum cpu_step */
	int r;
};

static void *cpu_worker_main(void *arg)
{
	struct cpu_worker *w = arg;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	/* Decompress first: the copy step reads what it leaves. */
	static const int order[3] = { STEP_DECOMPRESS, STEP_VERIFY,
				      STEP_COPY };

	w->r = dctx ? 0 : -ENOMEM;
	for (int k = 0; k < 3; k++) {
		step_line_wait(w->line);
		if (!w->r)
			w->r = time_step(w->v, w->n, order[k], dctx, w->raw,
					 w->dst, &w->seconds[order[k]]);
	}
	ZSTD_freeDCtx(dctx);
	return NULL;
}

/* How many probe threads fit: @threads, at most CPU_THREADS_MAX, and
 * their two buffers of @cap bytes each within a quarter of the RAM. */
static uint32_t cpu_probe_threads(uint32_t threads, uint64_t cap)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page
					     : 0;
	uint32_t n = threads < CPU_THREADS_MAX ? threads : CPU_THREADS_MAX;

	while (n > 1 && ram && (uint64_t)n * 2 * cap > ram / 4)
		n--;
	return n ? n : 1;
}

/* The median of @n values (sorts them). */
static double median(double *v, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && v[j] < v[j - 1]; j--) {
			double t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n ? v[n / 2] : 0;
}

/* Run the steps on up to @nw threads at once; each step's seconds per
 * pass are the median thread's (out->threads_at_once: how many ran).
 * @return: 0 or a thread's error. */
static int cpu_steps_at_once(const struct sample_block *v, uint32_t n,
			     uint32_t nw, uint64_t cap, struct cpu_limit *out)
{
	struct step_line line = { .parties = 0 };
	struct cpu_worker *w = calloc(nw, sizeof(*w));
	double *sec = calloc(nw, sizeof(*sec));
	uint32_t started = 0;
	int r = 0;

	if (!w || !sec) {
		free(w);
		free(sec);
		return -ENOMEM;
	}
	pthread_mutex_init(&line.mu, NULL);
	pthread_cond_init(&line.cv, NULL);
	for (uint32_t t = 0; t < nw; t++) {
		w[t].raw = malloc(cap);
		w[t].dst = malloc(cap);
		w[t].line = &line;
		w[t].v = v;
		w[t].n = n;
		if (!w[t].raw || !w[t].dst ||
		    pthread_create(&w[t].thread, NULL, cpu_worker_main, &w[t]))
			break;
		started++;
	}
	pthread_mutex_lock(&line.mu);
	line.parties = started;
	line.counted = 1;
	pthread_cond_broadcast(&line.cv);
	pthread_mutex_unlock(&line.mu);
	for (uint32_t t = 0; t < started; t++)
		pthread_join(w[t].thread, NULL);
	for (uint32_t t = 0; t < started && !r; t++)
		r = w[t].r;
	if (!started)
		r = -ENOMEM;
	for (int k = 0; k < 3 && !r; k++) {
		for (uint32_t t = 0; t < started; t++)
			sec[t] = w[t].seconds[k];
		*(k == STEP_VERIFY ? &out->verify_s
		  : k == STEP_DECOMPRESS ? &out->decompress_s
					 : &out->copy_s) = median(sec, started);
	}
	out->threads_at_once = started;
	for (uint32_t t = 0; t < nw; t++) {
		free(w[t].raw);
		free(w[t].dst);
	}
	pthread_mutex_destroy(&line.mu);
	pthread_cond_destroy(&line.cv);
	free(w);
	free(sec);
	return r;
}

int limit_cpu(const struct shard_set *s, uint32_t threads,
	      struct cpu_limit *out, char *err, size_t errlen)
{
	struct sample_block *v = NULL;
	uint64_t cap = s->max_raw < CPU_MAX_RAW ? s->max_raw : CPU_MAX_RAW;
	uint32_t n = 0;
	int r;

	memset(out, 0, sizeof(*out));
	out->threads = threads;
	if (cap == 0)
		cap = 1;
	r = load_sample(s, &v, &n, err, errlen);
	for (uint32_t i = 0; i < n; i++) {
		out->sample_stored += v[i].stored_size;
		out->sample_raw += v[i].raw_size;
	}
	out->sample_blocks = n;
	if (!r && n > 0) {
		r = cpu_steps_at_once(v, n, cpu_probe_threads(threads, cap),
				      cap, out);
		if (r == -SLUICE_EZSTD)
			snprintf(err, errlen,
				 "a sampled zstd block does not decompress to its raw size");
		else if (r)
			snprintf(err, errlen, "CPU probe: %s", strerror(-r));
	}
	for (uint32_t i = 0; i < n; i++)
		free(v[i].stored);
	free(v);
	return r;
}
