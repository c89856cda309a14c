/*
 * cli_convert.c - `dlpack-shard convert`: option parsing, the progress
 * line and the summary.  The importers do the work (import/import.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "import/import.h"

enum source_kind {
	SRC_GUESS, SRC_DIR, SRC_TAR, SRC_NPY, SRC_PARQUET, SRC_SYNTH
};

struct convert_args {
	struct import_options o;
	enum source_kind kind;
	int quiet, json;
	int have_shard_size, have_records_per_shard;
	struct import_skips skips;
};

/* A zstd-like progress line: rewritten in place, at most 5 times/s. */
struct progress {
	double start, last;
	int shown;
};

static void on_progress(void *ctx, const sluice_writer *w, uint64_t done,
			uint64_t total)
{
	struct progress *p = ctx;
	uint64_t records, raw, stored;
	double now = (double)clock_ns() / 1e9, secs, rate;

	/* The first line as soon as there is something to show, so even a
	 * short conversion shows one. */
	if (done == 0 || (p->shown && now - p->last < 0.2))
		return;
	p->last = now;
	secs = now - p->start;
	if (secs <= 0)
		return;
	sluice_writer_progress(w, &records, &raw, &stored);
	rate = (double)done / secs;
	fprintf(stderr, "\r%llu records  %.0f rec/s  %.1f MB/s",
		(unsigned long long)done, rate, (double)raw / 1e6 / secs);
	if (total && rate > 0 && done <= total) {
		unsigned long eta = (unsigned long)((double)(total - done) /
						    rate + 0.5);

		fprintf(stderr, "  %.0f%%  ETA %lu:%02lu",
			100.0 * (double)done / (double)total, eta / 60,
			eta % 60);
	}
	fputs("\x1b[K", stderr);
	p->shown = 1;
}

static int parse_compression(const char *s, int *level)
{
	uint64_t v;

	if (strcmp(s, "none") == 0) {
		*level = 0;
		return 0;
	}
	if (strcmp(s, "zstd") == 0) {
		*level = 3;
		return 0;
	}
	if (strncmp(s, "zstd:", 5) == 0 && cli_parse_u64(s + 5, &v) == 0 &&
	    v >= 1 && v <= 22) {
		*level = (int)v;
		return 0;
	}
	return -1;
}

static int parse_part(const char *s, uint32_t *index, uint32_t *count)
{
	const char *slash = strchr(s, '/');
	char head[32];
	uint64_t i, n;

	if (!slash || (size_t)(slash - s) >= sizeof(head))
		return -1;
	memcpy(head, s, (size_t)(slash - s));
	head[slash - s] = '\0';
	if (cli_parse_u64(head, &i) < 0 || cli_parse_u64(slash + 1, &n) < 0 ||
	    n == 0 || i >= n || n > UINT32_MAX)
		return -1;
	*index = (uint32_t)i;
	*count = (uint32_t)n;
	return 0;
}

/* "3x224x224", "-1", "-1x3", "scalar" or "" (ndim 0). */
static int parse_shape(const char *s, struct sluice_field *f)
{
	char *end;

	f->ndim = 0;
	if (*s == '\0' || strcmp(s, "scalar") == 0)
		return 0;
	for (;;) {
		long long d;

		if (f->ndim == SLUICE_MAX_NDIM)
			return -1;
		errno = 0;
		d = strtoll(s, &end, 10);
		if (end == s || errno || (d <= 0 && !(d == -1 && f->ndim == 0)))
			return -1;
		f->shape[f->ndim++] = d;
		if (*end == '\0')
			return 0;
		if (*end != 'x')
			return -1;
		s = end + 1;
	}
}

