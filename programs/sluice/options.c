/*
 * options.c - the command line of `sluice stream` and `sluice bench`:
 * loader options shared by both, then each command's own.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice_cli.h"

enum {
	OPT_BATCH = 256, OPT_SHUFFLE, OPT_WINDOW, OPT_SEED, OPT_EPOCHS,
	OPT_RANK, OPT_WORLD, OPT_PREFETCH, OPT_DECODE, OPT_QD, OPT_DEVICE,
	OPT_PAD, OPT_DROP_LAST, OPT_NO_VERIFY, OPT_ON_ERROR, OPT_DIRECT,
	OPT_SQPOLL, OPT_CACHE, OPT_MEMORY, OPT_COMPUTE, OPT_HASH, OPT_STATE_OUT,
	OPT_STATE_IN, OPT_STOP, OPT_JSON, OPT_TRACE, OPT_DROP_CACHE,
	OPT_READ_DELAY,
	OPT_PLAIN_READS, OPT_PAGEABLE, OPT_WHOLE_BLOCK_CHECKS, OPT_HOST_CHECKS, OPT_RANGE_READS, OPT_DEVICE_GATHER, OPT_HELP,
};

static const struct option long_opts[] = {
	{ "batch-size", required_argument, NULL, OPT_BATCH },
	{ "shuffle", required_argument, NULL, OPT_SHUFFLE },
	{ "window", required_argument, NULL, OPT_WINDOW },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "epochs", required_argument, NULL, OPT_EPOCHS },
	{ "rank", required_argument, NULL, OPT_RANK },
	{ "world-size", required_argument, NULL, OPT_WORLD },
	{ "prefetch", required_argument, NULL, OPT_PREFETCH },
	{ "decode-threads", required_argument, NULL, OPT_DECODE },
	{ "queue-depth", required_argument, NULL, OPT_QD },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "pad", required_argument, NULL, OPT_PAD },
	{ "drop-last", no_argument, NULL, OPT_DROP_LAST },
	{ "no-verify", no_argument, NULL, OPT_NO_VERIFY },
	{ "on-error", required_argument, NULL, OPT_ON_ERROR },
	{ "direct", required_argument, NULL, OPT_DIRECT },
	{ "range-reads", required_argument, NULL, OPT_RANGE_READS },
	{ "device-gather", required_argument, NULL, OPT_DEVICE_GATHER },
	{ "sqpoll", no_argument, NULL, OPT_SQPOLL },
	{ "cache-bytes", required_argument, NULL, OPT_CACHE },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "compute-ms", required_argument, NULL, OPT_COMPUTE },
	{ "plain-reads", no_argument, NULL, OPT_PLAIN_READS },
	{ "whole-block-checks", no_argument, NULL, OPT_WHOLE_BLOCK_CHECKS },
	{ "host-checks", no_argument, NULL, OPT_HOST_CHECKS },
	{ "pageable", no_argument, NULL, OPT_PAGEABLE },
	{ "read-delay-us", required_argument, NULL, OPT_READ_DELAY },
	{ "hash", no_argument, NULL, OPT_HASH },
	{ "state-out", required_argument, NULL, OPT_STATE_OUT },
	{ "state-in", required_argument, NULL, OPT_STATE_IN },
	{ "stop-after-batches", required_argument, NULL, OPT_STOP },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "trace", required_argument, NULL, OPT_TRACE },
	{ "drop-cache", no_argument, NULL, OPT_DROP_CACHE },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const char *const shuffle_names[] = { "none", "block", "window",
					     "full" };
static const char *const device_names[] = { "auto", "host", "cuda" };

const char *shuffle_name(int shuffle)
{
	return shuffle >= 0 && shuffle < 4 ? shuffle_names[shuffle] : "?";
}

const char *device_name(int device)
{
	return device >= 0 && device < 3 ? device_names[device] : "?";
}

static int parse_name(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

static int num_arg(const char *opt, const char *s, uint64_t max,
		   uint64_t *out)
{
	uint64_t v;

	if (cli_parse_size(s, &v) < 0 || v > max)
		return cli_usage_error("--%s: '%s' is not a number in 0..%llu",
				       opt, s, (unsigned long long)max);
	*out = v;
	return 0;
}

/* One loader option; @return: 0, CLI_EXIT_USAGE, or -1 (not ours). */
static int loader_opt(int c, const char *arg, struct cli_opts *o)
{
	struct sluice_loader_config *cfg = &o->cfg;
	uint64_t v = 0;
	int r = 0, k;

	switch (c) {
	case OPT_BATCH:
		r = num_arg("batch-size", arg, 1u << 24, &v);
		cfg->batch_size = (uint32_t)v;
		if (!r && v == 0)
			r = cli_usage_error("--batch-size must be at least 1");
		break;
	case OPT_SHUFFLE:
		k = parse_name(arg, shuffle_names, 4);
		if (k < 0)
			return cli_usage_error("--shuffle: want none, block, window or full, not '%s'", arg);
		cfg->shuffle = k;
		break;
	case OPT_WINDOW:
		r = num_arg("window", arg, UINT32_MAX, &v);
		cfg->window_blocks = (uint32_t)v;
		break;
	case OPT_SEED:
		r = num_arg("seed", arg, UINT64_MAX, &v);
		cfg->seed = v;
		break;
	case OPT_EPOCHS:
		r = num_arg("epochs", arg, UINT32_MAX, &o->epochs);
		break;
	case OPT_RANK:
		r = num_arg("rank", arg, 1u << 20, &v);
		cfg->rank = (int)v;
		break;
	case OPT_WORLD:
		r = num_arg("world-size", arg, 1u << 20, &v);
		cfg->world_size = (int)v;
		if (!r && v == 0)
			r = cli_usage_error("--world-size must be at least 1");
		break;
	case OPT_PREFETCH:
		r = num_arg("prefetch", arg, 1024, &v);
		cfg->prefetch_depth = (uint32_t)v;
		break;
	case OPT_DECODE:
		r = num_arg("decode-threads", arg, 64, &v);
		cfg->decode_threads = (uint32_t)v;
		break;
	case OPT_QD:
		r = num_arg("queue-depth", arg, 32768, &v);
		cfg->queue_depth = (uint32_t)v;
		break;
	case OPT_DEVICE:
		k = parse_name(arg, device_names, 3);
		if (k < 0)
			return cli_usage_error("--device: want host, cuda or auto, not '%s'", arg);
		cfg->device = k;
		break;
	case OPT_PAD:
		r = num_arg("pad", arg, UINT32_MAX, &v);
		cfg->pad_length = (uint32_t)v;
		break;
	case OPT_DROP_LAST:
		cfg->drop_last = 1;
		break;
	case OPT_NO_VERIFY:
		cfg->verify = 0;
		break;
	case OPT_ON_ERROR:
		if (strcmp(arg, "fail") == 0)
			cfg->on_error = SLUICE_ON_ERROR_FAIL;
		else if (strcmp(arg, "skip") == 0)
			cfg->on_error = SLUICE_ON_ERROR_SKIP;
		else
			return cli_usage_error("--on-error: want fail or skip, not '%s'", arg);
		break;
	case OPT_DIRECT:
		if (strcmp(arg, "on") == 0)
			cfg->direct_io = SLUICE_DIRECT_IO_ON;
		else if (strcmp(arg, "off") == 0)
			cfg->direct_io = SLUICE_DIRECT_IO_OFF;
		else if (strcmp(arg, "auto") == 0)
			cfg->direct_io = SLUICE_DIRECT_IO_AUTO;
		else
			return cli_usage_error("--direct: want on, off or auto, not '%s'", arg);
		break;
	case OPT_RANGE_READS:
		if (strcmp(arg, "auto") == 0)
			cfg->range_reads = SLUICE_RANGE_READS_AUTO;
		else if (strcmp(arg, "on") == 0)
			cfg->range_reads = SLUICE_RANGE_READS_ON;
		else if (strcmp(arg, "off") == 0)
			cfg->range_reads = SLUICE_RANGE_READS_OFF;
		else
			return cli_usage_error("--range-reads: want auto, on or off, not '%s'", arg);
		break;
	case OPT_DEVICE_GATHER:
		if (strcmp(arg, "auto") == 0)
			cfg->device_gather = SLUICE_DEVICE_GATHER_AUTO;
		else if (strcmp(arg, "on") == 0)
			cfg->device_gather = SLUICE_DEVICE_GATHER_ON;
		else if (strcmp(arg, "off") == 0)
			cfg->device_gather = SLUICE_DEVICE_GATHER_OFF;
		else
			return cli_usage_error("--device-gather: want auto, on or off, not '%s'", arg);
		break;
	case OPT_SQPOLL:
		cfg->sqpoll = 1;
		break;
	case OPT_PLAIN_READS:
		sluice_loader_config_force(cfg, SLUICE_FORCE_PLAIN_READS);
		break;
	case OPT_PAGEABLE:
		sluice_loader_config_force(cfg, SLUICE_FORCE_PAGEABLE_COPIES);
		break;
	case OPT_WHOLE_BLOCK_CHECKS:
		sluice_loader_config_force(cfg,
					   SLUICE_FORCE_WHOLE_BLOCK_CHECKS);
		break;
	case OPT_HOST_CHECKS:
		sluice_loader_config_force(cfg, SLUICE_FORCE_HOST_CHECKS);
		break;
	case OPT_READ_DELAY:
		r = num_arg("read-delay-us", arg, 10000000, &v);
		if (!r)
			sluice_loader_config_read_delay(cfg, (uint32_t)v);
		break;
	case OPT_CACHE:
		r = num_arg("cache-bytes", arg, UINT64_MAX, &cfg->cache_bytes);
		break;
	case OPT_MEMORY:
		r = num_arg("memory", arg, UINT64_MAX, &cfg->memory_bytes);
		break;
	case OPT_COMPUTE: {
		char *end;

		o->compute_ms = strtod(arg, &end);
		if (end == arg || *end || !(o->compute_ms >= 0) ||
		    o->compute_ms > 3.6e6)
			return cli_usage_error("--compute-ms: '%s' is not a time in milliseconds", arg);
		break;
	}
	default:
		return -1;
	}
	return r;
}

