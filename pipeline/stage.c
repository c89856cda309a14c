/*
 * stage.c - raw blocks that go only to the device land in small rings of
 * pinned pieces (io/ring.h's staged reads) instead of their io memory.
 *
 * Where batches are gathered on the device and blocks checksummed there
 * (gather_checks), the CPU never reads a raw block: its host copy only
 * stages the upload.  Read whole into its 64 MiB of io memory, every
 * piece the page cache copies is written to memory the CPU's cache does
 * not hold, which costs the copy a read of the destination and a write
 * back; and the DMA then reads it from memory.  On an H200 host (16
 * cores), 16 threads' page-cache reads into 64 MiB buffers reached 16.1
 * GB/s, into 2 MiB buffers reused 46.6; the loader took 0.433 CPU s/GB
 * unstaged, 0.320 staged (bench/results/2026-11-27-h200-run2).  A ring
 * of a few pieces per block read, uploaded and released as they land
 * (stream.c), is reused while the cache may still hold it, as KvikIO's
 * bounce buffers are.  The block's io memory stays reserved, as the
 * device mirror's offsets are the host's, and is never written.
 *
 * The rings are carved from the io pool at open, before anything else
 * is, and only where every batch is gathered: a block whose bytes are
 * only on the device can be copied by no CPU (stage_slot_uses_locked).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

/* Pieces per ring.  The stream uploads a staged read 4 MiB at a time
 * (stream.c's STREAM_STEP: two pieces), so a ring needs those two, the
 * read's unaligned head, and room for the next copies: 4 at least.  On
 * the H200 host 32 rings of 4 delivered 36.3 GB/s at 0.320 CPU s/GB
 * (unstaged: 34.1 at 0.433); uploading each piece as it landed instead
 * took 0.41 CPU s/GB for 27.1 GB/s, and 8 pieces that way 29.0
 * (bench/results/2026-11-27-h200-staging.md).  SLUICE_STAGE_PIECES (4
 * to IO_STAGE_PIECES_MAX) for benchmarks' A/B. */
#define STAGE_PIECES 4u
/* Pieces per staging buffer of a fetch (fetch.c): a part of 4 MiB, the
 * task size KvikIO reads and uploads by.  SLUICE_STAGE_PIECES for the
 * A/B. */
#define FETCH_PIECES 2u
#define STAGE_PIECES_MIN 4u
/* Two rings per decode worker (they upload), within these: on the H200
 * host (16 workers) 16 rings staged 0.91 of the reads at 31.9 GB/s, 32
 * staged them all at 36.3; with a job per piece, 48 rings delivered less
 * than 32. */
#define STAGE_RINGS_PER_WORKER 2u
/* asked for at least (less memory may leave fewer: stage_open) */
#define STAGE_RINGS_MIN 2u
#define STAGE_RINGS_MAX 64u

/* @name's value in the environment (benchmarks' A/B), or @fallback;
 * within [@lo, @hi]. */
static uint32_t env_within(const char *name, uint32_t fallback, uint32_t lo,
			   uint32_t hi)
{
	const char *v = getenv(name);
	uint32_t n = v && *v ? (uint32_t)strtoul(v, NULL, 10) : fallback;

	return n < lo ? lo : n > hi ? hi : n;
}

