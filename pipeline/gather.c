/*
 * gather.c - batches assembled on the device (issue 12, device_gather):
 * raw data crosses the CPU's memory only by the disk's DMA.
 *
 * The device mirrors the arena's io part as well as its batch part.  A
 * decode worker uploads each decoded block to its mirror (decode.c,
 * before the entry becomes READY, waiting for the copy), so the device
 * copy is valid whenever the entry is READY and the host io memory is
 * free for reuse as soon as it is without gathers.  A batch's assembly
 * then builds a table of runs {io offset, batch offset, length}, one per
 * field and run of neighbouring records of one block, and the device
 * copies them with one kernel into the batch mirror; the batch's host
 * memory is never written (it still holds the batch against the budget).
 *
 * Ordering: the blocks a batch gathers from stay pinned until its gather
 * is enqueued (slot_finish); only then can they be evicted and their io
 * memory take another block, whose upload waits on the device for every
 * gather enqueued before it (device_upload()).
 *
 * Records read by range are gathered from their ranges, which the fetches
 * upload into the batch's io memory (ranges.device: ranges_open.c).
 *
 * Variable fields: each value is a run, and a padded row's tail a run of
 * zeros (GATHER_ZEROS).  Their offsets or lengths are worked out on the
 * host from the blocks' offsets tables (assemble.c: a fetched block's
 * fetch copies those to the host, fetch.c), and copied to the batch's
 * device memory after its gather (gather_submit).
 *
 * Not gathered (assembled on the CPU as before): batches with records
 * read by range where ranges.device is off (ranges_device_suits), loaders
 * whose batches' blocks do not fit at once (assembled a chunk of blocks
 * at a time, chunks.c; stats.fallbacks says so), batches over budget in
 * the consumer's own memory, and slots beyond the device's (both only
 * on the host).
 */
#include <stdio.h>
#include <stdlib.h>

#include "loader.h"

/* Whether the dataset and configuration would have batches gathered
 * (before the device opens, and before chunks are decided). */
static int gather_suits(const struct loader_core *c)
{
	/* Every record read by range: no block to upload, unless the ranges
	 * go to the device (ranges.c runs before the device opens). */
	if (c->cfg.device_gather == SLUICE_DEVICE_GATHER_OFF ||
	    (c->ranges.all && !ranges_device_suits(c)) ||
	    (c->cfg.device == SLUICE_DEVICE_HOST &&
	     c->cfg.device_gather != SLUICE_DEVICE_GATHER_ON))
		return 0;
	/* AUTO keeps zstd batches on the CPU where blocks go whole into one
	 * batch and decompress straight into it (direct.c); elsewhere a
	 * decoded block is uploaded once like a raw one, and no CPU copies
	 * it into batches (on the H100 host, zstd batches assembled on the
	 * CPU kept 3.9 threads copying). */
	return c->cfg.device_gather == SLUICE_DEVICE_GATHER_ON ||
	       !c->has_zstd || !direct_likely(c);
}

/* Before the device opens: does this loader ask for an io mirror?
 * Batches assembled by chunks hold their blocks a chunk at a time, so
 * they are assembled on the CPU (chunks.c). */
int gather_wanted(const struct loader_core *c)
{
	return !c->chunks.chunked && gather_suits(c);
}

/* Runs one batch can take: one per field and record at most, and with
 * a pad length one more per variable field and record (its zeros). */
uint32_t gather_runs_max(const struct loader_core *c)
{
	const struct shard_schema *sc = &c->ds->schema;
	uint32_t per_record = sc->nfields;

	for (uint32_t f = 0; c->cfg.pad_length && f < sc->nfields; f++)
		per_record += sc->fields[f].variable;
	return per_record * c->cfg.batch_size;
}

/* After the device opened: gathers on, and then no views or direct
 * decodes (their bytes would not be in the io mirror). */
void gather_init(struct loader_core *c)
{
	int device = (c->dev_info.caps & DEVICE_CAP_GATHER) ||
		     c->cfg.device_gather == SLUICE_DEVICE_GATHER_ON;

	c->gather.on = gather_wanted(c) && device;
	c->gather.lost_to_chunks = c->chunks.chunked && gather_suits(c) &&
				   device;
	c->gather.checks = c->gather.on && c->cfg.verify &&
			   (c->dev_info.caps & DEVICE_CAP_CHECKSUM) &&
			   !(sluice_loader_config_forced(&c->cfg) &
			     SLUICE_FORCE_HOST_CHECKS);
	if (c->gather.on) {
		c->views.on = 0;
		c->direct.on = 0;
	}
}

