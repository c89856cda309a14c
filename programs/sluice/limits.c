/*
 * limits.c - what the machine allows on this dataset, measured without the
 * loader on the shards and blocks the loader reads (the library's block
 * table, sluice_tools.h):
 *   disk: the shard files read the loader's way (limit_disk.c);
 *   cpu:  one thread doing what a decode worker does to a sample of the
 *         blocks (up to 64 MiB stored): XXH3 verify, ZSTD_decompressDCtx
 *         for zstd blocks, and the memcpy of the decoded bytes (the
 *         scatter into the batch slot), each timed on its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "dlpack_shard.h"
#include "sluice_cli.h"
#include "sluice_xxh3.h"

#define CPU_SAMPLE_BYTES (64ull << 20)
#define CPU_MIN_SECONDS 0.2   /* repeat small samples for a stable time */
#define CPU_MAX_PASSES 1000
#define CPU_MAX_RAW (1ull << 30)
/* Threads that run the CPU probe at once, each with its own decode and
 * copy buffers: at most this many, and their buffers at most a quarter
 * of the RAM. */
#define CPU_THREADS_MAX 32u
/* The loader checks stored bytes as they land in a buffer the cache
 * holds (a ring read's pieces, a staging buffer's 4 MiB): the probe
 * hashes one such piece of its own, over and over, where the loader's
 * reads were buffered; the sample in memory where they were O_DIRECT. */
#define CPU_VERIFY_PIECE (4ull << 20)

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

/* One pass of @step over the sample; checksums over the first @hot bytes
 * of @dst, a piece at a time, where @hot is not 0.  @return: 0 or
 * -SLUICE_EZSTD. */
static int cpu_pass(const struct sample_block *v, uint32_t n, int step,
		    ZSTD_DCtx *dctx, uint8_t *raw, uint8_t *dst,
		    uint64_t hot, uint64_t *sink)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct sample_block *b = &v[i];

		if (step == STEP_VERIFY && !hot) {
			*sink ^= XXH3_64bits(b->stored, b->stored_size);
		} else if (step == STEP_VERIFY) {
			for (uint64_t at = 0; at < b->stored_size; at += hot)
				*sink ^= XXH3_64bits(dst,
					b->stored_size - at < hot
						? b->stored_size - at : hot);
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
		     uint64_t hot, double *seconds)
{
	uint64_t sink = 0, t0 = clock_ns(), t;
	int passes = 0, r;

	do {
		r = cpu_pass(v, n, step, dctx, raw, dst, hot, &sink);
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
	uint64_t cap;           /* bytes of each */
	int in_cache;           /* checksums over a piece of dst */
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
	uint64_t hot = !w->in_cache ? 0
		       : w->cap < CPU_VERIFY_PIECE ? w->cap : CPU_VERIFY_PIECE;

	w->r = dctx ? 0 : -ENOMEM;
	/* Touch the buffers before any step is timed, as the loader makes
	 * its arena resident at open: on the VM a first memcpy of 64 MiB
	 * into fresh memory ran at 2.7 GB/s against 19 for the next one
	 * (a page fault per 4 KiB), and the copy step, timed first thing
	 * after the loader freed its arena, once reported 0.53 GB/s. */
	memset(w->raw, 0, w->cap);
	memset(w->dst, 0, w->cap);
	for (int k = 0; k < 3; k++) {
		step_line_wait(w->line);
		if (!w->r)
			w->r = time_step(w->v, w->n, order[k], dctx, w->raw,
					 w->dst, hot, &w->seconds[order[k]]);
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
			     uint32_t nw, uint64_t cap, int in_cache,
			     struct cpu_limit *out)
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
		w[t].cap = cap;
		w[t].in_cache = in_cache;
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

int limit_cpu(const struct shard_set *s, uint32_t threads, int in_cache,
	      struct cpu_limit *out, char *err, size_t errlen)
{
	struct sample_block *v = NULL;
	uint64_t cap = s->max_raw < CPU_MAX_RAW ? s->max_raw : CPU_MAX_RAW;
	uint32_t n = 0;
	int r;

	memset(out, 0, sizeof(*out));
	out->threads = threads;
	out->verify_in_cache = in_cache;
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
				      cap, in_cache, out);
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