/* NAME:DTYPE[:SHAPE[:COMPRESSIBILITY]] */
static int parse_field(const char *spec, struct synth_field *sf)
{
	char buf[256], *parts[4] = { 0 }, *p, *end;
	int n = 0;

	if (strlen(spec) >= sizeof(buf))
		return cli_usage_error("--field '%s': too long", spec);
	strcpy(buf, spec);
	for (p = buf; n < 4; n++) {
		parts[n] = p;
		p = strchr(p, ':');
		if (!p) {
			n++;
			break;
		}
		*p++ = '\0';
	}
	if (p || n < 2)
		return cli_usage_error("--field '%s': want "
				       "NAME:DTYPE[:SHAPE[:COMPRESSIBILITY]]",
				       spec);
	memset(sf, 0, sizeof(*sf));
	if (!*parts[0] || strlen(parts[0]) >= SLUICE_NAME_MAX)
		return cli_usage_error("--field '%s': name must be 1..%d "
				       "bytes", spec, SLUICE_NAME_MAX - 1);
	strcpy(sf->f.name, parts[0]);
	if (sluice_dtype_parse(parts[1], &sf->f.dtype) < 0)
		return cli_usage_error("--field '%s': unknown dtype '%s'",
				       spec, parts[1]);
	if (n >= 3 && parse_shape(parts[2], &sf->f) < 0)
		return cli_usage_error("--field '%s': bad shape '%s' (like "
				       "3x224x224, -1, -1x3 or scalar)",
				       spec, parts[2]);
	if (n == 4) {
		errno = 0;
		sf->compressibility = strtod(parts[3], &end);
		if (end == parts[3] || *end || errno ||
		    !(sf->compressibility >= 0 && sf->compressibility <= 1))
			return cli_usage_error("--field '%s': compressibility "
					       "must be in [0, 1]", spec);
	}
	return 0;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

static enum source_kind guess_kind(const char *src)
{
	struct stat st;

	if (stat(src, &st) == 0 && S_ISDIR(st.st_mode))
		return SRC_DIR;
	if (ends_with(src, ".tar"))
		return SRC_TAR;
	if (ends_with(src, ".npy"))
		return SRC_NPY;
	if (ends_with(src, ".parquet"))
		return SRC_PARQUET;
	return SRC_GUESS;
}

enum {
	OPT_FROM = 256, OPT_SHARD_SIZE, OPT_RECORDS_PER_SHARD, OPT_BLOCK_SIZE,
	OPT_COMPRESSION, OPT_THREADS, OPT_PART, OPT_PREFIX, OPT_JSON,
	OPT_RECORDS, OPT_FIELD, OPT_SEED, OPT_DROP_KEY, OPT_STRICT,
	OPT_FOLLOW_SYMLINKS,
};

static const struct option convert_options[] = {
	{ "out", required_argument, NULL, 'o' },
	{ "from", required_argument, NULL, OPT_FROM },
	{ "shard-size", required_argument, NULL, OPT_SHARD_SIZE },
	{ "records-per-shard", required_argument, NULL, OPT_RECORDS_PER_SHARD },
	{ "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
	{ "compression", required_argument, NULL, OPT_COMPRESSION },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "part", required_argument, NULL, OPT_PART },
	{ "prefix", required_argument, NULL, OPT_PREFIX },
	{ "quiet", no_argument, NULL, 'q' },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "records", required_argument, NULL, OPT_RECORDS },
	{ "field", required_argument, NULL, OPT_FIELD },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "drop-key", no_argument, NULL, OPT_DROP_KEY },
	{ "strict", no_argument, NULL, OPT_STRICT },
	{ "follow-symlinks", no_argument, NULL, OPT_FOLLOW_SYMLINKS },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Returns -1 to go on, else an exit code. */
static int parse_option(struct convert_args *a, int c, const char *arg)
{
	struct import_options *o = &a->o;
	uint64_t v;

	switch (c) {
	case 'o':
		o->out_dir = arg;
		return -1;
	case OPT_FROM:
		if (strcmp(arg, "dir") == 0)
			a->kind = SRC_DIR;
		else if (strcmp(arg, "tar") == 0)
			a->kind = SRC_TAR;
		else if (strcmp(arg, "npy") == 0)
			a->kind = SRC_NPY;
		else if (strcmp(arg, "parquet") == 0)
			a->kind = SRC_PARQUET;
		else if (strcmp(arg, "synth") == 0)
			a->kind = SRC_SYNTH;
		else
			return cli_usage_error("--from: '%s' is not dir, tar, "
					       "npy, parquet or synth", arg);
		return -1;
	case OPT_SHARD_SIZE:
		if (cli_parse_size(arg, &o->wcfg.shard_size) < 0)
			return cli_usage_error("--shard-size: bad size '%s'",
					       arg);
		a->have_shard_size = 1;
		return -1;
	case OPT_RECORDS_PER_SHARD:
		if (cli_parse_size(arg, &o->wcfg.records_per_shard) < 0 ||
		    o->wcfg.records_per_shard == 0)
			return cli_usage_error("--records-per-shard: bad "
					       "count '%s'", arg);
		a->have_records_per_shard = 1;
		return -1;
	case OPT_BLOCK_SIZE:
		if (cli_parse_size(arg, &o->wcfg.block_size) < 0 ||
		    o->wcfg.block_size == 0)
			return cli_usage_error("--block-size: bad size '%s'",
					       arg);
		return -1;
	case OPT_COMPRESSION:
		if (parse_compression(arg, &o->wcfg.compression_level) < 0)
			return cli_usage_error("--compression: want none, "
					       "zstd or zstd:1..22, not '%s'",
					       arg);
		return -1;
	case OPT_THREADS:
		if (cli_parse_u64(arg, &v) < 0 || v > 1024)
			return cli_usage_error("--threads: bad count '%s'",
					       arg);
		o->wcfg.threads = (uint32_t)v;
		return -1;
	case OPT_PART:
		if (parse_part(arg, &o->part_index, &o->part_count) < 0)
			return cli_usage_error("--part: want I/N with 0 <= I "
					       "< N, not '%s'", arg);
		return -1;
	case OPT_PREFIX:
		if (!*arg || strchr(arg, '/'))
			return cli_usage_error("--prefix: bad name '%s'", arg);
		o->wcfg.prefix = arg;
		return -1;
	case 'q':
		a->quiet = 1;
		return -1;
	case OPT_JSON:
		a->json = 1;
		return -1;
	case OPT_RECORDS:
		if (cli_parse_size(arg, &o->synth_records) < 0)
			return cli_usage_error("--records: bad count '%s'",
					       arg);
		return -1;
	case OPT_FIELD:
		if (o->synth_nfields == SLUICE_MAX_FIELDS)
			return cli_usage_error("at most %d --field options",
					       SLUICE_MAX_FIELDS);
		if (parse_field(arg, &o->synth_fields[o->synth_nfields]))
			return CLI_EXIT_USAGE;
		o->synth_nfields++;
		return -1;
	case OPT_DROP_KEY:
		o->tar_drop_key = 1;
		return -1;
	case OPT_STRICT:
		o->strict = 1;
		return -1;
	case OPT_FOLLOW_SYMLINKS:
		o->follow_symlinks = 1;
		return -1;
	case OPT_SEED:
		if (cli_parse_u64(arg, &o->synth_seed) < 0)
			return cli_usage_error("--seed: bad number '%s'", arg);
		return -1;
	default:
		return -1;
	}
}