int slot_gather_init(const struct loader_core *c, struct slot *s)
{
	if (!c->gather.on || s->id >= c->cfg.prefetch_depth)
		return 0;
	s->gather.runs = malloc((size_t)gather_runs_max(c) *
				sizeof(*s->gather.runs));
	return s->gather.runs ? 0 : -1;
}

/* With its memory granted: is this batch gathered on the device? */
int slot_gathers(const struct loader_core *c, const struct slot *s)
{
	return c->gather.on && s->gather.runs &&
	       (s->ranges.nranged == 0 || c->ranges.device) &&
	       !s->chunk.chunked && !s->own_host &&
	       s->host && s->id < c->cfg.prefetch_depth;
}

/* Append a run, or extend the last one when this one continues it on
 * both sides (neighbouring records of one block, or of one field; zeros
 * after zeros). */
void gather_run_append(struct gather_run *runs, uint32_t *n, uint64_t src,
		       uint64_t dst, uint64_t len)
{
	struct gather_run *last = *n ? &runs[*n - 1] : NULL;
	int zeros = src == GATHER_ZEROS;

	if (len == 0)
		return;
	if (last && last->dst + last->len == dst &&
	    (zeros ? last->src == GATHER_ZEROS
		   : last->src != GATHER_ZEROS && last->src + last->len == src)) {
		last->len += len;
		return;
	}
	runs[(*n)++] = (struct gather_run){ src, dst, len };
}

/* Runs taken from runs.c at a time, converted into the table. */
#define GATHER_RUNS_PER_CALL 64u

/* The batch's run table (runs.c), as the device takes it: arena offsets
 * into the io mirror and the batch mirror.  @return: the bytes they move
 * (the assemble stage's bytes: what goes into the batch, here by the
 * device). */
uint64_t gather_plan(struct loader_core *c, struct slot *s)
{
	uint64_t slot_off = (uint64_t)(s->host - c->arena);
	uint64_t bytes = 0;
	struct batch_run runs[GATHER_RUNS_PER_CALL];
	struct run_cursor cur;
	uint32_t n = 0, got;

	runs_start(s, 0, s->delivered, &cur);
	while ((got = runs_next(c, s, &cur, runs, GATHER_RUNS_PER_CALL)) > 0) {
		for (uint32_t k = 0; k < got; k++) {
			const struct batch_run *b = &runs[k];

			gather_run_append(s->gather.runs, &n,
					  (uint64_t)(b->src - c->arena),
					  slot_off + b->dst, b->len);
			gather_run_append(s->gather.runs, &n, GATHER_ZEROS,
					  slot_off + b->dst + b->len, b->zeros);
			bytes += b->len + b->zeros;
		}
	}
	s->gather.nruns = n;
	return bytes;
}

/* The variable fields' offsets or lengths, which the host wrote into the
 * batch (assemble.c), to its device memory, on the same stream.  After
 * the gather: the gather first waits for the slot's last copy, its run
 * table's last reader (cuda_device.c), which would be this one. */
static int copy_variable_index(struct loader_core *c, struct slot *s)
{
	const struct shard_schema *sc = &c->ds->schema;
	struct slot_range index[DLS_MAX_FIELDS];
	uint32_t n = 0, t = 0;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		t++;
		if (!sc->fields[f].variable)
			continue;
		index[n].offset = s->tensors[t].offset;
		index[n++].len = tensor_bytes(&s->tensors[t++]);
	}
	return n ? device_copy_slot_ranges(c->dev, s->id, s->host, index, n)
		 : 0;
}

/* Enqueue the batch's gather; before its blocks are unpinned.  On a
 * failure, *@step names the step that failed, for the loader's message. */
int gather_submit(struct loader_core *c, struct slot *s, const char **step)
{
	uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns(), bytes = 0;
	int r;

	for (uint32_t k = 0; k < c->tensors_per_batch; k++)
		bytes += tensor_bytes(&s->tensors[k]);
	/* the range records' resident fields, beside their uploaded
	 * ranges (ranges.device) */
	*step = "upload of the resident fields of its records read by range";
	r = s->ranges.resident_len
		? gather_upload(c, s->ranges.buf + s->ranges.resident_off,
				s->ranges.buf + s->ranges.resident_off,
				s->ranges.resident_len)
		: 0;
	if (!r) {
		*step = "gather";
		r = device_gather_slot(c->dev, s->id, s->gather.runs,
				       s->gather.nruns);
	}
	if (!r) {
		*step = "copy of the variable fields' offsets or lengths";
		r = copy_variable_index(c, s);
	}
	/* Assembly's CPU: enqueueing on a GPU, the whole memcpy on the
	 * host (ON there). */
	atomic_fetch_add(&c->cpu_assemble_ns, thread_cpu_ns() - cpu0);
	loader_span(c, SLUICE_STAGE_COPY, t0, now_ns(), bytes);
	atomic_fetch_add(&c->st_copy.busy_ns, now_ns() - t0);
	atomic_fetch_add(&c->st_copy.bytes, bytes);
	atomic_fetch_add(&c->st_copy.ops, 1);
	return r;     /* counted on delivery (loader.c), as views are */
}

