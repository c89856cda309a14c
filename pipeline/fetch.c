/*
 * fetch.c - raw blocks that go only to the device, read by the decode
 * workers themselves: each part of a block (4 MiB) is pread() into a
 * staging buffer while the CPU's cache holds it and uploaded from there
 * (stage.c says when a block is fetched), and the parts of one block go
 * to whichever workers are free, the oldest block's first.
 *
 * Why not the ring: a page-cache read is a CPU copy whoever makes it.
 * Through the ring, io_uring's workers copied each piece, the I/O thread
 * reaped it, a decode worker uploaded it and released its room, and the
 * I/O thread queued the next: four threads and two wake-ups a piece.  On
 * the H100 host that path delivered 30.5 GB/s at 0.41 CPU s/GB beside
 * KvikIO's 44.9 at 0.35 (bench/results/2026-11-27-h100-run2), which
 * reads and uploads in 4 MiB tasks on 16 threads, as a fetch does.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "loader.h"

void fetch_queue_locked(struct loader_core *c, struct cache_entry *e)
{
	uint32_t shard;
	const struct shard_block *blk = loader_block(c, e->block, &shard);
	uint64_t part = c->stage.buffer_bytes;
	uint32_t parts = (uint32_t)((blk->stored_size + part - 1) / part);

	/* an empty block still hands its read on, from one part */
	if (parts == 0)
		parts = 1;
	e->fetch.left = parts;
	c->fetch_jobs.ring[(c->fetch_jobs.head + c->fetch_jobs.len++) %
			   c->fetch_jobs.cap] =
		(struct job){ JOB_FETCH, (uint32_t)(e - c->cache.entries), 0,
			      parts };
	pthread_cond_signal(&c->work_cv);
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

void fetch_file_close(struct fetch_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

/* @f open on @shard: 0 or -errno. */
static int fetch_open(const struct loader_core *c, struct fetch_file *f,
		      uint32_t shard)
{
	if (f->fd >= 0 && f->shard == shard)
		return 0;
	fetch_file_close(f);
	f->fd = open(c->ds->shards[shard].path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return -errno;
	f->shard = shard;
	return 0;
}

void fetch_part(struct loader_core *c, struct job j, uint32_t buffer,
		struct fetch_file *f)
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
	uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
	int64_t got = fetch_open(c, f, shard);
	int read_err = 0, upload_err = 0, last;

	if (got == 0 && len)
		got = io_ring_pread(c->ring, shard, f->fd, staging, len,
				    blk->offset + from);
	/* a file shorter than its index says: damaged data (io_thread.c) */
	read_err = got < 0 ? (int)got : (uint64_t)got < len ? -ENODATA : 0;
	atomic_fetch_add(&c->cpu_read_ns, thread_cpu_ns() - cpu0);
	atomic_fetch_add(&c->st_read.busy_ns, now_ns() - t0);
	if (!read_err && len) {
		upload_err = gather_upload(c, io, staging, len);
		if (!upload_err)
			atomic_fetch_add(&c->stage.bytes, len);
	}

	pthread_mutex_lock(&c->mu);
	c->stage.free[c->stage.nfree++] = buffer;
	if (read_err && !e->fetch.err)
		e->fetch.err = read_err;
	/* the decode says what failed (decode.c's check_on_device) */
	if (upload_err && !e->fetch.upload_err)
		e->fetch.upload_err = upload_err;
	last = --e->fetch.left == 0;
	if (last) {
		e->rd.result = e->fetch.err ? e->fetch.err
					    : (int64_t)e->rd.length;
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
