/*
 * test_sim_faults.c - proof that the sim tests catch ordering bugs: each
 * deliberately wrong ordering of gpu/sim_device.h's enum sim_fault (test
 * builds only) makes the consumer of test_sim_loader.c read wrong bytes.
 *
 *   early_release       a released slot's host memory is reused before
 *                       its copy read it (no wait for the copy's event)
 *   no_consumer_wait    the consumer's stream does not wait on the
 *                       slot's ready event
 *   early_reuse         the copy stream does not wait on the consumer's
 *                       release: the mirror is poisoned and reused while
 *                       the consumer's reads are still queued
 *
 * Each case runs in a child process (fork, before any thread), which
 * exits 3 when its consumer saw wrong bytes, 0 when every read was right.
 * A case must fail within a few seeds; the same consumer without the
 * fault must pass, so that the failure is the fault's.  Under
 * SAN=thread a faulty child may instead be stopped by ThreadSanitizer's
 * race report (exit 66), which catches the same bug.
 */
#include <sys/wait.h>

#include "loader_fixture.h"
#include "sim_util.h"

#define N 3000
#define B 100
#define SAW_WRONG_BYTES 3

#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

static const char *const names[] = { "x" };

static int check_x(struct sim_pending *p)
{
	const int32_t *x = p->data[0];

	for (uint32_t r = 0; r < p->n; r++) {
		int32_t want[4];

		fx_x(p->idx[r], want);
		if (memcmp(x + 4 * r, want, sizeof(want))) {
			snprintf(p->why, sizeof(p->why),
				 "row %u (record %llu): x[0] is %08x, want %08x",
				 r, (unsigned long long)p->idx[r],
				 (unsigned)x[4 * r], (unsigned)want[0]);
			return 1;
		}
	}
	return 0;
}

struct fault_case {
	const char *name;
	unsigned fault;
	unsigned kernel_us;     /* the consumer's work before each read */
	const char *delay_us;   /* the device's longest delay */
};

/* In the child: one epoch with @fc's fault (or none); the exit code. */
static int run_child(const struct fault_case *fc, int with_fault,
		     const char *path)
{
	struct sluice_loader_config cfg;
	struct sim_consumer c;
	sluice_dataset *ds;
	sluice_loader *ld;
	int64_t s;

	sim_finished = 1;       /* the parent prints the seed */
	T_OK(setenv("SLUICE_SIM_DELAY_US", fc->delay_us, 1) ? -1 : 0);
	sim_test_faults = with_fault ? fc->fault : 0;
	T_OK(sluice_dataset_open(path, &ds));
	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.seed = sim_seed;
	cfg.prefetch_depth = 3;
	cfg.decode_threads = 2;
	/* copies from the host batch, which these faults are about */
	cfg.device_gather = SLUICE_DEVICE_GATHER_OFF;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	s = sim_stream_create(sim_seed * 5 + 1, 300);
	T_ASSERT(s != 0);
	memset(&c, 0, sizeof(c));
	c.names = names;
	c.ntensors = 1;
	c.check = check_x;
	c.stream = s;
	c.kernel_us = fc->kernel_us;
	c.rng = sim_seed;
	T_EQ(sim_consume(ld, &c, 0), SLUICE_EOF);
	sim_finish(&c);
	sluice_loader_close(ld);
	sim_stream_destroy(s);
	sluice_dataset_close(ds);
	printf("%s%s: %llu of %llu batches read wrong bytes%s%s\n",
	       fc->name, with_fault ? "" : " (not injected)",
	       (unsigned long long)c.bad, (unsigned long long)c.batches,
	       c.bad ? "; first: " : "", c.first_bad);
	return c.bad ? SAW_WRONG_BYTES : 0;
}

static int run(const struct fault_case *fc, int with_fault, const char *path)
{
	int status;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	T_ASSERT(pid >= 0);
	if (pid == 0) {
		int code = run_child(fc, with_fault, path);

		fflush(stdout);
		_exit(code);
	}
	T_EQ(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status))
		T_FAIL_AT("%s: the child died of signal %d", fc->name,
			  WTERMSIG(status));
	return WEXITSTATUS(status);
}

int main(void)
{
	static const struct fault_case cases[] = {
		{ "early_release", SIM_FAULT_EARLY_RELEASE, 0, "3000" },
		{ "no_consumer_wait", SIM_FAULT_NO_CONSUMER_WAIT, 0, "1000" },
		{ "early_reuse", SIM_FAULT_EARLY_REUSE, 2000, "300" },
	};
	char *dir = fx_tmpdir();
	uint64_t seed = sim_first_seed();
	unsigned rounds = sim_rounds(1);
	char path[600];

	snprintf(path, sizeof(path), "%s/d", dir);
	fx_write(path, N, 4096, 0, 1000);
	for (unsigned round = 0; round < rounds; round++)
		for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
			const struct fault_case *fc = &cases[k];
			int code, tries;

			sim_use_seed(seed + round);
			code = run(fc, 0, path);
			if (code != 0)
				T_FAIL_AT("%s: without the fault the consumer "
					  "fails too (exit %d)", fc->name, code);
			/* A race may go the right way for a whole epoch; a
			 * few seeds make that vanishingly rare. */
			for (tries = 0; tries < 5; tries++) {
				sim_use_seed(seed + round + 1000u * (tries + 1));
				code = run(fc, 1, path);
				if (code == SAW_WRONG_BYTES ||
				    (TSAN && code == 66))
					break;
				if (code != 0)
					T_FAIL_AT("%s: the child failed (exit "
						  "%d), not by wrong bytes",
						  fc->name, code);
			}
			if (tries == 5)
				T_FAIL_AT("%s: 5 seeds, and no read saw wrong "
					  "bytes: the sim tests would miss "
					  "this bug", fc->name);
			printf("%s: caught (seed %llu%s)\n", fc->name,
			       (unsigned long long)sim_seed,
			       code == 66 ? ", by ThreadSanitizer" : "");
		}
	fx_rmrf(dir);
	free(dir);
	sim_done();
	return 0;
}
