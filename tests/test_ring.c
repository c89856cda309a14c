/*
 * test_ring.c - the io ring against real files: known bytes read back,
 * coalescing, injected short reads / -EAGAIN / -EIO / -ECANCELED, EOF and
 * truncation, buffered runs read in pieces, wake from another thread,
 * destroy with reads in flight, and the fallbacks (buffered I/O, plain reads, unregistered buffers).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ring.h"
#include "ring_test.h"
#include "t.h"

#define ARENA_LEN ((size_t)4 << 20)
#define BLK 4096u
#define MAX_READS 512

static char tmpdir[256];
static char paths[3][300];
static uint64_t sizes[3] = { 1u << 20, (1u << 20) + 12345, 10000 };
static char *arena;

/* The byte at @off of file @seed: depends on both, so misplaced data
 * shows. */
static uint8_t pat(unsigned seed, uint64_t off)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^
		     (seed + 1) * 0xBF58476D1CE4E5B9ull;

	x ^= x >> 31;
	x *= 0x94D049BB133111EBull;
	return (uint8_t)(x >> 56);
}

static void make_file(const char *path, unsigned seed, uint64_t size)
{
	uint8_t buf[8192];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	T_ASSERT(fd >= 0);
	for (uint64_t at = 0; at < size;) {
		size_t n = size - at < sizeof(buf) ? (size_t)(size - at)
						    : sizeof(buf);

		for (size_t i = 0; i < n; i++)
			buf[i] = pat(seed, at + i);
		T_EQ(write(fd, buf, n), n);
		at += n;
	}
	T_EQ(close(fd), 0);
}

static void check_bytes(const void *buf, unsigned seed, uint64_t off,
			uint64_t len)
{
	const uint8_t *b = buf;

	for (uint64_t i = 0; i < len; i++)
		if (b[i] != pat(seed, off + i))
			T_FAIL_AT("file %u offset %llu: byte %u, want %u",
				  seed, (unsigned long long)(off + i), b[i],
				  pat(seed, off + i));
}

/* Drop @path's clean pages from the page cache (no root needed), so that
 * direct=-1 takes O_DIRECT for it. */
static void evict(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	T_ASSERT(fd >= 0);
	T_EQ(fsync(fd), 0);
	T_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
}

static void evict_all(void)
{
	for (unsigned i = 0; i < 3; i++)
		evict(paths[i]);
}

/* Read @path through the page cache, as a previous epoch would have. */
static void warm(const char *path)
{
	char buf[65536];
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	T_ASSERT(fd >= 0);
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

static struct io_ring *ring_open(const char *const *p, uint32_t n,
				 int direct, unsigned depth, int sqpoll,
				 struct io_ring_info *info)
{
	struct io_ring_config cfg = { .queue_depth = depth, .direct = direct,
				       .sqpoll = sqpoll };
	struct io_ring *r = NULL;
	char err[256];
	int ret = io_ring_create(&r, p, n, arena, ARENA_LEN, &cfg, err,
				 sizeof(err));

	if (ret == -ENOSYS)
		T_SKIP_BECAUSE("no io_uring: %s", err);
	if (ret != 0)
		T_FAIL_AT("io_ring_create: %d: %s", ret, err);
	io_ring_get_info(r, info);
	return r;
}

static struct io_ring *ring_default(int direct, unsigned depth,
				    struct io_ring_info *info)
{
	const char *const p[] = { paths[0], paths[1], paths[2] };

	return ring_open(p, 3, direct, depth, 0, info);
}

static struct io_read reads[MAX_READS];
static int returned[MAX_READS];

static void set_read(unsigned i, uint32_t file, uint64_t off, uint64_t len,
		     uint64_t min, void *buf)
{
	memset(&reads[i], 0, sizeof(reads[i]));
	reads[i].file = file;
	reads[i].offset = off;
	reads[i].length = len;
	reads[i].min_length = min;
	reads[i].buf = buf;
	reads[i].user = (void *)(uintptr_t)i;
	reads[i].result = 12345;  /* the ring must overwrite it */
}

/* Submit reads[0..n) in the order of @order (NULL: as they are). */
static void submit(struct io_ring *r, unsigned n, const unsigned *order)
{
	struct io_read *v[MAX_READS];

	for (unsigned i = 0; i < n; i++) {
		v[i] = &reads[order ? order[i] : i];
		returned[i] = 0;
	}
	T_EQ(io_ring_submit(r, v, n), 0);
}

/* Reap until all @n reads are back, each exactly once. */
static void reap_all(struct io_ring *r, unsigned n)
{
	unsigned got = 0;

	while (got < n) {
		struct io_read *done[16];
		int k = io_ring_reap(r, done, 16, 1);

		T_ASSERT(k >= 0);
		for (int j = 0; j < k; j++) {
			uintptr_t i = (uintptr_t)done[j]->user;

			T_ASSERT(i < n && done[j] == &reads[i]);
			T_EQ(returned[i]++, 0);
		}
		got += (unsigned)k;
	}
	T_EQ(io_ring_in_flight(r), 0);
	struct io_read *extra[1];
	T_EQ(io_ring_reap(r, extra, 1, 0), 0);
}

static void check_read(unsigned i, unsigned seed)
{
	T_EQ(reads[i].result, reads[i].length);
	check_bytes(reads[i].buf, seed, reads[i].offset, reads[i].length);
}

/* ---- fault injection ---- */

enum fault_mode { F_NONE, F_AT, F_RANDOM };

struct fault_rule {
	uint32_t file;
	uint64_t offset;   /* the SQE that starts here ... */
	int times;         /* ... this many times (-1: always) ... */
	int res;           /* ... gets this (>0: short to this count) */
};

struct fault {
	enum fault_mode mode;
	struct fault_rule rule[2];
	uint64_t rng;
	uint32_t align;    /* F_RANDOM: shorts stay multiples of this */
	int calls;
};

static struct fault fault;

static void fault_hook(void *ctx, uint32_t file, uint64_t offset,
		       uint64_t length, int *res)
{
	struct fault *f = ctx;

	(void)length;
	f->calls++;
	if (f->mode == F_AT) {
		for (unsigned i = 0; i < 2; i++) {
			struct fault_rule *u = &f->rule[i];

			if (file != u->file || offset != u->offset ||
			    u->times == 0)
				continue;
			if (u->times > 0)
				u->times--;
			if (u->res <= 0 || *res > u->res)
				*res = u->res;
			return;
		}
	} else if (f->mode == F_RANDOM && *res > 0) {
		f->rng = f->rng * 6364136223846793005ull +
			 1442695040888963407ull;
		unsigned x = (unsigned)(f->rng >> 33);

		if (x % 8 == 0) {
			*res = x % 16 == 0 ? -EAGAIN : -EINTR;
		} else if (x % 4 == 1 && (unsigned)*res > f->align) {
			unsigned units = (unsigned)*res / f->align;

			*res = (int)(f->align * (1 + (x >> 4) % units));
		}
	}
}

/* One rule (F_AT), random faults (F_RANDOM) or none. */
static void fault_set(enum fault_mode mode, uint32_t file, uint64_t offset,
		      int times, int res)
{
	memset(&fault, 0, sizeof(fault));
	fault.mode = mode;
	fault.rule[0] = (struct fault_rule){ file, offset, times, res };
	fault.rng = 42;
	fault.align = 1;
	io_ring_set_fault(mode == F_NONE ? NULL : fault_hook, &fault);
}

/* ---- tests ---- */

/* Scattered blocks from two files into scattered slots: no coalescing,
 * every byte right, one SQE per read. */
static void test_scattered(int direct)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(direct, 32, &info);
	unsigned n = 200;
	uint64_t s0 = io_ring_test_sqes(r);

	for (unsigned i = 0; i < n; i++) {
		uint32_t f = i % 2;
		uint64_t blk = (i * 37u) % (sizes[f] / BLK);

		/* slots in reverse: memory order opposes file order */
		set_read(i, f, blk * BLK, BLK, BLK,
			 arena + (size_t)(n - i) * 2 * BLK);
	}
	submit(r, n, NULL);
	reap_all(r, n);
	for (unsigned i = 0; i < n; i++)
		check_read(i, reads[i].file);
	T_EQ(io_ring_test_sqes(r) - s0, n);
	io_ring_destroy(r);
}

