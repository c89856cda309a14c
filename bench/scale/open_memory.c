/*
 * open_memory.c - where a dataset's memory goes at open: after
 * sluice_dataset_open, sluice_loader_open, the first batch and each
 * close, the process's RSS, its peak (VmHWM) and what malloc holds in
 * use (glibc's mallinfo2: small chunks plus mmapped ones).  RSS above
 * the heap in use is memory freed but not given back (the manifest's
 * parse, for one).  Public API only, so it builds against any libsluice.
 *
 *   cc -O2 -Iinclude bench/scale/open_memory.c build/libsluice.a \
 *      $(make -s print-libs) -o open_memory
 *   open_memory PATH
 * Prints one line per stage: stage rss_kib hwm_kib heap_kib.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

/* A /proc/self/status value in KiB, or -1. */
static long status_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0) {
			kib = atol(line + strlen(key));
			break;
		}
	fclose(f);
	return kib;
}

static void stage(const char *name)
{
	struct mallinfo2 m = mallinfo2();

	printf("%s rss_kib=%ld hwm_kib=%ld heap_kib=%zu\n", name,
	       status_kib("VmRSS:"), status_kib("VmHWM:"),
	       (m.uordblks + m.hblkhd) / 1024);
}

int main(int argc, char **argv)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	char msg[512] = "";
	int r;

	if (argc != 2) {
		fprintf(stderr, "usage: open_memory PATH\n");
		return 2;
	}
	stage("start");
	r = sluice_dataset_open(argv[1], &ds);
	if (r) {
		sluice_dataset_error(ds, msg, sizeof(msg));
		fprintf(stderr, "open_memory: %s: %s\n", sluice_strerror(r), msg);
		return 1;
	}
	stage("dataset_open");
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		fprintf(stderr, "open_memory: %s: %s\n", sluice_strerror(r), msg);
		return 1;
	}
	stage("loader_open");
	if (sluice_loader_next(ld, &b) == 0)
		sluice_batch_release(b);
	stage("first_batch");
	sluice_loader_close(ld);
	stage("loader_close");
	sluice_dataset_close(ds);
	stage("dataset_close");
	return 0;
}
