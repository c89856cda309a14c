/*
 * sluice_tools.h - the internal interface that the programs (programs/)
 * and the tests may use beyond the public API: the block table of a
 * dataset as the loader sees it, the one way to read a block, and the
 * loader's test and benchmark instruments (forced fallbacks, forced ON
 * modes, the PCIe and compute probes).
 *
 * Internal: not installed, no API or ABI promise (zstd's
 * ZSTD_STATIC_LINKING_ONLY section is the model).  Only libsluice.a users
 * can link it; its functions are not exported from libsluice.so.
 */
#ifndef SLUICE_TOOLS_H
#define SLUICE_TOOLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "dlpack_shard.h"
#include "sluice.h"

typedef struct ZSTD_DCtx_s ZSTD_DCtx;

/* ------------------------------------------------------------------ */
/* The block table                                                     */
/* ------------------------------------------------------------------ */

/* A field with its derived sizes (all checked for overflow at parse). */
struct shard_field {
	struct sluice_field f;
	uint64_t item_bytes;    /* bits / 8 * lanes */
	uint64_t record_bytes;  /* fixed: bytes per record; variable: 0 */
	uint64_t unit_bytes;    /* variable: item_bytes * prod(shape[1:]) */
	uint64_t max_value_bytes; /* variable: largest value (a shard's
				     header field max_value_bytes; a
				     dataset's: the max over its shards) */
	int variable;
};

struct shard_schema {
	uint32_t nfields;
	struct shard_field fields[DLS_MAX_FIELDS];
};

struct shard_block {
	uint64_t offset;
	uint64_t stored_size;
	uint64_t raw_size;
	uint64_t first_record;  /* within the shard */
	uint32_t record_count;
	uint32_t codec;
	uint64_t checksum;
};

/* Who a shard says it is (format v2 headers); unbound for v1 shards. */
struct shard_identity {
	int bound;              /* 0: a v1 shard, the rest is zero */
	uint8_t dataset_id[DLS_DATASET_ID_LEN];
	uint32_t index, count;  /* its index in the dataset; shard count */
	uint64_t checksum;      /* the header checksum: content checksum */
};

struct shard_file {
	char *path;             /* owned */
	uint64_t file_size;
	uint32_t version;       /* DLS_VERSION or DLS_VERSION_UNBOUND */
	struct shard_identity id;
	uint32_t alignment;
	uint64_t record_count;
	uint64_t block_count;
	uint64_t index_offset;
	uint64_t record_sums_offset; /* v3: the record checksums (bounds
					checked); length 0: none (v1, v2) */
	uint64_t record_sums_length;
	uint64_t record_sums_checksum;
	uint64_t raw_bytes;
	uint64_t stored_bytes;  /* sum of stored_size */
	uint64_t max_stored;    /* largest block, stored and raw */
	uint64_t max_raw;
	struct shard_block *blocks; /* owned, block_count entries */
	/* Owned: this shard's own header bound per field (0 for a fixed
	 * field), which its blocks' values must keep to; NULL when no field
	 * is variable.  The fields themselves are the dataset's (or, for a
	 * shard opened alone, the schema shard_open filled): a dataset holds
	 * its schema once, not once per shard. */
	uint64_t *max_value_bytes;
};

/* A dataset: shards in order with one schema. */
struct dataset {
	char *source;               /* the path given to open, owned */
	struct shard_schema schema; /* max_value_bytes: the shards' max */
	uint32_t nshards;
	struct shard_file *shards;  /* owned */
	uint64_t *shard_first;      /* global index of each shard's record 0;
				       nshards + 1 entries */
	uint64_t record_count;
	uint64_t block_count;
	uint64_t max_stored, max_raw;
	uint32_t max_alignment;
};

/*
 * dataset_load - resolve @path as sluice_dataset_open() does (directory
 * with dataset.json, shard file, comma list, glob) and parse every header
 * and index (bounds-checked, checksums verified).  On failure writes
 * "PATH: what" into @err; @out is then empty (dataset_free is still safe).
 * @return: 0, -errno, -SLUICE_EFORMAT, -SLUICE_ECORRUPT, -SLUICE_ESCHEMA.
 */
int dataset_load(const char *path, struct dataset *out, char *err,
		 size_t errlen);
void dataset_free(struct dataset *ds);

/* The block table behind an open public handle (borrowed: valid until
 * sluice_dataset_close).  NULL when @ds is NULL or failed to open. */
const struct dataset *dataset_table(const sluice_dataset *ds);

/* ------------------------------------------------------------------ */
/* Reading a block                                                     */
/* ------------------------------------------------------------------ */

/*
 * A decoded block seen through its layout.  Built by block_view_init(),
 * which checks every offset table (monotone, within the block) so that
 * later accesses need no checks.
 */
struct block_view {
	uint32_t n;
	const uint8_t *data[DLS_MAX_FIELDS];      /* field section start */
	const uint64_t *offsets[DLS_MAX_FIELDS];  /* variable fields only */
};

