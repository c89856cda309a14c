/*
 * budget_probe.c - one loader run for bench/budget_sweep.py: opens PATH
 * with the library's defaults and the few settings given, reads every
 * epoch on the host, checks that each epoch delivers every record exactly
 * once, and prints one JSON line with what the budget took.
 *
 *   budget_probe PATH SHUFFLE BATCH MEMORY CACHE EPOCHS HOLD
 *
 * SHUFFLE: none|block|window|full; MEMORY, CACHE: bytes (0: default);
 * HOLD 1: the consumer keeps each batch until the next one arrives (a
 * training loop that drops its batch when it takes the next).
 * Exit 0 with {"ok":1,...} when the run finished (the "bad" string is
 * empty when every epoch was exact), 3 with {"ok":0,"at":"open"|"next",
 * "rc":-N,"error":"..."} when the loader refused, 2 on usage.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "probe_util.h"

static int refused(const sluice_loader *ld, const char *at, int rc)
{
	char msg[2048] = "";

	if (ld)
		sluice_loader_error(ld, msg, sizeof(msg));
	printf("{\"ok\":0,\"at\":\"%s\",\"rc\":%d,\"error\":\"", at, rc);
	json_str(msg);
	printf("\"}\n");
	return 3;
}

int main(int argc, char **argv)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *held = NULL;
	uint64_t n, epochs, epoch = 0, got = 0, counts[64] = { 0 };
	uint8_t *seen;
	char bad[256] = "";
	int hold, r;

	if (argc != 8) {
		fprintf(stderr, "usage: budget_probe PATH SHUFFLE BATCH MEMORY CACHE EPOCHS HOLD\n");
		return 2;
	}
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	if (parse_shuffle(argv[2], &cfg.shuffle))
		return 2;
	cfg.batch_size = (uint32_t)strtoul(argv[3], NULL, 10);
	cfg.memory_bytes = strtoull(argv[4], NULL, 10);
	cfg.cache_bytes = strtoull(argv[5], NULL, 10);
	epochs = strtoull(argv[6], NULL, 10);
	hold = atoi(argv[7]);
	if (epochs < 1 || epochs > 64)
		return 2;
	cfg.epochs = epochs;

	r = sluice_dataset_open(argv[1], &ds);
	if (r) {
		fprintf(stderr, "budget_probe: %s: %s\n", argv[1],
			sluice_strerror(r));
		return 1;
	}
	n = sluice_dataset_records(ds);
	seen = calloc(n ? n : 1, 1);
	if (!seen)
		return 1;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		r = refused(ld, "open", r);
		goto out;
	}
	while (epoch < epochs) {
		sluice_batch *b;
		const uint64_t *idx;

		r = sluice_loader_next(ld, &b);
		if (r == SLUICE_EOF) {
			if (got != n && !bad[0])
				snprintf(bad, sizeof(bad),
					 "epoch %" PRIu64 ": %" PRIu64
					 " of %" PRIu64 " records", epoch, got, n);
			counts[epoch++] = got;
			got = 0;
			memset(seen, 0, n);
			continue;
		}
		if (r < 0) {
			sluice_batch_release(held);
			held = NULL;
			r = refused(ld, "next", r);
			goto out;
		}
		idx = sluice_batch_indices(b);
		for (uint32_t k = 0; k < sluice_batch_size(b); k++) {
			if (idx[k] >= n || seen[idx[k]]) {
				if (!bad[0])
					snprintf(bad, sizeof(bad),
						 "epoch %" PRIu64 ": record %"
						 PRIu64 " %s", epoch, idx[k],
						 idx[k] >= n ? "out of range"
							     : "twice");
				continue;
			}
			seen[idx[k]] = 1;
			got++;
		}
		sluice_batch_release(held);
		held = NULL;
		if (hold)
			held = b;
		else
			sluice_batch_release(b);
	}
	sluice_batch_release(held);
	sluice_loader_stats(ld, &st);
	printf("{\"ok\":1,\"memory_bytes\":%" PRIu64 ",\"io_memory_bytes\":%"
	       PRIu64 ",\"over_budget\":%" PRIu64 ",\"records\":%" PRIu64
	       ",\"epoch_records\":[",
	       st.memory_bytes, st.io_memory_bytes, st.batches_over_budget, n);
	for (uint64_t e = 0; e < epochs; e++)
		printf("%s%" PRIu64, e ? "," : "", counts[e]);
	printf("],\"fallbacks\":\"");
	json_str(st.fallbacks);
	printf("\",\"bad\":\"");
	json_str(bad);
	printf("\"}\n");
	r = 0;
out:
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	free(seen);
	return r;
}
