/*
 * limit_disk.c - the disk limit of `sluice bench`: the shard files read
 * with raw io_uring reads from one thread and ring per online CPU, like
 * fio's numjobs (page-cache reads are CPU copies, and one thread's copies
 * were the loader's hidden ceiling), the loader's way (and, as its workers
 * read record ranges from the page cache, with pread(2) for random pieces
 * of buffered files):
 *   in order  every byte once in 1 MiB pieces, queue depth 8 each, where
 *             the loader read whole blocks;
 *   random    pieces of the loader's average record-range read at random
 *             places, each once, queue depth 64 each, for at most
 *             DISK_RANDOM_SECONDS, where it read record ranges (full
 *             shuffle): a disk's random reads are not its sequential
 *             ones.
 * O_DIRECT, buffered or, for direct_io auto, buffered just where the file
 * is mostly cached, as the loader chose.  Files are opened in turn
 * (random: a group at a time, DISK_RANDOM_FILES at most and a quarter of
 * RLIMIT_NOFILE), so that a dataset of more shards than RLIMIT_NOFILE
 * allows is read too.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sluice_cli.h"

#define DISK_BLOCK (1u << 20)
#define DISK_QD 8u              /* per thread, reading in order */
#define DISK_RANDOM_QD 64u      /* per thread, reading random pieces: the
				   loader's default ring depth */
#define DISK_QD_MAX DISK_RANDOM_QD
/* Buffers: DISK_QD MiB per thread, so 256 MiB at most (random pieces:
 * as many of them as fit, DISK_RANDOM_QD at most). */
#define DISK_THREADS_MAX 32u
#define DISK_ALIGN 4096u
#define DISK_BUF_ALIGN (2u << 20) /* a huge page */
#define DISK_RANDOM_FILES 256u  /* open at once, at most */
#define DISK_RANDOM_SECONDS 5.0 /* enough for a steady rate */

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
	bool *buffered;         /* per file: opened without O_DIRECT */
	uint32_t *inflight;     /* per file: its reads in the kernel */
	uint64_t *unqueued;     /* per file: its pieces not queued yet */
	uint32_t nfiles;
	const struct shard_set *s;
	int direct;             /* 1, 0, or -1: as direct_io auto chooses */
	uint32_t piece;         /* bytes per read */
	uint32_t qd;            /* per thread */
	/* in order: the file of the next piece */
	uint32_t next_file;
	/* random: files [group_first, group_end) at a time, their pieces
	 * numbered in file order from group_base[], visited in a fixed
	 * shuffled order of [0, group_pieces): each once */
	int random;
	uint64_t *group_base;   /* per file of the group, and its end */
	uint32_t group_first, group_end, group_files_max;
	uint64_t group_pieces, group_next;
	unsigned half_bits;     /* the shuffle's: 2 x half_bits cover it */

	uint64_t stop_ns;       /* random: queue nothing after this */
	uint64_t bytes, ring_ops, pread_ops;
	/* reads that began where the one queued before them ended */
	uint64_t in_order;
	uint32_t last_file;
	uint64_t last_end;
	int error;              /* the first thread's error */
	struct disk_limit *out;
	char *err;
	size_t errlen;
};

/* One reading thread: its own ring and buffers. */
struct disk_worker {
	struct disk_probe *p;
	struct io_uring ring;
	struct disk_read rds[DISK_QD_MAX];
	pthread_t thread;
};

/* Pieces of @size bytes of a file @piece bytes apiece. */
static uint64_t pieces_of(uint64_t size, uint32_t piece)
{
	return (size + piece - 1) / piece;
}

/* Open shard @i as the loader did: O_DIRECT when wanted (for auto,
 * unless the page cache holds most of it), unless the file refuses it;
 * an error (the file's, not the refusal) goes to p->err.  Under mu. */
static int open_file(struct disk_probe *p, uint32_t i)
{
	const char *path = p->s->d->shards[i].path;
	int direct = p->direct != 0;
	char why[512];
	int fd = -1;

	if (p->direct == -1) {
		fd = file_open_regular(path, O_RDONLY, NULL, why, sizeof(why));
		if (fd >= 0 && file_mostly_cached(fd)) {
			direct = 0;
			p->out->cached_files++;
		} else if (fd >= 0) {
			close(fd);
			fd = -1;
		}
	}
	if (fd < 0 && direct) {
		fd = file_open_regular(path, O_RDONLY | O_DIRECT, NULL, why,
				       sizeof(why));
		if (fd == -EINVAL) {
			if (!p->out->note[0])
				snprintf(p->out->note, sizeof(p->out->note),
					 "O_DIRECT refused on %s: buffered reads (page cache may serve them)",
					 path);
			direct = 0;
		}
	}
	if (fd < 0 && !direct)
		fd = file_open_regular(path, O_RDONLY, NULL, why, sizeof(why));
	if (fd < 0) {
		if (p->errlen && !p->err[0])
			snprintf(p->err, p->errlen, "%s", why);
		return fd;
	}
	if (direct) {
		p->out->direct_files++;
	} else {
		p->out->buffered_files++;
		p->out->direct = 0;
	}
	p->buffered[i] = !direct;
	p->fds[i] = fd;
	return 0;
}

