/*
 * epoch_scale.c - what a dataset's record count costs the loader: open
 * time, first-batch time, the stall at an epoch boundary and at
 * set_epoch, and memory (RSS), for one shuffle mode.  Uses the public API
 * only, so the same file builds against any libsluice (to compare
 * versions side by side).
 *
 *   make bench-scale
 *   build/epoch_scale PATH none|block|window|full [BATCH [STEP_MS]]
 *
 * The boundary is reached by restoring a state a few batches before the
 * end of epoch 0 (reading the whole epoch is not what is measured); each
 * of those batches is held STEP_MS (a training step, default 0) before
 * the next is asked for, so what the boundary costs beyond what prefetch
 * hides is what the first batch of epoch 1 waits.
 * Prints one line: times in ms, memory in MiB (VmRSS now, VmHWM peak).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* VmRSS or VmHWM from /proc/self/status, in MiB. */
static double status_mib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	double kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0) {
			kib = atof(line + strlen(key) + 1);
			break;
		}
	fclose(f);
	return kib / 1024;
}

static int die(const char *what, int r, const sluice_loader *ld)
{
	char msg[512] = "";

	if (ld)
		sluice_loader_error(ld, msg, sizeof(msg));
	fprintf(stderr, "epoch_scale: %s: %s %s\n", what, sluice_strerror(r),
		msg);
	return 1;
}

static double step_ms;

/* One next() (timed, in ms; -1 at the end of an epoch), then a training
 * step of step_ms, then release. */
static double timed_next(sluice_loader *ld, int *rc)
{
	sluice_batch *b;
	double t = now_ms();

	*rc = sluice_loader_next(ld, &b);
	t = now_ms() - t;
	if (*rc == 0) {
		struct timespec ts = { (time_t)(step_ms / 1e3),
				       (long)(fmod(step_ms, 1e3) * 1e6) };

		nanosleep(&ts, NULL);
		sluice_batch_release(b);
	}
	return *rc == 0 ? t : -1;
}

int main(int argc, char **argv)
{
	static const char *const modes[] = {"none", "block", "window", "full"};
	struct sluice_loader_config cfg;
	struct sluice_state st;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	double t0, t_ds, t_open, t_first, t_set, t_after_set;
	double before = 0, boundary, rss_first;
	int shuffle = -1, rc;
	uint64_t nb;

	if (argc < 3) {
		fprintf(stderr, "usage: epoch_scale PATH none|block|window|full [BATCH]\n");
		return 2;
	}
	for (int i = 0; i < 4; i++)
		if (strcmp(argv[2], modes[i]) == 0)
			shuffle = i;
	if (shuffle < 0)
		return 2;
	sluice_loader_config_init(&cfg);
	cfg.shuffle = shuffle;
	cfg.batch_size = argc > 3 ? (uint32_t)atoi(argv[3]) : 256;
	step_ms = argc > 4 ? atof(argv[4]) : 0;
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.rank = 0;
	cfg.world_size = 1;

	t0 = now_ms();
	rc = sluice_dataset_open(argv[1], &ds);
	if (rc)
		return die("dataset open", rc, NULL);
	t_ds = now_ms() - t0;
	t0 = now_ms();
	rc = sluice_loader_open(ds, &cfg, &ld);
	if (rc)
		return die("loader open", rc, ld);
	t_open = now_ms() - t0;
	t_first = timed_next(ld, &rc);
	if (rc)
		return die("first batch", rc, ld);
	rss_first = status_mib("VmRSS:");

	/* Jump to 4 batches before the end of epoch 0, take them, then the
	 * first batch of epoch 1: the boundary. */
	nb = sluice_loader_batches(ld);
	rc = sluice_loader_state_get(ld, &st);
	if (rc)
		return die("state_get", rc, ld);
	st.batches_consumed = nb > 4 ? nb - 4 : 0;
	rc = sluice_loader_state_set(ld, &st);
	if (rc)
		return die("state_set", rc, ld);
	for (;;) {
		double t = timed_next(ld, &rc);

		if (rc == SLUICE_EOF)
			break;
		if (rc)
			return die("next", rc, ld);
		before = t > before ? t : before;
	}
	boundary = timed_next(ld, &rc);
	if (rc)
		return die("first batch of epoch 1", rc, ld);

	/* An explicit set_epoch, and the first batch after it. */
	t0 = now_ms();
	rc = sluice_loader_set_epoch(ld, 7);
	t_set = now_ms() - t0;
	if (rc)
		return die("set_epoch", rc, ld);
	t_after_set = timed_next(ld, &rc);
	if (rc)
		return die("after set_epoch", rc, ld);

	printf("%s records=%llu shuffle=%s batch=%u step_ms=%g "
	       "dataset_open_ms=%.2f "
	       "loader_open_ms=%.2f first_batch_ms=%.2f "
	       "last_batches_max_ms=%.3f epoch_boundary_ms=%.3f "
	       "set_epoch_ms=%.3f after_set_epoch_ms=%.3f "
	       "rss_mib=%.1f peak_rss_mib=%.1f\n",
	       argv[1], (unsigned long long)sluice_dataset_records(ds),
	       modes[shuffle], cfg.batch_size, step_ms, t_ds, t_open, t_first,
	       before,
	       boundary, t_set, t_after_set, rss_first,
	       status_mib("VmHWM:"));
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	return 0;
}
