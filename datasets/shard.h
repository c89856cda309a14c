/*
 * shard.h - the datasets/ interface used by the loader: parsed shards,
 * datasets, and block decoding.  No io_uring, no CUDA.  The part the
 * programs may use too is in include/sluice_tools.h.
 */
#ifndef SLUICE_DATASETS_SHARD_H
#define SLUICE_DATASETS_SHARD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dlpack_shard.h"
#include "sluice.h"
#include "sluice_tools.h"

/*
 * shard_parse - validate a header page and an index against @file_size
 * and fill @out, and @schema with the header's fields (their
 * max_value_bytes this shard's, as out->max_value_bytes).  The caller
 * keeps the schema: once per dataset, compared with schema_equal.  Pure
 * (no I/O): the fuzz target calls it directly.
 * @header: DLS_HEADER_SIZE bytes; @index, @index_len: the index bytes (may
 * be NULL/0 to validate the header alone, then out->blocks is NULL).
 * On failure writes "PATH: offset N: what" into @err and returns
 * -SLUICE_EFORMAT, -SLUICE_ECORRUPT or -ENOMEM; @out and @schema are left
 * empty.
 */
int shard_parse(const char *path, const void *header, const void *index,
		size_t index_len, uint64_t file_size, struct shard_file *out,
		struct shard_schema *schema, char *err, size_t errlen);

/* shard_open - pread header and index of @path and shard_parse() them. */
int shard_open(const char *path, struct shard_file *out,
	       struct shard_schema *schema, char *err, size_t errlen);
void shard_file_free(struct shard_file *sf);

/* The last index i < @n (@n >= 1) with @a[i] <= @x, for @a sorted
 * ascending with @a[0] <= @x: the shard, block or frame holding record
 * or byte @x, from their first ones.  0 when none is. */