/* A block is decoded: put its bytes on the device before it is READY. */
int gather_upload(struct loader_core *c, const uint8_t *io, const uint8_t *src,
		  uint64_t len)
{
	struct device_upload u;
	int r = gather_upload_start(c, io, src, len, &u);

	return r ? r : gather_upload_finish(c, &u);
}

/* Both halves count their wall time, waits included (what an upload
 * costs the worker that makes it), and their CPU as assembly's share on
 * this path (the copy itself is the GPU's DMA; the wait sleeps). */
static void upload_account(struct loader_core *c, uint64_t t0, uint64_t cpu0)
{
	atomic_fetch_add(&c->gather.upload_ns, now_ns() - t0);
	atomic_fetch_add(&c->cpu_assemble_ns, thread_cpu_ns() - cpu0);
}

int gather_upload_start(struct loader_core *c, const uint8_t *io,
			const uint8_t *src, uint64_t len,
			struct device_upload *u)
{
	uint64_t cpu0 = thread_cpu_ns(), t0 = now_ns();
	int r = device_upload_start(c->dev, io, src, len, u);

	upload_account(c, t0, cpu0);
	return r;
}

int gather_upload_finish(struct loader_core *c, struct device_upload *u)
{
	uint64_t cpu0 = thread_cpu_ns(), t0 = now_ns();
	int r = device_upload_finish(c->dev, u);

	upload_account(c, t0, cpu0);
	if (!r)
		atomic_fetch_add(&c->gather.device_upload_bytes, u->len);
	return r;
}

/* Below this a block's checksum costs the CPU less than the launch and
 * the wait would (XXH3 hashes 256 KiB in about 25 us on one core). */
#define DEVICE_CHECK_MIN ((uint64_t)256 << 10)

/* Is @blk checksummed on the device (gather_check) instead of the CPU
 * (never without verify: gather.checks)?
 * Its stored bytes go there as they land: a raw block's are what the
 * gathers read; a zstd block's cross PCIe once more (half the decoded
 * bytes, at zstd's usual ratio) to spare the CPU their hash, the CPUs
 * being what binds zstd data. */
int gather_checks(const struct loader_core *c, const struct shard_block *blk)
{
	return c->gather.checks && blk->stored_size >= DEVICE_CHECK_MIN &&
	       (blk->codec == DLS_CODEC_ZSTD ||
		(blk->codec == DLS_CODEC_RAW &&
		 blk->stored_size == blk->raw_size));
}

/* @blk needs no host copy at all: raw, uploaded whole to the device's
 * mirror, where batches gather from it, and checksummed there unless the
 * loader checks nothing (cfg.verify off).  But for its variable fields'
 * offsets tables, which its fetch copies to the host (fetch.c). */
int gather_device_only(const struct loader_core *c,
		       const struct shard_block *blk)
{
	if (c->cfg.verify)
		return blk->codec == DLS_CODEC_RAW && gather_checks(c, blk);
	return c->gather.on && blk->codec == DLS_CODEC_RAW &&
	       blk->stored_size == blk->raw_size;
}

/*
 * @blk is uploaded whole from @stored: its checksum, taken on the device
 * from the bytes the gathers will read.  @return: 0, -SLUICE_ECORRUPT,
 * or the device's error (its message in device_last_error()).
 */
int gather_check(struct loader_core *c, const struct shard_block *blk,
		 const uint8_t *stored)
{
	uint64_t sum = 0, cpu0 = thread_cpu_ns(), t0 = now_ns();
	int r = device_checksum(c->dev, stored, blk->stored_size, &sum);

	/* the wait sleeps: verify's CPU is the launch's; its wall time is
	 * what the check costs the worker */
	atomic_fetch_add(&c->cpu_verify_ns, thread_cpu_ns() - cpu0);
	atomic_fetch_add(&c->gather.check_ns, now_ns() - t0);
	if (r)
		return r;
	atomic_fetch_add(&c->gather.bytes_checked, blk->stored_size);
	return sum == blk->checksum ? 0 : -SLUICE_ECORRUPT;
}
