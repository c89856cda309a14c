/*
 * ring.h - the io/ interface: one io_uring with registered files and
 * buffers, batched reads, short-read and error handling.  Knows nothing of
 * shards or CUDA.  Owned and driven by one thread (the loader's I/O thread).
 */
#ifndef SLUICE_IO_RING_H
#define SLUICE_IO_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct io_ring;
struct io_read;

/* A buffered read is cut into pieces of this many bytes, which the
 * kernel's workers copy from the page cache in parallel.  Small enough
 * that one 64 MiB block is copied by many workers, large enough that an
 * SQE's cost is noise beside its copy (4 MiB is KvikIO's task size; 2 MiB
 * measured as fast, see bench/results/2026-11-26-parallel-reads.md). */
#define IO_PIECE_BYTES ((uint64_t)2 << 20)

struct io_ring_config {
	unsigned queue_depth;   /* reads in flight (a buffered read's
				   pieces up to 8 SQEs each); reads beyond
				   it wait */
	int direct;             /* -1 auto: buffered when the page cache
				   holds most of a file, else O_DIRECT when
				   the fs allows; 0; 1 */
	int sqpoll;             /* IORING_SETUP_SQPOLL */
	int plain_reads;        /* 1: do not register the buffers (forces
				   the plain-read fallback, for tests) */
	uint32_t read_delay_us; /* every read SQE starts this long after
				   its submission: a slow device, for
				   benchmarks; 0: none */
	/* Called on the reaping thread each time a read's landed rises
	 * while some of its pieces are still out (NULL: never), so that
	 * its owner can use those bytes while they are in the CPU's
	 * cache.  It must not call into the ring. */
	void (*on_landed)(void *ctx, struct io_read *rd);
	void *on_landed_ctx;
};

/* What the ring ended up using, with the reason for each fallback. */
struct io_ring_info {
	int direct;             /* O_DIRECT active on every file */
	uint32_t cached_files;  /* auto: read buffered, found in the cache */
	int fixed_buffers;      /* READ_FIXED into registered buffers */
	int fixed_files;        /* IOSQE_FIXED_FILE */
	int sqpoll;
	uint32_t alignment;     /* offset/length/address alignment required */
	char fallbacks[256];    /* e.g. "O_DIRECT refused by tmpfs; ..." */
};

/*
 * One read.  The caller fills file, offset, length, buf, user; the ring
 * fills result (bytes read, == length, or a negative errno) before
 * handing the read back.  With O_DIRECT, offset, length and buf must be
 * multiples of info.alignment; a read that reaches EOF may return fewer
 * bytes than length, but at least min_length, and that is success.
 */
struct io_read {
	uint32_t file;          /* index into the paths given at create */
	uint64_t offset;
	uint64_t length;
	uint64_t min_length;    /* bytes that must exist (<= length) */
	void *buf;
	void *user;
	int64_t result;
	/* Bytes at the front of buf known read: rises while the read is in
	 * flight as its pieces land in order (a buffered read's; an
	 * O_DIRECT read's all at once when it is handed back).  Any thread
	 * may load it (acquire): the bytes below it are written. */
	_Atomic uint64_t landed;
	/* private to the ring */
	uint64_t done;
	unsigned attempts;
	unsigned ops_left;      /* pieces (ring_ops) not finished yet */
	int err;                /* the first error of a piece */
	uint64_t short_at;      /* first byte a piece did not read */
	uint64_t piece_origin;  /* file offset of its first piece */
	uint64_t piece_next;    /* the first piece not landed, from there */
	uint64_t pieces_early;  /* bit k: piece piece_next + k landed */
	struct io_read *done_next; /* on the ring's done queue */
};

/*
 * io_ring_create - open @paths (read-only), set up the ring, register the
 * files and the buffer region [@arena, @arena + @arena_len) (split into
 * iovecs of at most 1 GiB).  Falls back to buffered I/O, plain reads or
 * unregistered files when refused, saying why in info.fallbacks.
 * @err: a message naming the path on failure.
 * @return: 0; -errno (ENOENT naming the file, ENOSYS without io_uring).
 */
int io_ring_create(struct io_ring **out, const char *const *paths,
		   uint32_t nfiles, void *arena, size_t arena_len,
		   const struct io_ring_config *cfg, char *err, size_t errlen);
void io_ring_destroy(struct io_ring *r);   /* waits for reads in flight */
void io_ring_get_info(const struct io_ring *r, struct io_ring_info *info);

