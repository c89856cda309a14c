/*
 * runs.c - a batch's runs: where each of its pieces comes from and goes.
 *
 * Every placement that moves bytes walks the same records the same way:
 * field by field, each fixed field's rows of neighbouring records of one
 * block as one piece, each variable value as one.  So one generator makes
 * the pieces and the placements differ only in who moves them: the
 * decode workers' memcpy in parallel parts (a part generates its records'
 * runs a few at a time, into its own stack, so no table grows with the
 * batch), or the device, whose gather takes the whole batch's table
 * (gather.c).  A run joins the one before it where both sides continue,
 * which also joins a chunk's rows that turn out to be neighbours.  A
 * record whose block kept its stored bytes (framed.c) is a run of its own
 * whose source is its zstd frame, decoded rather than copied; never
 * joined.
 */
#include <string.h>

#include "loader.h"

void slot_record_field(const struct loader_core *c, const struct slot *s,
		       uint32_t r, uint32_t f, const uint8_t **p,
		       uint64_t *len)
{
	if (s->rec_entry[r] == RANGE_ENTRY)
		range_field(c, s, r, f, p, len);
	else
		block_view_get(&c->ds->schema,
			       &c->cache.entries[s->rec_entry[r]].view, f,
			       s->rec_in_block[r], p, len);
}

void runs_start(const struct slot *s, uint32_t lo, uint32_t hi,
		struct run_cursor *cur)
{
	*cur = (struct run_cursor){ .pos = lo, .lo = lo, .hi = hi,
				    .chunked = s->chunk.chunked };
}

/* Records [r, r + n) of @s, n at most @hi - r, that are neighbours in
 * one decoded block, in order.  @return: n (at least 1). */
static uint32_t block_run(const struct slot *s, uint32_t r, uint32_t hi)
{
	uint32_t e = s->rec_entry[r], n = 1;

	while (r + n < hi && s->rec_entry[r + n] == e &&
	       s->rec_in_block[r + n] == s->rec_in_block[r] + n)
		n++;
	return n;
}

/* Append @run, or extend the last run when @run continues it on both
 * sides. */
static void run_append(struct batch_run *runs, uint32_t *n,
		       struct batch_run run)
{
	struct batch_run *last = *n ? &runs[*n - 1] : NULL;

	if (run.len == 0 && run.zeros == 0)
		return;
	if (last && !last->frame && !run.frame && last->zeros == 0 &&
	    last->src + last->len == run.src &&
	    last->dst + last->len == run.dst) {
		last->len += run.len;
		last->zeros = run.zeros;
		return;
	}
	runs[(*n)++] = run;
}

/* Bytes of records checked in one runs_next() call, at most about: the
 * copy that follows finds them still in the core's own cache (a copy
 * after 4 MiB of checks read them again from memory: 0.325 against
 * 0.295 CPU s/GB, 3 runs each). */
#define CHECKED_BYTES_MAX ((uint64_t)256 << 10)

#ifdef SLUICE_TESTING
uint32_t runs_test_cap;

/* Tests shrink the runs a call makes and the bytes it checks to the
 * least, so that a part's runs take the most calls. */
#define RUNS_CAP(cap) (runs_test_cap && runs_test_cap < (cap) \
		       ? runs_test_cap : (cap))
#define CHECKED_MAX (runs_test_cap ? 1 : CHECKED_BYTES_MAX)
#else
#define RUNS_CAP(cap) (cap)
#define CHECKED_MAX CHECKED_BYTES_MAX
#endif

/* Check range record @r in its copy, if that is where it is checked.
 * @return: its main field's bytes, those the next copy reads (the
 * checksum covers its other, smaller fields too). */
static uint64_t range_check_in_copy(struct loader_core *c, struct slot *s,
				    struct run_cursor *cur, uint32_t r)
{
	const uint8_t *p;
	uint64_t t0, len;

	if (s->rec_entry[r] != RANGE_ENTRY || !s->ranges.verify_in_copy ||
	    cur->field != c->ranges.main_field)
		return 0;
	/* timed by the cheap wall clock: a thread clock per record would
	 * cost more than a 16 KiB record's hash */
	t0 = now_ns();
	(void)range_record_check(c, s, r);
	cur->verify_ns += now_ns() - t0;
	slot_record_field(c, s, r, cur->field, &p, &len);
	return len;
}

/* The run of record @r, at @cur's position, in @cur's fixed field;
 * @step: the positions it takes. */
