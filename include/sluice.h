/*
 * sluice.h - stream sharded record datasets from NVMe into GPU memory.
 *
 * The whole public C API.  Conventions (liburing, libuv):
 * - functions return 0 (or a count) on success and a negative code on
 *   failure: -errno, or one of the SLUICE_E* codes below;
 * - the library never prints, never exits and never sets errno;
 * - each handle keeps the last detailed message (file, shard, block,
 *   offset), copied out with sluice_*_error(handle, buf, len);
 * - create/destroy come in pairs and every destroy accepts NULL.
 *
 * - structs can grow without breaking libsluice.so.1:
 *   - configs (the structs the library reads) end in reserved space:
 *     start from the *_config_init() defaults, never from a struct of
 *     your own;
 *   - statistics (the structs the library fills: sluice_stats,
 *     sluice_writer_summary) begin with a size field that the caller
 *     sets to sizeof the struct it was compiled with; the library fills
 *     that many bytes at most and sets size to how many it filled, so a
 *     program built against an older header gets the fields it knows;
 * - every tri-state ("auto, on or off") has AUTO = 0, ON = 1, OFF = 2, so
 *   a zeroed field means automatic;
 * - test and benchmark instruments (forced fallbacks, forced ON modes,
 *   probes) are not part of this API: they are in sluice_tools.h, which
 *   is not installed.
 *
 * Typical use (one epoch; tests/test_header_example.c compiles and runs
 * exactly this text):
 *
 *	sluice_dataset *ds = NULL;
 *	sluice_loader *ld = NULL;
 *	struct sluice_loader_config cfg;
 *	sluice_batch *b;
 *	DLManagedTensor *t;
 *	char msg[256] = "";
 *	int r;
 *
 *	r = sluice_dataset_open("data/train", &ds);
 *	if (r < 0) {
 *		sluice_dataset_error(ds, msg, sizeof(msg));
 *	} else {
 *		sluice_loader_config_init(&cfg);
 *		cfg.batch_size = 256;
 *		r = sluice_loader_open(ds, &cfg, &ld);
 *	}
 *	while (r == 0 && (r = sluice_loader_next(ld, &b)) == 0) {
 *		r = sluice_batch_tensor(b, "data", 0, &t);
 *		if (r == 0)
 *			t->deleter(t);  // done with t->dl_tensor
 *		sluice_batch_release(b);
 *	}
 *	if (r < 0 && ld)  // r == SLUICE_EOF: the epoch ended
 *		sluice_loader_error(ld, msg, sizeof(msg));
 *	sluice_loader_close(ld);
 *	sluice_dataset_close(ds);
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice_dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SLUICE_API
#else
#define SLUICE_API __attribute__((visibility("default")))
#endif

#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 2
#define SLUICE_VERSION_PATCH 0

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/* Codes outside the errno range; returned negated like -errno. */
enum sluice_error {
	SLUICE_ECORRUPT = 10000, /* a checksum or structural bound failed */
	SLUICE_ESCHEMA,          /* fields do not match / bad field spec */
	SLUICE_EFORMAT,          /* not a dlpack-shard file, bad version */
	SLUICE_EZSTD,            /* zstd reported an error */
	SLUICE_ECUDA,            /* the CUDA runtime reported an error */
	SLUICE_ENODEVICE,        /* no usable GPU */
	SLUICE_EINPUT,           /* an importer's source is malformed */
	SLUICE_ESTATE,           /* a saved state does not fit this loader */
	SLUICE_ECLOSED,          /* the loader failed earlier or is closing */
};

/* Returned by sluice_loader_next() when the epoch has no more batches. */
#define SLUICE_EOF 1

/**
 * sluice_strerror - static text naming an error code.
 * @code: a value returned by any sluice function (negative or not).
 * @return: never NULL; "success" for 0.
 * Thread-safety: safe from any thread.
 */
SLUICE_API const char *sluice_strerror(int code);

/* ------------------------------------------------------------------ */
/* Schema                                                              */
/* ------------------------------------------------------------------ */

#define SLUICE_NAME_MAX 48
#define SLUICE_MAX_NDIM 6
#define SLUICE_MAX_FIELDS 32

/* One field of a record.  shape[0] == -1 makes it variable-length. */
struct sluice_field {
	char name[SLUICE_NAME_MAX];
	DLDataType dtype;
	int32_t ndim;
	int64_t shape[SLUICE_MAX_NDIM];
};

/**
 * sluice_dtype_parse - parse "uint8", "int64", "float16", "bfloat16",
 * "bool", ... into a DLPack dtype.
 * @return: 0, or -SLUICE_ESCHEMA for an unknown name.
 * Thread-safety: safe from any thread.
 */
SLUICE_API int sluice_dtype_parse(const char *name, DLDataType *out);

/**
 * sluice_dtype_name - the name sluice_dtype_parse() accepts for @dtype.
 * @return: static text, or NULL for a dtype sluice does not store.
 * Thread-safety: any thread.
 */
SLUICE_API const char *sluice_dtype_name(DLDataType dtype);

/* ------------------------------------------------------------------ */
/* Datasets                                                            */
/* ------------------------------------------------------------------ */

typedef struct sluice_dataset sluice_dataset;

/**
 * sluice_dataset_open - open a dataset for reading.
 * @path: a dataset directory (with dataset.json), one shard file, a
 *	comma-separated list of shard files, or a glob ("dir/data-*.dls").
 *	Borrowed for the call.
 * @out: receives the handle; on failure receives a handle that only
 *	carries the error message (read it with sluice_dataset_error(),
 *	then close it), or NULL when even that could not be allocated.
 * Every header and index is parsed and bounds-checked; blocks are not read.
 * Shards are checked against their dataset (format v2): by dataset.json
 * (each name's dataset id, index and content checksum) for a directory;
 * for a list or glob, each dataset's shards must form one whole run, in
 * order (a glob otherwise trusts the caller).  A shard of a write that
 * did not finish is refused.  v1 shards carry no identity and are not.
 * @return: 0; -ENOENT, -EIO, ...; -SLUICE_EFORMAT, -SLUICE_ECORRUPT
 *	(also: a duplicated, swapped, foreign, missing or uncommitted
 *	shard), -SLUICE_ESCHEMA (shards disagree).
 * Thread-safety: the handle may be read from many threads at once.
 */
