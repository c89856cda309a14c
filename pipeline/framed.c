/*
 * framed.c - zstd records decoded from their own frames straight into
 * their batch (issue 22): no block decoded whole, no record copied.
 *
 * A window batch takes a few records from each block of its window, so a
 * block decoded whole (fetch.c) waits in io memory until its last batch
 * copies its last record out: every record is written to memory by the
 * decoder and read back by the copy, by then long out of the CPU's
 * cache.  So does a block that two batches of a shuffle none or block
 * share.  Format v4 cuts a block's frames at record boundaries, and a
 * record of FRAMED_RECORD_MIN or more is a frame of its own
 * (datasets/block_frames.c).  Such a record's frame is decoded by the
 * assembly straight into its row of the batch (runs.c): the block keeps
 * only its stored bytes, checked as they were read, its other (small)
 * fields decoded, and where each record's frame starts.  On the VM
 * (medians of 5, SLUICE_FRAMED=0 against the default), a window shuffle
 * of 16 KiB zstd records in 1 MiB blocks went from 8.77 to 9.35 GB/s
 * (0.225 -> 0.206 CPU s/GB), of 1 MiB records in 64 MiB blocks from
 * 7.87 to 10.62 (0.251 -> 0.185); a block shuffle of the 16 KiB ones,
 * batch 256, from 8.24 to 12.07 (bench/results/2026-11-29-framed-records.md).
 *
 * For batches of fixed-shape fields assembled on the CPU, their blocks
 * read by a worker (c->zstd_fetched: framed_fetch) or by the ring
 * (O_DIRECT, or the page cache where workers do not fetch: decode.c,
 * framed_lay_out_read).  Not where a cache holds the dataset, whose
 * decoded blocks cost a copy each epoch, not a decode; nor with chunks,
 * which need decoded blocks; nor where batches are gathered on the
 * device from decoded blocks; nor with on_error=skip, which drops a bad
 * block's records once its checksum fails, where a frame the checksum
 * passed and zstd refuses at assembly would fail the loader instead.
 * Under a shuffle none or block, only for batches of a block's records
 * or more: a smaller batch mostly views its block (view.c), which views
 * need decoded; a block one such batch takes whole is still decompressed
 * straight into it (direct.c, fetch_decode).  A block not cut a frame a
 * record (another writer's) is decoded whole, as before.
 *
 * Entry layout, fetched: its stored bytes, then each other field's
 * values (in field order, 8-aligned), then frame_at (records + 1
 * offsets); never less than its decoded bytes, so that a block decoded
 * whole fits it.  Read by the ring: the other fields and frame_at in the
 * entry's decode buffer (scratch), which has room for them all
 * (block_io_bytes); frame_at counts from the stored bytes (e->frames),
 * past the read's O_DIRECT alignment.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

/* The writer cuts a frame at every record boundary past 16 KiB of it
 * (datasets/block_frames.c's FRAME_MIN_BYTES): a record of at least this
 * is a frame of its own. */
#define FRAMED_RECORD_MIN ((uint64_t)16 << 10)

void framed_open(struct loader_core *c)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t largest = 0;

	c->framed.sized = c->framed.on = 0;
	if (!c->has_zstd || c->has_variable ||
	    c->cfg.on_error == SLUICE_ON_ERROR_SKIP || env_off("SLUICE_FRAMED"))
		return;
	/* in order, a batch of fewer records than a block mostly views it
	 * (view.c), with no copy: 16 KiB records, shuffle none, batch 32,
	 * 6.28 GB/s viewed against 4.85 from their frames (single runs) */
	if (c->cfg.shuffle <= SLUICE_SHUFFLE_BLOCK && c->nblocks &&
	    c->cfg.batch_size < c->ds->record_count / c->nblocks)
		return;
	for (uint32_t s = 0; s < c->ds->nshards; s++)
		if (c->ds->shards[s].version <= DLS_VERSION_SINGLE_FRAME)
			return;
	for (uint32_t f = 1; f < sc->nfields; f++)
		if (sc->fields[f].record_bytes > sc->fields[largest].record_bytes)
			largest = f;
	/* and its last record's frame ends with it: the padding to the
	 * next section, which starts a frame, would go with it (a block
	 * not cut so is read twice: for its frames, then whole) */
	if (sc->fields[largest].record_bytes < FRAMED_RECORD_MIN ||
	    (sc->fields[largest].record_bytes % 8 &&
	     largest + 1 < sc->nfields))
		return;
	c->framed.field = largest;
	c->framed.on = 1;
	/* a block the ring reads has room for its stored bytes and its
	 * decoded ones (block_io_bytes): the layout fits beside them */
	c->framed.sized = c->zstd_fetched;
}