/* Adjacent on disk and in memory, submitted shuffled: one SQE per run. */
static void test_coalesce(int direct)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(direct, 8, &info);
	unsigned order[64], n = 0;
	uint64_t s0 = io_ring_test_sqes(r);

	for (unsigned i = 0; i < 16; i++)  /* run 1: file 0, 16 blocks */
		set_read(n++, 0, 64 * BLK + i * BLK, BLK, BLK,
			 arena + i * BLK);
	for (unsigned i = 0; i < 8; i++)   /* run 2: file 1, other slots */
		set_read(n++, 1, i * BLK, BLK, BLK,
			 arena + (size_t)(100 + i) * BLK);
	/* adjacent on disk to run 2 but not in memory: its own SQE */
	set_read(n++, 1, 8 * BLK, BLK, BLK, arena + 300 * (size_t)BLK);
	/* the same bytes as run 1's neighbour, in another file: own SQE */
	set_read(n++, 1, 80 * BLK, BLK, BLK, arena + 16 * (size_t)BLK);
	for (unsigned i = 0; i < n; i++)
		order[i] = (i * 7) % n;  /* n = 26, 7 coprime */
	submit(r, n, order);
	reap_all(r, n);
	for (unsigned i = 0; i < n; i++)
		check_read(i, reads[i].file);
	T_EQ(io_ring_test_sqes(r) - s0, 4);
	io_ring_destroy(r);
}

/* A small iovec size: adjacent reads across a registered-buffer boundary
 * stay apart; a read straddling one still works (plain READ). */
static void test_iovec_boundary(void)
{
	struct io_ring_info info;
	struct io_ring *r;
	uint64_t s0;
	size_t chunk = 16 * BLK;

	io_ring_test_set_iovec_max(chunk);
	r = ring_default(-1, 8, &info);
	io_ring_test_set_iovec_max(0);
	if (!info.fixed_buffers) {
		io_ring_destroy(r);
		return;  /* nothing to cross; reported by test_report */
	}
	s0 = io_ring_test_sqes(r);
	set_read(0, 0, 0, BLK, BLK, arena + chunk - BLK);
	set_read(1, 0, BLK, BLK, BLK, arena + chunk);
	set_read(2, 0, 10 * BLK, 2 * BLK, 2 * BLK, arena + 2 * chunk - BLK);
	submit(r, 3, NULL);
	reap_all(r, 3);
	for (unsigned i = 0; i < 3; i++)
		check_read(i, 0);
	T_EQ(io_ring_test_sqes(r) - s0, 3);
	io_ring_destroy(r);
}

