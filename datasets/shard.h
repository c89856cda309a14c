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

/*
 * shard_read_field - fixed field @f of every record in @sf's raw blocks,
 * record after record, into @out (record_count * record_bytes bytes;
 * records of zstd blocks are left as they are).  Read with pread, not
 * verified: the record checksums cover these bytes.  @sec: the blocks'
 * section starts from shard_read_layout() (blocks it marked are left as
 * they are too); NULL when every field is fixed-shape (computed).  On
 * failure writes "PATH: block B: offset O: what".
 * @return: 0, -errno, -SLUICE_ECORRUPT (short file).
 */
int shard_read_field(const struct shard_schema *s,
		     const struct shard_file *sf, uint32_t f,
		     const uint64_t *sec, uint8_t *out, char *err,
		     size_t errlen);

/*
 * shard_read_layout - where each record's bytes lie in @sf's raw blocks,
 * without reading their variable values (block_layout.c): for block b,
 * @sec[b * nfields + f] is where field f's bytes start in the block (a
 * variable field's values: after its offsets table), and the block's
 * offsets table of variable field f (n + 1 entries) goes to @offs[f] +
 * first_record + b (the caller sizes each record_count + block_count;
 * NULL for fixed fields; @offs NULL: the sections only, each variable
 * field's last offset read and its table left to the block's reader).
 * Checked as block_view_init() checks a decoded block (as far as it is
 * read); a zstd block, or one whose layout is bad or cut short, gets
 * @sec[b * nfields] = UINT64_MAX: to be read whole, which reports it.
 * On failure writes "PATH: block B: offset O: what".
 * @return: 0, -errno (open, read).
 */
int shard_read_layout(const struct shard_schema *s,
		      const struct shard_file *sf, uint64_t *sec,
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
