/*
 * fetch.c - reads the decode workers make themselves, not the ring: raw
 * blocks that go only to the device, and record ranges from the page
 * cache (at the end of the file): into io memory, straight into their
 * batch where they are read in place (ranges.in_place), or, where they go
 * to the device (ranges.device), through a staging buffer as the blocks'
 * parts do.
 *
 * A block: each part of it (4 MiB) is pread() into a staging buffer
 * while the CPU's cache holds it and uploaded from there (stage.c says
 * when a block is fetched), and the parts of one block go to whichever
 * workers are free, the oldest block's first.  A worker reads its next
 * part while the last one's copy runs, and then waits for that copy:
 * one upload in flight per worker, two staging buffers.  Of a block's
 * bytes only its variable fields' offsets tables reach the host.
 *
 * Why not the ring: a page-cache read is a CPU copy whoever makes it.
 * Through the ring, io_uring's workers copied each piece, the I/O thread
 * reaped it, a decode worker uploaded it and released its room, and the
 * I/O thread queued the next: four threads and two wake-ups a piece.  On
 * the H100 host, in one run, that path delivered 29.4 GB/s at 0.41 CPU
 * s/GB, fetches 39.6 at 0.28, and KvikIO, which reads and uploads in
 * 4 MiB tasks on 16 threads as a fetch does, 44.2 at 0.36
 * (bench/results/2026-11-27-h100-fetch.md, run 3).
 */
#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_d_stableOutBuffer */
#include <errno.h>
#include <string.h>
#include <zstd.h>

#include "loader.h"

void fetch_queue_locked(struct loader_core *c, struct cache_entry *e)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	uint64_t part = c->stage.buffer_bytes;
	/* a zstd block's parts decompress in order, by one worker */
	uint32_t parts = e->fetch.decoded
		? 1 : (uint32_t)((blk->stored_size + part - 1) / part);

	e->fetch.left = parts;
	/* taken by fetch_pop_locked only, a part at a time */
	jobs_push_locked(c, (struct job){ JOB_FETCH,
					  (uint32_t)(e - c->cache.entries),
					  0, parts });
}

int fetch_pop_locked(struct loader_core *c, struct job *j, uint32_t *buffer)
{
	struct job_queue *q = &c->fetch_jobs;
	struct job *head = &q->ring[q->head];

	if (q->len == 0 || c->stage.nfree == 0)
		return 0;
	*j = *head;
	*buffer = c->stage.free[--c->stage.nfree];
	/* the block stays at the head until its last part is taken */
	if (++head->part == head->parts) {
		q->head = (q->head + 1) % q->cap;
		q->len--;
	}
	/* the next part, for another worker: one wakes the next */
	if (q->len && c->stage.nfree)
		pthread_cond_signal(&c->work_cv);
	return 1;
}

/* A part is read and uploaded, or failed: its buffer goes back, and the
 * block's last part hands its read on. */
static void part_done(struct loader_core *c, struct job j, uint32_t buffer,
		      int read_err, int upload_err)
{
	struct cache_entry *e = &c->cache.entries[j.id];
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	int last;

	core_lock(c);
	c->stage.free[c->stage.nfree++] = buffer;
	if (read_err && !e->fetch.err) {
		e->fetch.err = read_err;
		e->fetch.err_at = blk->offset +
				  (uint64_t)j.part * c->stage.buffer_bytes;
	}
	/* the decode says what failed (decode.c's check_on_device) */
	if (upload_err && !e->fetch.upload_err)
		e->fetch.upload_err = upload_err;
	last = --e->fetch.left == 0;
	if (last) {
		e->rd.result = e->fetch.err ? e->fetch.err
					    : (int64_t)e->rd.length;
		/* a decoded block's: when its last part was read (the
		 * read-ahead's latency sample leaves out the decode) */
		if (!e->fetch.decoded)
			e->read_back_ns = now_ns();
		entry_read_done_locked(c, e);
	}
	/* its buffer is free for the next part */
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
	/* the I/O thread may sleep in the ring with no read of its own
	 * left: a block that came in lets it plan again */
	if (last)
		io_ring_wake(c->ring);
}

