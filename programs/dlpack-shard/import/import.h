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

/* What an importer passed over, by kind (never silently: the CLI prints
 * the counts and the first few paths; --strict makes any an error). */
enum import_skip_kind {
	IMPORT_SKIP_HIDDEN,       /* a name starting with '.' */
	IMPORT_SKIP_OUTSIDE,      /* a symlink out of the source tree */
	IMPORT_SKIP_DANGLING,     /* a symlink to nothing */
	IMPORT_SKIP_LOOP,         /* a folder already on the walk's path */
	IMPORT_SKIP_FIFO,
	IMPORT_SKIP_SOCKET,
	IMPORT_SKIP_DEVICE,
	IMPORT_SKIP_NOT_IN_CLASS, /* a file beside the class folders */
	IMPORT_SKIP_TAR_ENTRY,    /* a tar member that is not a file */
	IMPORT_SKIP_KINDS
};

#define IMPORT_SKIP_SHOWN 3
struct import_skips {
	uint64_t count[IMPORT_SKIP_KINDS];
	uint64_t total;
	char first[IMPORT_SKIP_SHOWN][400]; /* "PATH (kind)" */
};

/* "hidden entry", "symlink out of the tree", ...; @n picks the plural. */
const char *import_skip_name(enum import_skip_kind k, uint64_t n);

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
	/* what is skipped (may be NULL: counted nowhere) */
	struct import_skips *skips;
	int strict;                   /* any skip is an error */
	int follow_symlinks;          /* dir: links out of SRC are followed */
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