int stage_open(struct loader_core *c)
{
	struct stage_pool *p = &c->stage;
	/* benchmarks' A/B: "0" off, "ring" staged reads in the ring */
	const char *v = getenv("SLUICE_STAGING");
	int ring_mode = v && strcmp(v, "ring") == 0;
	uint32_t n = env_within("SLUICE_STAGE_RINGS",
				(ring_mode ? STAGE_RINGS_PER_WORKER : 1) *
					c->cfg.decode_threads,
				STAGE_RINGS_MIN, STAGE_RINGS_MAX);
	uint32_t min_pieces = ring_mode ? STAGE_PIECES_MIN : 1;
	uint64_t ring;

	/* Every batch gathered, every raw block checksummed on the device;
	 * a cache that holds the dataset reads each block once anyway. */
	if (!c->gather.checks || !(c->dev_info.caps & DEVICE_CAP_MIRROR) ||
	    c->ranges.on || c->cache.all || (v && strcmp(v, "0") == 0))
		return 0;
	p->fetch = !ring_mode;
	p->pieces = env_within("SLUICE_STAGE_PIECES",
			       ring_mode ? STAGE_PIECES : FETCH_PIECES,
			       min_pieces, IO_STAGE_PIECES_MAX);
	/* an upload takes every landed piece up to the ring's end
	 * (io_read_at): one DMA and one wait for a job's 4 MiB, not one a
	 * piece; SLUICE_STAGE_UPLOAD_PIECES caps it, for benchmarks' A/B */
	p->upload_max = IO_PIECE_BYTES *
		env_within("SLUICE_STAGE_UPLOAD_PIECES", IO_STAGE_PIECES_MAX,
			   1, IO_STAGE_PIECES_MAX);
	/* At most a quarter of the io memory, leaving a batch's blocks
	 * (what the budget promised); the read-ahead has the rest.  Where
	 * that is tight, fewer rings, then shorter ones. */
	for (;;) {
		ring = (uint64_t)p->pieces * IO_PIECE_BYTES;
		if ((uint64_t)n * ring <= c->io_bytes / 4 &&
		    c->io_bytes - (uint64_t)n * ring >= c->io_batch_max)
			break;
		if (n > 1)
			n--;
		else if (p->pieces / 2 >= min_pieces)
			p->pieces /= 2;
		else
			return 0;
	}
	if (pool_alloc(&c->io_pool, (uint64_t)n * ring, &p->off))
		return 0;
	p->pool_bytes = (uint64_t)n * ring;
	p->free = calloc(n, sizeof(*p->free));
	if (!p->free)
		return -ENOMEM;
	p->base = c->arena + p->off;
	p->buffer_bytes = ring;
	p->nfree = n;
	for (uint32_t k = 0; k < n; k++)
		p->free[k] = n - 1 - k;
	p->on = 1;
	return 0;
}

void stage_close(struct loader_core *c)
{
	free(c->stage.free);
	c->stage.free = NULL;
	c->stage.on = 0;
}

void stage_take_locked(struct loader_core *c, struct cache_entry *e,
		       const struct shard_block *blk)
{
	struct stage_pool *p = &c->stage;
	uint32_t k;

	stage_give_locked(c, e);  /* one still held (none should be) */
	e->fetch = (struct fetch_entry){ 0 };
	/* O_DIRECT reads are the device's DMA, not a CPU copy: they land
	 * in the block's io memory as ever (io/ring.h) */
	if (!p->on || blk->codec != DLS_CODEC_RAW ||
	    !gather_checks(c, blk) || c->ring_info.direct ||
	    io_ring_file_direct(c->ring, c->block_shard[e->block]))
		return;
	if (p->fetch) {
		e->fetch.on = 1;        /* its parts take buffers as they go */
		return;
	}
	if (p->nfree == 0)
		return;
	k = p->free[--p->nfree];
	e->stage_ring = (int32_t)k;
	e->rd.stage = p->base + (uint64_t)k * p->pieces * IO_PIECE_BYTES;
	e->rd.stage_pieces = p->pieces;
}

void stage_give_locked(struct loader_core *c, struct cache_entry *e)
{
	if (e->stage_ring < 0)
		return;
	c->stage.free[c->stage.nfree++] = (uint32_t)e->stage_ring;
	e->stage_ring = -1;
}

int stage_slot_uses_locked(const struct loader_core *c, const struct slot *s)
{
	if (!c->stage.on)
		return 0;
	for (uint32_t k = 0; k < s->nentries; k++)
		if (c->cache.entries[s->entries[k]].rd.staged ||
		    c->cache.entries[s->entries[k]].fetch.on)
			return 1;
	return 0;
}
