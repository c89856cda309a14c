/*
 * stage.c - which blocks are fetched by the workers (fetch.c) instead of
 * read by the ring into their io memory, and the pinned staging buffers
 * their parts pass through.
 *
 * Where batches are gathered on the device and blocks checksummed there,
 * or not at all (gather_device_only), the CPU never reads a raw block:
 * its host copy only stages the upload.  Read whole into its 64 MiB of
 * io memory, every piece the page cache copies is written to memory the
 * CPU's cache does not hold, which costs the copy a read of the
 * destination and a write back; and the DMA then reads it from memory.
 * On an H200 host (16 cores), 16 threads' page-cache reads into 64 MiB
 * buffers reached 16.1 GB/s, into 2 MiB buffers reused 46.6
 * (bench/results/2026-11-27-h200-run2).  Small staging buffers, each taken for one
 * part and given back (the last given, the first taken), stay in the
 * cache, as KvikIO's bounce buffers do: two per worker, one read into
 * while the other uploads (fewer where memory is tight, and then fewer
 * parts overlap).  The block's io memory stays reserved, as the device
 * mirror's offsets are the host's, and is never written.
 *
 * The buffers are carved from the io pool at open, before anything else
 * is, and only where every batch is gathered: a block whose bytes are
 * only on the device can be copied by no CPU (stage_slot_uses_locked).
 *
 * zstd blocks of host batches go through them too (stage.host_decode, a
 * buffer per worker): the ring's workers copied a block's stored bytes
 * into io memory the cache does not hold, and the decoder read them back
 * from memory; through a buffer, the copy, the checksum and the decoder
 * find them in the cache.  Medians of 5 on the VM (2 cores, tmpfs):
 * 16 KiB records in 1 MiB blocks, window shuffle, 8.04 -> 10.49 GB/s;
 * 1 MiB records in 64 MiB blocks, window 8.30 -> 10.56, shuffle none
 * with views 10.65 -> 12.73 (bench/results/2026-11-29-host-staged-decode.md).
 * Where every zstd block goes so (stage_fetches_zstd), a block's io
 * memory is only its decoded bytes, and the budget keeps these buffers'
 * room (stage_fetch_want).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

/* Pieces of IO_PIECE_BYTES per staging buffer: a part of 4 MiB, the task
 * size KvikIO reads and uploads by.  On the H100 host parts of 4 MiB
 * delivered 39.6 GB/s, of 2 MiB 33.0 and of 8 MiB 35.7, in the same run
 * (bench/results/2026-11-27-h100-run3).  SLUICE_STAGE_PIECES (1 to
 * STAGE_PIECES_MAX) for benchmarks' A/B. */
#define STAGE_PIECES 2u
#define STAGE_PIECES_MAX 16u
/* Two buffers per decode worker (they fetch), at most this many: one
 * part read while the last one uploads.  SLUICE_STAGE_BUFFERS for A/B;
 * SLUICE_FETCH_OVERLAP=0 reads and uploads each part in turn, with a
 * buffer per worker. */
#define STAGE_BUFFERS_MAX 128u
/* A zstd block is read and decompressed a part at a time by one worker
 * through one buffer: a part of 1 MiB, which the CPU's cache holds from
 * the read to the decoder; a buffer per worker (no more than blocks),
 * shorter ones before fewer, as a worker without one waits.  On the VM
 * (2 cores), 16 KiB records in 1 MiB blocks, shuffle none, parts of 128
 * KiB to 4 MiB (a local build's knob), two runs each (GB/s): 9.6/9.0, 10.1/9.8, 10.2/10.1,
 * 10.8/10.4, 10.1/10.4, 9.1/10.1.  At 4 MiB the default budget's io
 * memory left one buffer for two workers, which read every block in
 * turn: 7.2 GB/s, 12.1 with a buffer each. */
#define DECODE_PART ((uint64_t)1 << 20)
#define DECODE_PART_MIN ((uint64_t)64 << 10)

/* @name's value in the environment (benchmarks' A/B), or @fallback;
 * within [@lo, @hi]. */
static uint32_t env_within(const char *name, uint32_t fallback, uint32_t lo,
			   uint32_t hi)
{
	const char *v = getenv(name);
	uint32_t n = v && *v ? (uint32_t)strtoul(v, NULL, 10) : fallback;

	return n < lo ? lo : n > hi ? hi : n;
}

/* A staging buffer's bytes, unless memory is tight or a benchmark asks
 * for others (stage_open). */
