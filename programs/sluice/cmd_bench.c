/*
 * cmd_bench.c - `sluice bench`: run the loader for E epochs (with an
 * optional simulated compute step), then measure the disk and CPU limits
 * on the same shard files, and report what was achieved against the
 * smallest limit.  The loader runs first so the probes cannot warm the
 * page cache for it.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sluice_cli.h"

static uint32_t online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : (uint32_t)n;
}

static void maybe_drop_cache(const struct cli_opts *o, const char *when)
{
	int r;

	if (!o->drop_cache)
		return;
	r = drop_page_cache();
	if (r)
		fprintf(stderr, CLI_NAME ": could not drop the page cache %s: %s (needs root)\n",
			when, strerror(-r));
}

/* How the loader opened its shards, for the disk probe: O_DIRECT (1),
 * buffered (0), or auto's choice per file (-1). */
static int probe_direct(const struct cli_opts *o, const struct sluice_stats *st)
{
	if (st->direct_io)
		return 1;
	return o->cfg.direct_io == SLUICE_DIRECT_IO_OFF ? 0
	       : o->cfg.direct_io == SLUICE_DIRECT_IO_ON ? 1 : -1;
}

int cmd_bench(int argc, char **argv)
{
	static char disk_err[512], cpu_err[512];
	struct cli_opts o;
	struct run_result res;
	struct shard_set shards;
	struct disk_limit disk;
	struct cpu_limit cpu;
	struct trace *trace = NULL;
	struct bench_report rep;
	sluice_dataset *ds = NULL;
	int r, rc;

	rc = opts_parse(argc, argv, CMD_BENCH, &o);
	if (rc)
		return rc < 0 ? 0 : rc;
	o.measure_h2d = 1;
	r = sluice_dataset_open(o.path, &ds);
	if (r) {
		rc = dataset_error_exit(ds, r);
		sluice_dataset_close(ds);
		return rc;
	}
	memset(&rep, 0, sizeof(rep));
	shards_summarize(ds, &shards);
	if (o.trace_path) {
		r = trace_open(o.trace_path, clock_ns(), &trace);
		if (r) {
			sluice_dataset_close(ds);
			return cli_error("%s: %s", o.trace_path, strerror(-r));
		}
	}

	maybe_drop_cache(&o, "before the run");
	rc = run_loader(ds, &o, trace, NULL, NULL, &res);
	rep.trace_events = trace_events(trace);
	r = trace_close(trace);
	if (r && !rc)
		rc = cli_error("%s: %s", o.trace_path, strerror(-r));
	if (rc)
		goto out;

	maybe_drop_cache(&o, "before the disk probe");
	/* The loader's own way of reading (O_DIRECT or the page cache,
	 * blocks in order or records at random), from as many threads as
	 * there are CPUs. */
	if (limit_disk(&shards, online_cpus(), probe_direct(&o, &res.stats),
		       disk_probe_piece(&res.stats, &shards), &disk, disk_err,
		       sizeof(disk_err)) == 0)
		rep.disk = &disk;
	/* The machine's limit, on every CPU whatever --decode-threads
	 * says: the decompressor on all cores; checksums over bytes in the
	 * cache where the loader's reads were buffered. */
	if (limit_cpu(&shards, online_cpus(), !res.stats.direct_io, &cpu,
		      cpu_err, sizeof(cpu_err)) == 0)
		rep.cpu = &cpu;
	rep.o = &o;
	rep.ds = ds;
	rep.shards = &shards;
	rep.run = &res;
	rep.disk_error = disk_err[0] ? disk_err : NULL;
	rep.cpu_error = cpu_err[0] ? cpu_err : NULL;
	rep.online_cpus = online_cpus();
	if (o.json)
		report_json(stdout, &rep);
	else
		report_text(stdout, &rep);
	if (fflush(stdout))
		rc = cli_error("write error on stdout");
out:
	sluice_dataset_close(ds);
	return rc;
}
