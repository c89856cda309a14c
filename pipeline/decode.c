/*
 * decode.c - the decode workers: take jobs (assembly parts and range
 * checks first), verify and decompress blocks, and wake the slots that
 * wait for them.  Assembly itself: assemble.c.
 */
#include <errno.h>
#include <zstd.h>

#include "loader.h"

void jobs_push_locked(struct loader_core *c, struct job j)
{
	/* Bounded by construction: one decode and one fetch per cache
	 * entry, and a few parts per slot. */
	struct job_queue *q = j.kind == JOB_DECODE ? &c->decode_jobs
			      : j.kind == JOB_STREAM ? &c->stream_jobs
			      : j.kind == JOB_FETCH ? &c->fetch_jobs
						    : &c->batch_jobs;

	q->ring[(q->head + q->len++) % q->cap] = j;
	pthread_cond_signal(&c->work_cv);
}

/* The next job, those that finish batches first (loader.h).  @return:
 * 1, or 0 when there is none. */
int jobs_pop_locked(struct loader_core *c, struct job *j)
{
	struct job_queue *q = c->batch_jobs.len ? &c->batch_jobs
			      : c->stream_jobs.len ? &c->stream_jobs
						   : &c->decode_jobs;

	if (q->len == 0)
		return 0;
	*j = q->ring[q->head];
	q->head = (q->head + 1) % q->cap;
	q->len--;
	return 1;
}

void entry_ready_locked(struct loader_core *c, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];
	uint64_t w = e->nwaiters ? e->wait_first : WAIT_NONE;

	/* the slots in the order they waited (batch order) */
	e->nwaiters = 0;
	e->wait_first = e->wait_last = WAIT_NONE;
	while (w != WAIT_NONE) {
		struct slot *s = c->slots[w >> 32];

		w = s->wait_next[(uint32_t)w];
		if (--s->pending == 0)
			slot_assemble_locked(c, s);
	}
	if (e->ahead) {
		e->ahead = 0;
		c->ahead.inflight--;
		cache_unpin(c, i);
	}
}

/* @blk's stored bytes on the device whole (what stream.c did not upload
 * as they landed) and their checksum taken there (gather.c).  On a
 * failure of the device's, *@failed says which step failed. */
static int check_on_device(struct loader_core *c, struct cache_entry *e,
			   const struct shard_block *blk, const uint8_t *stored,
			   int fetched, int fetch_err, const char **failed)
{
	uint64_t up = e->stream.uploaded;
	/* a fetched block's parts all went up from staging (fetch.c) */
	int r = fetched ? fetch_err
		: gather_upload(c, stored + up, stored + up,
				blk->stored_size - up);

	if (r) {
		*failed = "copy to the device for its checksum: ";
		return r;
	}
	r = gather_check(c, blk, stored);
	if (r && r != -SLUICE_ECORRUPT)
		*failed = "checksum on the device: ";
	return r;
}