SLUICE_API int sluice_dataset_open(const char *path, sluice_dataset **out);

/**
 * sluice_dataset_close - release @ds (NULL is fine), also a handle whose
 * open failed.  Loaders opened on it must be closed first.
 * Thread-safety: no other call on @ds may run or follow.
 */
SLUICE_API void sluice_dataset_close(sluice_dataset *ds);

/**
 * sluice_dataset_error - copy the last detailed message of @ds into @buf
 * (@len bytes, always NUL-terminated when @len > 0).
 * @return: the message length, as snprintf (may exceed @len - 1).
 * Thread-safety: any thread.
 */
SLUICE_API int sluice_dataset_error(const sluice_dataset *ds, char *buf,
				    size_t len);

/*
 * Totals read from the headers and indexes at open: records, shard files,
 * blocks, fields.  0 for NULL or a handle whose open failed.
 * Thread-safety: any thread.
 */
SLUICE_API uint64_t sluice_dataset_records(const sluice_dataset *ds);
SLUICE_API uint32_t sluice_dataset_shards(const sluice_dataset *ds);
SLUICE_API uint64_t sluice_dataset_blocks(const sluice_dataset *ds);
SLUICE_API int sluice_dataset_field_count(const sluice_dataset *ds);
/** sluice_dataset_field - schema of field @i; NULL when out of range.
 * The pointer is owned by @ds and lives as long as it.
 * Thread-safety: any thread. */
SLUICE_API const struct sluice_field *
sluice_dataset_field(const sluice_dataset *ds, int i);

/**
 * sluice_dataset_read - read one record's field with pread (slow path, for
 * tools and tests; the loader is the fast path).
 * @buf: caller memory of @cap bytes; @len receives the field's byte length
 *	even when it exceeds @cap (then nothing is copied, -ENOSPC).
 * The block is checksum-verified.
 * @return: 0; -ERANGE (index), -ENOENT (field), -ENOSPC, -EIO,
 *	-SLUICE_ECORRUPT, -SLUICE_EZSTD.
 * Thread-safety: safe from many threads on the same handle.
 */
SLUICE_API int sluice_dataset_read(sluice_dataset *ds, uint64_t index,
				   const char *field, void *buf, size_t cap,
				   size_t *len);

/**
 * sluice_dataset_class_count - how many class names dataset.json keeps for
 * a label field (an ImageFolder import's folders: label i is class i).
 * @field: out, the label field's name (NULL when there are none); may be
 *	NULL.  Datasets written before class names were kept, lists and
 *	globs of shards have none.
 * @return: the count (0: none); -EINVAL for a handle whose open failed.
 * Thread-safety: any thread.
 */
SLUICE_API int64_t sluice_dataset_class_count(const sluice_dataset *ds,
					      const char **field);
/** sluice_dataset_class_name - the name of label @label; NULL past the
 * count.  Owned by @ds, lives as long as it.  Thread-safety: any thread. */
SLUICE_API const char *sluice_dataset_class_name(const sluice_dataset *ds,
						 uint32_t label);

/* ------------------------------------------------------------------ */
/* Writing shards                                                      */
/* ------------------------------------------------------------------ */

typedef struct sluice_writer sluice_writer;

/* Compression workers per writer when the config says 0: a few, not one per
 * CPU, since a cluster node runs many writers (Spark or Ray tasks) at once;
 * capped by the CPUs this process may run on (sched_getaffinity). */
#define SLUICE_WRITER_DEFAULT_THREADS 4

struct sluice_writer_config {
	const char *prefix;          /* shard names PREFIX-00000.dls; "data" */
	uint64_t shard_size;         /* stored bytes per shard; 0: unbounded */
	uint64_t records_per_shard;  /* 0: unbounded; exclusive w/ shard_size */
	uint64_t block_size;         /* target raw bytes per block; 1 MiB */
	int compression_level;       /* 0: raw blocks; 1..22: zstd level */
	uint32_t threads;            /* compression workers; 0: the default,
					SLUICE_WRITER_DEFAULT_THREADS or
					fewer when fewer CPUs are ours */
	uint32_t alignment;          /* block alignment; 4096 */
	int no_manifest;             /* 1: do not write dataset.json */
	uint64_t reserved[8];        /* zero (config_init): room to grow */
};

/** sluice_writer_config_init - fill @cfg with the documented defaults
 * (every other byte zero).  Thread-safety: any thread. */
SLUICE_API void sluice_writer_config_init(struct sluice_writer_config *cfg);

/**
 * sluice_writer_open - start writing a dataset into directory @out_dir
 * (created when missing; it must not hold a dataset.json or *.dls).
 * @fields, @nfields: the schema, copied.
 * The writer holds an exclusive lock on @out_dir (OUT/.sluice.lock)
 * until it is closed or aborted: a second writer or merge into the same
 * folder fails at once with -EBUSY.  Every shard is written under a
 * temporary name unique to this writer (".NAME.ID.tmp") with a header
 * marked uncommitted; only when the whole dataset is written (close)
 * are the headers committed (each gets the dataset's shard count),
 * synced and the shards renamed, then dataset.json is written,
 * atomically.  So what a failed or killed write leaves is refused by
 * every reader, by dataset.json or by glob.  Each dataset gets a random
 * 128-bit id, recorded with each shard's index in its header.
 * Memory stays bounded by a few blocks per worker thread, the open
 * shard's index and 512 KiB of record checksums (the rest of a shard's
 * wait in an unlinked temporary file in @out_dir): it does not grow with
 * records per shard.
 * @out_dir, @cfg: borrowed for the call.
 * @out: the writer; on failure a writer carrying only the message
 *	(sluice_writer_error(), then sluice_writer_abort()), or NULL.
 * @return: 0; -EINVAL, -SLUICE_ESCHEMA, -EBUSY (another writer holds
 *	@out_dir), -EEXIST (@out_dir holds a dataset), -errno.
 * Thread-safety: one thread at a time per writer (the writer runs its
 *	own compression threads).
 */
