/*
 * verify_dups.h - records duplicated across the datasets of a list or
 * glob of shards: a retried task's two attempts, or a killed run's part
 * beside its rerun's, each a complete and valid dataset of its own, so
 * that the binding checks (one whole run of shards per dataset) accept
 * them.  verify compares every record's checksum (format v3's, or the
 * same XXH3 chain computed from the decoded record for older shards)
 * across datasets; records repeated inside one dataset are its data.
 * Memory: 24 bytes per record of the list, held only when it names more
 * than one dataset.  datasets/-internal.
 */
#ifndef SLUICE_DATASETS_VERIFY_DUPS_H
#define SLUICE_DATASETS_VERIFY_DUPS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice_tools.h"

struct dup_entry;

struct dup_check {
	struct dup_entry *e;
	size_t n, cap;
	uint8_t (*ids)[DLS_DATASET_ID_LEN]; /* the datasets seen, in order */
	uint32_t nids;
	const char **paths;     /* borrowed: the shards, by ordinal */
	int enabled;            /* more than one dataset in the list */
	int oom;
};

/* Look at the identities of @paths (headers only) and enable the check
 * when they name more than one dataset.  @paths must outlive @dc. */
void dup_check_init(struct dup_check *dc, char *const *paths, size_t n);

/* The dataset ordinal of shard @id, or UINT32_MAX (unbound: not checked). */
uint32_t dup_check_set(const struct dup_check *dc,
		       const struct shard_identity *id);

/* Record @rec of shard @shard (its ordinal in the list), of dataset
 * ordinal @set, has checksum @sum. */
void dup_check_add(struct dup_check *dc, uint32_t set, uint32_t shard,
		   uint64_t rec, uint64_t sum);

/* Report each pair of datasets that share records: one line, with the
 * count and one example.  @return: the lines reported. */
long dup_check_report(struct dup_check *dc, verify_report_fn report,
		      void *ctx);

void dup_check_free(struct dup_check *dc);

#endif /* SLUICE_DATASETS_VERIFY_DUPS_H */
