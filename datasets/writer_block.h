/*
 * writer_block.h - the writer's open block: records staged column by
 * column until the block is full, then laid out field-major (the decoded
 * block layout of dlpack_shard.h) into a compression slot.
 */
#ifndef SLUICE_DATASETS_WRITER_BLOCK_H
#define SLUICE_DATASETS_WRITER_BLOCK_H

#include <stdint.h>

#include "shard_internal.h"
#include "writer_internal.h"

/* Per-field staging: values back to back, and for a variable field the
 * running offsets (offs[0] == 0). */
struct staging {
	uint8_t *buf;
	uint64_t len, cap;
	uint64_t *offs;
	uint64_t offs_cap;
};

struct open_block {
	const struct shard_schema *schema;  /* borrowed from the writer */
	struct staging st[DLS_MAX_FIELDS];
	uint64_t var_bytes[DLS_MAX_FIELDS]; /* staged values, variable fields */
	uint32_t n;                         /* records staged */
};

/* Set up an empty block for @schema.  @return: 0 or -ENOMEM. */
int open_block_init(struct open_block *b, const struct shard_schema *schema);
void open_block_free(struct open_block *b);

/* Where record @i of field @f starts in @run's column (0 without a run). */
uint64_t record_run_start(const struct record_run *run, uint32_t f,
			  uint64_t i);

/* The block's layout size with records [i, i + k) of @run added (none
 * when @run is NULL); UINT64_MAX when it overflows. */
uint64_t open_block_size_with(const struct open_block *b,
			      const struct record_run *run, uint64_t i,
			      uint64_t k);

/* Copy records [i, i + k) of @run into the staging.  @return: 0 or
 * -ENOMEM (the block is unchanged). */
int open_block_stage(struct open_block *b, const struct record_run *run,
		     uint64_t i, uint64_t k);

/*
 * open_block_lay - lay the staged records, and records [i, i + k) of @run
 * after them (none when @run is NULL), out field-major into *@buf (grown
 * to fit; malloc'd, so 8-aligned), then empty the staging.  The run's
 * bytes are copied once, from their column into the buffer.
 * @size: receives the layout's size.  @longest: receives, per field, the
 * block's longest value in bytes (variable fields; 0 for fixed ones).
 * @return: 0 or -ENOMEM (nothing laid, the block unchanged).
 */
int open_block_lay(struct open_block *b, const struct record_run *run,
		   uint64_t i, uint64_t k, uint8_t **buf, uint64_t *cap,
		   uint64_t *size, uint64_t *longest);

#endif /* SLUICE_DATASETS_WRITER_BLOCK_H */
