/*
 * sluice_cli.h - the private interface between the files of the `sluice`
 * command (programs/sluice/).  Everything here uses only the public API
 * (include/sluice.h, include/dlpack_shard.h), the internal tools header
 * (include/sluice_tools.h) and zstd, xxhash, liburing.
 */
#ifndef SLUICE_BENCH_CLI_H
#define SLUICE_BENCH_CLI_H

#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>

#include "cli_util.h"
#include "sluice.h"
#include "sluice_tools.h"

#define CLI_NAME "sluice"

/* ------------------------------------------------------------------ */
/* Options (options.c)                                                 */
/* ------------------------------------------------------------------ */

#define CLI_MAX_STREAMS 64

struct cli_opts {
	struct sluice_loader_config cfg;
	const char *path;
	/* stream only: several PATH[:WEIGHT|@SAMPLES] make a mixture; the
	 * command opens the datasets into streams[i].dataset */
	int nstreams;             /* 0: one dataset, path */
	char *stream_paths[CLI_MAX_STREAMS];
	struct sluice_stream streams[CLI_MAX_STREAMS];
	uint64_t epochs;          /* run until the end of epoch epochs - 1 */
	int hash;                 /* stream: print EPOCH INDEX FIELD XXH64 */
	const char *state_out;
	const char *state_in;
	uint64_t stop_after;      /* batches; 0: no limit */
	double compute_ms;        /* a simulated step per batch: a kernel on
				     the GPU, a busy loop on the host */
	int measure_h2d;          /* bench: the loader's PCIe probe */
	int json;
	const char *trace_path;
	int drop_cache;
	int progress;             /* live line on stderr (a TTY) */
	int say_fallbacks;        /* stream: the loader's fallbacks on stderr
				     (bench reports them in its report) */
};

enum cli_command { CMD_STREAM, CMD_BENCH };

/* Parse argv (argv[0] is the command name).  @return: 0, or an exit code
 * (CLI_EXIT_USAGE after printing why). */
int opts_parse(int argc, char **argv, enum cli_command cmd,
	       struct cli_opts *o);
void opts_free(struct cli_opts *o);
const char *shuffle_name(int shuffle);
const char *device_name(int device);

/* ------------------------------------------------------------------ */
/* Small helpers (main.c)                                              */
/* ------------------------------------------------------------------ */

void busy_wait_ns(uint64_t ns);      /* spin: a stand-in for compute */
void cli_usage(FILE *f);
/* One command's usage and the loader options (COMMAND --help). */
void cli_command_usage(FILE *f, enum cli_command cmd);
/* Print the loader's (or dataset's) message for @code; @return: 1. */
int loader_error_exit(const sluice_loader *ld, int code);
int dataset_error_exit(const sluice_dataset *ds, int code);

