/*
 * shard.h - the datasets/ interface used by the loader and the tools:
 * parsed shards, datasets, and block decoding.  No io_uring, no CUDA.
 */
#ifndef SLUICE_DATASETS_SHARD_H
#define SLUICE_DATASETS_SHARD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dlpack_shard.h"
#include "sluice.h"

typedef struct ZSTD_DCtx_s ZSTD_DCtx;

/* A field with its derived sizes (all checked for overflow at parse). */
struct shard_field {
	struct sluice_field f;
	uint64_t item_bytes;    /* bits / 8 * lanes */
	uint64_t record_bytes;  /* fixed: bytes per record; variable: 0 */
	uint64_t unit_bytes;    /* variable: item_bytes * prod(shape[1:]) */
	uint64_t max_value_bytes; /* variable: largest value (header field
				     max_value_bytes; max over shards) */
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

/* Who a shard says it is (v2 headers); unbound for v1 shards. */
struct shard_identity {
	int bound;              /* 0: a v1 shard, the rest is zero */
	uint8_t dataset_id[DLS_DATASET_ID_LEN];
	uint32_t index, count;
	uint64_t checksum;      /* the header checksum: content checksum */
};

struct shard_file {
	char *path;             /* owned */
	uint64_t file_size;
	uint32_t version;
	struct shard_identity id;
	uint32_t alignment;
	uint64_t record_count;
	uint64_t block_count;
	uint64_t raw_bytes;
	uint64_t stored_bytes;  /* sum of stored_size */
	uint64_t max_stored;    /* largest block, stored and raw */
	uint64_t max_raw;
	struct shard_block *blocks; /* owned, block_count entries */
	struct shard_schema schema;
};

/*
 * shard_parse - validate a header page and an index against @file_size
 * and fill @out.  Pure (no I/O): the fuzz target calls it directly.
 * @header: DLS_HEADER_SIZE bytes; @index, @index_len: the index bytes (may
 * be NULL/0 to validate the header alone, then out->blocks is NULL).
 * On failure writes "PATH: offset N: what" into @err and returns
 * -SLUICE_EFORMAT or -SLUICE_ECORRUPT; @out is left empty.
 */
int shard_parse(const char *path, const void *header, const void *index,
		size_t index_len, uint64_t file_size, struct shard_file *out,
		char *err, size_t errlen);

/* shard_open - pread header and index of @path and shard_parse() them. */
int shard_open(const char *path, struct shard_file *out, char *err,
	       size_t errlen);
void shard_file_free(struct shard_file *sf);

/* Schema conversion and checks shared by writer and reader. */
int schema_from_fields(const struct sluice_field *fields, int nfields,
		       struct shard_schema *out, char *err, size_t errlen);
int schema_equal(const struct shard_schema *a, const struct shard_schema *b);

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

/* Size of the decoded layout of @n records whose variable fields total
 * @var_bytes[f] bytes; UINT64_MAX on overflow. */
uint64_t block_layout_size(const struct shard_schema *s, uint32_t n,
			   const uint64_t *var_bytes);

int block_view_init(const struct shard_schema *s, const void *raw,
		    uint64_t raw_size, uint32_t n, struct block_view *out);

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
 * block_decode - verify (when @verify) and decode one block's stored
 * bytes.  Raw blocks are not copied: *@raw points into @stored.  zstd
 * blocks decompress into @scratch (@scratch_cap >= blk->raw_size).
 * @return: 0; -SLUICE_ECORRUPT (checksum, size); -SLUICE_EZSTD.
 */
int block_decode(ZSTD_DCtx *dctx, const struct shard_block *blk,
		 const void *stored, int verify, void *scratch,
		 size_t scratch_cap, const void **raw);

/* A dataset: shards in order with one schema. */
struct dataset {
	char *source;               /* the path given to open, owned */
	struct shard_schema schema;
	uint32_t nshards;
	struct shard_file *shards;  /* owned */
	uint64_t *shard_first;      /* global index of each shard's record 0;
				       nshards + 1 entries */
	uint64_t record_count;
	uint64_t block_count;
	uint64_t max_stored, max_raw;
	uint32_t max_alignment;
};

int dataset_load(const char *path, struct dataset *out, char *err,
		 size_t errlen);
void dataset_free(struct dataset *ds);

/* Locate global record @index: its shard, block (within the shard) and
 * record within the block.  @return: 0 or -ERANGE. */
int dataset_locate(const struct dataset *ds, uint64_t index,
		   uint32_t *shard, uint64_t *block, uint32_t *in_block);

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

/* The struct behind the public sluice_dataset handle. */
struct sluice_dataset {
	struct dataset d;
	int loaded;
	char err[512];
	pthread_mutex_t lock;       /* guards err */
};

/* Record an error message on a dataset handle (thread-safe). */
void dataset_set_error(struct sluice_dataset *ds, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* SLUICE_DATASETS_SHARD_H */