/*
 * A block reader: the buffers and zstd context that block_read() reuses
 * from one block to the next.  A zeroed struct is ready; free with
 * block_reader_free().  One thread at a time.
 */
struct block_reader {
	ZSTD_DCtx *dctx;
	void *stored, *raw;         /* 64-byte aligned; grow as needed */
	uint64_t stored_cap, raw_cap;
};

/*
 * block_read - read block @b of @sf from @fd (open on sf->path), check its
 * XXH3, decompress it, and build its view in @view, which points into @br
 * until the next block_read or block_reader_free.  @s: the fields of
 * @sf's dataset (or the schema shard_open filled); values are bounded by
 * @sf's own max_value_bytes.  No size from the index is trusted for an
 * allocation before the data agrees with it.  On failure writes
 * "PATH: block B: offset O: what" into @err.
 * @return: 0, -errno (read), -ENOMEM, -SLUICE_ECORRUPT (short file,
 *	checksum, sizes, layout, a value over the shard's bound),
 *	-SLUICE_EZSTD.
 */
int block_read(struct block_reader *br, int fd, const struct shard_schema *s,
	       const struct shard_file *sf, uint64_t b, struct block_view *view,
	       char *err, size_t errlen);
void block_reader_free(struct block_reader *br);

/* Field @f of record @i (0-based within the block). */
static inline void block_view_get(const struct shard_schema *s,
				  const struct block_view *v, uint32_t f,
				  uint32_t i, const uint8_t **ptr,
				  uint64_t *len)
{
	if (s->fields[f].variable) {
		*ptr = v->data[f] + v->offsets[f][i];
		*len = v->offsets[f][i + 1] - v->offsets[f][i];
	} else {
		*len = s->fields[f].record_bytes;
		*ptr = v->data[f] + (uint64_t)i * *len;
	}
}

/*
 * dataset_verify - check every structural bound and checksum of the
 * dataset or shard at @path (headers, indexes, every block's XXH3, every
 * decoded block's layout, manifest against shards).  Calls @report once
 * per problem with a line "FILE: block B: offset O: what" (block and
 * offset omitted where they do not apply).
 * @return: number of problems (0: clean), or a negative code when the
 *	check itself could not run (then @report got the reason).
 */
typedef void (*verify_report_fn)(void *ctx, const char *line);
long dataset_verify(const char *path, verify_report_fn report, void *ctx);

/* ------------------------------------------------------------------ */
/* Files                                                               */
/* ------------------------------------------------------------------ */

/*
 * file_open_regular - open @path with @flags (O_RDONLY, O_RDWR; O_CLOEXEC
 * is added) for a reader, never blocking: it opens with O_NONBLOCK, so
 * that a FIFO without a writer cannot hang the open, refuses anything but
 * a regular file, and hands back a blocking descriptor.
 * @st: out, the file's stat (may be NULL).
 * @return: a descriptor; -errno; -SLUICE_EFORMAT for a file that is not
 *	regular, with "PATH: not a regular file (it is a FIFO)" in @err.
 */
int file_open_regular(const char *path, int flags, struct stat *st,
		      char *err, size_t errlen);

/* "a FIFO", "a directory", ...: what a file of @mode is, for messages. */
const char *file_kind(mode_t mode);

/* Whether the page cache holds at least half of @fd's pages (cachestat,
 * else mincore; 0 when the kernel cannot say): direct_io AUTO reads such
 * a file buffered, and the bench's disk probe does as the loader did. */
int file_mostly_cached(int fd);

/* ------------------------------------------------------------------ */
/* The writer lock of a folder                                         */
/* ------------------------------------------------------------------ */

/* Every writer and merge holds an exclusive flock on DIR/.sluice.lock
 * while it writes into DIR, with its pid written in the file. */
#define DIR_LOCK_NAME ".sluice.lock"

/*
 * dir_lock - take the lock of @dir (which exists) and write this
 * process's pid into it.  *@fd receives the lock's descriptor.
 * @return: 0; -EBUSY when another process holds it (@err names the
 *	holder's pid); -errno.
 */
int dir_lock(const char *dir, int *fd, char *err, size_t errlen);

/* Remove the lock file and release it (@fd < 0: nothing to do). */
void dir_unlock(const char *dir, int fd);

/*
 * dir_lock_holder - whether a live process holds the lock of @dir,
 * without taking it.  *@pid: the pid written in the lock file (0 when
 * none could be read): the holder's when @return is 1, the last
 * holder's (dead: a killed writer) when 0.
 * @return: 1 held; 0 no lock file, or one nobody holds; -errno.
 */
int dir_lock_holder(const char *dir, long *pid);

/* ------------------------------------------------------------------ */
/* Loader instruments (tests, benchmarks)                              */
/* ------------------------------------------------------------------ */

