/*
 * manifest.h - dataset.json: written last and atomically by the writer
 * and merge; read (as untrusted input) by dataset_load and verify.
 */
#ifndef SLUICE_DATASETS_MANIFEST_H
#define SLUICE_DATASETS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "shard.h"

#define MANIFEST_FILE_MAX 256
#define MANIFEST_MAX_BYTES (64u << 20)
#define MANIFEST_MAX_CLASSES (1u << 20)

struct manifest_shard {
	char file[MANIFEST_FILE_MAX];  /* a plain name inside the dataset */
	uint64_t records;
	uint64_t blocks;
	uint64_t bytes;                /* file size */
	struct shard_identity id;      /* unbound: a v1 shard */
};

struct manifest {
	int bound;                     /* 0: a v1 manifest, no dataset id */
	uint8_t dataset_id[DLS_DATASET_ID_LEN]; /* this dataset's (merge:
						   its own, not its parts') */
	uint64_t records;
	uint64_t raw_bytes;
	uint64_t stored_bytes;
	struct shard_schema schema;
	struct dataset_classes classes;  /* "classes"; older manifests and
					    readers: none, ignored */
	uint32_t nshards;
	struct manifest_shard *shards; /* owned */
};

/* Write @dir/dataset.json via a temporary file, fsync, rename and an
 * fsync of @dir.  @return: 0 or -errno (message in @err). */
int manifest_write(const char *dir, const struct manifest *m, char *err,
		   size_t errlen);

/* Parse @len bytes of JSON text (untrusted).  On failure @err gets
 * "what" (with a byte offset for syntax errors) and the return is
 * -SLUICE_ECORRUPT or -ENOMEM; @m is left empty. */
int manifest_parse(const char *text, size_t len, struct manifest *m,
		   char *err, size_t errlen);

/* Read and parse @dir/dataset.json; messages name the file. */
int manifest_read(const char *dir, struct manifest *m, char *err,
		  size_t errlen);

void manifest_free(struct manifest *m);

/* Copy @n class names of field @field into @c (replacing any).
 * @return: 0, -EINVAL (a name too long or @n too large), -ENOMEM. */
int dataset_classes_set(struct dataset_classes *c, const char *field,
			const char *const *names, uint32_t n);
void dataset_classes_free(struct dataset_classes *c);

#endif /* SLUICE_DATASETS_MANIFEST_H */