/* A file is closed once its last piece is queued and none is in flight:
 * in order, at most threads x qd + 1 files are open at once; random, the
 * group's files and the last group's stragglers.
 * Under mu. */
static void maybe_close(struct disk_probe *p, uint32_t i)
{
	if (p->inflight[i] || p->unqueued[i] || p->fds[i] < 0)
		return;
	close(p->fds[i]);
	p->fds[i] = -1;
}

/* A bijection of [0, 2^(2 x half_bits)): a four-round Feistel
 * network over the two halves of @x (splitmix64's mixer as the round). */
static uint64_t feistel(uint64_t x, unsigned half_bits)
{
	const uint64_t mask = ((uint64_t)1 << half_bits) - 1;
	uint64_t l = x >> half_bits, r = x & mask;

	for (uint64_t round = 1; round <= 4; round++) {
		uint64_t f = (r + round) * 0x9E3779B97F4A7C15ull, t;

		f = (f ^ (f >> 30)) * 0xBF58476D1CE4E5B9ull;
		f = (f ^ (f >> 27)) * 0x94D049BB133111EBull;
		t = l ^ ((f ^ (f >> 31)) & mask);
		l = r;
		r = t;
	}
	return (l << half_bits) | r;
}

/* The @k-th piece of the group in shuffled order: feistel() walked until
 * it lands below group_pieces (a bijection there too; the domain is under
 * 4x group_pieces, so a few steps at most on average). */
static uint64_t shuffled(const struct disk_probe *p, uint64_t k)
{
	do
		k = feistel(k, p->half_bits);
	while (k >= p->group_pieces);
	return k;
}

/* The next group of files for random pieces: 1, or 0 after the last. */
static int next_group(struct disk_probe *p)
{
	uint32_t first = p->group_end, end;

	if (first >= p->nfiles)
		return 0;
	end = p->nfiles - first < p->group_files_max
		? p->nfiles : first + p->group_files_max;
	p->group_base[0] = 0;
	for (uint32_t i = first; i < end; i++)
		p->group_base[i - first + 1] = p->group_base[i - first] +
					       p->unqueued[i];
	p->group_first = first;
	p->group_end = end;
	p->group_pieces = p->group_base[end - first];
	p->group_next = 0;
	p->half_bits = 1;
	while (p->half_bits < 32 &&
	       ((uint64_t)1 << (2 * p->half_bits)) < p->group_pieces)
		p->half_bits++;
	return 1;
}

/* The place of the next piece: 1, or 0 when none is left. */
static int next_place(struct disk_probe *p, uint32_t *file, uint64_t *index)
{
	if (!p->random) {
		while (p->next_file < p->nfiles &&
		       !p->unqueued[p->next_file])
			p->next_file++;
		if (p->next_file >= p->nfiles)
			return 0;
		*file = p->next_file;
		*index = pieces_of(p->s->d->shards[*file].file_size,
				   p->piece) - p->unqueued[*file];
		return 1;
	}
	if (clock_ns() >= p->stop_ns)
		return 0;
	while (p->group_next == p->group_pieces)
		if (!next_group(p))
			return 0;
	{
		uint64_t k = shuffled(p, p->group_next++);
		uint32_t lo = 0, hi = p->group_end - p->group_first;

		/* the file whose pieces hold k: group_base[f] <= k */
		while (hi - lo > 1) {
			uint32_t mid = (lo + hi) / 2;

			if (p->group_base[mid] <= k)
				lo = mid;
			else
				hi = mid;
		}
		*file = p->group_first + lo;
		*index = k - p->group_base[lo];
	}
	return 1;
}

/* The next piece to read, its file opened: 1; 0 when none is left; a
 * negative errno when the file does not open.  Under mu. */
