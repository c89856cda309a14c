/*
 * verify_dups.c - records duplicated across the datasets of a list or
 * glob of shards (see verify_dups.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"
#include "shard.h"
#include "shard_internal.h"
#include "verify_dups.h"

struct dup_entry {
	uint64_t sum;
	uint32_t set, shard;
	uint64_t rec;
};

/* A pair of datasets that share records: how many, and the first. */
struct dup_pair {
	uint32_t a, b;
	uint64_t count;
	struct dup_entry first_a, first_b;
};

static uint32_t find_set(const struct dup_check *dc, const uint8_t *id)
{
	for (uint32_t i = 0; i < dc->nids; i++)
		if (memcmp(dc->ids[i], id, DLS_DATASET_ID_LEN) == 0)
			return i;
	return UINT32_MAX;
}

void dup_check_init(struct dup_check *dc, char *const *paths, size_t n)
{
	memset(dc, 0, sizeof(*dc));
	dc->paths = (const char **)(uintptr_t)paths;
	dc->ids = malloc((n ? n : 1) * sizeof(*dc->ids));
	if (!dc->ids) {
		dc->oom = 1;
		return;
	}
	/* Headers only (the blocks are read once, by verify); a shard that
	 * does not open is verify's to report. */
	for (size_t i = 0; i < n; i++) {
		struct shard_schema own;
		struct shard_file sf;
		char err[256];

		if (shard_open(paths[i], &sf, &own, err, sizeof(err)) < 0)
			continue;
		if (sf.id.bound && find_set(dc, sf.id.dataset_id) == UINT32_MAX)
			memcpy(dc->ids[dc->nids++], sf.id.dataset_id,
			       DLS_DATASET_ID_LEN);
		shard_file_free(&sf);
	}
	dc->enabled = dc->nids > 1;
}

uint32_t dup_check_set(const struct dup_check *dc,
		       const struct shard_identity *id)
{
	if (!dc->enabled || !id->bound)
		return UINT32_MAX;
	return find_set(dc, id->dataset_id);
}

void dup_check_add(struct dup_check *dc, uint32_t set, uint32_t shard,
		   uint64_t rec, uint64_t sum)
{
	if (!dc->enabled || set == UINT32_MAX || dc->oom)
		return;
	if (dc->n == dc->cap) {
		size_t cap = dc->cap ? dc->cap * 2 : 4096;
		void *nv = realloc(dc->e, cap * sizeof(*dc->e));

		if (!nv) {
			dc->oom = 1;
			return;
		}
		dc->e = nv;
		dc->cap = cap;
	}
	dc->e[dc->n++] = (struct dup_entry){ sum, set, shard, rec };
}

static int by_sum(const void *x, const void *y)
{
	const struct dup_entry *a = x, *b = y;

	if (a->sum != b->sum)
		return a->sum < b->sum ? -1 : 1;
	if (a->set != b->set)
		return a->set < b->set ? -1 : 1;
	if (a->shard != b->shard)
		return a->shard < b->shard ? -1 : 1;
	return (a->rec > b->rec) - (a->rec < b->rec);
}

static void count_pair(struct dup_pair **pairs, size_t *np, size_t *cap,
		       const struct dup_entry *a, const struct dup_entry *b)
{
	struct dup_pair *p = NULL;

	for (size_t i = 0; i < *np; i++)
		if ((*pairs)[i].a == a->set && (*pairs)[i].b == b->set)
			p = &(*pairs)[i];
	if (!p) {
		if (*np == *cap) {
			size_t nc = *cap ? *cap * 2 : 8;
			void *nv = realloc(*pairs, nc * sizeof(**pairs));

			if (!nv)
				return;
			*pairs = nv;
			*cap = nc;
		}
		p = &(*pairs)[(*np)++];
		*p = (struct dup_pair){ a->set, b->set, 0, *a, *b };
	}
	/* The example shown: the later dataset's first repeated record. */
	if (b->shard < p->first_b.shard ||
	    (b->shard == p->first_b.shard && b->rec < p->first_b.rec)) {
		p->first_a = *a;
		p->first_b = *b;
	}
	p->count++;
}

long dup_check_report(struct dup_check *dc, verify_report_fn report,
		      void *ctx)
{
	struct dup_pair *pairs = NULL;
	size_t np = 0, cap = 0;
	char line[1024], ha[DATASET_ID_HEX_LEN + 1], hb[DATASET_ID_HEX_LEN + 1];
	long lines = 0;

	if (!dc->enabled)
		return 0;
	if (dc->oom) {
		if (report)
			report(ctx, "out of memory for the record checksums "
				    "of the datasets listed: records "
				    "duplicated across them were not checked");
		return 1;
	}
	qsort(dc->e, dc->n, sizeof(*dc->e), by_sum);
	for (size_t i = 0; i < dc->n;) {
		size_t j = i + 1;

		while (j < dc->n && dc->e[j].sum == dc->e[i].sum)
			j++;
		/* Sorted by set within the group: each record of a later
		 * dataset repeats the group's first dataset's record. */
		for (size_t k = i + 1; k < j; k++)
			if (dc->e[k].set != dc->e[i].set)
				count_pair(&pairs, &np, &cap, &dc->e[i],
					   &dc->e[k]);
		i = j;
	}
	for (size_t i = 0; i < np; i++) {
		const struct dup_pair *p = &pairs[i];

		dataset_id_hex(dc->ids[p->a], ha);
		dataset_id_hex(dc->ids[p->b], hb);
		snprintf(line, sizeof(line),
			 "%s: record %llu is also %s record %llu, and %llu "
			 "records in all of dataset %s repeat records of "
			 "dataset %s: the same records twice (a retried task's two "
			 "attempts, or a killed run's part beside its "
			 "rerun's?); list each part once, or merge the parts "
			 "the job reported",
			 dc->paths[p->first_b.shard],
			 (unsigned long long)p->first_b.rec,
			 dc->paths[p->first_a.shard],
			 (unsigned long long)p->first_a.rec,
			 (unsigned long long)p->count, hb, ha);
		if (report)
			report(ctx, line);
		lines++;
	}
	free(pairs);
	return lines;
}

void dup_check_free(struct dup_check *dc)
{
	free(dc->e);
	free(dc->ids);
	memset(dc, 0, sizeof(*dc));
}