uint64_t stage_buffer_nominal(void)
{
	return STAGE_PIECES * IO_PIECE_BYTES;
}

/* Record ranges go through two buffers per worker, as blocks' parts
 * do: a worker reads and checks a buffer's worth while the last one
 * uploads (fetch_ranges); no block is fetched beside them (ranges.all). */
uint64_t stage_ranges_want(const struct loader_core *c)
{
	return 2 * (uint64_t)c->cfg.decode_threads * stage_buffer_nominal();
}

/* The staging buffer a zstd block goes through whole: a part of
 * DECODE_PART, or its longest block's stored bytes where less. */
static uint64_t decode_part(const struct loader_core *c)
{
	return c->zstd_stored_max < DECODE_PART
		? (c->zstd_stored_max + 4095) / 4096 * 4096 : DECODE_PART;
}

int stage_fetches_zstd(const struct loader_core *c)
{
	if (!c->has_zstd || env_off("SLUICE_STAGED_DECODE") ||
	    env_off("SLUICE_HOST_STAGED_DECODE") ||
	    device_offloads(c->cfg.device, c->cfg.device_id) ||
	    c->cfg.device_gather == SLUICE_DEVICE_GATHER_ON ||
	    c->cfg.direct_io == SLUICE_DIRECT_IO_ON)
		return 0;
	/* direct_io auto reads buffered what the page cache holds */
	return c->cfg.direct_io == SLUICE_DIRECT_IO_OFF
		? io_files_stay_open(c->ds->nshards) : shards_open_cached(c);
}

/* A buffer per worker that decodes a block whole, no more than blocks. */
static uint32_t decode_buffers(const struct loader_core *c)
{
	return c->zstd_blocks < c->cfg.decode_threads
		? (uint32_t)c->zstd_blocks : c->cfg.decode_threads;
}

uint64_t stage_fetch_want(const struct loader_core *c)
{
	return c->zstd_fetched ? decode_buffers(c) * decode_part(c) : 0;
}