static int next_piece(struct disk_probe *p, struct disk_read *rd)
{
	uint32_t file;
	uint64_t index, size, left;
	int r;

	if (!next_place(p, &file, &index))
		return 0;
	if (p->fds[file] < 0 && (r = open_file(p, file)) < 0)
		return r;
	size = p->s->d->shards[file].file_size;
	rd->file = file;
	rd->offset = index * p->piece;
	left = size - rd->offset;
	/* O_DIRECT wants whole aligned lengths; a read past EOF simply
	 * comes back short. */
	rd->length = left < p->piece
		? (uint32_t)((left + DISK_ALIGN - 1) &
			     ~(uint64_t)(DISK_ALIGN - 1))
		: p->piece;
	p->unqueued[file]--;
	p->in_order += file == p->last_file && rd->offset == p->last_end;
	p->last_file = file;
	p->last_end = rd->offset + rd->length;
	return 1;
}

/* Under mu (the descriptor and the count are shared). */
static void queue_read(struct disk_worker *w, struct disk_read *rd)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	/* Never NULL: at most qd reads are in flight. */
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
	p->ring_ops++;
	return 1;
}

/*
 * A random piece of a buffered file: pread(2) on this thread, the lock
 * dropped meanwhile, as the loader's workers read record ranges from the
 * page cache (pipeline/fetch.c): through io_uring each small copy costs
 * more CPU, which would lower the cpus limit below what the loader does.
 * Under mu.  @return: 0 or a negative errno.
 */
static int read_now(struct disk_probe *p, const struct disk_read *rd)
{
	const uint64_t size = p->s->d->shards[rd->file].file_size;
	const int fd = p->fds[rd->file];
	uint64_t got = 0;
	int r = 0;

	p->inflight[rd->file]++;
	pthread_mutex_unlock(&p->mu);
	while (got < rd->length) {
		ssize_t n = pread(fd, (char *)rd->buf + got, rd->length - got,
				  (off_t)(rd->offset + got));

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0) {   /* EOF: short only past the file's end */
			if (rd->offset + got < size)
				r = -EIO;
			break;
		}
		got += (uint64_t)n;
	}
	pthread_mutex_lock(&p->mu);
	p->inflight[rd->file]--;
	p->bytes += got;
	p->pread_ops += r == 0;
	maybe_close(p, rd->file);
	return r;
}

/* Keep qd pieces in flight until none is left; after an error (here or
 * in another thread) queue no more, wait for what the kernel holds (it
 * lands in our buffers), and return it. */