void framed_init(struct loader_core *c)
{
	c->framed.on = c->framed.on && !c->cache.all && !c->chunks.chunked &&
		       !gather_wanted(c);
}

/* Bytes of @n records' fields other than the main one, each field's
 * 8-aligned. */
static uint64_t other_bytes(const struct loader_core *c, uint64_t n)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint64_t sum = 0;

	for (uint32_t f = 0; f < sc->nfields; f++)
		if (f != c->framed.field)
			sum += align_up(n * sc->fields[f].record_bytes, 8);
	return sum;
}

uint64_t framed_io_bytes(const struct loader_core *c,
			 const struct shard_block *blk)
{
	uint64_t n = blk->record_count;
	uint64_t framed = align_up(blk->stored_size, 8) + other_bytes(c, n) +
			  (n + 1) * sizeof(uint64_t);
	uint64_t whole = blk->raw_size;

	/* blocks are at most DLS_MAX_BLOCK_BYTES: no overflow */
	return ((framed > whole ? framed : whole) + 4095) & ~(uint64_t)4095;
}

/* Read @blk's stored bytes into @to a part at a time, hashing each as it
 * lands.  @return: 0, or the read's error (*@bad_part set). */
static int read_stored(struct loader_core *c, const struct shard_block *blk,
		       uint32_t shard, uint8_t *to, struct block_hash *hash,
		       uint32_t *bad_part, uint64_t *read_end)
{
	/* parts of a staging buffer's size: each hashed while cached */
	uint64_t part = c->stage.buffer_bytes ? c->stage.buffer_bytes
					      : blk->stored_size;
	uint64_t cpu_read = 0, cpu_hash = 0, read_ns = 0;
	int r = 0;

	block_hash_reset(hash);
	for (uint64_t from = 0; from < blk->stored_size; from += part) {
		uint64_t len = blk->stored_size - from < part
			? blk->stored_size - from : part;
		uint64_t cpu0;

		r = fetch_read_part(c, shard, to + from, len,
				    blk->offset + from, &read_ns, &cpu_read,
				    read_end);
		if (r) {
			*bad_part = (uint32_t)(from / part);
			break;
		}
		cpu0 = thread_cpu_ns();
		if (c->cfg.verify)
			block_hash_feed(hash, to + from, len);
		cpu_hash += thread_cpu_ns() - cpu0;
	}
	atomic_fetch_add(&c->cpu_read_ns, cpu_read);
	atomic_fetch_add(&c->cpu_verify_ns, cpu_hash);
	atomic_fetch_add(&c->st_read.busy_ns, read_ns);
	if (!r && c->cfg.verify)
		atomic_fetch_add(&c->bytes_verified_landing, blk->stored_size);
	return r;
}

/* Frames @k0.. of @fr holding decoded bytes [@at, @at + @len) exactly,
 * but for the padding to the next 8-aligned section: *@k1 the last.
 * @return: 1 when they do. */
static int frames_hold(const struct block_frames *fr, uint64_t at,
		       uint64_t len, uint32_t *k0, uint32_t *k1)
{
	if (len == 0 || at + len > fr->raw[fr->n])
		return 0;
	*k0 = block_frame_of(fr, at);
	*k1 = block_frame_of(fr, at + len - 1);
	return fr->raw[*k0] == at && fr->raw[*k1 + 1] >= at + len &&
	       fr->raw[*k1 + 1] <= align_up(at + len, 8);
}

/*
 * Lay entry @e out for block @blk, its stored bytes at @stored, parsed
 * into @fr: each record's frame of the main field in frame_at, the other
 * fields decoded at @others (8-aligned), the view on them.  @return: 0,
 * FRAMED_NOT_CUT, or a decode error (-SLUICE_EZSTD, -SLUICE_ECORRUPT).
 */