/* Buffers outside the arena, and (buffered) unaligned reads. */
static void test_outside_arena_and_unaligned(void)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(0, 8, &info);
	char *heap = aligned_alloc(BLK, 8 * BLK);

	T_ASSERT(heap);
	T_EQ(info.direct, 0);
	T_EQ(info.alignment, 1);
	set_read(0, 1, 3 * BLK, 2 * BLK, 2 * BLK, heap);
	set_read(1, 1, 1001, 777, 777, heap + 5 * BLK + 3);
	set_read(2, 0, 12345, 5000, 5000, arena + 17);
	set_read(3, 0, 17345, 100, 100, arena + 17 + 5000); /* coalesces */
	submit(r, 4, NULL);
	reap_all(r, 4);
	check_read(0, 1);
	check_read(1, 1);
	check_read(2, 0);
	check_read(3, 0);
	free(heap);
	io_ring_destroy(r);
}

/* Short reads and -EAGAIN/-EINTR are resubmitted/retried unseen. */
static void test_short_and_again(int direct)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(direct, 8, &info);
	uint64_t s0;

	/* an unaligned short in the middle of a coalesced SQE: an
	 * O_DIRECT ring restarts at the aligned-down offset */
	for (unsigned i = 0; i < 4; i++)
		set_read(i, 0, 32 * BLK + i * BLK, BLK, BLK, arena + i * BLK);
	fault_set(F_AT, 0, 32 * BLK, 1, 5000);
	s0 = io_ring_test_sqes(r);
	submit(r, 4, NULL);
	reap_all(r, 4);
	for (unsigned i = 0; i < 4; i++)
		check_read(i, 0);
	T_EQ(io_ring_test_sqes(r) - s0, 2);
	T_EQ(fault.calls, 2);

	/* -EAGAIN three times, then through */
	set_read(0, 1, 5 * BLK, BLK, BLK, arena);
	fault_set(F_AT, 1, 5 * BLK, 3, -EAGAIN);
	s0 = io_ring_test_sqes(r);
	submit(r, 1, NULL);
	reap_all(r, 1);
	check_read(0, 1);
	T_EQ(io_ring_test_sqes(r) - s0, 4);

	/* -EINTR forever: bounded, then it fails */
	set_read(0, 1, 6 * BLK, BLK, BLK, arena);
	set_read(1, 1, 9 * BLK, BLK, BLK, arena + 2 * BLK);
	fault_set(F_AT, 1, 6 * BLK, -1, -EINTR);
	submit(r, 2, NULL);
	reap_all(r, 2);
	T_EQ(reads[0].result, -EINTR);
	check_read(1, 1);
	T_LT(fault.calls, 200);

	fault_set(F_NONE, 0, 0, 0, 0);
	io_ring_destroy(r);
}

/* -EIO and -ECANCELED fail only the reads they hit. */
static void test_errors(int direct)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(direct, 8, &info);
	static const int errs[] = { -EIO, -ECANCELED };

	for (unsigned e = 0; e < 2; e++) {
		for (unsigned i = 0; i < 6; i++)  /* separate SQEs */
			set_read(i, 0, i * 3 * BLK, BLK, BLK,
				 arena + i * 2 * BLK);
		fault_set(F_AT, 0, 2 * 3 * BLK, 1, errs[e]);
		submit(r, 6, NULL);
		reap_all(r, 6);
		for (unsigned i = 0; i < 6; i++)
			if (i == 2)
				T_EQ(reads[i].result, errs[e]);
			else
				check_read(i, 0);
	}

	/* A coalesced run: the first SQE comes back short (8 KiB), the
	 * resubmission fails: the reads fully read succeed. */
	for (unsigned i = 0; i < 4; i++)
		set_read(i, 1, i * BLK, BLK, BLK, arena + i * BLK);
	fault_set(F_AT, 1, 0, 1, 2 * BLK);
	fault.rule[1] = (struct fault_rule){ 1, 2 * BLK, 1, -EIO };
	submit(r, 4, NULL);
	reap_all(r, 4);
	check_read(0, 1);
	check_read(1, 1);
	T_EQ(reads[2].result, -EIO);
	T_EQ(reads[3].result, -EIO);

	fault_set(F_NONE, 0, 0, 0, 0);
	io_ring_destroy(r);
}

/* A buffered run longer than a piece is read as several SQEs in flight
 * at once; a read that spans pieces comes back once, when its last piece
 * is done, with the first error or end of file any of its pieces met. */
