/*
 * sluice_main.c - `sluice`: stream a dataset through the loader (stream)
 * or measure it against the machine's limits (bench).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sluice_cli.h"

void cli_usage(FILE *f)
{
	fputs(
"Usage: " CLI_NAME " COMMAND PATH [options]\n"
"\n"
"  stream PATH [loader options] [--hash] [--state-out FILE\n"
"         --stop-after-batches K] [--state-in FILE]\n"
"      --hash           'EPOCH INDEX FIELD XXH64' per delivered record and\n"
"                       field, in delivery order (host batches only)\n"
"      without --hash: one summary line\n"
"  bench PATH [loader options] [--compute-ms X] [--json] [--trace FILE]\n"
"         [--drop-cache]\n"
"      runs the loader, then measures the disk, decompression and copy\n"
"      limits on the same shard files and names the binding one\n"
"\n"
"Loader options:\n"
"  --batch-size B       records per batch (256)\n"
"  --shuffle none|block|window|full  (window)\n"
"  --window W           blocks per shuffle window (16)\n"
"  --seed S             (0)\n"
"  --epochs E           run until the end of epoch E-1 (1)\n"
"  --rank R --world-size W   this process's part ($RANK, $WORLD_SIZE)\n"
"  --prefetch N         batch slots (4)\n"
"  --decode-threads N   (0: online CPUs, at most 8)\n"
"  --queue-depth N      io_uring entries (64)\n"
"  --device host|cuda|auto   (auto)\n"
"  --pad L              variable fields padded to [B, L] + F.lengths\n"
"  --drop-last          drop a short last batch\n"
"  --no-verify          skip the per-block XXH3 check\n"
"  --on-error fail|skip (fail)\n"
"  --direct on|off|auto O_DIRECT (auto: buffered for shards the page\n"
"                       cache already holds, O_DIRECT for the others)\n"
"  --sqpoll             IORING_SETUP_SQPOLL\n"
"  --cache-bytes N      decoded-block cache (0: automatic)\n"
"  --compute-ms X       busy-wait X ms per batch before releasing it\n"
"\n"
"PATH is a dataset directory, a shard file, a comma-separated list of\n"
"shards or a glob.  Exit status: 0 ok, 1 error, 2 usage error.\n",
	      f);
}

uint64_t clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void busy_wait_ns(uint64_t ns)
{
	uint64_t end = clock_ns() + ns;

	while (clock_ns() < end)
		;
}

int cli_error(const char *fmt, ...)
{
	va_list ap;

	fputs(CLI_NAME ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return CLI_EXIT_ERROR;
}

int cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs(CLI_NAME ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fputs("Run '" CLI_NAME " --help' for usage.\n", stderr);
	return CLI_EXIT_USAGE;
}

int loader_error_exit(const sluice_loader *ld, int code)
{
	char msg[1024] = "";

	if (ld)
		sluice_loader_error(ld, msg, sizeof(msg));
	if (!msg[0])
		snprintf(msg, sizeof(msg), "%s", sluice_strerror(code));
	return cli_error("%s", msg);
}

int dataset_error_exit(const sluice_dataset *ds, int code)
{
	char msg[1024] = "";

	if (ds)
		sluice_dataset_error(ds, msg, sizeof(msg));
	if (!msg[0])
		snprintf(msg, sizeof(msg), "%s", sluice_strerror(code));
	return cli_error("%s", msg);
}

int main(int argc, char **argv)
{
	const char *cmd;

	if (argc < 2) {
		cli_usage(stderr);
		return CLI_EXIT_USAGE;
	}
	cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
	    strcmp(cmd, "help") == 0) {
		cli_usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0) {
		printf(CLI_NAME " %d.%d.%d\n", SLUICE_VERSION_MAJOR,
		       SLUICE_VERSION_MINOR, SLUICE_VERSION_PATCH);
		return 0;
	}
	if (strcmp(cmd, "stream") == 0)
		return cmd_stream(argc - 1, argv + 1);
	if (strcmp(cmd, "bench") == 0)
		return cmd_bench(argc - 1, argv + 1);
	return cli_usage_error("unknown command '%s'", cmd);
}