static void decode_entry(struct loader_core *c, ZSTD_DCtx *dctx, uint32_t i)
{
	struct cache_entry *e = &c->cache.entries[i];
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	const uint8_t *stored = e->stored + (blk->offset - e->rd.offset);
	const void *raw = NULL;
	uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns(), cpu1 = cpu0;
	/* checksummed on the device, from its upload: the CPU reads a raw
	 * block not at all, a zstd block only to decompress it; unless its
	 * fetch decompressed it (and checked it on the way) */
	int on_device;
	int r = 0, ahead, decoded, decode_err, framed;
	/* what failed on the device: its checksum, or the upload of the
	 * decoded block (else the block itself is at fault) */
	const char *dev_failed = NULL;
	char dev_msg[256] = "";
	uint8_t *into;
	int fetched, fetch_err, direct;

	/* direct.c set it before the read, fetch.c as the parts went up;
	 * nothing else touches them now */
	core_lock(c);
	into = e->direct ? e->direct : e->scratch;
	direct = e->direct != NULL;
	fetched = e->fetch.on;
	fetch_err = e->fetch.upload_err;
	decoded = e->fetch.decoded;
	decode_err = e->fetch.decode_err;
	/* its view made by its fetch, on its frames (framed.c) */
	framed = decoded && e->frame_at;
	pthread_mutex_unlock(&c->mu);
	on_device = !decoded && gather_checks(c, blk);
	if (decoded) {
		/* checked and decompressed by its fetch (fetch.c) */
		r = decode_err;
		raw = framed ? NULL : into;
	} else if (on_device) {
		r = check_on_device(c, e, blk, stored, fetched, fetch_err,
				    &dev_failed);
		cpu1 = thread_cpu_ns();
		/* the decode stage's span: the device's wait is not its */
		t0 = now_ns();
	} else if (fetched) {
		/* unchecked (cfg.verify off): its parts went up all the same */
		r = fetch_err;
		if (r)
			dev_failed = "copy to the device: ";
	} else if (c->cfg.verify) {
		r = e->stream.hash ? stream_check(e, blk, stored)
				   : block_verify(blk, stored);
		cpu1 = thread_cpu_ns();
		atomic_fetch_add(&c->cpu_verify_ns, cpu1 - cpu0);
	}
	/* its records' frames left for the assembly (framed.c), unless
	 * it goes whole into one batch (direct.c) */
	if (!r && !decoded && !on_device && !fetched && c->framed.on &&
	    blk->codec == DLS_CODEC_ZSTD && !direct) {
		r = framed_lay_out_read(c, e, blk, stored, dctx);
		framed = r == 0;
		if (r == FRAMED_NOT_CUT)
			r = 0;
	}
	if (!r && !decoded && !framed)
		r = block_decode(dctx, blk, stored, 0, into,
				 into ? blk->raw_size : 0, &raw);
	if (!r && !framed)
		r = block_view_init(&c->ds->schema,
				    c->ds->shards[shard].max_value_bytes, raw,
				    blk->raw_size, blk->record_count, &e->view);
	/* a fetched raw block: only its offsets tables are on the host */
	if (!r && fetched && !decoded && c->has_variable)
		r = block_tables_check(c, e->block, raw, &e->view);
	uint64_t t1 = now_ns();

	atomic_fetch_add(&c->cpu_decompress_ns, thread_cpu_ns() - cpu1);
	/* The device copy must be whole before the entry is READY: gathers
	 * read it from then on (gather.c).  A raw block checked there, or
	 * fetched, is. */
	if (!r && c->gather.on && !((on_device || fetched) && raw == stored)) {
		/* what stream.c uploaded as it landed (raw blocks) */
		uint64_t up = raw == stored ? e->stream.uploaded : 0;

		r = gather_upload(c, (const uint8_t *)raw + up,
				  (const uint8_t *)raw + up,
				  blk->raw_size - up);
		if (r)
			dev_failed = "copy to the device for a gather: ";
	}
	/* the device's words for its own failures only */
	if (dev_failed && r == -SLUICE_ECUDA)
		device_last_error(c->dev, dev_msg, sizeof(dev_msg));

	loader_span(c, SLUICE_STAGE_DECODE, t0, t1, blk->raw_size);
	atomic_fetch_add(&c->st_decode.busy_ns, t1 - t0);
	atomic_fetch_add(&c->st_decode.bytes, blk->raw_size);
	atomic_fetch_add(&c->st_decode.ops, 1);

	core_lock(c);
	stream_release_locked(c, e);
	if (r) {
		const char *what = r == -SLUICE_ECORRUPT
			? "checksum or layout mismatch (corrupt block)"
			: sluice_strerror(r);

		e->state = ENTRY_FAILED;
		e->error = r;
		e->corrupt = !dev_failed;
		loader_block_failed_locked(c, r, e->corrupt,
				"%s: block %llu: offset %llu: %s%s",
				c->ds->shards[shard].path,
				(unsigned long long)(e->block -
					c->shard_block_base[shard]),
				(unsigned long long)blk->offset,
				dev_failed ? dev_failed : what,
				dev_failed ? (dev_msg[0] ? dev_msg
					      : sluice_strerror(r)) : "");
	} else {
		e->raw = raw;
		e->state = ENTRY_READY;
		if (e->direct)
			atomic_fetch_add(&c->blocks_direct, 1);
	}
	ahead = e->ahead;
	entry_ready_locked(c, i);
	pthread_mutex_unlock(&c->mu);
	if (ahead)
		io_ring_wake(c->ring);   /* its pin is gone: room to plan */
}

void *decode_worker_main(void *arg)
{
	struct loader_core *c = arg;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	struct block_hash *hash = block_hash_new();
	uint32_t buffer = 0, range_buffer;
	struct io_read *ranges[FETCH_RANGES_MAX];
	struct fetch_pending pending = { 0 };

	core_lock(c);
	if (!dctx || !hash)
		loader_fail_locked(c, -ENOMEM,
				   "cannot create a zstd context or a hash");
	while (!c->stop) {
		struct job j;
		int have = jobs_pop_locked(c, &j);
		unsigned nranges = 0;

		/* fetches last: the jobs before finish blocks and batches;
		 * a batch's range reads before the blocks read ahead */
		if (!have)
			nranges = fetch_ranges_pop_locked(c, ranges,
							  &range_buffer);
		if (nranges) {
			pthread_mutex_unlock(&c->mu);
			fetch_ranges(c, ranges, nranges, range_buffer,
				     &pending, dctx);
			core_lock(c);
			continue;
		}
		if (!have && !fetch_pop_locked(c, &j, &buffer)) {
			uint64_t t0 = now_ns();

			/* no part to read while the last one uploads:
			 * finish it before sleeping, then look again */
			if (pending.on) {
				pthread_mutex_unlock(&c->mu);
				fetch_settle(c, &pending);
				core_lock(c);
				continue;
			}
			pthread_cond_wait(&c->work_cv, &c->mu);
			atomic_fetch_add(&c->st_decode.wait_ns, now_ns() - t0);
			continue;
		}
		pthread_mutex_unlock(&c->mu);
		/* only a fetch overlaps the last part's upload: other jobs
		 * may take an upload lane themselves */
		if (j.kind != JOB_FETCH)
			fetch_settle(c, &pending);
		if (j.kind == JOB_DECODE)
			decode_entry(c, dctx, j.id);
		else if (j.kind == JOB_STREAM)
			stream_part(c, j.id);
		else if (j.kind == JOB_FETCH)
			fetch_part(c, j, buffer, &pending, dctx, hash);
		else if (j.kind == JOB_RANGES)
			ranges_verify_part(c, j);
		else if (j.kind == JOB_RANGES_DECODE)
			ranges_decode_part(c, j, dctx);
		else
			run_assemble(c, j, dctx);
		core_lock(c);
	}
	pthread_mutex_unlock(&c->mu);
	fetch_settle(c, &pending);
	ZSTD_freeDCtx(dctx);
	block_hash_free(hash);
	return NULL;
}