/* A raw block with variable fields goes to the device alone: the part's
 * share of its offsets tables, which its batches are sized and gathered
 * by on the host, is copied from @staging to its place in the block's io
 * memory (the layout read at open says where: block_tables_known; the
 * decode checks the tables against it, decode.c). */
static void copy_tables(struct loader_core *c, const struct cache_entry *e,
			const struct shard_block *blk, const uint8_t *staging,
			uint64_t from, uint64_t len)
{
	const struct shard_schema *sc = &c->ds->schema;
	const uint64_t *sec = c->ranges.sec + e->block * sc->nfields;
	uint64_t table = ((uint64_t)blk->record_count + 1) * 8;
	uint8_t *host = e->stored + (blk->offset - e->rd.offset);

	for (uint32_t f = 0; f < sc->nfields; f++) {
		/* a table ends where its field's values start */
		uint64_t lo = sec[f] - table, hi = sec[f];

		if (!sc->fields[f].variable)
			continue;
		if (lo < from)
			lo = from;
		if (hi > from + len)
			hi = from + len;
		if (lo < hi)
			memcpy(host + lo, staging + (lo - from), hi - lo);
	}
}

/* A part's upload is complete: its bytes are on the device. */
static int upload_finish(struct loader_core *c, struct device_upload *upload)
{
	int r = gather_upload_finish(c, upload);

	if (!r)
		atomic_fetch_add(&c->stage.bytes, upload->len);
	return r;
}

static void ranges_done(struct loader_core *c, struct io_read **rds,
			unsigned n, uint32_t buffer, int upload_err);

/* @overlapped: the worker read a part while this upload ran. */
static void settle(struct loader_core *c, struct fetch_pending *pending,
		   int overlapped)
{
	int upload_err;

	if (!pending->on)
		return;
	pending->on = 0;
	upload_err = upload_finish(c, &pending->upload);
	if (!upload_err && overlapped)
		atomic_fetch_add(&c->stage.bytes_overlapped,
				 pending->upload.len);
	if (pending->nranges)
		ranges_done(c, pending->ranges, pending->nranges,
			    pending->buffer, upload_err);
	else
		part_done(c, pending->job, pending->buffer, 0, upload_err);
}

void fetch_settle(struct loader_core *c, struct fetch_pending *pending)
{
	settle(c, pending, 0);
}

int fetch_read_part(struct loader_core *c, uint32_t shard, uint8_t *to,
		    uint64_t len, uint64_t at, uint64_t *read_ns,
		    uint64_t *cpu_ns, uint64_t *end)
{
	uint64_t t0, cpu0;
	int64_t got;
	int stop;

	/* a close or a failure does not wait for the whole block */
	core_lock(c);
	stop = c->stop || c->failed;
	pthread_mutex_unlock(&c->mu);
	cpu0 = thread_cpu_ns();
	t0 = now_ns();
	got = stop ? -ECANCELED : io_ring_pread(c->ring, shard, to, len, at);
	*end = now_ns();
	*read_ns += *end - t0;
	*cpu_ns += thread_cpu_ns() - cpu0;
	/* short: the file ends before its index says */
	return got < 0 ? (int)got : (uint64_t)got < len ? -ENODATA : 0;
}

/*
 * A zstd block that goes only to the device (fetch.decoded): read part by
 * part through @buffer while the CPU's cache holds it, hashed and
 * decompressed from there straight into the entry's scratch, which the
 * decode then uploads (decode.c).  Through the ring its stored bytes
 * were read into io memory the cache does not hold, uploaded for their
 * checksum, and read again by the decompressor: on the H100 host zstd
 * blocks delivered 21.2 GB/s at 0.61 CPU s/GB, 0.20 of it reading
 * (bench/results/2026-11-27-h100-defaults.md).  The output buffer is
 * stable (the whole scratch), so zstd writes there, not into a window of
 * its own.  @return: the read's error (its part in *@bad_part), or 0 with
 * *@decode_err set when the bytes were bad; *@read_end: when its last
 * read ended.
 */
