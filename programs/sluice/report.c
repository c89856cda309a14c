/*
 * report.c - the figures of a bench run, as text for people and as one
 * JSON object (nested like fio's: dataset, config, result, stages,
 * fallbacks, limits) for scripts.  Both print the same numbers, derived
 * once in derive().  GB means 1e9 bytes.
 *
 * The limits are compared in records per second, the one unit that all
 * of them share: the disk moves stored (file) bytes, the CPU stages make
 * decoded bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice_cli.h"

#define GB 1e9
/* Under this, start-up and the first reads dominate what is measured
 * (the demo's 3 MB: a 1 ms run). */
#define SHORT_RUN_S 0.5
#define SHORT_PROBE_S 0.05

struct limit {
	const char *name;        /* NULL: not applicable */
	double records_s;        /* 0: not measured */
	double gbps;             /* in the limit's own bytes */
	const char *unit;        /* "stored", "decoded" */
};

/* Below this share of the nearest limit, the loader itself binds. */
#define LOADER_BINDS_BELOW 0.5

struct figures {
	double wall_s, open_s, samples_s;
	double read_gbps, decoded_gbps, assembled_gbps;
	/* The records' raw bytes (the dataset's average per record) per
	 * second: decoded_gbps counts a block again each time it is
	 * decoded again (full shuffle, evictions). */
	double delivered_gbps;
	double cpu_s_per_gb, cpu_s_per_gb_delivered, occupancy, wait_frac;
	/* CPU s per GB decoded, by stage: the loader's threads' own CPU
	 * clocks, read's with io_uring's workers' page-cache copies; other
	 * is the rest of the process (the consumer, copies to the device,
	 * page faults outside the stages). */
	double cpu_read, cpu_verify, cpu_decompress, cpu_assemble, cpu_other;
	struct limit disk, cpu, pcie;
	/* Every stage at once on the same CPUs: what each above costs per
	 * GB decoded (CPU s), added up. */
	struct limit cpus;
	double cpus_read, cpus_verify, cpus_decompress, cpus_copy;
	double copy_dev_gbps;    /* bytes copied to the device per second */
	double h2d_fraction;     /* copy_dev_gbps over the PCIe probe */
	double gpu_idle;         /* 1 - compute time / wall; -1: n/a */
	double decompress_gbps;  /* threads x one thread (timed while the
				    others ran too), zstd only */
	double verify_gbps, copy_gbps;
	const struct limit *binding;  /* the nearest limit */
	double achieved;         /* samples_s / binding->records_s */
	int loader_binds;        /* far below every limit */
	const char *pcie_status;
};