static void test_pieces(void)
{
	const uint64_t mib = 1u << 20, half = mib / 2, size = 3 * mib + 777;
	char path[320];
	const char *p[1] = { path };
	struct io_ring_info info;
	struct io_workers_clock *workers = malloc(sizeof(*workers));
	struct io_worker_cpu none[1];
	struct io_ring *r;
	uint64_t s0;

	T_ASSERT(workers != NULL);
	snprintf(path, sizeof(path), "%s/pieces", tmpdir);
	make_file(path, 7, size);
	r = ring_open(p, 1, 0, 8, 0, &info);
	T_EQ(info.direct, 0);
	io_workers_clock_start(workers);

	/* the whole file: a piece of 2 MiB, one of 1 MiB and 777 bytes */
	set_read(0, 0, 0, size, size, arena);
	s0 = io_ring_test_sqes(r);
	submit(r, 1, NULL);
	reap_all(r, 1);
	T_EQ(io_ring_test_sqes(r) - s0, 2);
	check_bytes(arena, 7, 0, size);
	/* io_uring's workers copied the pieces, for this thread: their CPU
	 * is counted, and no other thread has workers of its own here */
	T_LT(0, io_workers_clock_sample(workers));
	T_EQ(io_workers_cpu(1, none, 1), 0);
	free(workers);

	/* one run of three reads: B spans the pieces' boundary, C meets
	 * the end of the file in the last piece */
	memset(arena, 0, ARENA_LEN);
	set_read(0, 0, 0, mib, mib, arena);
	set_read(1, 0, mib, 3 * half, 3 * half, arena + mib);
	set_read(2, 0, 5 * half, 2 * half, half + 777, arena + 5 * half);
	submit(r, 3, NULL);
	reap_all(r, 3);
	check_read(0, 7);
	check_read(1, 7);
	T_EQ(reads[2].result, half + 777);
	check_bytes(arena + 5 * half, 7, 5 * half, half + 777);

	/* -EIO in the second piece: A, wholly in the first, is read; B and
	 * C, which have bytes there, fail */
	fault_set(F_AT, 0, 2 * mib, -1, -EIO);
	submit(r, 3, NULL);
	reap_all(r, 3);
	check_read(0, 7);
	T_EQ(reads[1].result, -EIO);
	T_EQ(reads[2].result, -EIO);

	/* a short first piece is resubmitted: all read */
	memset(arena, 0, ARENA_LEN);
	fault_set(F_AT, 0, 0, 1, 4096);
	submit(r, 3, NULL);
	reap_all(r, 3);
	check_read(0, 7);
	check_read(1, 7);
	T_EQ(reads[2].result, half + 777);
	check_bytes(arena + 5 * half, 7, 5 * half, half + 777);
	fault_set(F_NONE, 0, 0, 0, 0);

	io_ring_destroy(r);
	unlink(path);
}

/* What on_landed saw: each call's landed must rise, stop short of the
 * read's end, fall on a piece's end and cover bytes already there. */
struct landed_log {
	struct io_read *rd[2];
	uint64_t last[2];
	uint64_t limit;    /* no landed beyond this file offset */
	unsigned calls, bad;
};

static void on_landed(void *ctx, struct io_read *rd)
{
	struct landed_log *log = ctx;
	uint64_t got = atomic_load_explicit(&rd->landed, memory_order_acquire);
	unsigned i = rd == log->rd[1];

	log->calls++;
	if ((rd != log->rd[0] && rd != log->rd[1]) || got <= log->last[i] ||
	    got >= rd->length || (rd->offset + got) % (2u << 20) ||
	    rd->offset + got > log->limit) {
		log->bad++;
		return;
	}
	check_bytes(rd->buf, 9, rd->offset, got);
	log->last[i] = got;
}

/* A buffered read's landed rises as its pieces arrive in order (the
 * loader hashes them while they are in cache), relative to each read of
 * a run; a failed piece stops it there; a settled read has all. */
static void test_landed(void)
{
	const uint64_t mib = 1u << 20, size = 48 * mib + 100;
	struct landed_log log;
	struct io_ring_config cfg = { .queue_depth = 1, .direct = 0,
				      .on_landed = on_landed,
				      .on_landed_ctx = &log };
	char path[320], err[256];
	const char *p[1] = { path };
	struct io_ring *r = NULL;
	char *big = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned tries = 0;

	T_ASSERT(big != MAP_FAILED);
	snprintf(path, sizeof(path), "%s/landed", tmpdir);
	make_file(path, 9, size);
	T_EQ(io_ring_create(&r, p, 1, big, size, &cfg, err, sizeof(err)), 0);

	/* one run of two reads, the second from inside a piece; the order
	 * pieces finish in is the kernel's, so try until one rose early */
	do {
		memset(&log, 0, sizeof(log));
		log.limit = size;
		log.rd[0] = &reads[0];
		log.rd[1] = &reads[1];
		set_read(0, 0, 0, 3 * mib, 3 * mib, big);
		set_read(1, 0, 3 * mib, size - 3 * mib, size - 3 * mib,
			 big + 3 * mib);
		submit(r, 2, NULL);
		reap_all(r, 2);
		check_read(0, 9);
		check_read(1, 9);
		T_EQ(log.bad, 0);
		T_EQ(atomic_load(&reads[0].landed), 3 * mib);
		T_EQ(atomic_load(&reads[1].landed), size - 3 * mib);
	} while (log.calls == 0 && ++tries < 10);
	T_ASSERT(log.calls > 0);

	/* -EIO in the piece at 8 MiB: nothing past it is said to be there */
	memset(&log, 0, sizeof(log));
	log.limit = 8 * mib;
	log.rd[0] = &reads[0];
	set_read(0, 0, 0, size, size, big);
	fault_set(F_AT, 0, 8 * mib, -1, -EIO);
	submit(r, 1, NULL);
	reap_all(r, 1);
	fault_set(F_NONE, 0, 0, 0, 0);
	T_EQ(reads[0].result, -EIO);
	T_EQ(log.bad, 0);
	T_EQ(atomic_load(&reads[0].landed), 8 * mib);  /* all before it */

	io_ring_destroy(r);
	munmap(big, size);
	unlink(path);
}

/* A slow device (read_delay_us): each read starts no sooner than the
 * delay after its submission, and reads the same bytes. */