/*
 * The forced ON modes of two public tri-states (sluice.h names only AUTO
 * and OFF):
 * - range_reads ON: record-range reads in every shuffle mode, not only
 *   FULL;
 * - device_gather ON: also for zstd datasets (their blocks are then
 *   uploaded, not decompressed into the batch) and on the host device (a
 *   memcpy per run: what the CPU assembly costs); not when a batch's
 *   blocks do not fit memory_bytes at once (stats.fallbacks says so).
 */
#define SLUICE_RANGE_READS_ON SLUICE_RANGE_READS_RESERVED1
#define SLUICE_DEVICE_GATHER_ON SLUICE_DEVICE_GATHER_RESERVED1

/*
 * Forced fallbacks: both stay correct, only slower, and
 * sluice_stats.fallbacks says they are on.
 */
enum sluice_force {
	SLUICE_FORCE_PLAIN_READS = 1u << 0,     /* no io_uring registered
						   buffers */
	SLUICE_FORCE_PAGEABLE_COPIES = 1u << 1, /* no cudaHostRegister of
						   the arena: copies from
						   pageable memory */
	SLUICE_FORCE_WHOLE_BLOCK_CHECKS = 1u << 2, /* checksums once a
						   block is whole, not as
						   its pieces land (the
						   A/B of stream.c) */
	SLUICE_FORCE_HOST_CHECKS = 1u << 3,     /* blocks uploaded for
						   gathers checksummed on
						   the CPU, not on the
						   device (the A/B of
						   gather_check) */
};

/*
 * The forced fallbacks live in the last word of the config's reserved
 * space, which sluice.h documents as zero, so that the public struct does
 * not name them.  Call after sluice_loader_config_init().
 */
#define SLUICE_CONFIG_FORCE_WORD(cfg) \
	((cfg)->reserved[sizeof((cfg)->reserved) / sizeof((cfg)->reserved[0]) - 1])

static inline void sluice_loader_config_force(struct sluice_loader_config *cfg,
					      unsigned flags)
{
	SLUICE_CONFIG_FORCE_WORD(cfg) |= flags;
}

/* The fallbacks @cfg forces (SLUICE_FORCE_* bits). */
static inline unsigned
sluice_loader_config_forced(const struct sluice_loader_config *cfg)
{
	return (unsigned)SLUICE_CONFIG_FORCE_WORD(cfg);
}

/*
 * A slow device, for benchmarks: every read starts @us microseconds after
 * it is submitted (a linked io_uring timeout), so the delivered rate
 * shows how many bytes the loader keeps in flight (rate x latency).
 * Kept in the config's next-to-last reserved word.  0: none.
 */
#define SLUICE_CONFIG_READ_DELAY_WORD(cfg) \
	((cfg)->reserved[sizeof((cfg)->reserved) / sizeof((cfg)->reserved[0]) - 2])

static inline void
sluice_loader_config_read_delay(struct sluice_loader_config *cfg, uint32_t us)
{
	SLUICE_CONFIG_READ_DELAY_WORD(cfg) = us;
}

/**
 * sluice_loader_measure_h2d - the PCIe limit as this loader sees it:
 * @iters cudaMemcpyAsync calls of @bytes each from the loader's own host
 * arena (its batch slots: pinned, unless sluice_stats.device_pinned says
 * otherwise) to the loader's GPU, on the loader's copy stream, timed with
 * CUDA events.  @bytes is capped at the arena's size.  The destination
 * is a scratch allocation made and freed by this call (the device slots
 * may hold batches still in use), so nothing the loader delivers is
 * touched.  Copies the loader has in flight share the link: call it when
 * the loader is idle (after the last batch wanted) for a clean figure.
 * @bytes_per_s: out; 0 on failure.
 * @return: 0; -SLUICE_ENODEVICE when the loader's batches stay on the
 *	host (no link to measure); -SLUICE_ECUDA (message in
 *	sluice_loader_error()); -EINVAL (@bytes 0, @iters < 1, no loader).
 * Thread-safety: the consumer thread.
 */
int sluice_loader_measure_h2d(sluice_loader *ld, uint64_t bytes, int iters,
			      double *bytes_per_s);

/**
 * sluice_loader_compute - stand in for a training step of @ms
 * milliseconds.  On a GPU loader: enqueue on @stream (the consumer's
 * cudaStream_t as an integer; 0 the legacy default stream) a kernel that
 * keeps every SM busy for @ms of wall time, then wait until @stream has
 * finished everything queued on it, like a step ending in loss.item().
 * With @ms 0 only the wait.  Work on @stream is ordered after the copies
 * of the batches whose tensors were exported to it, so a step that
 * starts late shows the loader's delay.  On a host loader: spin the
 * calling thread for @ms.
 * @return: 0; -SLUICE_ECUDA; -EINVAL (@ms negative or over an hour,
 *	@stream below 0, no loader).
 * Thread-safety: any thread.
 */
int sluice_loader_compute(sluice_loader *ld, int64_t stream, double ms);

#endif /* SLUICE_TOOLS_H */