SLUICE_API int sluice_writer_open(const char *out_dir,
				  const struct sluice_field *fields,
				  int nfields,
				  const struct sluice_writer_config *cfg,
				  sluice_writer **out);

/**
 * sluice_writer_add - append one record.
 * @values[i], @lengths[i]: field i's bytes (borrowed for the call).  A
 *	fixed field must have exactly its size; a variable one a multiple of
 *	its unit (item size times trailing dims), possibly 0.
 * @return: 0; -SLUICE_ESCHEMA (bad length), -errno, -SLUICE_EZSTD.
 *	After an error the writer only accepts sluice_writer_abort().
 * Thread-safety: one thread at a time per writer.
 */
SLUICE_API int sluice_writer_add(sluice_writer *w, const void *const *values,
				 const uint64_t *lengths);

/* One field's values for @n records, column-wise (sluice_writer_add_columns).
 * A fixed field: @values holds n x field bytes back to back, @offsets NULL.
 * A variable field: record i is bytes [offsets[i], offsets[i+1]) of
 *	@values (n + 1 nondecreasing byte offsets, offsets[n] <= values_len;
 *	offsets[0] need not be 0, so a slice of a larger column works), or,
 *	with @offsets NULL, every record takes values_len / n bytes. */
struct sluice_column {
	const void *values;
	uint64_t values_len;        /* bytes readable at @values */
	const uint64_t *offsets;    /* NULL or n + 1 byte offsets */
	uint64_t reserved[2];       /* zero */
};

/**
 * sluice_writer_add_columns - append @n records given column-wise, one
 * sluice_column per field in schema order (the Python write_batch path:
 * Arrow or NumPy columns without a per-record call from Python).
 * @cols: @ncols columns, borrowed for the call; @ncols must equal the
 *	schema's field count.
 * Every column is checked (lengths, offsets in bounds and nondecreasing)
 * before any record is appended; then the records are appended as by
 * sluice_writer_add, in order.
 * @return: 0; -EINVAL (bad column), -SLUICE_ESCHEMA (a length that does
 *	not fit its field), -errno, -SLUICE_EZSTD.  The message names the
 *	field and the record (sluice_writer_error()).  After an error the
 *	writer only accepts sluice_writer_abort().
 * Thread-safety: one thread at a time per writer.
 */
SLUICE_API int sluice_writer_add_columns(sluice_writer *w, uint64_t n,
					 const struct sluice_column *cols,
					 int ncols);

/* Totals of a finished (or merged) dataset.  Set size to sizeof(struct
 * sluice_writer_summary) before the call (see the top of this file). */
struct sluice_writer_summary {
	uint32_t size;             /* in: sizeof; out: the bytes filled */
	uint64_t records;
	uint64_t blocks;
	uint32_t shards;
	uint64_t raw_bytes;
	uint64_t stored_bytes;
	double seconds;
};

/**
 * sluice_writer_close - flush, finish the last shard, commit the shards
 * (see sluice_writer_open), write dataset.json and free @w (in every
 * case: @w is invalid afterwards).
 * @summary: filled on success; may be NULL; its size field set by the
 *	caller (a size of 0 fails with -EINVAL, before anything is written).
 * @return: 0, or a negative code (every shard of this writer is then
 *	removed: nothing of a dataset that did not complete remains).
 * Thread-safety: no other call on @w may run or follow.
 */
SLUICE_API int sluice_writer_close(sluice_writer *w,
				   struct sluice_writer_summary *summary);

/** sluice_writer_abort - stop, remove every shard this writer wrote
 * (all are still uncommitted), release the folder, free @w (NULL ok).
 * Thread-safety: no other call on @w may run or follow. */
SLUICE_API void sluice_writer_abort(sluice_writer *w);

/** sluice_writer_error - copy the last detailed message of @w into @buf.
 * @return: its length, as snprintf.  Thread-safety: any thread. */
SLUICE_API int sluice_writer_error(const sluice_writer *w, char *buf,
				   size_t len);

/**
 * sluice_writer_set_classes - keep @n class names for the int64 scalar
 * field @field in dataset.json (label i is @names[i]); copied, so
 * @names may be freed on return.  Replaces names set before.
 * @return: 0; -EINVAL (no such int64 scalar field, a name of 4096 bytes
 *	or more, over 2^20 names); -ENOMEM.  @w is unchanged after an error.
 * Thread-safety: not with other calls on @w.
 */
SLUICE_API int sluice_writer_set_classes(sluice_writer *w, const char *field,
					 const char *const *names, uint32_t n);

/** sluice_writer_progress - records, raw and stored bytes accepted so far
 * (for progress lines; any pointer may be NULL).
 * Thread-safety: any thread, also while another adds records. */
SLUICE_API void sluice_writer_progress(const sluice_writer *w,
				       uint64_t *records, uint64_t *raw_bytes,
				       uint64_t *stored_bytes);

/* sluice_merge flags */
#define SLUICE_MERGE_VERIFY 1u  /* check every block checksum first */
#define SLUICE_MERGE_COPY 2u    /* copy every shard, never hard-link */

