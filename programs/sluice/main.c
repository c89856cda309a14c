/*
 * main.c - `sluice`: stream a dataset through the loader (stream)
 * or measure it against the machine's limits (bench).
 */
#include <stdio.h>

#include "sluice_cli.h"

static const char stream_usage[] =
"  stream PATH [loader options] [--hash] [--state-out FILE\n"
"         --stop-after-batches K] [--state-in FILE]\n"
"  stream PATH[:WEIGHT|@SAMPLES] PATH[:WEIGHT|@SAMPLES]... [options]\n"
"      a mixture of datasets with the same fields: each gives WEIGHT's\n"
"      share of the samples the weighted ones hold together (1 when not\n"
"      given), or exactly SAMPLES per epoch; indices count the datasets'\n"
"      records end to end\n"
"      --hash           'EPOCH INDEX FIELD XXH64' per delivered record and\n"
"                       field, in delivery order (host batches only)\n"
"      --state-out FILE --stop-after-batches K   stop after K batches and\n"
"                       save the position; --state-in FILE resumes there\n"
"      without --hash: one summary line (records/s, GB/s delivered);\n"
"      fallbacks (no GPU for --device auto, ...) once on stderr\n";

static const char bench_usage[] =
"  bench PATH [loader options] [--compute-ms X] [--json] [--trace FILE]\n"
"         [--drop-cache]\n"
"      runs the loader, then measures the disk, decompression and copy\n"
"      limits on the same shard files and names the binding one; with\n"
"      --device cuda also the PCIe limit on the loader's own arena.\n"
"      The disk is read the loader's way: in order, or, where it read\n"
"      record ranges (--shuffle full), pieces of their size at random\n"
"      places; O_DIRECT or the page cache as it chose\n"
"      --json           the report as one JSON object\n"
"      --trace FILE     a Chrome trace (chrome://tracing, Perfetto)\n"
"      --drop-cache     drop the page cache before the run and the\n"
"                       disk probe (root)\n";

static const char loader_options[] =
"Loader options:\n"
"  --batch-size B       records per batch (256)\n"
"  --shuffle none|block|window|full  (window)\n"
"  --window W           blocks per shuffle window (16)\n"
"  --seed S             (0)\n"
"  --epochs E           run until the end of epoch E-1 (1)\n"
"  --rank R --world-size W   this process's part ($RANK, $WORLD_SIZE)\n"
"  --prefetch N         batch slots (4)\n"
"  --decode-threads N   (0: the CPUs this process may use, shared among\n"
"                       $LOCAL_WORLD_SIZE ranks, at most 32)\n"
"  --queue-depth N      io_uring entries (64)\n"
"  --device host|cuda|auto   (auto: the GPU when one is usable, else host\n"
"                       batches, saying why once)\n"
"  --pad L              variable fields padded to [B, L] + F.lengths\n"
"  --drop-last          drop a short last batch\n"
"  --no-verify          skip the per-block (and per-record) XXH3 check\n"
"  --on-error fail|skip (fail)\n"
"  --direct on|off|auto O_DIRECT (auto: buffered for shards the page\n"
"                       cache already holds, O_DIRECT for the others)\n"
"  --range-reads auto|on|off  read records' byte ranges (zstd: their\n"
"                       frames), not their blocks (auto: with --shuffle\n"
"                       full; needs format v3 shards unless --no-verify,\n"
"                       v4 for zstd)\n"
"  --device-gather auto|on|off  upload decoded blocks to the GPU once and\n"
"                       gather batches there (auto: fixed-shape data on a\n"
"                       GPU, zstd unless its blocks go whole into batches;\n"
"                       on: also on the host as a memcpy, for tests)\n"
"  --sqpoll             IORING_SETUP_SQPOLL\n"
"  --cache-bytes N      decoded-block cache (0: automatic)\n"
"  --memory N           memory budget: io buffers and batches, K/M/G\n"
"                       (0: what the dataset needs, at most an eighth\n"
"                       of RAM or of the cgroup limit, shared among\n"
"                       $LOCAL_WORLD_SIZE ranks; given, what batches\n"
"                       do not want caches blocks: a dataset that fits\n"
"                       is read once)\n"
"  --compute-ms X       a training step of X ms per batch before releasing\n"
"                       it: a kernel on the GPU (cuda), a busy loop (host)\n"
"  --plain-reads        no io_uring registered buffers (forced fallback)\n"
"  --pageable           no cudaHostRegister: pageable copies (fallback)\n"
"  --whole-block-checks checksums once each block is whole, not piece by\n"
"                       piece as it lands (fallback, for A/B runs)\n"
"  --host-checks        blocks uploaded for gathers checksummed on the CPU,\n"
"                       not on the GPU (fallback, for A/B runs)\n"
"  --read-delay-us N    every read starts N us after it is submitted: a\n"
"                       slow device, so that GB/s x latency shows the\n"
"                       bytes the loader keeps in flight (diagnostic)\n";

static const char footer[] =
"\n"
"PATH is a dataset directory (made by `dlpack-shard convert`), a shard\n"
"file, a comma-separated list of shards or a glob.  Exit status: 0 ok,\n"
"1 error, 2 usage error.\n";

void cli_usage(FILE *f)
{
	fputs("Usage: " CLI_NAME " COMMAND PATH [options]\n\n", f);
	fputs(stream_usage, f);
	fputs(bench_usage, f);
	fputs("\n", f);
	fputs(loader_options, f);
	fputs(footer, f);
	fputs("'" CLI_NAME " COMMAND --help' shows one command's options.\n", f);
}

void cli_command_usage(FILE *f, enum cli_command cmd)
{
	fprintf(f, "Usage: " CLI_NAME " %s PATH [options]\n\n",
		cmd == CMD_STREAM ? "stream" : "bench");
	fputs(cmd == CMD_STREAM ? stream_usage : bench_usage, f);
	fputs("\n", f);
	fputs(loader_options, f);
	fputs(footer, f);
}

void busy_wait_ns(uint64_t ns)
{
	uint64_t end = clock_ns() + ns;

	while (clock_ns() < end)
		;
}

int loader_error_exit(const sluice_loader *ld, int code)
{
	char msg[1024] = "";

	if (ld)
		sluice_loader_error(ld, msg, sizeof(msg));
	return cli_error_code(msg, code);
}

int dataset_error_exit(const sluice_dataset *ds, int code)
{
	char msg[1024] = "";

	if (ds)
		sluice_dataset_error(ds, msg, sizeof(msg));
	return cli_error_code(msg, code);
}

int main(int argc, char **argv)
{
	static const struct cli_subcommand commands[] = {
		{ "stream", cmd_stream }, { "bench", cmd_bench },
	};
	static const struct cli_program program = {
		CLI_NAME, cli_usage, commands,
		sizeof(commands) / sizeof(commands[0]),
	};

	return cli_main(&program, argc, argv);
}