static int parse_args(struct convert_args *a, int argc, char **argv)
{
	int c, rc;

	memset(a, 0, sizeof(*a));
	sluice_writer_config_init(&a->o.wcfg);
	a->o.skips = &a->skips;
	a->o.part_count = 1;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:qh", convert_options, NULL)) !=
	       -1) {
		if (c == 'h') {
			cli_usage(stdout);
			return 0;
		}
		if (c == '?' || c == ':')
			return cli_usage_error("convert: bad option '%s'",
					       argv[optind - 1]);
		rc = parse_option(a, c, optarg);
		if (rc >= 0)
			return rc;
	}
	if (a->kind == SRC_SYNTH) {
		if (optind != argc)
			return cli_usage_error("convert --from synth takes no "
					       "SRC ('%s')", argv[optind]);
		if (a->o.synth_nfields == 0)
			return cli_usage_error("convert --from synth needs "
					       "--field");
		a->o.src = "synth";
	} else {
		if (optind + 1 != argc)
			return cli_usage_error("convert needs exactly one SRC");
		a->o.src = argv[optind];
		if (a->o.synth_nfields || a->o.synth_records)
			return cli_usage_error("--field and --records are for "
					       "--from synth");
	}
	if (!a->o.out_dir)
		return cli_usage_error("convert needs --out DIR");
	if (a->have_shard_size && a->have_records_per_shard)
		return cli_usage_error("--shard-size and --records-per-shard "
				       "exclude each other");
	if (a->kind == SRC_GUESS) {
		a->kind = guess_kind(a->o.src);
		if (a->kind == SRC_GUESS)
			return cli_usage_error("%s: cannot guess the source "
					       "kind; use --from", a->o.src);
	}
	return -1;
}

/* JSON keys of the skip kinds (import.h). */
static const char *const skip_keys[IMPORT_SKIP_KINDS] = {
	[IMPORT_SKIP_HIDDEN] = "hidden",
	[IMPORT_SKIP_OUTSIDE] = "symlink_outside",
	[IMPORT_SKIP_DANGLING] = "symlink_dangling",
	[IMPORT_SKIP_LOOP] = "folder_loop",
	[IMPORT_SKIP_FIFO] = "fifo",
	[IMPORT_SKIP_SOCKET] = "socket",
	[IMPORT_SKIP_DEVICE] = "device",
	[IMPORT_SKIP_NOT_IN_CLASS] = "not_in_class",
	[IMPORT_SKIP_TAR_ENTRY] = "tar_not_a_file",
};

/* One line on stderr, even with --quiet (a skip is a warning, not part
 * of the summary): the counts by kind and the first few paths. */