/**
 * sluice_merge - join datasets written as parts (folders with a
 * dataset.json) into one new dataset at @out_dir, in the order given,
 * without rewriting block data: shards are hard-linked, or copied when
 * the link fails (or always, with SLUICE_MERGE_COPY).  A hard link is
 * the same file as its source: a source later edited in place changes
 * the merged dataset too (its checks then refuse it); copy when the
 * parts will be changed or must stay independent.  No source file is
 * ever removed or written.
 * Every part is loaded and checked first (each shard's records, blocks,
 * size and identity against its dataset.json); with SLUICE_MERGE_VERIFY
 * every block's checksum and layout too, before anything is written.
 * @out_dir must not be one of the parts and must be new or empty; it is
 * locked as a writer locks it.  The merged dataset.json gets a new
 * dataset id and records each shard's own (its part's) identity.
 * On failure, what the merge created in @out_dir is removed.
 * @parts, @out_dir: borrowed for the call.  @summary may be NULL; its
 *	size field set by the caller.
 * @flags: 0, or SLUICE_MERGE_VERIFY and/or SLUICE_MERGE_COPY.
 * @err, @errlen: receive a message on failure (may be NULL).
 * @return: 0; -EINVAL (no parts, @out_dir is a part, the parts hold
 *	a shard twice, or @summary's size is 0); -ENOTEMPTY; -EBUSY (another writer holds
 *	@out_dir); -SLUICE_ESCHEMA (schemas differ); -SLUICE_ECORRUPT (a
 *	part fails its checks); -errno.
 * Thread-safety: any thread (no shared state); parts are only read.
 */
SLUICE_API int sluice_merge(const char *const *parts, int nparts,
			    const char *out_dir, unsigned flags,
			    struct sluice_writer_summary *summary, char *err,
			    size_t errlen);

/* ------------------------------------------------------------------ */
/* The loader                                                          */
/* ------------------------------------------------------------------ */

typedef struct sluice_loader sluice_loader;
typedef struct sluice_batch sluice_batch;

enum sluice_shuffle {
	SLUICE_SHUFFLE_NONE = 0,   /* file order */
	SLUICE_SHUFFLE_BLOCK,      /* block order shuffled, records in order */
	SLUICE_SHUFFLE_WINDOW,     /* blocks shuffled, records within W blocks */
	SLUICE_SHUFFLE_FULL,       /* a random permutation of records */
};

/*
 * The tri-states.  AUTO is 0 and OFF is 2 in every one, so a zeroed field
 * means automatic.  ON is 1 where the public API has it; where it is a
 * test and benchmark instrument, value 1 is a placeholder that
 * sluice_tools.h names (as zstd.h's ZSTD_c_experimentalParam*): do not
 * use it.
 */
enum sluice_direct_io {
	SLUICE_DIRECT_IO_AUTO = 0, /* buffered for shards the page cache
				      mostly holds (cachestat, else
				      mincore), O_DIRECT for the others
				      where the filesystem allows */
	SLUICE_DIRECT_IO_ON = 1,   /* O_DIRECT wherever the fs allows */
	SLUICE_DIRECT_IO_OFF = 2,  /* buffered reads */
};

/* Whether a loader reads record ranges (sluice_loader_config.range_reads). */
enum sluice_range_reads {
	SLUICE_RANGE_READS_AUTO = 0, /* for shuffle FULL */
	SLUICE_RANGE_READS_RESERVED1 = 1, /* sluice_tools.h; do not use */
	SLUICE_RANGE_READS_OFF = 2,  /* always whole blocks */
};

/* Where a CUDA loader assembles batches (sluice_loader_config.device_gather). */
enum sluice_device_gather {
	SLUICE_DEVICE_GATHER_AUTO = 0, /* on a GPU; zstd datasets unless
					  their blocks go whole into
					  batches (decompressed there) */
	SLUICE_DEVICE_GATHER_RESERVED1 = 1, /* sluice_tools.h; do not use */
	SLUICE_DEVICE_GATHER_OFF = 2,  /* batches assembled on the CPU */
};

/* The most record checksums a loader loads for range reads (bytes). */
#define SLUICE_RANGE_SUMS_MAX (256ull << 20)

enum sluice_device_kind {
	SLUICE_DEVICE_AUTO = 0,    /* cuda when a GPU is usable, else host */
	SLUICE_DEVICE_HOST,
	SLUICE_DEVICE_CUDA,        /* fails with -SLUICE_ENODEVICE w/o GPU */
};

enum sluice_on_error {
	SLUICE_ON_ERROR_FAIL = 0,  /* corrupt data fails the loader */
	SLUICE_ON_ERROR_SKIP,      /* skip the records, count them */
};

enum sluice_stage {
	SLUICE_STAGE_READ = 0,     /* one io_uring read, submit to completion */
	SLUICE_STAGE_DECODE,       /* verify + decompress of one block */
	SLUICE_STAGE_ASSEMBLE,     /* one assembly part of a batch */
	SLUICE_STAGE_COPY,         /* issuing one batch's device copy */
};