static void test_read_delay(void)
{
	const char *const p[1] = { paths[1] };
	struct io_ring_config cfg = { .queue_depth = 4, .direct = 0,
				      .read_delay_us = 20000 };
	struct io_ring *r = NULL;
	struct timespec t0, t1;
	char err[256];
	double ms;

	T_EQ(io_ring_create(&r, p, 1, arena, ARENA_LEN, &cfg, err,
			    sizeof(err)), 0);
	for (unsigned i = 0; i < 6; i++)    /* more than the depth */
		set_read(i, 0, (uint64_t)i * 65536, 65536, 65536,
			 arena + (size_t)i * 65536);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	submit(r, 6, NULL);
	reap_all(r, 6);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (unsigned i = 0; i < 6; i++)
		check_read(i, 1);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	     (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	T_ASSERT(ms >= 19.0);
	io_ring_destroy(r);
}

/* Ends of files: truncated -> -ENODATA; short of length but past
 * min_length -> success with the bytes there are. */
static void test_eof(int direct)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(direct, 8, &info);
	uint64_t tail = sizes[2] - 2 * BLK;  /* 1808 bytes in block 2 */

	uint64_t s0;

	set_read(0, 2, 2 * BLK, BLK, BLK, arena);            /* truncated */
	set_read(1, 2, 2 * BLK, BLK, tail, arena + 2 * BLK);  /* just fits */
	set_read(2, 2, 4 * BLK, BLK, 0, arena + 4 * BLK);     /* past EOF */
	set_read(3, 2, 4 * BLK, BLK, 1, arena + 6 * BLK);     /* needs 1 */
	submit(r, 4, NULL);
	reap_all(r, 4);
	T_EQ(reads[0].result, -ENODATA);
	T_EQ(reads[1].result, tail);
	check_bytes(reads[1].buf, 2, 2 * BLK, tail);
	T_EQ(reads[2].result, 0);
	T_EQ(reads[3].result, -ENODATA);

	/* a coalesced run over the end: one SQE comes back short, one
	 * more finds the end */
	set_read(0, 2, 0, BLK, BLK, arena + 10 * BLK);
	set_read(1, 2, BLK, BLK, BLK, arena + 11 * BLK);
	set_read(2, 2, 2 * BLK, BLK, tail, arena + 12 * BLK);
	set_read(3, 2, 3 * BLK, BLK, 0, arena + 13 * BLK);
	s0 = io_ring_test_sqes(r);
	submit(r, 4, NULL);
	reap_all(r, 4);
	T_EQ(io_ring_test_sqes(r) - s0, 2);
	check_read(0, 2);
	check_read(1, 2);
	T_EQ(reads[2].result, tail);
	check_bytes(reads[2].buf, 2, 2 * BLK, tail);
	T_EQ(reads[3].result, 0);
	io_ring_destroy(r);
}

/* Many reads, shallow queue, random shorts and retries: all right. */
static void test_stress(int direct)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(direct, 4, &info);
	unsigned order[MAX_READS], n = 300;
	uint64_t s0 = io_ring_test_sqes(r);

	for (unsigned i = 0; i < n; i++) {
		/* runs of 3 adjacent blocks, runs scattered */
		unsigned run = i / 3, k = i % 3;
		uint32_t f = run % 2;
		uint64_t blk = (run * 13u) % (sizes[f] / BLK - 3);

		set_read(i, f, (blk + k) * BLK, BLK, BLK,
			 arena + (size_t)(run * 4 + k) * BLK);
		order[i] = (i * 101) % n;
	}
	fault_set(F_RANDOM, 0, 0, 0, 0);
	fault.align = info.alignment > 1 ? info.alignment : 1;
	submit(r, n, order);
	T_EQ(io_ring_in_flight(r), n);
	reap_all(r, n);
	fault_set(F_NONE, 0, 0, 0, 0);
	for (unsigned i = 0; i < n; i++)
		check_read(i, reads[i].file);
	T_LT(n / 3 - 1, io_ring_test_sqes(r) - s0);
	io_ring_destroy(r);
}

static void test_invalid(void)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(-1, 8, &info);
	struct io_read *v[2] = { &reads[0], &reads[1] };

	set_read(0, 0, 0, BLK, BLK, arena);
	set_read(1, 3, 0, BLK, BLK, arena + BLK);  /* no such file */
	T_EQ(io_ring_submit(r, v, 2), -EINVAL);
	set_read(1, 0, BLK, BLK, 2 * BLK, arena + BLK); /* min > length */
	T_EQ(io_ring_submit(r, v, 2), -EINVAL);
	if (info.direct) {
		set_read(1, 0, 100, BLK, BLK, arena + BLK);
		T_EQ(io_ring_submit(r, v, 2), -EINVAL);
		set_read(1, 0, BLK, BLK, BLK, arena + BLK + 1);
		T_EQ(io_ring_submit(r, v, 2), -EINVAL);
	}
	T_EQ(io_ring_in_flight(r), 0);
	io_ring_destroy(r);

	const char *const missing[] = { paths[0], "/nonexistent/sluice" };
	struct io_ring_config cfg = { .queue_depth = 8, .direct = -1 };
	char err[256];

	r = (struct io_ring *)&cfg;
	T_EQ(io_ring_create(&r, missing, 2, arena, ARENA_LEN, &cfg, err,
			    sizeof(err)), -ENOENT);
	T_ASSERT(r == NULL);
	T_CONTAINS(err, "cannot open /nonexistent/sluice: No such file");
	cfg.queue_depth = 0;
	T_EQ(io_ring_create(&r, missing, 1, arena, ARENA_LEN, &cfg, err,
			    sizeof(err)), -EINVAL);
}

struct waiter {
	struct io_ring *r;
	atomic_int state;  /* 1: about to block, 2: returned */
	int ret;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	struct io_read *done[4];

	atomic_store(&w->state, 1);
	w->ret = io_ring_reap(w->r, done, 4, 1);
	atomic_store(&w->state, 2);
	return NULL;
}