static double div0(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* The share of the stored bytes whose checksums the CPU takes: none
 * without checks, less what the GPU checked from its uploads. */
static double cpu_checked(const struct bench_report *r)
{
	const struct sluice_stats *st = &r->run->stats;
	double device;

	if (!r->o->cfg.verify)
		return 0;
	device = div0((double)st->bytes_verified_device, (double)st->read.bytes);
	return device < 1 ? 1 - device : 0;
}

/* The share of the delivered bytes the CPU copies into batches: none
 * where the device gathers every batch, less the records read or
 * decoded straight into their batch (their main field, nearly all of
 * their bytes). */
static double cpu_copied(const struct bench_report *r, int gathered)
{
	const struct sluice_stats *st = &r->run->stats;
	double in_place = div0((double)(st->range_records_in_place +
					st->records_decoded_in_batch),
			       (double)st->records);

	if (gathered)
		return 0;
	return in_place < 1 ? 1 - in_place : 0;
}

/*
 * The loader does every stage on the same CPUs, where each limit above
 * has them all to itself: the page cache's copies (the disk probe's CPU,
 * per file byte), checksums, zstd and the batch copy of what is not
 * gathered on the device or read in place.  Their CPU seconds per GB decoded add up; the
 * CPUs the process may use divided by the sum is what they allow
 * together.  On page-cache data this binds before any of them alone.
 */
static void derive_cpus(const struct bench_report *r, int gathered,
			struct figures *x)
{
	const struct shard_set *s = r->shards;
	const struct cpu_limit *c = r->cpu;
	double raw, sum;

	x->cpus.name = "cpus";
	x->cpus.unit = "decoded";
	if (!r->disk || !r->disk->bytes || !c || !c->sample_raw || !s ||
	    !s->raw_bytes)
		return;
	raw = (double)c->sample_raw;
	x->cpus_read = r->disk->cpu_s / (double)r->disk->bytes *
		       (double)s->file_bytes / (double)s->raw_bytes * GB;
	x->cpus_verify = cpu_checked(r) * c->verify_s / raw * GB;
	x->cpus_decompress = c->decompress_s / raw * GB;
	x->cpus_copy = cpu_copied(r, gathered) * c->copy_s / raw * GB;
	sum = x->cpus_read + x->cpus_verify + x->cpus_decompress +
	      x->cpus_copy;
	x->cpus.gbps = div0(c->threads, sum);
	x->cpus.records_s = div0(x->cpus.gbps * GB * (double)s->records,
				 (double)s->raw_bytes);
}

/* How the disk probe read: "O_DIRECT", "buffered (page cache)", or
 * "O_DIRECT, N files buffered" (direct_io auto: mostly cached ones). */
static const char *disk_mode(const struct disk_limit *d)
{
	static _Thread_local char buf[64];

	if (d->buffered_files == 0 && d->direct)
		return "O_DIRECT";
	if (d->direct_files == 0)
		return "buffered (page cache)";
	snprintf(buf, sizeof(buf), "O_DIRECT, %u file%s buffered",
		 d->buffered_files, d->buffered_files == 1 ? "" : "s");
	return buf;
}

/* Whether io_uring made any of the probe's reads (its queue depth then
 * means something). */
static int disk_ring_reads(const struct disk_limit *d)
{
	return d->pread_ops == 0 || d->pread_ops < d->ops;
}

/* What read: io_uring, but pread(2) for random pieces of buffered files
 * (the loader's workers read record ranges from the page cache so). */
static const char *disk_engine(const struct disk_limit *d)
{
	if (d->pread_ops == 0)
		return "io_uring";
	return disk_ring_reads(d) ? "io_uring and pread" : "pread";
}

static void derive_limits(const struct bench_report *r, struct figures *x)
{
	const struct shard_set *s = r->shards;
	const struct cpu_limit *c = r->cpu;
	const struct sluice_stats *st = &r->run->stats;
	double recs = s ? (double)s->records : 0;
	/* Batches gathered on the device cost the CPU no copy: its limit
	 * is then the checksums (and zstd) alone. */
	int gathered = st->batches && st->batches_gathered == st->batches;

	x->disk.name = "disk";
	x->disk.unit = "stored";
	if (r->disk && s) {
		x->disk.gbps = div0((double)r->disk->bytes,
				    r->disk->seconds) / GB;
		if (r->disk->random)
			/* Read like the loader's range reads, whose bytes
			 * brought it range_records records (bytes, not reads:
			 * a piece is at most 1 MiB, a range read up to 4). */
			x->disk.records_s = div0(x->disk.gbps * GB *
						 (double)st->range_records,
						 range_read_bytes(st, s));
		else
			/* File bytes (headers, index, alignment) per record:
			 * what a reader of every record has to move. */
			x->disk.records_s = div0(x->disk.gbps * GB * recs,
						 (double)s->file_bytes);
	}
	x->cpu.name = s && s->zstd_blocks ? "decompression"
		    : cpu_copied(r, gathered) == 0 ? "verify" : "copy";
	x->cpu.unit = "decoded";
	if (c && s && c->sample_raw) {
		double per_thread = c->decompress_s +
				    cpu_copied(r, gathered) * c->copy_s +
				    cpu_checked(r) * c->verify_s;
		double raw = (double)c->sample_raw;

		/* Raw blocks gathered on the device, checked there (or not
		 * at all), leave the CPU no work per byte (under 1 ms/GB):
		 * no limit here. */
		if (per_thread / raw * GB < 1e-3)
			per_thread = 0;
		x->cpu.gbps = c->threads * div0(raw, per_thread) / GB;
		x->cpu.records_s = div0(x->cpu.gbps * GB * recs,
					(double)s->raw_bytes);
		x->decompress_gbps = s->zstd_blocks
			? c->threads * div0(raw, c->decompress_s) / GB : 0;
		x->verify_gbps = c->threads *
				 div0((double)c->sample_stored, c->verify_s) /
				 GB;
		x->copy_gbps = c->threads * div0(raw, c->copy_s) / GB;
	}
	derive_cpus(r, gathered, x);
	x->pcie.name = "pcie";
	x->pcie.unit = "decoded";
	if (r->run->h2d_bps > 0) {
		/* What crosses the link per record: the batch tensors, i.e.
		 * the decoded bytes. */
		x->pcie.gbps = r->run->h2d_bps / GB;
		x->pcie.records_s = s ? div0(r->run->h2d_bps * recs,
					     (double)s->raw_bytes)
				      : 0;
		x->pcie_status = r->run->stats.device_pinned
			? "cudaMemcpyAsync from the loader's pinned arena"
			: "cudaMemcpyAsync from the loader's arena, NOT pinned";
	} else {
		x->pcie_status = r->run->h2d_note[0] ? r->run->h2d_note
						     : "not measured";
	}
	x->binding = NULL;
	if (x->disk.records_s > 0)
		x->binding = &x->disk;
	if (x->cpu.records_s > 0 &&
	    (!x->binding || x->cpu.records_s < x->binding->records_s))
		x->binding = &x->cpu;
	if (x->cpus.records_s > 0 &&
	    (!x->binding || x->cpus.records_s < x->binding->records_s))
		x->binding = &x->cpus;
	if (x->pcie.records_s > 0 &&
	    (!x->binding || x->pcie.records_s < x->binding->records_s))
		x->binding = &x->pcie;
	x->achieved = x->binding ? div0(x->samples_s,
					x->binding->records_s) : 0;
	/* Every limit at least twice what was delivered: none of them
	 * binds, the loader's own design does. */
	x->loader_binds = x->binding && x->achieved < LOADER_BINDS_BELOW;
}

static void derive(const struct bench_report *r, struct figures *x)
{
	const struct run_result *run = r->run;
	const struct sluice_stats *st = &run->stats;

	memset(x, 0, sizeof(*x));
	x->wall_s = (double)run->wall_ns / 1e9;
	x->open_s = (double)run->open_ns / 1e9;
	x->samples_s = div0((double)st->records, x->wall_s);
	x->read_gbps = div0((double)st->read.bytes, x->wall_s) / GB;
	x->decoded_gbps = div0((double)st->decode.bytes, x->wall_s) / GB;
	x->assembled_gbps = div0((double)st->assemble.bytes, x->wall_s) / GB;
	x->cpu_s_per_gb = div0(run->cpu_s, (double)st->decode.bytes / GB);
	if (r->shards && r->shards->records) {
		double per_record = (double)r->shards->raw_bytes /
				    (double)r->shards->records;

		x->delivered_gbps = x->samples_s * per_record / GB;
		x->cpu_s_per_gb_delivered =
			div0(run->cpu_s, (double)st->records * per_record / GB);
	}
	x->cpu_read = div0((double)st->cpu_read_ns,
			   (double)st->decode.bytes);
	x->cpu_verify = div0((double)st->cpu_verify_ns,
			     (double)st->decode.bytes);
	x->cpu_decompress = div0((double)st->cpu_decompress_ns,
				 (double)st->decode.bytes);
	x->cpu_assemble = div0((double)st->cpu_assemble_ns,
			       (double)st->decode.bytes);
	/* The stages' clocks start at open, the process's after it: never
	 * print a negative rest. */
	x->cpu_other = x->cpu_s_per_gb - x->cpu_read - x->cpu_verify -
		       x->cpu_decompress - x->cpu_assemble;
	if (x->cpu_other < 0)
		x->cpu_other = 0;
	x->occupancy = div0((double)st->slot_occupancy_sum,
			    (double)st->batches);
	x->wait_frac = div0((double)st->consumer_wait_ns,
			    (double)run->wall_ns);
	x->copy_dev_gbps = div0((double)st->copy.bytes, x->wall_s) / GB;
	x->h2d_fraction = div0(x->copy_dev_gbps * GB, run->h2d_bps);
	/* The kernel runs r->o->compute_ms of GPU wall time per batch
	 * (globaltimer), so what is left of the run the GPU sat idle. */
	x->gpu_idle = run->device.device_type == kDLCUDA &&
			      r->o->compute_ms > 0 && x->wall_s > 0
		? 1 - (double)st->batches * r->o->compute_ms / 1e3 / x->wall_s
		: -1;
	derive_limits(r, x);
}

void report_stream_line(FILE *f, const struct run_result *run,
			double record_bytes)
{
	const struct sluice_stats *st = &run->stats;
	double s = (double)run->wall_ns / 1e9;

	/* GB/s is what the consumer got (records x their bytes); decoded
	 * also counts blocks read for records of other batches and ranks. */
	fprintf(f,
		"records %llu  batches %llu  seconds %.3f  records/s %.0f  GB/s %.3f delivered (%.3f decoded)  consumer wait %.1f%%\n",
		(unsigned long long)st->records,
		(unsigned long long)st->batches, s,
		div0((double)st->records, s),
		div0((double)st->records * record_bytes, s) / GB,
		div0((double)st->decode.bytes, s) / GB,
		100 * div0((double)st->consumer_wait_ns, (double)run->wall_ns));
}

/* ------------------------------------------------------------------ */
/* Text                                                                */
/* ------------------------------------------------------------------ */

static void text_stage(FILE *f, const char *name,
		       const struct sluice_stage_stats *s, double wall_s)
{
	fprintf(f,
		"  %-9s %10.3f GB %9llu ops  busy %8.3f s (%5.2f threads)  wait %8.3f s\n",
		name, (double)s->bytes / GB, (unsigned long long)s->ops,
		(double)s->busy_ns / 1e9,
		div0((double)s->busy_ns / 1e9, wall_s),
		(double)s->wait_ns / 1e9);
}

static void text_limit(FILE *f, const struct limit *l, const char *extra)
{
	if (l->records_s <= 0) {
		fprintf(f, "  %-14s %s\n", l->name, extra);
		return;
	}
	fprintf(f, "  %-14s %9.3f GB/s %-7s = %12.0f records/s  %s\n",
		l->name, l->gbps, l->unit, l->records_s, extra);
}

void report_text(FILE *f, const struct bench_report *r)
{
	const struct run_result *run = r->run;
	const struct sluice_stats *st = &run->stats;
	const struct cli_opts *o = r->o;
	struct figures x;
	char buf[320], shared[96];
	const char *ranks = getenv("LOCAL_WORLD_SIZE");

	derive(r, &x);
	fprintf(f, "dataset  %s: %llu records, %u shards, %llu blocks (%llu zstd), %.3f GB stored, %.3f GB raw\n",
		o->path, (unsigned long long)sluice_dataset_records(r->ds),
		sluice_dataset_shards(r->ds),
		(unsigned long long)sluice_dataset_blocks(r->ds),
		r->shards ? (unsigned long long)r->shards->zstd_blocks : 0ull,
		r->shards ? (double)r->shards->stored_bytes / GB : 0,
		r->shards ? (double)r->shards->raw_bytes / GB : 0);
	shared[0] = '\0';
	if (!o->cfg.decode_threads && st->decode_threads < r->online_cpus &&
	    ranks)
		/* the default divides the CPUs among the host's ranks, though
		 * this process may run alone */
		snprintf(shared, sizeof(shared),
			 " (%u CPUs shared among LOCAL_WORLD_SIZE=%s ranks)",
			 r->online_cpus, ranks);
	fprintf(f, "config   batch %u, shuffle %s, epochs %llu, prefetch %u, decode threads %u%s, device %s, verify %s, compute %.3f ms/batch\n",
		o->cfg.batch_size, shuffle_name(o->cfg.shuffle),
		(unsigned long long)o->epochs, st->prefetch_depth,
		st->decode_threads, shared,
		run->device.device_type == kDLCPU ? "host" : "cuda",
		o->cfg.verify ? "on" : "off", o->compute_ms);
	fprintf(f, "result   %llu records in %llu batches, %.3f s (+ %.3f s opening the loader, %.3f s of it making the %.1f MB arena resident)\n",
		(unsigned long long)st->records,
		(unsigned long long)st->batches, x.wall_s, x.open_s,
		(double)st->arena_resident_ns / 1e9,
		(double)st->memory_bytes / 1e6);
	fprintf(f, "         %.0f samples/s   %.3f GB/s delivered   %.3f GB/s stored   %.3f GB/s decoded   %.3f GB/s assembled\n",
		x.samples_s, x.delivered_gbps, x.read_gbps, x.decoded_gbps,
		x.assembled_gbps);
	fprintf(f, "         CPU %.3f s = %.3f s/GB decoded   consumer wait %.1f%%   slot occupancy %.2f of %u   lock wait %.2f threads\n",
		run->cpu_s, x.cpu_s_per_gb, 100 * x.wait_frac, x.occupancy,
		st->prefetch_depth,
		div0((double)st->lock_wait_ns / 1e9, x.wall_s));
	fprintf(f, "         CPU s/GB by stage: read %.3f  verify %.3f  decompress %.3f  assemble %.3f  other %.3f\n",
		x.cpu_read, x.cpu_verify, x.cpu_decompress, x.cpu_assemble,
		x.cpu_other);
	fprintf(f, "         no copy: %llu of %llu batches viewed their block, %llu blocks decompressed straight into their batch, %llu records from their own frames\n",
		(unsigned long long)st->batches_viewed,
		(unsigned long long)st->batches,
		(unsigned long long)st->blocks_direct,
		(unsigned long long)st->records_decoded_in_batch);
	fprintf(f, "         checked as landed: %.3f GB of %.3f GB read (in cache, before the block was whole); on the GPU: %.3f GB; read through staging buffers the cache holds: %.3f GB (%.3f GB uploaded while the next part was read); read-ahead %llu blocks\n",
		(double)st->bytes_verified_landing / GB,
		(double)st->read.bytes / GB,
		(double)st->bytes_verified_device / GB,
		(double)st->bytes_staged / GB,
		(double)st->bytes_staged_overlapped / GB,
		(unsigned long long)st->read_ahead_blocks);
	fprintf(f, "         device gather: %llu of %llu batches gathered from uploaded blocks (%llu runs), %.3f GB uploaded (%.1f threads uploading, %.1f waiting for checksums), %.1f MB of device memory\n",
		(unsigned long long)st->batches_gathered,
		(unsigned long long)st->batches,
		(unsigned long long)st->gather_runs,
		(double)st->device_upload_bytes / GB,
		div0((double)st->device_upload_ns / 1e9, x.wall_s),
		div0((double)st->device_check_ns / 1e9, x.wall_s),
		(double)st->device_memory_bytes / 1e6);
	if (run->device.device_type == kDLCUDA) {
		fprintf(f, "         to the device %.3f GB/s", x.copy_dev_gbps);
		if (run->h2d_bps > 0)
			fprintf(f, " = %.2fx the PCIe probe (%.3f GB/s)",
				x.h2d_fraction, run->h2d_bps / GB);
		if (x.gpu_idle >= 0)
			fprintf(f, "   GPU idle %.1f%% (compute kernel %.3f ms x %llu batches)",
				100 * x.gpu_idle, o->compute_ms,
				(unsigned long long)st->batches);
		fputc('\n', f);
	}
	fprintf(f, "stages\n");
	text_stage(f, "read", &st->read, x.wall_s);
	text_stage(f, "decode", &st->decode, x.wall_s);
	text_stage(f, "assemble", &st->assemble, x.wall_s);
	text_stage(f, "copy", &st->copy, x.wall_s);
	fprintf(f, "io       direct %s (%u shards cached: buffered), registered buffers %s, files %s, sqpoll %s, device pinned %s\n",
		st->direct_io ? "yes" : "no", (unsigned)st->cached_shards,
		st->registered_buffers ? "yes" : "no",
		st->registered_files ? "yes" : "no", st->sqpoll ? "yes" : "no",
		st->device_pinned ? "yes" : "no");
	fprintf(f, "         blocks read %llu, range reads %llu (%llu records, %llu read in place), read %.2fx the bytes assembled, cache hits %llu, records skipped %llu\n",
		(unsigned long long)st->blocks_read,
		(unsigned long long)st->range_reads,
		(unsigned long long)st->range_records,
		(unsigned long long)st->range_records_in_place,
		div0((double)st->read.bytes, (double)st->assemble.bytes),
		(unsigned long long)st->block_cache_hits,
		(unsigned long long)st->records_skipped);
	if (st->fallbacks[0])
		fprintf(f, "fallbacks %s\n", st->fallbacks);
	fprintf(f, "limits (same data, measured after the run)\n");
	if (r->disk) {
		const struct disk_limit *d = r->disk;
		char qd[32] = "";

		if (disk_ring_reads(d))
			snprintf(qd, sizeof(qd), " x QD %u", d->queue_depth);
		snprintf(buf, sizeof(buf), "%s %s%u KiB%s x %u threads, %s%s%s",
			 disk_engine(d), d->random ? "random " : "",
			 d->block_bytes >> 10, qd, d->threads, disk_mode(d),
			 d->note[0] ? "; " : "", d->note);
		text_limit(f, &x.disk, buf);
	} else {
		text_limit(f, &x.disk, r->disk_error ? r->disk_error
						     : "not measured");
	}
	if (r->cpu && r->cpu->sample_blocks) {
		if (r->shards && r->shards->zstd_blocks)
			snprintf(buf, sizeof(buf),
				 "%u threads x (zstd %.3f + verify %.3f%s + copy %.3f GB/s per thread, %u at once)",
				 r->cpu->threads,
				 div0(x.decompress_gbps, r->cpu->threads),
				 div0(x.verify_gbps, r->cpu->threads),
				 r->cpu->verify_in_cache ? " in cache" : "",
				 div0(x.copy_gbps, r->cpu->threads),
				 r->cpu->threads_at_once);
		else if (x.cpu.records_s <= 0)
			snprintf(buf, sizeof(buf),
				 "n/a: no CPU work per byte (raw blocks gathered on the GPU, checked there or not at all)");
		else
			snprintf(buf, sizeof(buf),
				 "decompression n/a (raw); %u threads x (verify %.3f%s + memcpy %.3f GB/s per thread, %u at once)",
				 r->cpu->threads,
				 div0(x.verify_gbps, r->cpu->threads),
				 r->cpu->verify_in_cache ? " in cache" : "",
				 div0(x.copy_gbps, r->cpu->threads),
				 r->cpu->threads_at_once);
		text_limit(f, &x.cpu, buf);
	} else {
		text_limit(f, &x.cpu, r->cpu_error ? r->cpu_error
						   : "not measured");
	}
	if (x.cpus.records_s > 0) {
		snprintf(buf, sizeof(buf),
			 "every stage on the same %u CPUs: read %.3f + verify %.3f + decompress %.3f + copy %.3f CPU s/GB",
			 r->cpu->threads, x.cpus_read, x.cpus_verify,
			 x.cpus_decompress, x.cpus_copy);
		text_limit(f, &x.cpus, buf);
	}
	text_limit(f, &x.pcie, x.pcie_status);
	if (x.loader_binds && x.decoded_gbps > 2 * x.assembled_gbps)
		/* The limits are per record read once: a loader that decodes
		 * a block for nearly every record (a full shuffle of zstd
		 * blocks) is bound by that, which the fallbacks explain. */
		fprintf(f, "binding  the loader: it decoded %.1fx the bytes it assembled (see fallbacks); every limit is over twice what it delivered; the nearest, %s, allows %.0f records/s, it achieved %.0f (%.0f%%)\n",
			x.decoded_gbps / x.assembled_gbps, x.binding->name,
			x.binding->records_s, x.samples_s, 100 * x.achieved);
	else if (x.loader_binds)
		fprintf(f, "binding  the loader: every limit is over twice what it delivered; the nearest, %s, allows %.0f records/s, it achieved %.0f (%.0f%%)\n",
			x.binding->name, x.binding->records_s, x.samples_s,
			100 * x.achieved);
	else if (x.binding)
		fprintf(f, "binding  %s: achieved %.0f of %.0f records/s (%.0f%%)\n",
			x.binding->name, x.samples_s, x.binding->records_s,
			100 * x.achieved);
	if (x.achieved > 1 && st->block_cache_hits &&
	    x.decoded_gbps < 0.9 * x.assembled_gbps)
		fprintf(f, "         above the limit: the block cache served %llu block uses without reading (the data fits in it)\n",
			(unsigned long long)st->block_cache_hits);
	else if (x.achieved > 1)
		/* every record read: its stages ran on pieces in cache */
		fprintf(f, "         above the limit: the loader's stages take each piece while the cache holds it, where the limit times each stage alone over blocks in memory\n");
	if (x.wall_s < SHORT_RUN_S)
		fprintf(f, "note     the run took %.3f s: too short for these rates, percentages and ratios to mean much (start-up and the first reads dominate); bench a dataset of a GB or more, or more --epochs\n",
			x.wall_s);
	if (r->disk && r->disk->seconds < SHORT_PROBE_S)
		fprintf(f, "note     the disk probe took %.3f s (%llu reads): too short for its rate to mean much (opening the files and the first reads dominate)\n",
			r->disk->seconds, (unsigned long long)r->disk->ops);
	if (r->o->trace_path)
		fprintf(f, "trace    %s (%llu events)\n", r->o->trace_path,
			(unsigned long long)r->trace_events);
}

/* ------------------------------------------------------------------ */
/* JSON                                                                */
/* ------------------------------------------------------------------ */

/* Numbers: finite, full precision (scripts check bytes/s == GB/s). */
static void jnum(FILE *f, const char *key, double v, int last)
{
	fprintf(f, "\"%s\":%.12g%s", key, isfinite(v) ? v : 0, last ? "" : ",");
}

static void jint(FILE *f, const char *key, uint64_t v, int last)
{
	fprintf(f, "\"%s\":%llu%s", key, (unsigned long long)v,
		last ? "" : ",");
}

static void json_dataset(FILE *f, const struct bench_report *r)
{
	const struct shard_set *s = r->shards;
	int nf = sluice_dataset_field_count(r->ds);

	fputs("\"dataset\":{\"path\":", f);
	cli_json_string(f, r->o->path);
	fputc(',', f);
	jint(f, "records", sluice_dataset_records(r->ds), 0);
	jint(f, "shards", sluice_dataset_shards(r->ds), 0);
	jint(f, "blocks", sluice_dataset_blocks(r->ds), 0);
	jint(f, "zstd_blocks", s ? s->zstd_blocks : 0, 0);
	jint(f, "stored_bytes", s ? s->stored_bytes : 0, 0);
	jint(f, "raw_bytes", s ? s->raw_bytes : 0, 0);
	jint(f, "file_bytes", s ? s->file_bytes : 0, 0);
	fputs("\"fields\":[", f);
	for (int i = 0; i < nf; i++) {
		const struct sluice_field *fd = sluice_dataset_field(r->ds, i);
		const char *dt = fd ? sluice_dtype_name(fd->dtype) : NULL;

		if (!fd)
			continue;
		fputs(i ? ",{\"name\":" : "{\"name\":", f);
		cli_json_string(f, fd->name);
		fputs(",\"dtype\":", f);
		cli_json_string(f, dt ? dt : "?");
		fputs(",\"shape\":[", f);
		for (int k = 0; k < fd->ndim; k++)
			fprintf(f, "%s%lld", k ? "," : "",
				(long long)fd->shape[k]);
		fputs("]}", f);
	}
	fputs("]}", f);
}

static void json_config(FILE *f, const struct bench_report *r)
{
	const struct sluice_loader_config *c = &r->o->cfg;

	fputs(",\"config\":{", f);
	jint(f, "batch_size", c->batch_size, 0);
	fputs("\"shuffle\":", f);
	cli_json_string(f, shuffle_name(c->shuffle));
	fputc(',', f);
	jint(f, "window_blocks", c->window_blocks, 0);
	jint(f, "seed", c->seed, 0);
	jint(f, "epochs", r->o->epochs, 0);
	fprintf(f, "\"rank\":%d,\"world_size\":%d,", c->rank, c->world_size);
	jint(f, "prefetch_depth", r->run->stats.prefetch_depth, 0);
	jint(f, "decode_threads", r->run->stats.decode_threads, 0);
	jint(f, "cpu_threads_used_for_limit", r->cpu ? r->cpu->threads : 0, 0);
	jint(f, "online_cpus", r->online_cpus, 0);
	jint(f, "queue_depth", c->queue_depth, 0);
	fputs("\"device\":", f);
	cli_json_string(f, r->run->device.device_type == kDLCPU ? "host" : "cuda");
	fprintf(f, ",\"verify\":%d,\"on_error\":\"%s\",\"direct_io\":\"%s\",\"sqpoll\":%d,",
		c->verify, c->on_error ? "skip" : "fail",
		c->direct_io == SLUICE_DIRECT_IO_ON ? "on"
		: c->direct_io == SLUICE_DIRECT_IO_OFF ? "off" : "auto",
		c->sqpoll);
	jint(f, "pad_length", c->pad_length, 0);
	jnum(f, "compute_ms", r->o->compute_ms, 0);
	fprintf(f, "\"drop_cache\":%d}", r->o->drop_cache);
}

static void json_result(FILE *f, const struct bench_report *r,
			const struct figures *x)
{
	const struct sluice_stats *st = &r->run->stats;

	fputs(",\"result\":{", f);
	jnum(f, "seconds", x->wall_s, 0);
	jnum(f, "open_seconds", x->open_s, 0);
	jnum(f, "arena_resident_seconds", (double)st->arena_resident_ns / 1e9,
	     0);
	jint(f, "memory_bytes", st->memory_bytes, 0);
	jint(f, "records", st->records, 0);
	jint(f, "batches", st->batches, 0);
	jnum(f, "samples_per_s", x->samples_s, 0);
	jint(f, "read_bytes", st->read.bytes, 0);
	jnum(f, "read_gbps", x->read_gbps, 0);
	jint(f, "decoded_bytes", st->decode.bytes, 0);
	jnum(f, "decoded_gbps", x->decoded_gbps, 0);
	jnum(f, "delivered_gbps", x->delivered_gbps, 0);
	jint(f, "assembled_bytes", st->assemble.bytes, 0);
	jnum(f, "assembled_gbps", x->assembled_gbps, 0);
	jnum(f, "cpu_seconds", r->run->cpu_s, 0);
	jnum(f, "cpu_s_per_gb", x->cpu_s_per_gb, 0);
	jnum(f, "cpu_s_per_gb_delivered", x->cpu_s_per_gb_delivered, 0);
	fputs("\"cpu_s_per_gb_by_stage\":{", f);
	jnum(f, "read", x->cpu_read, 0);
	jnum(f, "verify", x->cpu_verify, 0);
	jnum(f, "decompress", x->cpu_decompress, 0);
	jnum(f, "assemble", x->cpu_assemble, 0);
	jnum(f, "other", x->cpu_other, 1);
	fputs("},", f);
	jint(f, "batches_viewed", st->batches_viewed, 0);
	jint(f, "blocks_direct", st->blocks_direct, 0);
	jint(f, "records_decoded_in_batch", st->records_decoded_in_batch, 0);
	jint(f, "batches_gathered", st->batches_gathered, 0);
	jint(f, "gather_runs", st->gather_runs, 0);
	jint(f, "device_upload_bytes", st->device_upload_bytes, 0);
	/* threads busy uploading, on average (their waits included) */
	jnum(f, "device_upload_threads",
	     div0((double)st->device_upload_ns / 1e9, x->wall_s), 0);
	/* threads waiting for checksums on the device, on average */
	jnum(f, "device_check_threads",
	     div0((double)st->device_check_ns / 1e9, x->wall_s), 0);
	/* threads waiting for the loader's lock, on average */
	jnum(f, "lock_wait_threads",
	     div0((double)st->lock_wait_ns / 1e9, x->wall_s), 0);
	jint(f, "bytes_verified_landing", st->bytes_verified_landing, 0);
	jint(f, "bytes_verified_device", st->bytes_verified_device, 0);
	jint(f, "bytes_staged", st->bytes_staged, 0);
	jint(f, "bytes_staged_overlapped", st->bytes_staged_overlapped, 0);
	jint(f, "read_ahead_blocks", st->read_ahead_blocks, 0);
	jint(f, "device_memory_bytes", st->device_memory_bytes, 0);
	jnum(f, "consumer_wait_seconds", (double)st->consumer_wait_ns / 1e9, 0);
	jnum(f, "consumer_wait_fraction", x->wait_frac, 0);
	jnum(f, "slot_occupancy", x->occupancy, 0);
	jnum(f, "device_copy_gbps", x->copy_dev_gbps, 0);
	jnum(f, "device_copy_over_pcie_probe", x->h2d_fraction, 0);
	if (x->gpu_idle >= 0)
		jnum(f, "gpu_idle_fraction", x->gpu_idle, 0);
	jint(f, "records_skipped", st->records_skipped, 0);
	jint(f, "blocks_read", st->blocks_read, 0);
	jint(f, "range_reads", st->range_reads, 0);
	jint(f, "range_records", st->range_records, 0);
	jint(f, "range_records_in_place", st->range_records_in_place, 0);
	jint(f, "block_cache_hits", st->block_cache_hits, 0);
	jint(f, "trace_events", r->trace_events, 1);
	fputc('}', f);
}

static void json_stages(FILE *f, const struct bench_report *r,
			const struct figures *x)
{
	const struct sluice_stats *st = &r->run->stats;
	const struct {
		const char *name;
		const struct sluice_stage_stats *s;
	} v[] = { { "read", &st->read }, { "decode", &st->decode },
		  { "assemble", &st->assemble }, { "copy", &st->copy } };

	fputs(",\"stages\":{", f);
	for (int i = 0; i < 4; i++) {
		fprintf(f, "%s\"%s\":{", i ? "," : "", v[i].name);
		jint(f, "bytes", v[i].s->bytes, 0);
		jint(f, "ops", v[i].s->ops, 0);
		jnum(f, "busy_seconds", (double)v[i].s->busy_ns / 1e9, 0);
		jnum(f, "wait_seconds", (double)v[i].s->wait_ns / 1e9, 0);
		jnum(f, "busy_threads",
		     div0((double)v[i].s->busy_ns / 1e9, x->wall_s), 1);
		fputc('}', f);
	}
	fputc('}', f);
	fprintf(f, ",\"fallbacks\":{\"direct_io\":%d,\"cached_shards\":%llu,\"registered_buffers\":%d,\"registered_files\":%d,\"sqpoll\":%d,\"device_pinned\":%d,\"reasons\":",
		st->direct_io, (unsigned long long)st->cached_shards,
		st->registered_buffers, st->registered_files, st->sqpoll,
		st->device_pinned);
	cli_json_string(f, st->fallbacks);
	fputc('}', f);
}

static void json_limit(FILE *f, const struct limit *l, const char *status,
		       int last)
{
	fprintf(f, "\"%s\":{", l->name);
	if (l->records_s > 0) {
		jnum(f, "gbps", l->gbps, 0);
		fprintf(f, "\"bytes\":\"%s\",", l->unit);
		jnum(f, "records_per_s", l->records_s, 0);
	}
	fputs("\"status\":", f);
	cli_json_string(f, status);
	fputs(last ? "}" : "},", f);
}

static void json_limits(FILE *f, const struct bench_report *r,
			const struct figures *x)
{
	const struct cpu_limit *c = r->cpu;
	const int zstd = r->shards && r->shards->zstd_blocks;
	char status[96];

	fputs(",\"limits\":{", f);
	if (r->disk)
		snprintf(status, sizeof(status), "measured, %s",
			 disk_mode(r->disk));
	json_limit(f, &x->disk,
		   r->disk ? status
			   : r->disk_error ? r->disk_error : "not measured",
		   0);
	if (r->disk) {
		fputs("\"disk_probe\":{", f);
		jint(f, "bytes", r->disk->bytes, 0);
		jint(f, "reads", r->disk->ops, 0);
		jint(f, "preads", r->disk->pread_ops, 0);
		jint(f, "reads_in_order", r->disk->in_order, 0);
		jnum(f, "seconds", r->disk->seconds, 0);
		fputs("\"engine\":", f);
		cli_json_string(f, disk_engine(r->disk));
		fputs(",\"pattern\":", f);
		cli_json_string(f, r->disk->random ? "random" : "sequential");
		fputc(',', f);
		jint(f, "direct_files", r->disk->direct_files, 0);
		jint(f, "buffered_files", r->disk->buffered_files, 0);
		jint(f, "cached_files", r->disk->cached_files, 0);
		jint(f, "block_bytes", r->disk->block_bytes, 0);
		/* pread: one read at a time per thread */
		jint(f, "queue_depth", disk_ring_reads(r->disk)
				       ? r->disk->queue_depth : 1, 0);
		jint(f, "threads", r->disk->threads, 0);
		jnum(f, "cpu_seconds", r->disk->cpu_s, 0);
		fputs("\"note\":", f);
		cli_json_string(f, r->disk->note);
		fputs("},", f);
	}
	/* Named "decompression" for zstd data, "copy" for raw data. */
	if (!zstd)
		fputs("\"decompression\":{\"status\":\"n/a (raw)\"},", f);
	json_limit(f, &x->cpu,
		   c && c->sample_blocks ? "measured"
		   : r->cpu_error ? r->cpu_error : "not measured", 0);
	if (c) {
		fputs("\"cpu_probe\":{", f);
		jint(f, "threads", c->threads, 0);
		jint(f, "threads_at_once", c->threads_at_once, 0);
		jint(f, "sample_blocks", c->sample_blocks, 0);
		jint(f, "sample_stored_bytes", c->sample_stored, 0);
		jint(f, "sample_raw_bytes", c->sample_raw, 0);
		jnum(f, "verify_seconds", c->verify_s, 0);
		jnum(f, "decompress_seconds", c->decompress_s, 0);
		jnum(f, "copy_seconds", c->copy_s, 0);
		jnum(f, "verify_gbps", x->verify_gbps, 0);
		jnum(f, "copy_gbps", x->copy_gbps, 0);
		if (zstd)
			jnum(f, "decompress_gbps", x->decompress_gbps, 1);
		else
			fputs("\"decompress_gbps\":\"n/a (raw)\"", f);
		fputs("},", f);
	}
	json_limit(f, &x->cpus, x->cpus.records_s > 0
		   ? "derived: the disk, verify, decompression and copy "
		     "probes' CPU per GB, on the same CPUs"
		   : "not measured", 0);
	if (x->cpus.records_s > 0) {
		fputs("\"cpus_s_per_gb\":{", f);
		jnum(f, "read", x->cpus_read, 0);
		jnum(f, "verify", x->cpus_verify, 0);
		jnum(f, "decompress", x->cpus_decompress, 0);
		jnum(f, "copy", x->cpus_copy, 1);
		fputs("},", f);
	}
	json_limit(f, &x->pcie, x->pcie_status, 0);
	if (r->run->h2d_bps > 0) {
		fputs("\"pcie_probe\":{", f);
		jint(f, "copy_bytes_max", r->run->h2d_bytes, 0);
		jnum(f, "bytes_per_s", r->run->h2d_bps, 0);
		fprintf(f, "\"pinned\":%d},", r->run->stats.device_pinned);
	}
	fputs("\"binding\":", f);
	cli_json_string(f, x->loader_binds ? "loader"
			   : x->binding ? x->binding->name : "unknown");
	fputs(",\"nearest_limit\":", f);
	cli_json_string(f, x->binding ? x->binding->name : "unknown");
	fputc(',', f);
	jnum(f, "achieved_fraction", x->achieved, 1);
	fputc('}', f);
}

void report_json(FILE *f, const struct bench_report *r)
{
	struct figures x;

	derive(r, &x);
	fputc('{', f);
	json_dataset(f, r);
	json_config(f, r);
	json_result(f, r, &x);
	json_stages(f, r, &x);
	json_limits(f, r, &x);
	fputs("}\n", f);
}