/* Options that belong to one command only. */
static int command_opt(int c, const char *arg, enum cli_command cmd,
		       struct cli_opts *o)
{
	uint64_t v = 0;
	int stream = cmd == CMD_STREAM;

	switch (c) {
	case OPT_HASH:
		if (!stream)
			break;
		o->hash = 1;
		return 0;
	case OPT_STATE_OUT:
		o->state_out = arg;
		return 0;
	case OPT_STATE_IN:
		o->state_in = arg;
		return 0;
	case OPT_STOP:
		if (num_arg("stop-after-batches", arg, UINT64_MAX, &v))
			return CLI_EXIT_USAGE;
		if (v == 0)
			return cli_usage_error("--stop-after-batches must be at least 1");
		o->stop_after = v;
		return 0;
	case OPT_JSON:
		if (stream)
			break;
		o->json = 1;
		return 0;
	case OPT_TRACE:
		if (stream)
			break;
		o->trace_path = arg;
		return 0;
	case OPT_DROP_CACHE:
		if (stream)
			break;
		o->drop_cache = 1;
		return 0;
	default:
		return cli_usage_error("unknown option");
	}
	return cli_usage_error("this option is not one of '%s'",
			       stream ? "stream" : "bench");
}

/*
 * A mixture: each argument PATH, PATH:WEIGHT or PATH@SAMPLES, the suffix
 * being what follows the last ':' or '@' ("a:b:0.5" is the path "a:b"
 * with weight 0.5).  No suffix means weight 1.
 */
