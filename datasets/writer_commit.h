/*
 * writer_commit.h - the last step of a write: one writer's shards, all
 * written under temporary names with uncommitted headers, are committed
 * (each header gets the shard count), synced and renamed; or, when the
 * write failed, removed.  datasets/-internal (writer.c).
 */
#ifndef SLUICE_DATASETS_WRITER_COMMIT_H
#define SLUICE_DATASETS_WRITER_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"

#define SHARD_PATH_CAP 4400

/* Where one writer's shards live and how they are named:
 * DIR/PREFIX-00000.dls, temporarily DIR/.PREFIX-00000.dls.TAG.tmp. */
struct shard_names {
	const char *dir;        /* at most SHARD_PATH_CAP - 400 bytes */
	const char *prefix;     /* a plain name, under 128 bytes */
	const char *tag;        /* unique to the writer: 16 hex digits */
};

/* Shard @k's final (@tmp 0) or temporary path.  @return: 0 or
 * -ENAMETOOLONG. */
int shard_names_path(const struct shard_names *n, uint32_t k, int tmp,
		     char *buf, size_t cap);

/*
 * shards_commit - commit the @m->nshards shards written under temporary
 * names: each header gets the shard count and its checksum (recorded in
 * @m->shards[k].id.checksum), all are synced, then renamed in order.
 * *@renamed counts the shards under their final names, also on failure.
 * @return: 0 or -errno, with "PATH: what" in @err.
 */
int shards_commit(const struct shard_names *n, struct manifest *m,
		  uint32_t *renamed, char *err, size_t errlen);

/* Remove shards 0 .. @count-1: final names below @renamed, temporary
 * ones from there on. */
void shards_remove(const struct shard_names *n, uint32_t count,
		   uint32_t renamed);

#endif /* SLUICE_DATASETS_WRITER_COMMIT_H */