/*
 * io_ring_submit - queue @n reads and submit them with one io_uring_enter.
 * Reads of the same file that are adjacent on disk and in memory are
 * coalesced.  A buffered run (the page cache is its source, and each read
 * a CPU copy) is split into pieces that the kernel's workers copy in
 * parallel; an O_DIRECT run is one SQE, the device's DMA does the copy.
 * Reads stay owned by the caller until returned by io_ring_reap().
 * @return: 0 or -errno.
 */
int io_ring_submit(struct io_ring *r, struct io_read *const *reads,
		   unsigned n);

/*
 * io_ring_reap - wait for at least @min_complete reads to finish (0: do
 * not wait) and store up to @max of them in @done.  Short reads are
 * resubmitted, -EAGAIN/-EINTR retried, internally; a read is returned
 * only when complete (result == bytes) or failed (result < 0; 0 bytes
 * before min_length is -ENODATA: truncated file).
 * @return: number of reads stored, or -errno.
 */
int io_ring_reap(struct io_ring *r, struct io_read **done, unsigned max,
		 unsigned min_complete);

/*
 * io_ring_pread - read [@offset, @offset + @len) of @file into @buf on the
 * calling thread, as the ring would: short reads continued, -EAGAIN/
 * -EINTR retried, the test faults and read_delay_us applied (pread.c).
 * Only for a file io_ring_pread_fd() gives.  Any thread.
 * @return: bytes read (fewer only at end of file), or -errno (-EBADF:
 * not such a file).
 */
int64_t io_ring_pread(const struct io_ring *r, uint32_t file, void *buf,
		      uint64_t len, uint64_t offset);
/* @file's descriptor, where io_ring_pread() may read it: buffered and
 * open for the ring's life.  -1 for an O_DIRECT file, or where the ring
 * opens files on demand (more of them than RLIMIT_NOFILE allows). */
int io_ring_pread_fd(const struct io_ring *r, uint32_t file);

/* Does the page cache hold most of @path, so that direct_io auto would
 * read it buffered (residency.c)?  0 also where it cannot be opened or
 * the kernel cannot say. */
int io_path_cached(const char *path);
/* Would a ring keep @nfiles files open for its life (RLIMIT_NOFILE's
 * hard limit allows it), rather than open them on demand (nofile.c)? */
int io_files_stay_open(uint32_t nfiles);

/* Reads submitted and not yet returned by io_ring_reap(). */
unsigned io_ring_in_flight(const struct io_ring *r);

/* Wake a thread blocked in io_ring_reap() (returns 0 reads). Any thread. */
void io_ring_wake(struct io_ring *r);

/* One of io_uring's worker threads and the CPU it has used. */
struct io_worker_cpu {
	long tid;
	uint64_t cpu_ns;        /* its CPU clock (user + system) */
};

/*
 * io_workers_cpu - the io_uring worker threads alive now that work for
 * thread @submitter (gettid() of the thread submitting to a ring: its
 * buffered reads' pieces are copied there, workers.c), at most @max into
 * @out.  @return: how many were found (0 where /proc is not there).
 */
int io_workers_cpu(long submitter, struct io_worker_cpu *out, int max);

/* Bound io_uring keeps on a task's workers for regular files: 4 per CPU;
 * past it a clock misses some. */
#define IO_WORKERS_MAX 256

/*
 * The CPU the calling thread's io_uring workers take, added up across
 * samples: workers come and go, but one exits only after some idle
 * seconds, so what it used was seen by a sample before it went.
 */
struct io_workers_clock {
	long submitter;
	int nseen;
	struct io_worker_cpu seen[IO_WORKERS_MAX];
};

/* Start counting for the calling thread's workers. */
void io_workers_clock_start(struct io_workers_clock *k);
/* @return: the CPU ns its workers took since the last sample. */
uint64_t io_workers_clock_sample(struct io_workers_clock *k);

#ifdef SLUICE_TESTING
/*
 * Fault injection for tests: called on each completion before the ring
 * looks at it; may rewrite *res (short count, -EIO, -EAGAIN, -ECANCELED).
 */
typedef void (*io_fault_fn)(void *ctx, uint32_t file, uint64_t offset,
			    uint64_t length, int *res);
void io_ring_set_fault(io_fault_fn fn, void *ctx);
#endif

#endif /* SLUICE_IO_RING_H */