static void print_skips(const struct import_skips *k)
{
	char line[3000];
	size_t at = 0;
	const char *sep = "";

	if (!k->total)
		return;
#define ADD(...)                                                         \
	do {                                                             \
		if (at < sizeof(line))                                   \
			at += (size_t)snprintf(line + at,                \
					       sizeof(line) - at,        \
					       __VA_ARGS__);             \
	} while (0)
	ADD("skipped %llu: ", (unsigned long long)k->total);
	for (int i = 0; i < IMPORT_SKIP_KINDS; i++) {
		if (!k->count[i])
			continue;
		ADD("%s%llu %s", sep, (unsigned long long)k->count[i],
		    import_skip_name((enum import_skip_kind)i, k->count[i]));
		sep = ", ";
	}
	ADD("; first: ");
	for (uint64_t i = 0; i < k->total && i < IMPORT_SKIP_SHOWN; i++)
		ADD("%s%s", i ? ", " : "", k->first[i]);
	if (k->total > IMPORT_SKIP_SHOWN)
		ADD(", ...");
	ADD(" (--strict makes a skip an error)");
#undef ADD
	cli_error("%s", line);
}

static void print_summary(const struct convert_args *a,
			  const struct sluice_writer_summary *s, double secs)
{
	double ratio = s->stored_bytes ?
			       (double)s->raw_bytes / (double)s->stored_bytes :
			       0.0;
	double mbps = secs > 0 ? (double)s->raw_bytes / 1e6 / secs : 0.0;

	if (a->json) {
		printf("{\"records\": %llu, \"shards\": %u, \"blocks\": %llu, "
		       "\"raw_bytes\": %llu, \"stored_bytes\": %llu, "
		       "\"ratio\": %.4f, \"seconds\": %.3f, "
		       "\"MB_per_s\": %.1f, \"skipped\": {\"total\": %llu",
		       (unsigned long long)s->records, s->shards,
		       (unsigned long long)s->blocks,
		       (unsigned long long)s->raw_bytes,
		       (unsigned long long)s->stored_bytes, ratio, secs, mbps,
		       (unsigned long long)a->skips.total);
		for (int i = 0; i < IMPORT_SKIP_KINDS; i++)
			printf(", \"%s\": %llu", skip_keys[i],
			       (unsigned long long)a->skips.count[i]);
		printf("}}\n");
		fflush(stdout);
	}
	if (!a->quiet)
		fprintf(stderr,
			"%s: %llu records, %u shards, %llu blocks, %.1f MB -> "
			"%.1f MB (ratio %.3f), %.2f s, %.1f MB/s\n",
			a->o.out_dir, (unsigned long long)s->records,
			s->shards, (unsigned long long)s->blocks,
			(double)s->raw_bytes / 1e6,
			(double)s->stored_bytes / 1e6, ratio, secs, mbps);
}

int cli_convert(int argc, char **argv)
{
	struct sluice_writer_summary sum;
	struct convert_args a;
	struct progress prog = { 0 };
	char err[1024] = "";
	double start;
	int r;

	r = parse_args(&a, argc, argv);
	if (r >= 0)
		return r;
	r = cli_check_out_dir(a.o.out_dir);
	if (r)
		return r;
	start = (double)clock_ns() / 1e9;
	prog.start = prog.last = start;
	if (!a.quiet && isatty(STDERR_FILENO)) {
		a.o.progress = on_progress;
		a.o.progress_ctx = &prog;
	}
	memset(&sum, 0, sizeof(sum));
	sum.size = sizeof(sum);
	switch (a.kind) {
	case SRC_DIR:
		r = import_dir(&a.o, &sum, err, sizeof(err));
		break;
	case SRC_TAR:
		r = import_tar(&a.o, &sum, err, sizeof(err));
		break;
	case SRC_NPY:
		r = import_npy(&a.o, &sum, err, sizeof(err));
		break;
	case SRC_PARQUET:
		r = import_parquet(&a.o, &sum, err, sizeof(err));
		break;
	default:
		r = import_synth(&a.o, &sum, err, sizeof(err));
		break;
	}
	if (prog.shown)
		fputs("\r\x1b[K", stderr);
	if (r < 0) {
		cli_error_code(err, r);
		/* The writer removed its shards; only the folder remains.
		 * Unless another writer holds it (EBUSY, or one that started
		 * since): then its files are live, and removal would kill
		 * its conversion. */
		if (r != -EBUSY && access(a.o.out_dir, F_OK) == 0 &&
		    cli_check_busy(a.o.out_dir) == 0)
			fprintf(stderr, "dlpack-shard: no dataset was written; "
				"%s holds nothing to keep (remove it with 'rm "
				"-r %s'). A killed conversion leaves only hidden "
				".tmp files there, which no reader loads: "
				"'" CLI_NAME " clean %s' removes them.\n",
				a.o.out_dir, a.o.out_dir, a.o.out_dir);
		return CLI_EXIT_ERROR;
	}
	print_summary(&a, &sum, (double)clock_ns() / 1e9 - start);
	print_skips(&a.skips);
	return 0;
}