static int parse_streams(int n, char **args, struct cli_opts *o)
{
	if (n > CLI_MAX_STREAMS)
		return cli_usage_error("at most %d datasets in a mixture",
				       CLI_MAX_STREAMS);
	for (int i = 0; i < n; i++) {
		char *colon = strrchr(args[i], ':'), *at = strrchr(args[i], '@');
		char *cut = !colon ? at : !at ? colon : colon > at ? colon : at;
		char *end;
		struct sluice_stream *st = &o->streams[i];

		st->weight = 1;
		st->samples = 0;
		if (cut && cut[1]) {
			if (cut == colon) {
				st->weight = strtod(cut + 1, &end);
				if (*end || !(st->weight >= 0))
					return cli_usage_error("'%s': the weight after ':' must be a number >= 0",
							       args[i]);
			} else {
				errno = 0;
				st->samples = strtoull(cut + 1, &end, 10);
				if (*end || errno || cut[1] == '-' ||
				    st->samples == 0)
					return cli_usage_error("'%s': the samples after '@' must be a count > 0",
							       args[i]);
			}
		} else {
			cut = NULL;
		}
		o->stream_paths[i] = cut ? strndup(args[i],
						   (size_t)(cut - args[i]))
					 : strdup(args[i]);
		o->nstreams = i + 1;
		if (!o->stream_paths[i])
			return cli_error("out of memory");
	}
	return 0;
}

