/*
 * runs.h - a batch's plan as runs (runs.c): each piece of the batch is
 * one {source, destination, length} made by one generator from where its
 * records are, and carried out by the placement plan.c chose for it: the
 * CPU's memcpy (copy, chunks) or a kernel on the device (gather).
 */
#ifndef SLUICE_PIPELINE_RUNS_H
#define SLUICE_PIPELINE_RUNS_H

#include <stdint.h>
#include <zstd.h>

struct loader_core;
struct slot;

/* One piece of a batch: @len bytes from @src (a decoded block, a range
 * read's buffer, a field kept since open) to byte @dst of the batch's
 * memory, then @zeros bytes of zeros (a value padded to pad_length).
 * With @frame, @src is a zstd frame of that many bytes that decodes to
 * the @len (framed.c). */
struct batch_run {
	const uint8_t *src;
	uint64_t dst;
	uint64_t len;
	uint64_t zeros;
	uint64_t frame;
};

/* Where runs_next() goes on from: field by field, positions [lo, hi) of
 * the batch (its records in batch order, or a chunk's rows in block order
 * for a batch assembled by chunks). */
struct run_cursor {
	uint32_t field, tensor;
	uint32_t pos, lo, hi;
	int chunked;
	uint64_t verify_ns;     /* range records' checksums checked on the way */
	uint64_t in_place;      /* bytes of rows found in place (left out) */
};

/* Field @f of the slot's record @r: in its decoded block, or read by
 * range (ranges.c): its bytes and their length. */
void slot_record_field(const struct loader_core *c, const struct slot *s,
		       uint32_t r, uint32_t f, const uint8_t **p,
		       uint64_t *len);

/* @cur at the start of positions [@lo, @hi) of @s. */
void runs_start(const struct slot *s, uint32_t lo, uint32_t hi,
		struct run_cursor *cur);

/*
 * The next runs of @s's positions, at most @cap (at least 1) into @runs:
 * neighbouring pieces joined, rows already in place (a block decoded
 * into its batch, direct.c; records read into it, ranges.c) left out,
 * counted in cur->in_place.  A record read by range whose
 * checksum is checked in its copy (ranges.c's verify_in_copy) is checked
 * here, just before its bytes are copied; a bad one fails the batch.
 * @return: how many; 0 once the positions are done.
 */
uint32_t runs_next(struct loader_core *c, struct slot *s,
		   struct run_cursor *cur, struct batch_run *runs,
		   uint32_t cap);

#ifdef SLUICE_TESTING
/* Nonzero: runs_next() makes at most this many runs a call and checks
 * one record a call (tests of its resumption). */
extern uint32_t runs_test_cap;
#endif

/* What runs_copy() did: the bytes it wrote, the frames it decoded and
 * the time that took, and the first run whose frame did not decode. */
struct runs_copied {
	uint64_t bytes, frames, decode_ns;
	const struct batch_run *bad;
};

/* Carry @runs out on the CPU into @batch, decoding frames with @dctx;
 * adds to @done.  @return: 0, or a decode error (done->bad: its run;
 * the runs after it are left). */
int runs_copy(uint8_t *batch, const struct batch_run *runs, uint32_t n,
	      ZSTD_DCtx *dctx, struct runs_copied *done);

#endif /* SLUICE_PIPELINE_RUNS_H */