static struct batch_run fixed_run(const struct loader_core *c,
				  const struct slot *s,
				  struct run_cursor *cur,
				  uint32_t r, uint32_t *step)
{
	uint64_t rb = c->ds->schema.fields[cur->field].record_bytes;
	uint64_t dst = s->tensors[cur->tensor].offset + (uint64_t)r * rb;
	const struct cache_entry *e = s->rec_entry[r] == RANGE_ENTRY
		? NULL : &c->cache.entries[s->rec_entry[r]];
	const uint8_t *p;
	uint64_t len;

	/* its own frame, decoded into its row (framed.c) */
	if (e && e->frame_at && cur->field == c->framed.field) {
		const uint64_t *at = e->frame_at + s->rec_in_block[r];

		*step = 1;
		return (struct batch_run){ e->frames + at[0], dst, rb, 0,
					   at[1] - at[0] };
	}

	/* in batch order a block's neighbouring rows are one run; a chunk's
	 * positions are in block order, joined by run_append() */
	*step = cur->chunked || s->rec_entry[r] == RANGE_ENTRY
		? 1 : block_run(s, r, cur->hi);
	slot_record_field(c, s, r, cur->field, &p, &len);
	/* decoded or read into its place in the batch (direct.c,
	 * ranges.c): nothing moves */
	if (s->host && p == s->host + dst) {
		cur->in_place += rb * *step;
		return (struct batch_run){ p, dst, 0, 0, 0 };
	}
	return (struct batch_run){ p, dst, rb * *step, 0, 0 };
}

/* The run of record @r's value of @cur's variable field: after the
 * values before it (as the offsets tensor that follows the field's own
 * says, written by assemble.c), or in its row of pad_length items, zeros
 * after it. */
static struct batch_run variable_run(const struct loader_core *c,
				     const struct slot *s,
				     struct run_cursor *cur, uint32_t r)
{
	const struct shard_field *fd = &c->ds->schema.fields[cur->field];
	const int64_t *index = (const int64_t *)(const void *)
		(s->host + s->tensors[cur->tensor + 1].offset);
	uint64_t unit = fd->unit_bytes, pad = c->cfg.pad_length;
	uint64_t dst = s->tensors[cur->tensor].offset;
	const uint8_t *p;
	uint64_t len;

	slot_record_field(c, s, r, cur->field, &p, &len);
	if (pad) {
		uint64_t cap = pad * unit;
		uint64_t n = (uint64_t)index[r] < pad
			? (uint64_t)index[r] * unit : cap;

		return (struct batch_run){ p, dst + (uint64_t)r * cap, n,
					   cap - n, 0 };
	}
	dst += (uint64_t)index[r] * unit;
	/* read into its place (ranges.c): nothing moves */
	if (len && p == s->host + dst) {
		cur->in_place += len;
		return (struct batch_run){ p, dst, 0, 0, 0 };
	}
	return (struct batch_run){ p, dst, len, 0, 0 };
}

uint32_t runs_next(struct loader_core *c, struct slot *s,
		   struct run_cursor *cur, struct batch_run *runs,
		   uint32_t cap)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t checked = 0;
	uint32_t n = 0;

	while (cur->field < sc->nfields) {
		const struct shard_field *fd = &sc->fields[cur->field];
		uint32_t r, step = 1;
		struct batch_run run;

		if (cur->pos >= cur->hi) {
			cur->tensor += fd->variable ? 2 : 1;
			cur->field++;
			cur->pos = cur->lo;
			continue;
		}
		/* full, even where the next run would join the last */
		if (n == RUNS_CAP(cap) || checked >= CHECKED_MAX)
			break;
		r = cur->chunked ? chunk_row(s, cur->pos) : cur->pos;
		checked += range_check_in_copy(c, s, cur, r);
		run = fd->variable ? variable_run(c, s, cur, r)
				   : fixed_run(c, s, cur, r, &step);
		run_append(runs, &n, run);
		cur->pos += step;
	}
	return n;
}

/* Decode @run's frame into its place.  @return: 0 or the error. */
static int decode_frame(uint8_t *batch, const struct batch_run *run,
			ZSTD_DCtx *dctx)
{
	size_t got = ZSTD_decompressDCtx(dctx, batch + run->dst, run->len,
					 run->src, run->frame);

	if (ZSTD_isError(got))
		return -SLUICE_EZSTD;
	return got == run->len ? 0 : -SLUICE_ECORRUPT;
}

/* Where a call decodes frames, its time is the decoder's, taken by the
 * wall clock once a call (a clock a record was 4.7% of a window
 * shuffle's profile on the VM); the other fields' runs beside them are a
 * few bytes a record. */
int runs_copy(uint8_t *batch, const struct batch_run *runs, uint32_t n,
	      ZSTD_DCtx *dctx, struct runs_copied *done)
{
	uint64_t t0 = now_ns(), frames = done->frames;
	int r = 0;

	for (uint32_t k = 0; k < n; k++) {
		if (runs[k].frame) {
			done->frames++;
			r = decode_frame(batch, &runs[k], dctx);
			if (r) {
				done->bad = &runs[k];
				break;
			}
		} else {
			memcpy(batch + runs[k].dst, runs[k].src, runs[k].len);
		}
		memset(batch + runs[k].dst + runs[k].len, 0, runs[k].zeros);
		done->bytes += runs[k].len + runs[k].zeros;
	}
	if (done->frames > frames)
		done->decode_ns += now_ns() - t0;
	return r;
}