static int fetch_decode(struct loader_core *c, struct cache_entry *e,
			uint32_t buffer, ZSTD_DCtx *dctx,
			struct block_hash *hash, uint32_t *bad_part,
			int *decode_err, uint64_t *read_end)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	uint64_t part = c->stage.buffer_bytes;
	uint8_t *staging = c->stage.base + (uint64_t)buffer * part;
	/* straight into its batch where direct.c chose so (host batches) */
	ZSTD_outBuffer out = { e->direct ? e->direct : e->scratch,
			       blk->raw_size, 0 };
	uint64_t from, done = 0, cpu_read = 0, cpu_hash = 0, cpu_zstd = 0;
	uint64_t read_ns = 0, zstd_ns = 0, t0, cpu0;
	size_t left = 1;
	int r = 0;

	*decode_err = 0;
	(void)ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters);
	/* no window of its own is kept with a stable output, so any window
	 * a frame declares decodes, as ZSTD_decompressDCtx's do */
	if (ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_stableOutBuffer,
						1)) ||
	    ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax,
						ZSTD_WINDOWLOG_MAX)))
		*decode_err = -ENOMEM;
	block_hash_reset(hash);
	/* after a zstd error, a block checked is still read to its end: a
	 * damaged one is corrupt, whatever zstd made of it, as where the
	 * checksum is taken first (decode.c) */
	for (from = 0; from < blk->stored_size &&
		       (!*decode_err || c->cfg.verify); from += part) {
		uint64_t len = blk->stored_size - from < part
			? blk->stored_size - from : part;
		ZSTD_inBuffer in = { staging, len, 0 };

		r = fetch_read_part(c, shard, staging, len, blk->offset + from,
				    &read_ns, &cpu_read, read_end);
		if (r) {
			*bad_part = (uint32_t)(from / part);
			break;
		}
		done += len;
		cpu0 = thread_cpu_ns();
		if (c->cfg.verify)
			block_hash_feed(hash, staging, len);
		cpu_hash += thread_cpu_ns() - cpu0;
		if (*decode_err)
			continue;
		cpu0 = thread_cpu_ns();
		t0 = now_ns();
		/* the first frame holds at most the block's raw size (v4:
		 * one of several); the frames then fill exactly that */
		if (from == 0 && ZSTD_getFrameContentSize(staging, len) >
					 blk->raw_size)
			*decode_err = -SLUICE_ECORRUPT;
		while (!*decode_err && in.pos < in.size) {
			size_t in0 = in.pos, out0 = out.pos;

			left = ZSTD_decompressStream(dctx, &out, &in);
			/* no progress: more output than raw_size */
			if (ZSTD_isError(left) ||
			    (in.pos == in0 && out.pos == out0))
				*decode_err = -SLUICE_EZSTD;
		}
		zstd_ns += now_ns() - t0;
		cpu_zstd += thread_cpu_ns() - cpu0;
	}
	/* the bytes end inside a frame: zstd's error, as the one-shot
	 * decoder's (block_decode) */
	if (!r && !*decode_err && left != 0)
		*decode_err = -SLUICE_EZSTD;
	if (!r && !*decode_err && out.pos != blk->raw_size)
		*decode_err = -SLUICE_ECORRUPT;
	if (!r && c->cfg.verify && block_hash_check(blk, hash))
		*decode_err = -SLUICE_ECORRUPT;
	(void)ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters);
	atomic_fetch_add(&c->cpu_read_ns, cpu_read);
	atomic_fetch_add(&c->cpu_verify_ns, cpu_hash);
	atomic_fetch_add(&c->cpu_decompress_ns, cpu_zstd);
	if (c->cfg.verify)
		atomic_fetch_add(&c->bytes_verified_landing, done);
	atomic_fetch_add(&c->st_read.busy_ns, read_ns);
	/* the decode's (decode.c adds its upload and bytes) */
	atomic_fetch_add(&c->st_decode.busy_ns, zstd_ns);
	atomic_fetch_add(&c->stage.bytes, done);
	return r;
}