/* A reap blocked with nothing in flight returns 0 on a wake. */
static void test_wake(void)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(-1, 8, &info);
	struct waiter w = { r, 0, -1 };
	pthread_t t;

	T_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
	while (atomic_load(&w.state) == 0)
		sched_yield();
	usleep(20000);  /* let it block; the result does not depend on it */
	io_ring_wake(r);
	T_EQ(pthread_join(t, NULL), 0);
	T_EQ(w.ret, 0);

	/* wakes do not pile up: two wakes, one early return, then the
	 * ring is usable as before */
	io_ring_wake(r);
	io_ring_wake(r);
	struct io_read *done[1];
	T_EQ(io_ring_reap(r, done, 1, 1), 0);
	set_read(0, 0, 0, BLK, BLK, arena);
	submit(r, 1, NULL);
	reap_all(r, 1);
	check_read(0, 0);
	io_ring_destroy(r);
}

/* Destroy with reads queued and in the kernel: waits, frees, no leak. */
static void test_destroy_in_flight(void)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(-1, 16, &info);
	unsigned n = 400;

	for (unsigned i = 0; i < n; i++)
		set_read(i, i % 2, (uint64_t)(i % 200) * BLK, BLK, BLK,
			 arena + (size_t)(n - i) * 2 * BLK);
	submit(r, n, NULL);
	T_EQ(io_ring_in_flight(r), n);
	io_ring_destroy(r);
	io_ring_destroy(NULL);
}

static void test_sqpoll(void)
{
	struct io_ring_info info;
	const char *const p[] = { paths[0] };
	struct io_ring *r = ring_open(p, 1, -1, 8, 1, &info);

	if (!info.sqpoll)
		T_CONTAINS(info.fallbacks, "SQPOLL");
	for (unsigned i = 0; i < 20; i++)
		set_read(i, 0, (uint64_t)i * 5 * BLK, BLK, BLK,
			 arena + i * 2 * BLK);
	submit(r, 20, NULL);
	reap_all(r, 20);
	for (unsigned i = 0; i < 20; i++)
		check_read(i, 0);
	printf("sqpoll: %s\n", info.sqpoll ? "on" : info.fallbacks);
	io_ring_destroy(r);
}

/* More files than one register_files call takes here: a sparse table
 * filled in chunks; the last file reads right. */
static void test_many_files(void)
{
	enum { N = 1100 };
	static const char *p[N];
	struct rlimit rl;
	struct io_ring_info info;
	struct io_ring *r;

	T_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < N + 100) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
		T_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < N + 100) {
		T_SKIP_PART("RLIMIT_NOFILE %llu: many-files test",
			    (unsigned long long)rl.rlim_cur);
		return;
	}
	for (unsigned i = 0; i < N; i++)
		p[i] = paths[i % 2];
	r = ring_open(p, N, -1, 8, 0, &info);
	printf("%u files: fixed_files %d %s\n", N, info.fixed_files,
	       info.fallbacks);
	T_EQ(info.fixed_files, 1);
	set_read(0, N - 1, 7 * BLK, BLK, BLK, arena);
	set_read(1, N - 2, 7 * BLK, BLK, BLK, arena + 2 * BLK);
	submit(r, 2, NULL);
	reap_all(r, 2);
	check_read(0, 1);
	check_read(1, 0);
	io_ring_destroy(r);
}

/*
 * More files than the hard RLIMIT_NOFILE allows (lowered for the rest of
 * the process: run last): at most a few are open at once, the others are
 * opened on demand into the registered table; reads of every file, in an
 * order that keeps evicting, all return the right bytes, with the
 * maximum of reads in flight (every open file busy at times).
 */
static void test_files_on_demand(int direct)
{
	enum { N = 300 };
	static const char *p[N];
	struct rlimit rl;
	struct io_ring_info info;
	struct io_ring *r;
	unsigned order[N];

	T_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 110) {
		printf("note: RLIMIT_NOFILE hard %llu: on-demand test skipped\n",
		       (unsigned long long)rl.rlim_max);
		return;
	}
	/* A few descriptors in use + 64 headroom + about 40 shards. */
	rl.rlim_cur = rl.rlim_max = 110;
	T_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
	for (unsigned i = 0; i < N; i++)
		p[i] = paths[i % 3];
	r = ring_open(p, N, direct, 16, 0, &info);
	printf("%u files under hard limit 110: fixed_files %d, %s\n", N,
	       info.fixed_files, info.fallbacks);
	T_CONTAINS(info.fallbacks, "opened on demand");
	for (unsigned round = 0; round < 3; round++) {
		for (unsigned i = 0; i < N; i++) {
			uint32_t f = (i * 7 + round * 31) % N;
			uint64_t blk = (f * 5u + round) % (sizes[f % 3] / BLK);

			set_read(i, f, blk * BLK, BLK, BLK,
				 arena + (size_t)i * BLK);
			order[i] = (i * 101 + round) % N;
		}
		submit(r, N, order);
		reap_all(r, N);
		for (unsigned i = 0; i < N; i++)
			check_read(i, reads[i].file % 3);
	}
	T_LT(N, io_ring_test_reopens(r));
	io_ring_destroy(r);
}

/*
 * direct=-1: a file the page cache holds is read buffered (O_DIRECT
 * would read it from the device again); one it does not hold, with
 * O_DIRECT where the filesystem allows.  Right bytes either way.
 */