static int place_frames(struct loader_core *c, struct cache_entry *e,
			const struct shard_block *blk,
			const struct block_frames *fr, ZSTD_DCtx *dctx,
			const uint8_t *stored, uint8_t *others)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t n = blk->record_count, m = c->framed.field;
	uint64_t sec = 0, main_at = 0, rb = sc->fields[m].record_bytes;
	uint64_t *frame_at = (uint64_t *)(void *)(others + other_bytes(c, n));
	struct block_view view = { .n = n };
	uint32_t k0, k1;

	/* the sections as block_view_init() finds them: all fixed */
	for (uint32_t f = 0; f < sc->nfields; f++) {
		uint64_t len = (uint64_t)n * sc->fields[f].record_bytes;

		sec = align_up(sec, 8);
		if (f == m) {
			main_at = sec;
		} else if (len) {
			int r;

			if (!frames_hold(fr, sec, len, &k0, &k1))
				return FRAMED_NOT_CUT;
			r = block_frames_decode(dctx, fr, k0, k1,
						stored + fr->at[k0], others);
			if (r < 0)
				return r;
			view.data[f] = others;
			others += align_up(len, 8);
		} else {
			view.data[f] = others;
		}
		sec += len;
	}
	if (sec != blk->raw_size)
		return FRAMED_NOT_CUT;
	/* a frame per record of the main field */
	for (uint32_t i = 0; i < n; i++) {
		if (!frames_hold(fr, main_at + i * rb, rb, &k0, &k1) ||
		    k0 != k1 || fr->raw[k0 + 1] != main_at + (i + 1) * rb)
			return FRAMED_NOT_CUT;
		frame_at[i] = fr->at[k0];
		frame_at[i + 1] = fr->at[k0 + 1];
	}
	e->frame_at = frame_at;
	e->frames = stored;
	e->view = view;
	return 0;
}

/* Parse @blk's seek table from its stored bytes at @stored and lay entry
 * @e out (place_frames).  A table that cannot be parsed, for want of
 * memory too, leaves the block to be decoded whole, which says why and
 * needs none.  @return: place_frames()'s. */
static int lay_out(struct loader_core *c, struct cache_entry *e,
		   const struct shard_block *blk, ZSTD_DCtx *dctx,
		   const uint8_t *stored, uint8_t *others)
{
	struct block_frames fr;
	uint64_t need;
	int r;

	if (block_frames_parse(blk, stored, blk->stored_size, &fr, &need))
		return FRAMED_NOT_CUT;
	r = place_frames(c, e, blk, &fr, dctx, stored, others);
	block_frames_free(&fr);
	return r;
}

int framed_fetch(struct loader_core *c, struct cache_entry *e,
		 const struct shard_block *blk, ZSTD_DCtx *dctx,
		 struct block_hash *hash, uint32_t *bad_part, int *decode_err,
		 uint64_t *read_end)
{
	uint32_t shard = c->block_shard[e->block];
	uint64_t t0, cpu0;
	int r;

	*decode_err = 0;
	e->frame_at = NULL;
	r = read_stored(c, blk, shard, e->stored, hash, bad_part, read_end);
	if (r)
		return r;
	if (c->cfg.verify && block_hash_check(blk, hash)) {
		*decode_err = -SLUICE_ECORRUPT;
		return 0;
	}
	/* the whole block is here: its table too */
	cpu0 = thread_cpu_ns();
	t0 = now_ns();
	r = lay_out(c, e, blk, dctx, e->stored,
		    e->stored + align_up(blk->stored_size, 8));
	atomic_fetch_add(&c->cpu_decompress_ns, thread_cpu_ns() - cpu0);
	atomic_fetch_add(&c->st_decode.busy_ns, now_ns() - t0);
	if (r < 0)
		*decode_err = r;
	return r > 0 ? r : 0;
}

int framed_lay_out_read(struct loader_core *c, struct cache_entry *e,
			const struct shard_block *blk, const uint8_t *stored,
			ZSTD_DCtx *dctx)
{
	uint64_t room = align_up(blk->raw_size, 4096);

	e->frame_at = NULL;
	/* the decode buffer holds the other fields and the table: the main
	 * field's records are 16 KiB or more each */
	if (other_bytes(c, blk->record_count) +
	    ((uint64_t)blk->record_count + 1) * sizeof(uint64_t) > room)
		return FRAMED_NOT_CUT;
	return lay_out(c, e, blk, dctx, stored, e->scratch);
}