int stage_open(struct loader_core *c)
{
	struct stage_pool *p = &c->stage;
	int overlap = !env_off("SLUICE_FETCH_OVERLAP");
	int decode = !env_off("SLUICE_STAGED_DECODE");
	/* zstd blocks of host batches, read and decompressed by a worker
	 * through a buffer (no upload to overlap: one each); O_DIRECT
	 * reads, the device's DMA, stay on the ring (stage_choose_locked) */
	int host = decode && !env_off("SLUICE_HOST_STAGED_DECODE") &&
		   c->has_zstd && !c->gather.on && !c->ranges.on &&
		   c->cfg.direct_io != SLUICE_DIRECT_IO_ON;
	/* every block fetched is a zstd block that one worker reads and
	 * decompresses whole through one buffer, no part's upload to
	 * overlap: host batches', or all gathered on the device (not
	 * record ranges, whose reads ranges_open sized by the buffers) */
	int decoded_only = host ||
			   (decode && c->gather.on && !c->ranges.on &&
			    c->zstd_blocks == c->nblocks);
	uint32_t n = env_within("SLUICE_STAGE_BUFFERS",
				decoded_only ? decode_buffers(c)
				: (overlap ? 2 : 1) * c->cfg.decode_threads,
				1, STAGE_BUFFERS_MAX);
	/* blocks': a quarter of the io memory at most; ranges': what the
	 * budget added for them, leaving the ranges theirs (their want, or
	 * where the budget was short of it, one batch's: budget.c) */
	uint64_t room = c->ranges.all ? c->ranges.stage_want
		      : c->zstd_fetched ? stage_fetch_want(c) : c->io_bytes / 4;
	uint64_t ranges_kept = c->io_bytes >= c->ranges.io_want
		? c->ranges.io_want : c->ranges.io_least;
	uint64_t keep = c->ranges.all
		? ranges_kept - c->ranges.stage_want
		: c->zstd_fetched ? 0 : c->io_batch_max;
	uint32_t pieces = env_within("SLUICE_STAGE_PIECES", STAGE_PIECES, 1,
				     STAGE_PIECES_MAX);
	uint64_t bytes;

	/* Every batch gathered, every raw block checksummed on the device
	 * or not at all (gather_device_only), every record read by range
	 * checked in its buffer (ranges_device_suits); a cache that holds
	 * the dataset reads each block once anyway (where blocks are read:
	 * record ranges are read every epoch). */
	p->off_why = host
		? (c->cache.all && !c->zstd_fetched
		   ? "the cache holds the dataset" : NULL)
		: !c->gather.on || !(c->dev_info.caps & DEVICE_CAP_MIRROR)
		? "no gathers"
		: c->cfg.verify && !c->gather.checks
		? "checksums taken on the CPU"
		/* raw blocks and ranges of variable fields need their
		 * layout (block_tables_known) */
		: c->has_variable && !c->has_zstd && !c->ranges.sec
		? "no layout read at open"
		: c->ranges.on && !ranges_device_suits(c)
		? "record ranges copied on the CPU"
		: c->cache.all && !c->ranges.all
		? "the cache holds the dataset"
		: env_off("SLUICE_STAGING") ? "SLUICE_STAGING=0" : NULL;
	if (p->off_why)
		return c->zstd_fetched ? -ENOSPC : 0;   /* never: the same test */
	/* At most the room, leaving a batch's blocks or every range batch
	 * in flight (what the budget promised); the read-ahead has the
	 * rest.  Where that is tight, fewer buffers, then shorter ones;
	 * decodes' shorter ones first. */
	bytes = decoded_only ? decode_part(c)
			     : (uint64_t)pieces * IO_PIECE_BYTES;
	for (;;) {
		if ((uint64_t)n * bytes <= room &&
		    (uint64_t)n * bytes <= c->io_bytes &&
		    c->io_bytes - (uint64_t)n * bytes >= keep)
			break;
		if (decoded_only && bytes > DECODE_PART_MIN) {
			bytes /= 2;
		} else if (n > 1) {
			n--;
		} else if (!decoded_only && pieces > 1) {
			pieces /= 2;
			bytes = (uint64_t)pieces * IO_PIECE_BYTES;
		} else {
			p->off_why = "no room in the io memory";
			return c->zstd_fetched ? -ENOSPC : 0;
		}
	}
	/* the budget kept the room of c->zstd_fetched's (the first taken) */
	if (pool_alloc(&c->io_pool, (uint64_t)n * bytes, &p->off)) {
		p->off_why = "no room in the io pool";
		return c->zstd_fetched ? -ENOSPC : 0;
	}
	p->pool_bytes = (uint64_t)n * bytes;
	p->free = calloc(n, sizeof(*p->free));
	if (!p->free)
		return -ENOMEM;
	p->base = c->arena + p->off;
	p->buffer_bytes = bytes;
	p->nfree = n;
	p->overlap = overlap && !host;
	p->decode = decode;
	p->host_decode = host;
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

void stage_choose_locked(struct loader_core *c, struct cache_entry *e,
			 const struct shard_block *blk)
{
	/* a zstd block whose decoded bytes go only to the device, or of
	 * host batches: read and decompressed by one worker through a
	 * buffer (fetch.c) */
	int zstd = c->stage.decode &&
		   (c->gather.on || c->stage.host_decode) &&
		   blk->codec == DLS_CODEC_ZSTD;

	e->fetch = (struct fetch_entry){ 0 };
	/* with records read by range, blocks only where those go to the
	 * device too: else their batches are copied on the CPU */
	if (c->ranges.on && !c->ranges.device)
		return;
	/* O_DIRECT reads are the device's DMA, not a CPU copy: they land
	 * in the block's io memory as ever (io/ring.h); so do the reads of
	 * shards the ring opens on demand, whose descriptors it may close
	 * (io_ring_pread_fd) */
	e->fetch.on = c->stage.on &&
		      ((gather_device_only(c, blk) &&
			block_tables_known(c, e->block)) || zstd) &&
		      !c->ring_info.direct &&
		      io_ring_pread_fd(c->ring, c->block_shard[e->block]) >= 0;
	/* its io memory holds only its decoded bytes (block_io_bytes): a
	 * worker reads it, or fails saying why (io_ring_pread) */
	if (c->zstd_fetched && blk->codec == DLS_CODEC_ZSTD)
		e->fetch.on = 1;
	e->fetch.decoded = e->fetch.on && zstd;
}

int stage_slot_uses_locked(const struct loader_core *c, const struct slot *s)
{
	if (!c->stage.on)
		return 0;
	/* a decoded zstd block's bytes are on the host too */
	for (uint32_t k = 0; k < s->nentries; k++)
		if (c->cache.entries[s->entries[k]].fetch.on &&
		    !c->cache.entries[s->entries[k]].fetch.decoded)
			return 1;
	return 0;
}