static void test_direct_auto(void)
{
	const char *const p[] = { paths[0], paths[1] };
	struct io_ring_info info;
	struct io_ring *r;
	int fd = open(paths[0], O_RDONLY | O_DIRECT | O_CLOEXEC);
	int fs_direct = fd >= 0;

	if (fd >= 0)
		close(fd);
	warm(paths[0]);
	warm(paths[1]);
	r = ring_open(p, 2, -1, 8, 0, &info);
	T_EQ(info.cached_files, 2);
	T_EQ(info.direct, 0);
	T_EQ(info.alignment, 1);
	T_ASSERT(!strstr(info.fallbacks, "O_DIRECT"));
	set_read(0, 0, 3 * BLK + 5, 1000, 1000, arena);
	set_read(1, 1, 0, BLK, BLK, arena + 2 * BLK);
	submit(r, 2, NULL);
	reap_all(r, 2);
	check_read(0, 0);
	check_read(1, 1);
	io_ring_destroy(r);

	evict(paths[0]);
	r = ring_open(p, 2, -1, 8, 0, &info);
	T_EQ(info.cached_files, 1);          /* paths[1] still cached */
	T_EQ(info.direct, 0);
	if (fs_direct)
		T_ASSERT(info.alignment >= 512);  /* paths[0]: O_DIRECT */
	io_ring_destroy(r);

	evict_all();
	r = ring_open(p, 2, -1, 8, 0, &info);
	T_EQ(info.cached_files, 0);
	T_EQ(info.direct, fs_direct);
	set_read(0, 0, 0, BLK, BLK, arena);
	set_read(1, 1, 5 * BLK, 2 * BLK, 2 * BLK, arena + 2 * BLK);
	submit(r, 2, NULL);
	reap_all(r, 2);
	check_read(0, 0);
	check_read(1, 1);
	io_ring_destroy(r);

	/* direct=1 and 0 ignore the cache. */
	warm(paths[0]);
	r = ring_open(p, 1, 0, 8, 0, &info);
	T_EQ(info.cached_files, 0);
	io_ring_destroy(r);
	if (fs_direct) {
		r = ring_open(p, 1, 1, 8, 0, &info);
		T_EQ(info.cached_files, 0);
		T_EQ(info.direct, 1);
		io_ring_destroy(r);
	}
	printf("direct auto: ok%s\n",
	       fs_direct ? "" : " (no O_DIRECT on this filesystem)");
}

/* A file that refuses O_DIRECT: /proc/version (procfs: EINVAL). */
static void test_direct_refused(void)
{
	const char *const p[] = { paths[0], "/proc/version" };
	struct io_ring_config cfg = { .queue_depth = 8, .direct = 1 };
	struct io_ring_info info;
	struct io_ring *r;
	char err[256], want[512];
	int fd = open("/proc/version", O_RDONLY | O_DIRECT | O_CLOEXEC);

	if (fd >= 0) {
		close(fd);
		T_SKIP_PART("/proc/version takes O_DIRECT here: no refusal "
			    "to test");
		return;
	}
	T_EQ(io_ring_create(&r, p, 2, arena, ARENA_LEN, &cfg, err,
			    sizeof(err)), -EINVAL);
	T_CONTAINS(err, "O_DIRECT refused on /proc/version (proc)");

	evict(paths[0]);
	r = ring_open(p, 2, -1, 8, 0, &info);
	T_CONTAINS(info.fallbacks,
		   "O_DIRECT refused on /proc/version (proc): buffered reads");
	T_EQ(info.direct, 0);
	T_ASSERT(info.alignment >= 512);  /* paths[0] is still O_DIRECT */
	printf("auto fallback: %s\n", info.fallbacks);

	fd = open("/proc/version", O_RDONLY | O_CLOEXEC);
	T_ASSERT(fd >= 0);
	ssize_t len = read(fd, want, sizeof(want));
	close(fd);
	T_ASSERT(len > 0);
	set_read(0, 1, 0, BLK, 1, arena);
	set_read(1, 0, 0, BLK, BLK, arena + BLK);
	submit(r, 2, NULL);
	reap_all(r, 2);
	T_EQ(reads[0].result, len);
	T_MEMEQ(arena, want, (size_t)len);
	check_read(1, 0);
	io_ring_destroy(r);
}

/* tmpfs: O_DIRECT since Linux 6.6, refused before; right bytes either
 * way.  Its pages are the page cache, so direct=-1 reads it buffered. */
static void test_tmpfs(void)
{
	struct statfs sf;
	char path[64];
	struct io_ring_info info;
	struct io_ring *r;
	const char *const p[] = { path };

	if (statfs("/dev/shm", &sf) != 0 || sf.f_type != 0x01021994) {
		T_SKIP_PART("/dev/shm is not tmpfs: tmpfs test");
		return;
	}
	snprintf(path, sizeof(path), "/dev/shm/sluice-ring-%d", (int)getpid());
	make_file(path, 7, 64 * BLK);
	r = ring_open(p, 1, -1, 8, 0, &info);
	T_EQ(info.cached_files, 1);
	T_EQ(info.direct, 0);
	io_ring_destroy(r);
	{
		struct io_ring_config cfg = { .queue_depth = 8,
					      .direct = 1 };
		char err[256];
		int ret = io_ring_create(&r, p, 1, arena, ARENA_LEN, &cfg,
					 err, sizeof(err));

		if (ret == 0) {
			io_ring_get_info(r, &info);
			printf("tmpfs: O_DIRECT accepted (alignment %u)\n",
			       info.alignment);
		} else {
			T_EQ(ret, -EINVAL);
			T_CONTAINS(err, "(tmpfs)");
			printf("tmpfs: %s\n", err);
			r = ring_open(p, 1, -1, 8, 0, &info);
		}
	}
	for (unsigned i = 0; i < 16; i++)
		set_read(i, 0, (uint64_t)(15 - i) * 4 * BLK, BLK, BLK,
			 arena + i * BLK);
	submit(r, 16, NULL);
	reap_all(r, 16);
	for (unsigned i = 0; i < 16; i++)
		check_read(i, 7);
	io_ring_destroy(r);
	unlink(path);
}

