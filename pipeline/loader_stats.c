/*
 * loader_stats.c - sluice_loader_stats(): the counters the pipeline's
 * stages keep, copied out in the caller's struct size, and the fallbacks
 * taken, in words.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "loader.h"

static void stage_get(const struct stage_clock *in,
		      struct sluice_stage_stats *out)
{
	out->bytes = atomic_load(&in->bytes);
	out->ops = atomic_load(&in->ops);
	out->busy_ns = atomic_load(&in->busy_ns);
	out->wait_ns = atomic_load(&in->wait_ns);
}

/* Append @what to the "; "-separated list @dst (cut at @cap). */
static void fallbacks_append(char *dst, size_t cap, const char *what)
{
	size_t n = strlen(dst);

	if (what[0] && n + 1 < cap)
		snprintf(dst + n, cap - n, "%s%s", n ? "; " : "", what);
}

SLUICE_API int sluice_loader_stats(const sluice_loader *ld,
				   struct sluice_stats *out)
{
	const struct loader_core *c = ld ? ld->core : NULL;
	struct sluice_stats all, *st = &all;
	size_t n;

	if (!c || !out || out->size == 0)
		return -EINVAL;
	/* Fill all we know, then give the caller the part its struct has
	 * room for: a caller built against an older header passes a
	 * smaller size (sluice.h: statistics grow at the end). */
	n = out->size < sizeof(all) ? out->size : sizeof(all);
	memset(st, 0, sizeof(*st));
	stage_get(&c->st_read, &st->read);
	stage_get(&c->st_decode, &st->decode);
	stage_get(&c->st_assemble, &st->assemble);
	stage_get(&c->st_copy, &st->copy);
	st->consumer_wait_ns = atomic_load(&c->consumer_wait_ns);
	st->batches = atomic_load(&c->batches);
	st->records = atomic_load(&c->records);
	st->records_skipped = atomic_load(&c->skipped);
	st->values_truncated = atomic_load(&c->truncated);
	st->blocks_read = atomic_load(&c->blocks_read);
	st->block_cache_hits = atomic_load(&c->cache_hits);
	st->slot_occupancy_sum = atomic_load(&c->occupancy_sum);
	st->prefetch_depth = c->nslots;
	st->decode_threads = c->nworkers;
	st->memory_bytes = c->io_bytes + c->batch_bytes;
	st->io_memory_bytes = c->io_bytes;
	st->batches_over_budget = atomic_load(&c->over_budget);
	st->direct_io = c->ring_info.direct;
	/* direct_io auto found them all cached at open and, for the
	 * workers' reads of zstd blocks, opened them buffered */
	st->cached_shards = c->zstd_fetched &&
			    c->cfg.direct_io == SLUICE_DIRECT_IO_AUTO
		? c->ds->nshards : c->ring_info.cached_files;
	st->registered_buffers = c->ring_info.fixed_buffers;
	st->registered_files = c->ring_info.fixed_files;
	st->sqpoll = c->ring_info.sqpoll;
	st->device_pinned = c->dev_info.arena_pinned;
	st->arena_resident_ns = c->dev_info.arena_resident_ns;
	st->batches_viewed = atomic_load(&c->batches_viewed);
	st->blocks_direct = atomic_load(&c->blocks_direct);
	st->cpu_read_ns = atomic_load(&c->cpu_read_ns);
	st->cpu_verify_ns = atomic_load(&c->cpu_verify_ns);
	st->cpu_decompress_ns = atomic_load(&c->cpu_decompress_ns);
	st->cpu_assemble_ns = atomic_load(&c->cpu_assemble_ns);
	st->range_reads = atomic_load(&c->ranges.reads);
	st->range_records = atomic_load(&c->ranges.records);
	st->range_records_in_place = atomic_load(&c->ranges.records_in_place);
	st->records_decoded_in_batch = atomic_load(&c->framed.records);
	st->batches_gathered = atomic_load(&c->gather.batches_gathered);
	st->gather_runs = atomic_load(&c->gather.runs);
	st->device_upload_bytes = atomic_load(&c->gather.device_upload_bytes);
	st->device_upload_ns = atomic_load(&c->gather.upload_ns);
	st->bytes_verified_landing = atomic_load(&c->bytes_verified_landing);
	st->read_ahead_blocks = atomic_load(&c->ahead.limit);
	st->bytes_verified_device = atomic_load(&c->gather.bytes_checked);
	st->bytes_staged = atomic_load(&c->stage.bytes);
	st->bytes_staged_overlapped = atomic_load(&c->stage.bytes_overlapped);
	st->device_check_ns = atomic_load(&c->gather.check_ns);
	st->lock_wait_ns = atomic_load(&c->lock_wait_ns);
	st->device_memory_bytes = c->dev_info.device_bytes;
	st->fallbacks[0] = '\0';
	fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
			 c->ring_info.fallbacks);
	fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
			 c->dev_info.fallbacks);
	if (c->cfg.verify && (sluice_loader_config_forced(&c->cfg) &
			      SLUICE_FORCE_WHOLE_BLOCK_CHECKS))
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
				 "checksums taken once each block is whole (forced)");
	if (c->cfg.verify && c->gather.on && (sluice_loader_config_forced(&c->cfg) &
					      SLUICE_FORCE_HOST_CHECKS))
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
				 "blocks uploaded for gathers checksummed on the CPU (forced)");
	/* The cap bound without halving the window: read-ahead and cache
	 * (and batches in flight) are what the loader holds less of. */
	if (c->budget_wanted && !c->window_asked) {
		char note[256];

		snprintf(note, sizeof(note),
			 "memory binds: the default memory_bytes is capped at %llu (an eighth of the memory this process may use, per local rank%s), short of the %llu it wants: less read-ahead and cache",
			 (unsigned long long)(c->io_bytes + c->batch_bytes),
			 c->device_memory ? ", and of the GPU's" : "",
			 (unsigned long long)c->budget_wanted);
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks), note);
	}
	if (c->window_asked) {
		char note[192];

		snprintf(note, sizeof(note),
			 "memory binds: shuffle window of %u blocks, not %u (%s memory_bytes for the whole window)",
			 c->cfg.window_blocks, c->window_asked,
			 c->cfg.memory_bytes
				 ? "two windows of its largest blocks within 3/4 of memory_bytes; raise"
				 : "what the io memory the default memory_bytes leaves holds; set");
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks), note);
	}
	if (c->ranges.device_lost) {
		char note[192];

		snprintf(note, sizeof(note),
			 "records read by range assembled on the CPU, not gathered on the device: %s",
			 c->ranges.device_lost);
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks), note);
	}
	fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
			 c->ranges.whole_note);
	/* on to be read in place (in_place_likely), and then not */
	if (c->ranges.on && c->ranges.for_in_place && !c->ranges.in_place &&
	    c->ranges.in_place_off) {
		char note[192];

		snprintf(note, sizeof(note),
			 "records read by range into io memory and copied, not in place: %s",
			 c->ranges.in_place_off);
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks), note);
	}
	if (c->chunks.chunked)
		fallbacks_append(st->fallbacks, sizeof(st->fallbacks),
				 c->gather.lost_to_chunks
				 ? "a batch's blocks do not fit memory_bytes at once: batches assembled a chunk of blocks at a time on the CPU, not gathered on the device, a block read again for each batch it serves"
				 : "a batch's blocks do not fit memory_bytes at once: batches assembled a chunk of blocks at a time, a block read again for each batch it serves");
	all.size = (uint32_t)n;
	if (out->size > n)   /* a newer caller: fields we do not know */
		memset((char *)out + n, 0, out->size - n);
	memcpy(out, &all, n);
	return 0;
}