struct sluice_loader_config {
	uint32_t batch_size;       /* records per batch; 256 */
	enum sluice_shuffle shuffle; /* WINDOW */
	uint32_t window_blocks;    /* W for SHUFFLE_WINDOW; 16.  Where the
				      default memory_bytes is capped and a
				      batch's blocks would not fit, halved
				      until they do (stats.fallbacks says
				      so; the order then depends on it) */
	uint64_t seed;             /* 0 */
	int drop_last;             /* drop a short last batch; 0 */
	int rank;                  /* -1: $RANK, else 0 */
	int world_size;            /* -1: $WORLD_SIZE, else 1 */
	uint32_t prefetch_depth;   /* batches in flight (memory: see
				      memory_bytes); 4 */
	uint32_t decode_threads;   /* 0: the CPUs this process may use,
				      divided among $LOCAL_WORLD_SIZE
				      ranks, at most 32 */
	uint32_t queue_depth;      /* io_uring entries; 64 */
	enum sluice_device_kind device; /* AUTO */
	int device_id;             /* -1: $LOCAL_RANK, else 0 */
	int verify;                /* check each block's XXH3; 1 */
	enum sluice_on_error on_error; /* FAIL */
	enum sluice_direct_io direct_io; /* AUTO (-1, the value before
				      0.2, still means AUTO) */
	int sqpoll;                /* IORING_SETUP_SQPOLL; 0 */
	uint32_t pad_length;       /* 0: variable fields as values+offsets;
				      L: padded [B, L] + F.lengths, the
				      true lengths (values past L are cut
				      and counted: values_truncated) */
	uint64_t cache_bytes;      /* decoded-block cache (within
				      memory_bytes): io memory for blocks
				      as read and decoded; 0: automatic.
				      When it holds every block, each is
				      read once: batches then copy from
				      the cache rather than view or decode
				      into their blocks, which would read
				      them again each epoch */
	/*
	 * The memory budget: the bytes of the loader's one arena, which
	 * holds every io buffer, decode buffer and host batch (on CUDA the
	 * device holds a copy of the batch part, and the whole arena is
	 * pinned).  0 (default): what the dataset's index says prefetch_depth
	 * + 1 typical batches (one more with variable-length fields), the block
	 * cache, the two largest batches (the one held and the next) and
	 * the largest block need, capped at an eighth
	 * of RAM or of the control group's memory limit when lower, divided
	 * among $LOCAL_WORLD_SIZE ranks (an explicit cache_bytes is not
	 * capped).  Given: exactly that, what batches do not want going to
	 * the block cache (up to every block, unless cache_bytes is set),
	 * and an
	 * explicit cache_bytes that does not fit beside one batch fails
	 * open with -ENOSPC.  The arena is made resident at open.  Batches
	 * take what their records need; the planner fills a slot only when
	 * the budget has room.  A batch larger than the whole batch part
	 * (memory_bytes minus the io part) fails the loader with -ENOSPC and
	 * a message naming its largest value's file, record and field and
	 * this option; so does a block too large to read within the budget
	 * (at open).  A consumer that holds all batch memory and asks for
	 * more gets batches outside the budget on the host (freed on
	 * release, counted in stats.batches_over_budget) and -EDEADLK on
	 * CUDA.  Metadata (indices, slot bookkeeping) is not counted.
	 */
	uint64_t memory_bytes;
	/*
	 * Optional tracing: called once per unit of work after it ends, on
	 * the pipeline thread that did it (so it must be thread-safe and
	 * quick).  Times are CLOCK_MONOTONIC ns;
	 * @bytes: stored bytes (read), raw bytes (decode), bytes copied
	 * (assemble, copy).  NULL: off.
	 */
	void (*on_span)(void *ctx, enum sluice_stage stage, uint64_t start_ns,
			uint64_t end_ns, uint64_t bytes);
	void *on_span_ctx;
	/*
	 * Record-range reads: read only the byte ranges of a batch's
	 * records instead of their whole blocks (one io_uring submission
	 * per batch, neighbours coalesced), for raw blocks.  A variable
	 * field's values are found through its blocks' offsets tables,
	 * read at open with every section's start (8 bytes per record and
	 * variable field, up to SLUICE_RANGE_SUMS_MAX bytes, for datasets of
	 * at most 65536 blocks: past that, by block).  With verify on,
	 * only shards of format v3 qualify (each record has its checksum,
	 * checked before it goes into the batch; a mismatch is a corrupt
	 * record, skipped with on_error=skip); their checksums are loaded
	 * at open, 8 bytes per record, up to SLUICE_RANGE_SUMS_MAX bytes in
	 * all: shards past
	 * that, and older shards, are read by block.  Small fields (at most
	 * 64 bytes per record, such as labels) are read at open too, up to
	 * 64 MiB in all and for datasets of at most 65536 blocks, so that a
	 * record costs one read.  This memory is outside memory_bytes; the
	 * reads' io memory is inside.  AUTO (default): for shuffle FULL
	 * only, and not when cache_bytes, or an explicit memory_bytes
	 * beside its batches, holds every block (the cache then reads each
	 * block once, range reads every epoch); OFF: never.
	 */
	enum sluice_range_reads range_reads;
	/*
	 * Device gather: on a GPU, each decoded block is copied once to
	 * the device (a mirror of the arena's io memory, io_memory_bytes
	 * more of GPU memory) and each batch is gathered there by a kernel
	 * from its records' bytes, instead of being assembled on the CPU
	 * and copied: raw data then crosses the CPU's memory only by the
	 * disk's DMA.  Variable-length fields too (their offsets or lengths
	 * are worked out on the host).  Batches whose records were read by
	 * range are gathered where every field but the largest is kept in
	 * memory (or verify is off) and each value fits a 4 MiB staging
	 * buffer; else they are assembled on the CPU.  AUTO (default): on
	 * a GPU, zstd datasets too unless one field's blocks go whole and
	 * in order into batches (shuffle none or block, a block no larger
	 * than a batch: they decompress straight into the batch); OFF:
	 * never.
	 * sluice_stats.batches_gathered says which
	 * batches went this way.
	 */
	enum sluice_device_gather device_gather;
	/*
	 * Epochs the job will run.  0 (default): no end; the end of each
	 * epoch plans and reads ahead into the next.  E: the loader plans
	 * no batch past epoch E-1, so the last epoch's end reads nothing in
	 * vain (on the H100 host the read-ahead held 35 blocks of 64 MiB);
	 * from epoch E on, next() returns SLUICE_EOF at once and
	 * sluice_loader_batches() 0, until set_epoch or state_set go back
	 * to an earlier epoch.
	 */
	uint64_t epochs;
	uint64_t reserved[7];      /* zero (config_init): room to grow */
};

/** sluice_loader_config_init - fill @cfg with the defaults above (every
 * other byte zero).  Thread-safety: any thread. */
SLUICE_API void sluice_loader_config_init(struct sluice_loader_config *cfg);

/**
 * sluice_loader_open - start a loader over @ds.
 * All memory (pinned arena, io buffers, batch memory, device memory) is
 * allocated here, sized by memory_bytes; the steady state allocates
 * nothing (but see memory_bytes for a consumer that hoards batches).
 * The loader starts at epoch 0 and begins prefetching at once.
 * @ds: borrowed; must outlive the loader.
 * @cfg: copied; NULL means the defaults.
 * @out: the loader; on failure a handle carrying only the error message
 *	(sluice_loader_error(), then sluice_loader_close()), or NULL.
 * @return: 0; -EINVAL (config), -ENOMEM, -ENOSPC (a block does not fit
 *	memory_bytes), -SLUICE_ENODEVICE, -errno.
 * Thread-safety: a loader is driven by one consumer thread;
 *	sluice_batch_release() and tensor deleters may run on any thread.
 */