void fetch_part(struct loader_core *c, struct job j, uint32_t buffer,
		struct fetch_pending *pending, ZSTD_DCtx *dctx,
		struct block_hash *hash)
{
	struct cache_entry *e = &c->cache.entries[j.id];
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	uint64_t part = c->stage.buffer_bytes, from = (uint64_t)j.part * part;
	uint64_t len = blk->stored_size - from < part
		? blk->stored_size - from : part;
	uint8_t *staging = c->stage.base + (uint64_t)buffer * part;
	/* where the block's bytes would be in io memory: the device
	 * mirror's offset (never written here) */
	const uint8_t *io = e->stored + (blk->offset - e->rd.offset) + from;
	struct device_upload upload;
	int read_err = 0, upload_err = 0, skip, settle_first, decoded, direct;

	/* after a failure, the block's other parts and the loader's other
	 * fetches only finish; a block a part of which was never read
	 * fails, in the loader's failure or its close (nothing waits for
	 * it then) */
	core_lock(c);
	skip = e->fetch.err || e->fetch.upload_err || c->failed || c->stop;
	if (skip && !e->fetch.err && !e->fetch.upload_err)
		read_err = -ECANCELED;
	/* the pending part is the last its block waits for: the block is
	 * not kept waiting for this read too */
	settle_first = pending->on && !pending->nranges &&
		     c->cache.entries[pending->job.id].fetch.left == 1;
	decoded = e->fetch.decoded;
	direct = e->direct != NULL;
	pthread_mutex_unlock(&c->mu);
	if (decoded) {
		/* the block's only job, long: the last upload waits not */
		uint32_t bad_part = 0;
		int decode_err = 0, whole = !skip;
		uint64_t read_end = now_ns();

		settle(c, pending, 0);
		/* its main field's frames left for the assembly (framed.c),
		 * or, where it is not cut so, decoded whole */
		if (!skip && c->framed.on && !direct) {
			read_err = framed_fetch(c, e, blk, dctx, hash,
						&bad_part, &decode_err,
						&read_end);
			whole = read_err == FRAMED_NOT_CUT;
		}
		if (whole)
			read_err = fetch_decode(c, e, buffer, dctx, hash,
						&bad_part, &decode_err,
						&read_end);
		core_lock(c);
		e->fetch.decode_err = decode_err;
		e->read_back_ns = read_end;
		pthread_mutex_unlock(&c->mu);
		j.part = bad_part;
		part_done(c, j, buffer, read_err, 0);
		return;
	}
	if (settle_first)
		settle(c, pending, 0);
	if (!skip) {
		uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
		int64_t got = io_ring_pread(c->ring, shard, staging, len,
					    blk->offset + from);

		/* a file shorter than its index says: damaged data, as the
		 * ring's reads say (io_thread.c) */
		read_err = got < 0 ? (int)got
			 : (uint64_t)got < len ? -ENODATA : 0;
		if (!read_err && c->has_variable)
			copy_tables(c, e, blk, staging, from, len);
		atomic_fetch_add(&c->cpu_read_ns, thread_cpu_ns() - cpu0);
		atomic_fetch_add(&c->st_read.busy_ns, now_ns() - t0);
	}
	/* the previous part's copy ran while this one was read; its lane
	 * goes back before this part takes one */
	settle(c, pending, !skip);
	if (skip || read_err) {
		part_done(c, j, buffer, read_err, 0);
		return;
	}
	upload_err = gather_upload_start(c, io, staging, len, &upload);
	if (upload_err || !c->stage.overlap) {
		if (!upload_err)
			upload_err = upload_finish(c, &upload);
		part_done(c, j, buffer, 0, upload_err);
		return;
	}
	*pending = (struct fetch_pending){ .on = 1, .job = j, .buffer = buffer,
					   .upload = upload };
}