void opts_free(struct cli_opts *o)
{
	for (int i = 0; i < o->nstreams; i++) {
		sluice_dataset_close(o->streams[i].dataset);
		free(o->stream_paths[i]);
	}
	o->nstreams = 0;
}

int opts_parse(int argc, char **argv, enum cli_command cmd,
	       struct cli_opts *o)
{
	int c, r;

	memset(o, 0, sizeof(*o));
	sluice_loader_config_init(&o->cfg);
	o->epochs = 1;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		if (c == 'h' || c == OPT_HELP) {
			cli_command_usage(stdout, cmd);
			return -1;
		}
		if (c == '?' || c == ':')
			return cli_usage_error("bad option '%s'",
					       argv[optind - 1]);
		r = loader_opt(c, optarg, o);
		if (r < 0)
			r = command_opt(c, optarg, cmd, o);
		if (r)
			return r;
	}
	if (cmd == CMD_STREAM && argc - optind > 1) {
		r = parse_streams(argc - optind, argv + optind, o);
		if (r)
			return r;
	} else if (optind != argc - 1) {
		return cli_usage_error("want exactly one PATH (got %d)",
				       argc - optind);
	}
	o->path = argv[optind];
	if (o->cfg.rank >= 0 && o->cfg.world_size < 0)
		o->cfg.world_size = 1;
	if (o->cfg.rank >= 0 && o->cfg.rank >= o->cfg.world_size)
		return cli_usage_error("--rank %d is not below --world-size %d",
				       o->cfg.rank, o->cfg.world_size);
	if (o->state_out && !o->stop_after)
		return cli_usage_error("--state-out needs --stop-after-batches K");
	if (o->hash && o->cfg.device == SLUICE_DEVICE_CUDA)
		return cli_usage_error("--hash reads batches on the host; with --device cuda they live in GPU memory and the public API cannot copy them back (use --device host)");
	/* Hashing reads the batches on the host: auto must not pick cuda. */
	if (o->hash && o->cfg.device == SLUICE_DEVICE_AUTO)
		o->cfg.device = SLUICE_DEVICE_HOST;
	o->progress = isatty(2) && !o->hash;
	o->say_fallbacks = cmd == CMD_STREAM;
	return 0;
}