SLUICE_API int sluice_loader_open(sluice_dataset *ds,
				  const struct sluice_loader_config *cfg,
				  sluice_loader **out);

/*
 * A mixture of datasets with the same schema ("streams"), like MosaicML
 * Streaming's Stream(proportion=, repeat=, choose=) and LitData's weighted
 * combined datasets.  Each stream gives an epoch either exactly @samples
 * samples, or, when @samples is 0, a share by @weight of the samples the
 * weighted streams hold together (their record counts summed, rounded so
 * the shares add up exactly).  A stream with fewer records than samples
 * repeats them (reshuffled each time), one with more takes the first of
 * its epoch order (a different subset each epoch).  An epoch interleaves
 * the streams evenly: any run of positions holds each stream's share to
 * within one per stream, so every batch has the proportions; each stream
 * in its own order by the shuffle mode.  Deterministic from seed and
 * epoch, rank-partitioned and resumable (elastically too) like one
 * dataset.  Batch indices number the streams' records end to end: stream
 * s's record r is the sum of the earlier streams' record counts plus r.
 */
#define SLUICE_MAX_STREAMS 256

struct sluice_stream {
	sluice_dataset *dataset;   /* borrowed; must outlive the loader */
	double weight;             /* share, when samples is 0; >= 0 */
	uint64_t samples;          /* exact samples per epoch; 0: by weight */
};

/**
 * sluice_loader_open_streams - a loader over a mixture of @nstreams
 * datasets (1 to SLUICE_MAX_STREAMS), otherwise as sluice_loader_open().
 * @return: 0; -EINVAL (no datasets, a weight < 0 or not finite, samples
 *	from a dataset without records); -SLUICE_ESCHEMA (fields differ);
 *	-ENOMEM; as sluice_loader_open().
 */
SLUICE_API int sluice_loader_open_streams(const struct sluice_stream *streams,
					  int nstreams,
					  const struct sluice_loader_config *cfg,
					  sluice_loader **out);

/**
 * sluice_loader_skipped - what on_error=skip has left out so far.
 * @buf, @len: out, may be NULL: the first skipped block's message (file,
 *	block, offset, why), "" when none was skipped.
 * @return: the number of corrupt block reads skipped, or -EINVAL.  A
 *	corrupt block is not cached, so each batch that needs it reads it
 *	again and it counts again, in the same epoch too: this says how
 *	often, not how many blocks; sluice_stats.records_skipped counts the
 *	records left out of delivered batches, each once.  A record read by
 *	range (range_reads) that fails its checksum or read counts as one
 *	such read, its message naming its block, offset and record.
 * Thread-safety: any thread.
 */
SLUICE_API int64_t sluice_loader_skipped(const sluice_loader *ld, char *buf,
					 size_t len);

/**
 * sluice_loader_close - stop and free @ld (NULL ok), also mid-epoch with
 * reads and decodes in flight.  Batches and tensors still held by the
 * user stay valid until released; the memory is freed with the last.
 * Thread-safety: the consumer thread; no other call on @ld may run or
 *	follow (releases and deleters of held batches still may).
 */
SLUICE_API void sluice_loader_close(sluice_loader *ld);

/** sluice_loader_error - copy the last detailed message of @ld (why open
 * failed, or the failure the loader stopped on; under on_error=skip and
 * until a failure, the first skipped block's: file, block, offset) into
 * @buf.
 * @return: its length, as snprintf.  Thread-safety: any thread. */
SLUICE_API int sluice_loader_error(const sluice_loader *ld, char *buf,
				   size_t len);

/**
 * sluice_loader_set_epoch - restart at the beginning of @epoch (drops
 * prefetched batches of the current one).  O(blocks) for block and window
 * shuffle, O(1) otherwise.  Free when the loader is already at the start
 * of @epoch, which includes a state just restored elastically (so
 * set_epoch(e) after state_set keeps the resumed epoch).
 * @return: 0, or -SLUICE_ECLOSED after a failure.
 * Thread-safety: the consumer thread.
 */
SLUICE_API int sluice_loader_set_epoch(sluice_loader *ld, uint64_t epoch);

/**
 * sluice_loader_next - the next batch of the current epoch.
 * Blocks until it is ready.  @out is owned by the caller until
 * sluice_batch_release().  At the end of an epoch returns SLUICE_EOF once
 * and moves on to the next epoch, so a loop over epochs is
 * `while ((r = next(ld, &b)) == 0) {...}` per epoch.
 * @return: 0; SLUICE_EOF; -SLUICE_ECORRUPT, -EIO, -ENOSPC (a batch
 *	larger than memory_bytes allows), -EDEADLK (CUDA: the consumer
 *	holds every slot or all batch memory), ... (the loader then stays
 *	failed: the message names shard, block and offset).
 * Thread-safety: the consumer thread.
 */
SLUICE_API int sluice_loader_next(sluice_loader *ld, sluice_batch **out);

/** sluice_loader_batches - batches in this rank's current epoch (fewer
 * in an epoch resumed elastically; 0 for NULL).
 * Thread-safety: the consumer thread. */
SLUICE_API uint64_t sluice_loader_batches(const sluice_loader *ld);

/** sluice_loader_device - where batches live (kDLCPU or kDLCUDA, id).
 * Thread-safety: any thread. */
SLUICE_API DLDevice sluice_loader_device(const sluice_loader *ld);

/*
 * The resumable position: exactly what a restart needs, the same on every
 * rank (data-parallel ranks take their steps in lockstep), so rank 0 alone
 * can save it.  A job that resumes with the same world size, batch size
 * and drop_last continues exactly as the uninterrupted job would have.
 * One with another world size or batch size ("elastic" resume) delivers
 * exactly the records of the epoch that no earlier job consumed, each
 * once, split into equal parts over its ranks (each rank still reading
 * mostly its own blocks), then later epochs as a fresh job of its shape.
 * Elastic resumes chain: every earlier job of the epoch is one entry of
 * @earlier, at most SLUICE_STATE_MAX_EARLIER.
 */
