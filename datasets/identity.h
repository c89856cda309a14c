/*
 * identity.h - binding shards to their dataset (format v2): dataset ids,
 * and the checks that refuse a duplicated, swapped, foreign, missing or
 * uncommitted shard, whether the shards come from dataset.json or from a
 * list or glob.  datasets/-internal.
 */
#ifndef SLUICE_DATASETS_IDENTITY_H
#define SLUICE_DATASETS_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "shard.h"

#define DATASET_ID_HEX_LEN (2 * DLS_DATASET_ID_LEN)

/* A fresh random dataset id (getrandom).  @return: 0 or -errno. */
int dataset_id_new(uint8_t id[DLS_DATASET_ID_LEN]);

/* Lower-case hex, NUL-terminated, into @out (DATASET_ID_HEX_LEN + 1). */
void dataset_id_hex(const uint8_t id[DLS_DATASET_ID_LEN], char *out);

/* Parse exactly DATASET_ID_HEX_LEN hex digits.  @return: 0 or -1. */
int dataset_id_parse(const char *hex, uint8_t id[DLS_DATASET_ID_LEN]);

/*
 * identity_check_sequence - shards given by a list or glob, in order:
 * each v2 dataset's shards must appear as one run, 0 .. count-1, once
 * each.  v1 shards are not checked (they carry no identity).
 * @paths[i] NULL: shard i could not be opened; it is skipped.
 * Calls @report once per problem ("FILE: what").
 * @return: the number of problems.
 */
long identity_check_sequence(const char *const *paths,
			     const struct shard_identity *ids, size_t n,
			     verify_report_fn report, void *ctx);

/*
 * identity_check_manifest - shard @i of @m (read from @mpath, named in
 * messages) was opened as @paths[i] (NULL:
 * not opened, skipped) and says it is @ids[i]: each must be the shard
 * dataset.json recorded under its name (dataset id, index, content
 * checksum), and no shard or file may be listed twice.
 * @return: the number of problems (each reported as for the sequence).
 */
long identity_check_manifest(const char *mpath, const struct manifest *m,
			     const char *const *paths,
			     const struct shard_identity *ids,
			     verify_report_fn report, void *ctx);

/* identity_check_duplicates - the part of identity_check_manifest that
 * needs no shard: no file and no (dataset id, index) listed twice. */
long identity_check_duplicates(const char *mpath, const struct manifest *m,
			       verify_report_fn report, void *ctx);

#endif /* SLUICE_DATASETS_IDENTITY_H */