/*
 * Record-range reads (full shuffle, ranges.c) are tens of KiB each.  The
 * ring made them one after another on one thread (inline, or on one
 * io_uring worker where the file system cannot read without blocking,
 * as tmpfs): on the VM 16 KiB records in a full shuffle took 0.36-0.45
 * CPU s/GB to read and delivered 0.57x the window shuffle's GB/s.  The
 * workers make them in parallel instead, a few at a time.
 */
void fetch_range_queue_locked(struct loader_core *c, struct io_read *rd)
{
	struct fetch_range_queue *q = &c->range_fetches;

	q->ring[(q->head + q->len++) % q->cap] = rd;
	if (q->len == 1)
		pthread_cond_signal(&c->work_cv);
}

unsigned fetch_ranges_pop_locked(struct loader_core *c, struct io_read **rds,
				 uint32_t *buffer)
{
	struct fetch_range_queue *q = &c->range_fetches;
	unsigned n = 0;
	uint64_t bytes = 0;

	*buffer = FETCH_NO_BUFFER;
	if (q->len == 0)
		return 0;
	if (c->ranges.device) {
		/* through one staging buffer; no more than it holds at
		 * once, so that a batch's large records spread over the
		 * workers */
		if (c->stage.nfree == 0)
			return 0;
		*buffer = c->stage.free[--c->stage.nfree];
	}
	while (n < q->len && n < FETCH_RANGES_MAX) {
		struct io_read *rd = q->ring[(q->head + n) % q->cap];

		/* one span of one batch's io memory, uploaded at once:
		 * its reads lie back to back there (ranges.c) */
		if (*buffer != FETCH_NO_BUFFER && n &&
		    (bytes + rd->length > c->stage.buffer_bytes ||
		     (uint8_t *)rd->buf !=
			     (uint8_t *)rds[n - 1]->buf + rds[n - 1]->length))
			break;
		bytes += rd->length;
		rds[n++] = rd;
	}
	q->head = (q->head + n) % q->cap;
	q->len -= n;
	/* the rest, for another worker */
	if (q->len)
		pthread_cond_signal(&c->work_cv);
	return n;
}

/* The reads are back (and their span uploaded, unless @buffer is
 * FETCH_NO_BUFFER): the staging buffer goes back, and each read to its
 * batch as the ring would hand it.  A failed upload fails the loader:
 * the device's failure, not the data's. */
static void ranges_done(struct loader_core *c, struct io_read **rds,
			unsigned n, uint32_t buffer, int upload_err)
{
	char msg[256] = "";
	int batch_back = 0;

	if (upload_err == -SLUICE_ECUDA)
		device_last_error(c->dev, msg, sizeof(msg));
	core_lock(c);
	if (upload_err)
		loader_fail_locked(c, upload_err,
				   "%s: offset %llu: copy to the device: %s",
				   c->ds->shards[rds[0]->file].path,
				   (unsigned long long)rds[0]->offset,
				   msg[0] ? msg : sluice_strerror(upload_err));
	if (buffer != FETCH_NO_BUFFER) {
		c->stage.free[c->stage.nfree++] = buffer;
		pthread_cond_signal(&c->work_cv);
	}
	for (unsigned k = 0; k < n; k++) {
		if (upload_err && rds[k]->result >= 0)
			rds[k]->result = upload_err;
		batch_back |= range_read_done_locked(c, rds[k]);
	}
	pthread_mutex_unlock(&c->mu);
	/* A batch whose reads are all back may free the planner.  Only
	 * then: a wake per worker's handful of reads was 9% of a full
	 * shuffle's worker CPU on the VM (eventfd_write's wake-up). */
	if (batch_back)
		io_ring_wake(c->ring);
}