#define SLUICE_STATE_MAX_EARLIER 16

struct sluice_state_job {
	int32_t world_size;
	int32_t drop_last;
	uint64_t consumed;         /* positions each rank consumed */
};

struct sluice_state {
	uint64_t seed;
	enum sluice_shuffle shuffle;
	uint32_t window_blocks;    /* checked for SHUFFLE_WINDOW only */
	uint64_t dataset_records;  /* checked on restore */
	uint64_t mix;              /* 0, or a mixture's fingerprint */
	uint64_t epoch;
	/* the job that saved it */
	int32_t world_size;
	uint32_t batch_size;
	int32_t drop_last;
	uint64_t batches_consumed; /* by each rank, within the epoch */
	/* earlier jobs of this epoch, oldest first */
	uint32_t nearlier;
	struct sluice_state_job earlier[SLUICE_STATE_MAX_EARLIER];
};

/** sluice_loader_state_get - the position after the last batch returned
 * by next(), into @st.  @return: 0 or -EINVAL.
 * Thread-safety: the consumer thread. */
SLUICE_API int sluice_loader_state_get(const sluice_loader *ld,
				       struct sluice_state *st);

/**
 * sluice_loader_state_set - continue from @st (taken by this loader or by
 * any rank of another job on the same dataset, seed and shuffle).  With
 * the same world size, batch size and drop_last, the next batch is the
 * one the uninterrupted run would have returned after batches_consumed;
 * otherwise the epoch goes on elastically (see struct sluice_state).
 * Skipped batches are not read.
 * @return: 0; -SLUICE_ESTATE when @st does not fit this dataset/config
 *	(or chains more than SLUICE_STATE_MAX_EARLIER earlier jobs); the
 *	loader then goes on where it was, the message says why.
 * Thread-safety: the consumer thread.
 */
SLUICE_API int sluice_loader_state_set(sluice_loader *ld,
				       const struct sluice_state *st);

/*
 * Serialized state: one line of text, for files and Python:
 *   sluice-state v2 seed=0 shuffle=window window=16 records=10000 mix=0
 *   epoch=3 world=4 batch=256 drop=0 batches=17 earlier=8/96/0,3/40/1
 * (one line; earlier=- when the epoch had no earlier job).
 */
/* Room for any line sluice_state_format() writes, with its NUL. */
#define SLUICE_STATE_TEXT_MAX 1024

/**
 * sluice_state_format - @st as one text line (no newline) in @buf, for
 * files and Python; SLUICE_STATE_TEXT_MAX bytes always suffice.
 * @return: the length; -EINVAL (bad state), -ENOSPC (@len too small; then
 *	@buf holds "").  Thread-safety: any thread.
 */
SLUICE_API int sluice_state_format(const struct sluice_state *st, char *buf,
				   size_t len);
/** sluice_state_parse - the inverse of sluice_state_format (the line
 * without a newline; strict: every key once, plain decimal).  @return: 0;
 * -EINVAL (NULL); -SLUICE_ESTATE (not a state line; @st untouched).
 * Thread-safety: any thread. */
SLUICE_API int sluice_state_parse(const char *text, struct sluice_state *st);

/* Per-stage counters. Times in nanoseconds. */
struct sluice_stage_stats {
	uint64_t bytes;
	uint64_t ops;
	uint64_t busy_ns;
	uint64_t wait_ns;
};

/*
 * The loader's counters.  Set size before the call:
 *	struct sluice_stats st = { .size = sizeof(st) };
 * Fields are only ever added at the end.
 */