static inline uint64_t last_at_or_before(const uint64_t *a, uint64_t n,
					 uint64_t x)
{
	uint64_t lo = 0, hi = n;

	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (a[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Schema conversion and checks shared by writer and reader. */
int schema_from_fields(const struct sluice_field *fields, int nfields,
		       struct shard_schema *out, char *err, size_t errlen);
int schema_equal(const struct shard_schema *a, const struct shard_schema *b);

/* Size of the decoded layout of @n records whose variable fields total
 * @var_bytes[f] bytes; UINT64_MAX on overflow. */
uint64_t block_layout_size(const struct shard_schema *s, uint32_t n,
			   const uint64_t *var_bytes);

/* Where field @field's section starts in a decoded block of @n records
 * whose fields are all fixed-shape (its raw size, checked at parse, holds
 * them all). */
uint64_t block_field_offset(const struct shard_schema *s, uint32_t n,
			    uint32_t field);

struct block_frames;
/*
 * shard_read_field - fixed field @f of every record in @sf's raw blocks,
 * and its zstd blocks that have frames (@frames: shard_read_frames'; NULL:
 * none), record after record, into @out (record_count * record_bytes
 * bytes; records of other blocks are left as they are).  Read with
 * pread, not verified: the record checksums cover these bytes.  @sec:
 * the blocks' section starts from shard_read_layout() (blocks it marked
 * are left as they are too); NULL when every field is fixed-shape
 * (computed).  On failure writes "PATH: block B: offset O: what".
 * @return: 0, -errno, -SLUICE_ECORRUPT (short file, or a frame not of
 * its size), -SLUICE_EZSTD.
 */
int shard_read_field(const struct shard_schema *s,
		     const struct shard_file *sf, uint32_t f,
		     const struct block_frames *frames, const uint64_t *sec,
		     uint8_t *out, char *err, size_t errlen);

/*
 * shard_read_layout - where each record's bytes lie in @sf's raw blocks
 * and its zstd blocks that have frames (@frames, as for
 * shard_read_field), without reading their variable values
 * (block_layout.c): for block b, @sec[b * nfields + f] is where field
 * f's bytes start in the decoded block (a variable field's values: after
 * its offsets table), and the block's offsets table of variable field f
 * (n + 1 entries) goes to @offs[f] + first_record + b (the caller sizes
 * each record_count + block_count; NULL for fixed fields; @offs NULL: the
 * sections only, each variable field's last offset read and its table
 * left to the block's reader).  Checked as block_view_init() checks a
 * decoded block (as far as it is read); another block, or one whose
 * layout is bad, cut short or not decoded, gets @sec[b * nfields] =
 * UINT64_MAX: to be read whole, which reports it.  On failure writes
 * "PATH: block B: offset O: what".
 * @return: 0, -errno (open, read), -ENOMEM.
 */
int shard_read_layout(const struct shard_schema *s,
		      const struct shard_file *sf,
		      const struct block_frames *frames, uint64_t *sec,
		      uint64_t *const *offs, char *err, size_t errlen);

/*
 * block_view_init - check a decoded block's layout (@n records of the
 * fields @s) and view it.  @max_value_bytes: per field, the largest value
 * a variable field may hold (the shard's own, sf->max_value_bytes); NULL:
 * unbounded (only for blocks the caller laid out itself: the writer).
 * @return: 0, -EINVAL (@raw not 8-byte aligned), -SLUICE_ECORRUPT.
 */
int block_view_init(const struct shard_schema *s,
		    const uint64_t *max_value_bytes, const void *raw,
		    uint64_t raw_size, uint32_t n, struct block_view *out);

/*
 * A zstd block's frames (format v4, block_frames.c): frame k's stored
 * bytes are [at[k], at[k + 1]) from the block's start and decode to its
 * bytes [raw[k], raw[k + 1]); the seek table follows the last frame.
 */
struct block_frames {
	uint32_t n;
	uint64_t *at;           /* n + 1 entries, owned */
	uint64_t *raw;          /* n + 1 entries, in at's allocation */
};

typedef struct ZSTD_CCtx_s ZSTD_CCtx;
/* The writer: compress block @raw (@raw_size bytes laid out as @v) into
 * frames cut at record boundaries and a seek table, into *@out (grown to
 * *@cap as needed); its length in *@stored_size.  @return: 0, -ENOMEM,
 * -SLUICE_EZSTD. */
int block_frames_compress(ZSTD_CCtx *cctx, int level,
			  const struct shard_schema *s,
			  const struct block_view *v, const uint8_t *raw,
			  uint64_t raw_size, uint8_t **out, uint64_t *cap,
			  uint64_t *stored_size);
/* Parse zstd block @blk's seek table from @tail, the last @len bytes of
 * its stored bytes, into @fr (free with block_frames_free), checking that
 * its frames fill the block's stored and raw sizes.  @return: 0;
 * -EAGAIN when the table is longer than @len (*@need: its length);
 * -SLUICE_ECORRUPT (no table, or a bad one); -ENOMEM. */
int block_frames_parse(const struct shard_block *blk, const uint8_t *tail,
		       uint64_t len, struct block_frames *fr, uint64_t *need);
/* The same, read from @fd (a pread of the block's last page, or of its
 * table).  @return: as block_frames_parse, -EAGAIN aside; -errno. */
int block_frames_load(int fd, const struct shard_block *blk,
		      struct block_frames *fr);
void block_frames_free(struct block_frames *fr);
/* Each frame of @stored (a block's stored bytes) is one zstd frame of
 * its table's sizes.  @return: 0 or -SLUICE_ECORRUPT. */
int block_frames_check(const uint8_t *stored, const struct block_frames *fr);
/* The frame holding decoded byte @off (< raw[n]). */
uint32_t block_frame_of(const struct block_frames *fr, uint64_t off);
/* Decode frames @k0..@k1 from @stored (their bytes, from at[k0]) into
 * @out (raw[k1 + 1] - raw[k0] bytes).  @return: 0, -SLUICE_EZSTD, or
 * -SLUICE_ECORRUPT (a frame not of its table's size). */
int block_frames_decode(ZSTD_DCtx *dctx, const struct block_frames *fr,
			uint32_t k0, uint32_t k1, const uint8_t *stored,
			uint8_t *out);
/* Decoded bytes [@off, @off + @len) of block @blk, read from @fd through
 * its frames @fr, into @out.  @return: 0, -errno, -SLUICE_ECORRUPT,
 * -SLUICE_EZSTD, -ENOMEM. */
int block_frames_read_range(int fd, ZSTD_DCtx *dctx,
			    const struct shard_block *blk,
			    const struct block_frames *fr, uint64_t off,
			    uint64_t len, uint8_t *out);

/*
 * shard_read_frames - the seek tables of @sf's zstd blocks (format v4)
 * into @out (block_count entries, zeroed by the caller; a block without
 * one, or with a bad one, is left with n 0: read whole, which reports
 * it); the bytes they take are added to *@bytes.  v1 to v3 shards have
 * none.  On failure writes "PATH: block B: offset O: what".
 * @return: 0, -errno (open, read), -ENOMEM.
 */
int shard_read_frames(const struct shard_file *sf, struct block_frames *out,
		      uint64_t *bytes, char *err, size_t errlen);

/* block_verify - the XXH3-64 of @blk's stored bytes against its index
 * entry.  @return: 0 or -SLUICE_ECORRUPT. */
int block_verify(const struct shard_block *blk, const void *stored);

/*
 * The same check taken in pieces, in order, as a read's bytes arrive (the
 * loader hashes each piece while it is in cache).  block_hash_reset
 * before a block's first piece; block_hash_feed its stored bytes from
 * the start; block_hash_check once all blk->stored_size are fed.
 * @return: a state (NULL: out of memory); 0 or -SLUICE_ECORRUPT.
 */
struct block_hash;
struct block_hash *block_hash_new(void);
void block_hash_free(struct block_hash *h);
void block_hash_reset(struct block_hash *h);
void block_hash_feed(struct block_hash *h, const void *p, size_t len);
int block_hash_check(const struct shard_block *blk,
		     const struct block_hash *h);

/*
 * block_decode - verify (when @verify) and decode one block's stored
 * bytes.  Raw blocks are not copied: *@raw points into @stored.  zstd
 * blocks decompress into @scratch (@scratch_cap >= blk->raw_size).
 * @return: 0; -SLUICE_ECORRUPT (checksum, size); -SLUICE_EZSTD.
 */
int block_decode(ZSTD_DCtx *dctx, const struct shard_block *blk,
		 const void *stored, int verify, void *scratch,
		 size_t scratch_cap, const void **raw);

/*
 * Record checksums (format v3, record_sums.c).  record_checksum chains
 * the @nfields fields' bytes in field order, as dlpack_shard.h defines;
 * record_checksum_view does it for record @i of a decoded block.
 */
uint64_t record_checksum(uint32_t nfields, const uint8_t *const *ptr,
			 const uint64_t *len);
uint64_t record_checksum_view(const struct shard_schema *s,
			      const struct block_view *v, uint32_t i);

/*
 * shard_read_record_sums - read @sf's record checksums into @out
 * (sf->record_count entries; the caller sizes it: the count was checked
 * against the file's size at parse) and check the section's XXH3.
 * On failure writes "PATH: offset N: what" into @err.
 * @return: 0; -ENOENT when the shard has none (v1, v2); -errno;
 *	-SLUICE_ECORRUPT (checksum, short file).
 */
int shard_read_record_sums(const struct shard_file *sf, uint64_t *out,
			   char *err, size_t errlen);

/* Locate global record @index: its shard, block (within the shard) and
 * record within the block.  @return: 0 or -ERANGE. */
int dataset_locate(const struct dataset *ds, uint64_t index,
		   uint32_t *shard, uint64_t *block, uint32_t *in_block);

/* The struct behind the public sluice_dataset handle. */
/* The names of an int64 label field's values: label i is names[i] (an
 * ImageFolder's class folders).  n 0: none. */
struct dataset_classes {
	char field[SLUICE_NAME_MAX];
	uint32_t n;
	char **names;               /* owned */
};

struct sluice_dataset {
	struct dataset d;
	struct dataset_classes classes;  /* from dataset.json */
	int loaded;
	char err[512];
	pthread_mutex_t lock;       /* guards err */
};

/* Record an error message on a dataset handle (thread-safe). */
/* Copy @all (every field the library knows) into the caller's @out: at
 * most out->size bytes, the rest of out->size zeroed; out->size becomes
 * the bytes filled (sluice.h: statistics grow at the end). */
void writer_summary_copy(struct sluice_writer_summary *out,
			 const struct sluice_writer_summary *all);

void dataset_set_error(struct sluice_dataset *ds, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* SLUICE_DATASETS_SHARD_H */
