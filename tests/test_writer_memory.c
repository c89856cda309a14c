/*
 * test_writer_memory.c - the writer's memory does not grow with records
 * per shard (issue 24: it held every record checksum of the shard, 412 MB
 * for 50 million records).  8 Mi int64 records in shards of 6 and 2 Mi:
 * the peak RSS may grow by less than 24 MiB while they are written (this
 * writer: 9 MiB, its blocks and 512 KiB of checksums; the old one's
 * checksum array alone grew to 64 MiB, 48 MiB of it written, 33 MiB
 * measured for half as many records), and the record checksums, which
 * went through the spill file, are what a reader recomputes
 * (dataset_verify checks the section's checksum and every record's).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "format_util.h"
#include "sluice.h"
#include "sluice_tools.h"
#include "t.h"

#define NREC (8u << 20)
#define BATCH (64u << 10)
#define PER_SHARD (6u << 20)

static long peak_kib(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

static void on_problem(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "verify: %s\n", line);
}

int main(void)
{
	const char *root = tu_scratch("writer-memory");
	struct sluice_writer_config cfg;
	struct sluice_writer_summary sum = { .size = sizeof(sum) };
	struct sluice_field f;
	struct sluice_column col;
	sluice_writer *w;
	sluice_dataset *ds;
	char out[1024], err[512];
	int64_t *v;
	long before, grew;

	TU_FMT(out, "%s/ds", root);
	v = malloc(BATCH * sizeof(*v));
	T_ASSERT(v != NULL);
	tu_field(&f, "x", "int64", 0, 0, 0);
	sluice_writer_config_init(&cfg);
	cfg.compression_level = 0;
	cfg.threads = 1;
	cfg.shard_size = 0;
	cfg.records_per_shard = PER_SHARD;
	if (sluice_writer_open(out, &f, 1, &cfg, &w) != 0) {
		sluice_writer_error(w, err, sizeof(err));
		T_FAIL_AT("open: %s", err);
	}
	/* Fault in the batch buffer and the writer's first blocks before
	 * the baseline: what is measured is what grows with records. */
	memset(v, 0, BATCH * sizeof(*v));
	before = peak_kib();
	for (uint64_t i = 0; i < NREC; i += BATCH) {
		for (uint64_t k = 0; k < BATCH; k++)
			v[k] = (int64_t)((i + k) * 2654435761u);
		memset(&col, 0, sizeof(col));
		col.values = v;
		col.values_len = BATCH * sizeof(*v);
		if (sluice_writer_add_columns(w, BATCH, &col, 1) != 0) {
			sluice_writer_error(w, err, sizeof(err));
			T_FAIL_AT("add: %s", err);
		}
	}
	T_OK(sluice_writer_close(w, &sum));
	grew = peak_kib() - before;
	printf("%u records, %llu shards: peak RSS grew by %ld KiB while "
	       "writing\n", NREC, (unsigned long long)sum.shards, grew);
	T_EQ(sum.records, NREC);
	T_EQ(sum.shards, 2);
	T_LT(grew, 24 * 1024);

	/* The checksums came back from the spill file in order. */
	T_EQ(dataset_verify(out, on_problem, NULL), 0);
	T_OK(sluice_dataset_open(out, &ds));
	T_EQ(sluice_dataset_records(ds), NREC);
	sluice_dataset_close(ds);
	free(v);
	printf("ok\n");
	return 0;
}