int cmd_stream(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* ------------------------------------------------------------------ */
/* Chrome trace (trace.c)                                              */
/* ------------------------------------------------------------------ */

/* Tracks.  The pipeline stages match enum sluice_stage, the `stage`
 * argument of the loader's on_span hook (see trace_on_span). */
enum trace_track {
	TRACK_READ = 0,
	TRACK_DECODE,
	TRACK_ASSEMBLE,
	TRACK_COPY,
	TRACK_CONSUMER,
	TRACK_COUNT
};

struct trace;

/* Create the file now (so a bad path fails before the run); events are
 * kept in memory and written by trace_close().  @return: 0 or -errno. */
int trace_open(const char *path, uint64_t t0_ns, struct trace **out);
/* One complete ("X") event on @track; thread-safe. */
void trace_span(struct trace *t, int track, const char *name,
		uint64_t start_ns, uint64_t end_ns, uint64_t bytes);
/* One counter ("C") event with up to 4 named values; thread-safe. */
void trace_counter(struct trace *t, const char *name, uint64_t ts_ns,
		   const char *const *keys, const double *values, int n);
/*
 * The loader's on_span hook (struct sluice_loader_config), with @ctx the
 * struct trace.  Each calling thread gets its own lane under the stage's
 * name.  Thread-safe, never blocks for long.
 */
void trace_on_span(void *ctx, enum sluice_stage stage, uint64_t start_ns,
		   uint64_t end_ns, uint64_t bytes);
uint64_t trace_events(const struct trace *t);
/* Write the JSON and free @t (NULL ok).  @return: 0 or -errno. */
int trace_close(struct trace *t);

/* ------------------------------------------------------------------ */
/* The loader run shared by stream and bench (run.c)                   */
/* ------------------------------------------------------------------ */

struct run_result {
	uint64_t open_ns;        /* sluice_loader_open */
	uint64_t wall_ns;        /* from open's return to the last batch */
	uint64_t batches, records;
	uint64_t first_epoch, end_epoch;
	double cpu_s;            /* user + sys of the process over the run */
	int stopped;             /* --stop-after-batches reached */
	DLDevice device;
	uint64_t batches_per_epoch;
	struct sluice_stats stats;
	int64_t skipped_blocks;  /* sluice_loader_skipped() */
	char skip_first[512];    /* its first message */
	double h2d_bps;          /* sluice_loader_measure_h2d; 0: none */
	uint64_t h2d_bytes;      /* bytes per probe copy */
	char h2d_note[256];      /* why h2d_bps is 0 */
};

/* Called for each batch while the consumer holds it; non-zero stops the
 * run with that exit code. */
typedef int (*run_batch_fn)(void *ctx, sluice_batch *b);

/* Open a loader on @ds per @o, restore --state-in, run the epochs, write
 * --state-out, close.  @return: 0 or an exit code (message printed). */
int run_loader(sluice_dataset *ds, const struct cli_opts *o,
	       struct trace *trace, run_batch_fn fn, void *ctx,
	       struct run_result *res);

/* ------------------------------------------------------------------ */
/* The dataset's blocks and the limits (limits.c)                      */
/* ------------------------------------------------------------------ */

/* The shards and block table the loader reads (the library's own view,
 * sluice_tools.h), with the totals the report needs. */
struct shard_set {
	const struct dataset *d;  /* borrowed from the open sluice_dataset */
	uint64_t records, stored_bytes, raw_bytes, file_bytes, blocks;
	uint64_t zstd_blocks;
	uint64_t max_stored, max_raw;
};

/* Fill @s from the open, loaded dataset @ds. */
void shards_summarize(const sluice_dataset *ds, struct shard_set *s);

struct disk_limit {
	double seconds;
	uint64_t bytes;
	double cpu_s;            /* the process's CPU over the reads (user +
				    sys, io_uring's kernel workers too):
				    the page cache's copies */
	uint64_t ops;            /* reads (pieces) made */
	uint64_t pread_ops;      /* of which by pread(2), the rest io_uring */
	uint64_t in_order;       /* reads that began where the one queued
				    before them ended: all but one per file
				    in order, few at random */
	int direct;              /* O_DIRECT was used on every file */
	int random;              /* pieces at random places, each once,
				    else every byte in file order */
	uint32_t direct_files, buffered_files; /* files read each way */
	uint32_t cached_files;   /* of the buffered ones, direct_io auto's:
				    mostly cached, as the loader found */
	uint32_t block_bytes, queue_depth; /* queue depth per thread */
	uint32_t threads;        /* reading threads, a ring each */
	char note[200];
};

struct cpu_limit {
	uint32_t sample_blocks;
	uint64_t sample_stored, sample_raw;
	/* seconds for one pass over the sample by one thread, while
	 * threads_at_once threads each make theirs (the median thread) */
	double verify_s, decompress_s, copy_s;
	uint32_t threads;        /* decode workers that can run at once */
	uint32_t threads_at_once; /* the probe's threads (CPU_THREADS_MAX,
				     and their buffers, cap them) */
	int verify_in_cache;     /* checksums timed over bytes the cache
				    holds (the loader's buffered reads) */
};

/* Read the shards from @threads threads the loader's way: every byte once
 * in order in 1 MiB pieces when @piece is 0, else pieces of @piece bytes
 * (to the nearest 4 KiB) at random places, each once, for a few seconds;
 * O_DIRECT when @direct is 1 (and the filesystem takes it), buffered
 * when 0, and for -1 (direct_io auto) buffered where the page cache holds
 * most of the file. */
int limit_disk(const struct shard_set *s, uint32_t threads, int direct,
	       uint32_t piece, struct disk_limit *out, char *err,
	       size_t errlen);
/* The bytes the loader's record-range reads moved (what it read, less
 * its whole blocks at their average size). */
double range_read_bytes(const struct sluice_stats *st,
			const struct shard_set *s);
/* The probe's @piece for the loader's way of reading: 0 (in order) where
 * it read whole blocks; the average range read where those carried most
 * of the bytes it read (full shuffle). */
uint32_t disk_probe_piece(const struct sluice_stats *st,
			  const struct shard_set *s);
int limit_cpu(const struct shard_set *s, uint32_t threads, int in_cache,
	      struct cpu_limit *out, char *err, size_t errlen);
/* Write 3 to /proc/sys/vm/drop_caches after sync.  @return: 0 or -errno. */
int drop_page_cache(void);

/* ------------------------------------------------------------------ */
/* Reports (report.c)                                                  */
/* ------------------------------------------------------------------ */

struct bench_report {
	const struct cli_opts *o;
	sluice_dataset *ds;
	const struct shard_set *shards;
	const struct run_result *run;
	const struct disk_limit *disk;     /* NULL: not measured */
	const struct cpu_limit *cpu;       /* NULL: not measured */
	const char *disk_error, *cpu_error;
	uint64_t trace_events;
	uint32_t online_cpus;
};

void report_text(FILE *f, const struct bench_report *r);
void report_json(FILE *f, const struct bench_report *r);
/* The one-line summary of `sluice stream`; @record_bytes: the average
 * record's bytes (delivered = records x that, as bench counts it). */
void report_stream_line(FILE *f, const struct run_result *run,
			double record_bytes);

#endif /* SLUICE_BENCH_CLI_H */