struct sluice_stats {
	uint32_t size;                     /* in: sizeof; out: bytes filled */
	struct sluice_stage_stats read;    /* stored bytes read from disk */
	struct sluice_stage_stats decode;  /* raw bytes decoded/verified */
	struct sluice_stage_stats assemble;/* bytes copied into batch slots
					      (by the device with gathers) */
	struct sluice_stage_stats copy;    /* bytes copied to the device */
	uint64_t consumer_wait_ns;         /* time next() blocked */
	uint64_t batches;                  /* batches delivered */
	uint64_t records;                  /* records delivered */
	uint64_t records_skipped;          /* on_error=skip */
	uint64_t blocks_read;
	uint64_t block_cache_hits;
	uint64_t slot_occupancy_sum;       /* ready slots seen at each next() */
	uint32_t prefetch_depth;
	uint64_t memory_bytes;             /* the arena: io + batch memory */
	uint64_t io_memory_bytes;          /* of which io and decode buffers */
	uint64_t batches_over_budget;      /* hoarding consumer, host only */
	int direct_io;                     /* 1: O_DIRECT on every shard */
	int registered_buffers;            /* 1: READ_FIXED active */
	int registered_files;
	int sqpoll;
	int device_pinned;                 /* 1: arena registered with CUDA */
	char fallbacks[528];               /* why each fallback is active */
	/* CPU time the loader's threads spent per stage (thread CPU clocks,
	 * not wall time): planning, io_uring submit/reap and the page-cache
	 * copies io_uring's workers make for the loader's reads (sampled
	 * every 100 ms); checksums; zstd; copying records into batches.  Divided by the GB decoded
	 * (decode.bytes: what is delivered, unless shuffle full decodes a
	 * block for each batch that needs it) they say where the CPU per GB
	 * goes. */
	uint64_t cpu_read_ns;
	uint64_t cpu_verify_ns;
	uint64_t cpu_decompress_ns;
	uint64_t cpu_assemble_ns;
	uint64_t batches_viewed;           /* delivered as views of decoded
					      blocks, without a copy */
	uint64_t blocks_direct;            /* zstd blocks decompressed
					      straight into their batch */
	uint64_t values_truncated;         /* values past pad_length, cut */
	uint64_t cached_shards;            /* direct_io AUTO: shards read
					      buffered, found cached */
	uint64_t arena_resident_ns;        /* of the open: making the arena
					      resident (host: mlock, or its
					      pages faulted in), so that no
					      first touch is left to the
					      steady state */
	uint64_t range_reads;              /* reads of record ranges (after
					      coalescing; their bytes are in
					      read.bytes) */
	uint64_t range_records;            /* records read by range */
	uint64_t batches_gathered;         /* assembled on the device by a
					      gather kernel (device_gather) */
	uint64_t gather_runs;              /* their copy runs, after
					      coalescing neighbours */
	uint64_t device_upload_bytes;      /* decoded blocks copied to the
					      device for gathers, and zstd
					      blocks' stored bytes for
					      their checksums there */
	uint64_t device_memory_bytes;      /* GPU memory the loader holds:
					      batch mirror, io mirror with
					      device_gather, run tables */
	uint64_t bytes_verified_landing;   /* stored bytes checksummed as
					      their read's pieces landed,
					      while in the CPU's cache (the
					      rest: once the block is in) */
	uint64_t read_ahead_blocks;        /* blocks the read-ahead may have
					      in flight now: two per decode
					      thread, more where reads are
					      slow (bandwidth x latency, up
					      to what the budget holds) */
	uint64_t bytes_verified_device;    /* stored bytes checksummed on
					      the GPU from their upload
					      (blocks gathered there), not
					      hashed by the CPU */
	uint64_t bytes_staged;             /* stored bytes read through a
					      small staging buffer that
					      the CPU's cache holds, never
					      into io memory: raw blocks'
					      and record ranges' straight
					      to the GPU, zstd blocks'
					      into their decoder */
	uint64_t device_upload_ns;         /* wall time the loader's
					      threads spent in those
					      uploads, starting them and
					      waiting for them (not a copy
					      that runs while its thread
					      reads on) */
	uint64_t bytes_staged_overlapped;  /* of bytes_staged, those
					      whose upload ran while its
					      thread read the next part */
	uint64_t device_check_ns;          /* wall time the loader's
					      threads spent waiting for
					      checksums taken on the GPU
					      (bytes_verified_device) */
	uint64_t lock_wait_ns;             /* wall time the loader's
					      threads (and next()'s)
					      spent waiting to take its
					      one lock while another held
					      it (not to take it back
					      after a wait for work) */
	uint32_t decode_threads;           /* the loader's workers (a
					      gauge): the config's, or
					      its default's choice */
	uint64_t range_records_in_place;   /* of range_records, read
					      straight into their row of
					      the batch and checked there:
					      neither io memory nor a
					      copy */
	uint64_t records_decoded_in_batch; /* records whose own zstd
					      frame was decoded straight
					      into their row of the batch
					      (format v4, 16 KiB or more,
					      host batches): their block
					      never decoded whole, no
					      copy */
};

/**
 * sluice_loader_stats - copy the counters (monotonic since open, but the
 * gauges prefetch_depth, memory, read_ahead_blocks and decode_threads) into
 * @st: its first st->size bytes at most (st->size set by the caller to
 * sizeof(*st)); st->size then says how many bytes were filled.
 * @return: 0 or -EINVAL (no loader, NULL @st, st->size 0).
 * Thread-safety: any thread, also while another drives the loader.
 */
SLUICE_API int sluice_loader_stats(const sluice_loader *ld,
				   struct sluice_stats *st);

/* ------------------------------------------------------------------ */
/* Batches                                                             */
/* ------------------------------------------------------------------ */

/*
 * A batch is owned by the consumer from sluice_loader_next() until
 * sluice_batch_release().  Its accessors may run on any thread meanwhile;
 * they return 0/NULL for NULL.
 */

/** Records in the batch, and the epoch they belong to. */
SLUICE_API uint32_t sluice_batch_size(const sluice_batch *b);
SLUICE_API uint64_t sluice_batch_epoch(const sluice_batch *b);
/** Dataset indices of the batch's records, in batch order (host memory
 * owned by the batch, valid until release). */
SLUICE_API const uint64_t *sluice_batch_indices(const sluice_batch *b);

/** Number of tensors in the batch (fields, plus F.offsets or F.lengths
 * for variable fields) and their names (owned by the batch; NULL when @i
 * is out of range). */
SLUICE_API int sluice_batch_tensor_count(const sluice_batch *b);
SLUICE_API const char *sluice_batch_tensor_name(const sluice_batch *b,
						int i);

/**
 * sluice_batch_tensor - export tensor @name ("data", "data.offsets", ...)
 * as DLPack.  The caller owns *@out and must call its deleter; the slot
 * returns to the loader only when the batch is released AND every
 * exported tensor is deleted (deleters may run on any thread).  On the
 * host, when every field is fixed-shape and the batch's records are
 * neighbours in one block (shuffle none or block), the tensors point into
 * the decoded block itself (no copy; stats.batches_viewed): writing into
 * them is allowed and changes only this batch's records, and the block is
 * read again rather than served from the cache afterwards.
 * @stream: for CUDA batches, the consumer's cudaStream_t as an integer;
 *	the stream is made to wait on the batch's copy (no host blocking).
 *	0 means the legacy default stream; -1 means no synchronisation.
 *	Ignored on the host.
 * @return: 0; -EINVAL; -ENOENT (no such tensor); -ENOMEM; -SLUICE_ECUDA.
 * Thread-safety: any thread while the batch is held.
 */
SLUICE_API int sluice_batch_tensor(sluice_batch *b, const char *name,
				   int64_t stream, DLManagedTensor **out);
SLUICE_API int sluice_batch_tensor_versioned(sluice_batch *b,
					     const char *name, int64_t stream,
					     DLManagedTensorVersioned **out);

/** sluice_batch_release - give the batch back (NULL ok); @b is invalid
 * afterwards.  Exported tensors stay valid until their deleters run.
 * Thread-safety: any thread, once per batch. */
SLUICE_API void sluice_batch_release(sluice_batch *b);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