/* Was @rd planned to land in its batch (ranges.c's in_place, not from
 * frames, which their decode puts there)?  Set before the read was
 * queued, under the lock that handed it here. */
static int rr_in_place(const struct io_read *rd)
{
	const struct slot *s =
		((const struct range_read *)(const void *)rd)->slot;

	return s->ranges.in_place && !s->ranges.frames_in_place;
}

void fetch_ranges(struct loader_core *c, struct io_read **rds, unsigned n,
		  uint32_t buffer, struct fetch_pending *pending,
		  ZSTD_DCtx *dctx)
{
	uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns(), cpu_check = 0;
	uint64_t check_ns = 0;
	uint8_t *staging = buffer == FETCH_NO_BUFFER
		? NULL : c->stage.base + (uint64_t)buffer * c->stage.buffer_bytes;
	/* staged: the reads lie back to back from rds[0]->buf in io memory
	 * (fetch_ranges_pop_locked), and so in the buffer */
	uint64_t span = 0;
	struct device_upload upload;
	int upload_err;

	if (!staging)
		settle(c, pending, 0);
	for (unsigned k = 0; k < n; k++) {
		struct io_read *rd = rds[k];
		uint8_t *into = staging
			? staging + ((uint8_t *)rd->buf - (uint8_t *)rds[0]->buf)
			: rd->buf;
		int64_t got = io_ring_pread(c->ring, rd->file, into,
					    rd->length, rd->offset);

		/* as the ring settles a read (io/reap.c): short of
		 * min_length, the file is shorter than its index says */
		rd->result = got < 0 ? got
			   : (uint64_t)got >= rd->min_length ? got
							     : -ENODATA;
		/* zstd frames: decoded while the cache holds them (not
		 * staged: ranges_device_suits) */
		if (!staging)
			cpu_check += ranges_decode_read(c,
				(struct range_read *)(void *)rd, dctx);
		/* checked while the cache holds them, staged or read in
		 * place (decoded in place: as they were decoded) */
		if (staging || rr_in_place(rd)) {
			uint64_t t1 = now_ns();

			ranges_check_fetched(c, (struct range_read *)(void *)rd,
					     into, rd->result >= 0);
			check_ns += now_ns() - t1;
		}
		if (staging)
			span += rd->length;
	}
	/* the checks are verify's CPU (ranges_check_fetched), the decodes
	 * decompress's (ranges_decode_read), both by the wall clock, which
	 * a preempted thread may see run past its CPU clock: a thread CPU
	 * clock is a system call, two a read cost 0.06 CPU s/GB more than
	 * the checks of 16 KiB records on the VM */
	atomic_fetch_add(&c->cpu_verify_ns, check_ns);
	cpu_check += check_ns;
	cpu0 = thread_cpu_ns() - cpu0;
	atomic_fetch_add(&c->cpu_read_ns, cpu0 > cpu_check ? cpu0 - cpu_check
							  : 0);
	atomic_fetch_add(&c->st_read.busy_ns, now_ns() - t0);
	if (!staging) {
		ranges_done(c, rds, n, FETCH_NO_BUFFER, 0);
		return;
	}
	/* the last upload ran while these were read; its lane goes back
	 * before this one takes one.  Bytes past a short read, or of a
	 * failed one, go up too: no record is taken from them. */
	settle(c, pending, 1);
	upload_err = gather_upload_start(c, rds[0]->buf, staging, span,
					 &upload);
	if (upload_err || !c->stage.overlap) {
		if (!upload_err)
			upload_err = upload_finish(c, &upload);
		ranges_done(c, rds, n, buffer, upload_err);
		return;
	}
	*pending = (struct fetch_pending){ .on = 1, .buffer = buffer,
					   .upload = upload, .nranges = n };
	memcpy(pending->ranges, rds, n * sizeof(*rds));
}