/* In a child without CAP_IPC_LOCK, so that RLIMIT_MEMLOCK applies:
 * soft < needed <= hard: raised and registered; hard too: plain reads. */
static int memlock_child(rlim_t soft, rlim_t hard, int want_fixed)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3,
						0 };
	struct __user_cap_data_struct cap[2];
	struct rlimit rl = { soft, hard };
	struct io_ring_info info;
	struct io_ring *r;

	if (syscall(SYS_capget, &hdr, cap) != 0)
		return 2;
	cap[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	cap[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	if (syscall(SYS_capset, &hdr, cap) != 0 ||
	    setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return 2;
	r = ring_default(-1, 8, &info);
	printf("memlock soft %llu hard %llu: fixed_buffers %d: %s\n",
	       (unsigned long long)soft, (unsigned long long)hard,
	       info.fixed_buffers, info.fallbacks[0] ? info.fallbacks : "-");
	fflush(stdout);
	T_EQ(info.fixed_buffers, want_fixed);
	if (!want_fixed)
		T_CONTAINS(info.fallbacks,
			   "buffer registration refused (RLIMIT_MEMLOCK=");
	for (unsigned i = 0; i < 8; i++)
		set_read(i, 1, (uint64_t)i * 3 * BLK, BLK, BLK,
			 arena + i * 2 * BLK);
	submit(r, 8, NULL);
	reap_all(r, 8);
	for (unsigned i = 0; i < 8; i++)
		check_read(i, 1);
	io_ring_destroy(r);
	fflush(stdout);
	return 0;
}

static void test_memlock(void)
{
	struct rlimit now;
	struct {
		rlim_t soft, hard;
		int fixed;
	} cases[2] = {
		{ 64 << 10, 64 << 10, 0 },
		{ 64 << 10, 0, 1 },  /* hard: what we have, if enough */
	};

	if (geteuid() != 0) {
		T_SKIP_PART("memlock fallback (needs root)");
		return;
	}
	T_EQ(getrlimit(RLIMIT_MEMLOCK, &now), 0);
	cases[1].hard = now.rlim_max;
	for (unsigned c = 0; c < 2; c++) {
		int status;
		pid_t pid;

		if (cases[c].hard != RLIM_INFINITY &&
		    cases[c].hard < 2 * ARENA_LEN && cases[c].fixed) {
			T_SKIP_PART("hard RLIMIT_MEMLOCK too low to test the "
				    "raise");
			continue;
		}
		fflush(stdout);
		pid = fork();
		T_ASSERT(pid >= 0);
		if (pid == 0)
			_exit(memlock_child(cases[c].soft, cases[c].hard,
					    cases[c].fixed));
		T_EQ(waitpid(pid, &status, 0), pid);
		T_ASSERT(WIFEXITED(status));
		if (WEXITSTATUS(status) == 2)
			T_SKIP_PART("cannot drop CAP_IPC_LOCK here: memlock "
				    "fallback");
		else
			T_EQ(WEXITSTATUS(status), 0);
	}
}

static void report(void)
{
	struct io_ring_info info;
	struct io_ring *r = ring_default(-1, 8, &info);

	printf("%s: direct %d fixed_buffers %d fixed_files %d sqpoll %d "
	       "alignment %u fallbacks \"%s\"\n", tmpdir, info.direct,
	       info.fixed_buffers, info.fixed_files, info.sqpoll,
	       info.alignment, info.fallbacks);
	io_ring_destroy(r);
}

int main(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/sluice-ring-XXXXXX",
		 base && *base ? base : "/tmp");
	T_ASSERT(mkdtemp(tmpdir));
	for (unsigned i = 0; i < 3; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/f%u", tmpdir, i);
		make_file(paths[i], i, sizes[i]);
	}
	arena = mmap(NULL, ARENA_LEN, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	T_ASSERT(arena != MAP_FAILED);

	test_memlock();  /* forks: before any thread */
	evict_all();
	report();
	for (int direct = -1; direct <= 0; direct++) {
		evict_all();    /* -1 then takes O_DIRECT where it can */
		test_scattered(direct);
		test_coalesce(direct);
		test_short_and_again(direct);
		test_errors(direct);
		test_eof(direct);
		test_stress(direct);
	}
	test_pieces();
	test_landed();
	test_read_delay();
	test_iovec_boundary();
	test_outside_arena_and_unaligned();
	test_invalid();
	test_wake();
	test_destroy_in_flight();
	test_sqpoll();
	test_many_files();
	test_direct_refused();
	test_direct_auto();
	io_ring_test_no_cachestat(1);   /* kernels before 6.5: mincore */
	test_direct_auto();
	io_ring_test_no_cachestat(0);
	test_tmpfs();
	test_files_on_demand(-1);  /* lowers RLIMIT_NOFILE: last */
	test_files_on_demand(0);

	munmap(arena, ARENA_LEN);
	for (unsigned i = 0; i < 3; i++)
		unlink(paths[i]);
	rmdir(tmpdir);
	printf("ok\n");
	return t_done();
}
