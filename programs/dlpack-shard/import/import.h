/*
 * import.h - importers: each reads a source dataset and feeds records to a
 * sluice_writer.  Used by the dlpack-shard CLI.
 */
#ifndef SLUICE_DATASETS_IMPORT_H
#define SLUICE_DATASETS_IMPORT_H

#include <stdint.h>

#include "sluice.h"

struct synth_field {
	struct sluice_field f;
	double compressibility;  /* 0: random bytes .. 1: constant */
};

struct import_options {
	const char *src;              /* path (npy: comma-separated list;
					 tar: list, glob or brace pattern) */
	const char *out_dir;
	struct sluice_writer_config wcfg;
	uint32_t part_index;          /* --part I/N: 0-based I */
	uint32_t part_count;          /* N; 1 when not split */
	/* tar */
	int tar_drop_key;             /* no __key__ field */
	/* synth */
	uint64_t synth_records;
	uint64_t synth_seed;
	struct synth_field synth_fields[SLUICE_MAX_FIELDS];
	int synth_nfields;
	/* progress: called every so often (may be NULL) */
	void (*progress)(void *ctx, const sluice_writer *w, uint64_t done,
			 uint64_t total);
	void *progress_ctx;
};

/* Each returns 0 or a negative code with a message in @err naming the
 * source file (and offset or key where it applies). */
int import_dir(const struct import_options *o,
	       struct sluice_writer_summary *sum, char *err, size_t errlen);
int import_tar(const struct import_options *o,
	       struct sluice_writer_summary *sum, char *err, size_t errlen);
int import_npy(const struct import_options *o,
	       struct sluice_writer_summary *sum, char *err, size_t errlen);
/* Runs $SLUICE_PYTHON (python3) -m sluice.parquet: pyarrow reads. */
int import_parquet(const struct import_options *o,
		   struct sluice_writer_summary *sum, char *err, size_t errlen);
int import_synth(const struct import_options *o,
		 struct sluice_writer_summary *sum, char *err, size_t errlen);

#endif /* SLUICE_DATASETS_IMPORT_H */