static int run_reads(struct disk_worker *w)
{
	struct disk_probe *p = w->p;
	struct disk_read *free_list[DISK_QD_MAX];
	uint32_t nfree = 0, inflight = 0;
	int err = 0;

	for (uint32_t i = 0; i < p->qd; i++)
		free_list[nfree++] = &w->rds[i];
	for (;;) {
		struct io_uring_cqe *cqe;
		int r;

		pthread_mutex_lock(&p->mu);
		while (!err && !p->error && nfree > 0) {
			r = next_piece(p, free_list[nfree - 1]);
			if (r > 0 && p->random &&
			    p->buffered[free_list[nfree - 1]->file]) {
				if (inflight)   /* the queued ones go first */
					io_uring_submit(&w->ring);
				r = read_now(p, free_list[nfree - 1]);
				if (r == 0)
					continue;
			}
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

double range_read_bytes(const struct sluice_stats *st,
			const struct shard_set *s)
{
	double block = s->blocks ? (double)s->file_bytes / (double)s->blocks
				 : 0;
	double ranges = (double)st->read.bytes - block * (double)st->blocks_read;

	return ranges > 0 ? ranges : 0;
}

uint32_t disk_probe_piece(const struct sluice_stats *st,
			  const struct shard_set *s)
{
	double ranges = range_read_bytes(st, s), piece;

	if (st->range_reads == 0 || ranges * 2 < (double)st->read.bytes)
		return 0;
	piece = ranges / (double)st->range_reads;
	return piece < 1 ? 1 : piece > UINT32_MAX ? UINT32_MAX
						  : (uint32_t)piece;
}

/* Files a random group may hold open: DISK_RANDOM_FILES, at most a
 * quarter of RLIMIT_NOFILE (the rest: the process's own, and the
 * stragglers of the group before). */
static uint32_t group_files_max(void)
{
	struct rlimit rl;
	uint64_t n = DISK_RANDOM_FILES;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 4 < n)
		n = rl.rlim_cur / 4;
	return n ? (uint32_t)n : 1;
}

/* The probe's shape for @piece (0: in order, 1 MiB) into @p and @out. */
static void disk_shape(struct disk_probe *p, uint32_t piece,
		       struct disk_limit *out)
{
	p->random = piece != 0;
	if (!p->random) {
		p->piece = DISK_BLOCK;
		p->qd = DISK_QD;
	} else {
		/* the nearest whole pages: O_DIRECT's unit, and the
		 * loader's aligned reads average out near it */
		piece = piece < DISK_BLOCK ? piece : DISK_BLOCK;
		piece = (piece + DISK_ALIGN / 2) / DISK_ALIGN * DISK_ALIGN;
		p->piece = piece ? piece : DISK_ALIGN;
		/* no more buffer per thread than in order: DISK_QD MiB */
		p->qd = p->piece <= DISK_QD * DISK_BLOCK / DISK_RANDOM_QD
			? DISK_RANDOM_QD : DISK_QD * DISK_BLOCK / p->piece;
	}
	out->random = p->random;
	out->block_bytes = p->piece;
	out->queue_depth = p->qd;
}

static void probe_free(struct disk_probe *p)
{
	free(p->fds);
	free(p->buffered);
	free(p->inflight);
	free(p->unqueued);
	free(p->group_base);
}

int limit_disk(const struct shard_set *s, uint32_t threads, int direct,
	       uint32_t piece, struct disk_limit *out, char *err,
	       size_t errlen)
{
	struct disk_probe p = { .s = s, .nfiles = s->d->nshards, .out = out,
				.direct = direct, .err = err,
				.errlen = errlen };
	const size_t nf = p.nfiles ? p.nfiles : 1;
	struct disk_worker *w;
	uint8_t *bufs = NULL;
	uint32_t started = 0;
	size_t buf_bytes;
	uint64_t t0;
	int r;

	memset(out, 0, sizeof(*out));
	if (errlen)
		err[0] = '\0';
	if (threads == 0)
		threads = 1;
	if (threads > DISK_THREADS_MAX)
		threads = DISK_THREADS_MAX;
	out->threads = threads;
	out->direct = direct != 0;    /* until a file is read buffered */
	p.fds = malloc(nf * sizeof(*p.fds));
	p.buffered = calloc(nf, sizeof(*p.buffered));
	p.inflight = calloc(nf, sizeof(*p.inflight));
	p.unqueued = calloc(nf, sizeof(*p.unqueued));
	p.group_base = calloc(DISK_RANDOM_FILES + 1, sizeof(*p.group_base));
	w = calloc(threads, sizeof(*w));
	disk_shape(&p, piece, out);
	p.group_files_max = group_files_max();
	p.last_file = UINT32_MAX;
	buf_bytes = (size_t)threads * p.qd * p.piece;
	r = posix_memalign((void **)&bufs, DISK_BUF_ALIGN, buf_bytes);
	/* Huge pages where the kernel gives them, as the loader's arena
	 * asks (gpu/host_device.c): on the VM's disk, 1 MiB O_DIRECT reads
	 * into buffers so aligned ran 3.7-3.9 GB/s against 3.2-3.4 with 4
	 * KiB alignment (bench/results/2026-11-27-disk-probe-random.md). */
	if (!r) {
		(void)madvise(bufs, buf_bytes, MADV_HUGEPAGE);
		/* and resident before the clock starts, as the arena is
		 * (limits.c: a first touch is a page fault per page) */
		memset(bufs, 0, buf_bytes);
	}
	if (!p.fds || !p.buffered || !p.inflight || !p.unqueued ||
	    !p.group_base || !w || r) {
		if (!r)
			free(bufs);
		probe_free(&p);
		free(w);
		return -ENOMEM;
	}
	pthread_mutex_init(&p.mu, NULL);
	for (uint32_t i = 0; i < p.nfiles; i++) {
		p.fds[i] = -1;
		p.unqueued[i] = pieces_of(s->d->shards[i].file_size, p.piece);
	}
	for (uint32_t t = 0; t < threads; t++) {
		w[t].p = &p;
		for (uint32_t i = 0; i < p.qd; i++)
			w[t].rds[i].buf = bufs + ((size_t)t * p.qd + i) *
							 p.piece;
	}
	for (uint32_t t = 0; t < threads && !r; t++) {
		r = io_uring_queue_init(p.qd, &w[t].ring, 0);
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
		p.stop_ns = t0 + (uint64_t)(DISK_RANDOM_SECONDS * 1e9);
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
		out->ops = p.ring_ops + p.pread_ops;
		out->pread_ops = p.pread_ops;
		out->in_order = p.in_order;
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
	probe_free(&p);
	free(w);
	free(bufs);
	return r;
}
