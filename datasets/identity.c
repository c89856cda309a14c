/*
 * identity.c - dataset ids and the checks that bind shards to their
 * dataset: by dataset.json (each name's dataset id, index and content
 * checksum) or, for a list or glob, by each dataset's shards forming one
 * complete run 0 .. count-1.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "identity.h"
#include "shard_internal.h"

int dataset_id_new(uint8_t id[DLS_DATASET_ID_LEN])
{
	size_t got = 0;

	while (got < DLS_DATASET_ID_LEN) {
		ssize_t n = getrandom(id + got, DLS_DATASET_ID_LEN - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		got += (size_t)n;
	}
	/* All zero means "no id" (v1): vanishingly unlikely, but excluded. */
	for (unsigned i = 0; i < DLS_DATASET_ID_LEN; i++)
		if (id[i])
			return 0;
	id[0] = 1;
	return 0;
}

void dataset_id_hex(const uint8_t id[DLS_DATASET_ID_LEN], char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (unsigned i = 0; i < DLS_DATASET_ID_LEN; i++) {
		out[2 * i] = digits[id[i] >> 4];
		out[2 * i + 1] = digits[id[i] & 15];
	}
	out[DATASET_ID_HEX_LEN] = '\0';
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int dataset_id_parse(const char *hex, uint8_t id[DLS_DATASET_ID_LEN])
{
	if (strlen(hex) != DATASET_ID_HEX_LEN)
		return -1;
	for (unsigned i = 0; i < DLS_DATASET_ID_LEN; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		id[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

struct reporter {
	verify_report_fn report;
	void *ctx;
	long problems;
};

static void problem(struct reporter *rp, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void problem(struct reporter *rp, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	rp->problems++;
	if (rp->report)
		rp->report(rp->ctx, line);
}

static int same_dataset(const struct shard_identity *a,
			const struct shard_identity *b)
{
	return memcmp(a->dataset_id, b->dataset_id, DLS_DATASET_ID_LEN) == 0;
}

long identity_check_sequence(const char *const *paths,
			     const struct shard_identity *ids, size_t n,
			     verify_report_fn report, void *ctx)
{
	struct reporter rp = { report, ctx, 0 };
	const struct shard_identity *run = NULL; /* the dataset being read */
	const char *last = NULL;                 /* its last shard's path */
	uint32_t next = 0;                       /* the index expected next */
	char hex[DATASET_ID_HEX_LEN + 1];

	for (size_t i = 0; i <= n; i++) {
		const struct shard_identity *id = i < n ? &ids[i] : NULL;

		if (id && (!paths[i] || !id->bound))
			continue;
		if (run && (!id || !same_dataset(id, run))) {
			/* The run ends: it must have reached its count (a
			 * count mismatch inside it was reported already). */
			if (next < run->count) {
				char which[40];

				if (next + 1 == run->count)
					snprintf(which, sizeof(which),
						 "shard %u is", next);
				else
					snprintf(which, sizeof(which),
						 "shards %u..%u are", next,
						 run->count - 1);
				dataset_id_hex(run->dataset_id, hex);
				problem(&rp, "%s: dataset %s: %s missing "
					"after it (a write that did not finish, "
					"or an incomplete list; open the "
					"dataset's folder, or list all its "
					"shards in order)", last, hex, which);
			}
			run = NULL;
		}
		if (!id)
			break;
		if (!run) {
			run = id;
			next = 0;
		}
		if (id->count != run->count || id->index != next) {
			dataset_id_hex(id->dataset_id, hex);
			problem(&rp, "%s: shard %u of %u of dataset %s where shard "
				"%u of %u was expected (a duplicated, swapped, "
				"foreign or missing shard)",
				paths[i], id->index, id->count, hex, next,
				run->count);
		}
		next = id->index + 1;
		last = paths[i];
	}
	return rp.problems;
}

/* Sort keys for the duplicate checks. */
struct entry_ref {
	const struct manifest *m;
	uint32_t i;
};

static int by_file(const void *a, const void *b)
{
	const struct entry_ref *x = a, *y = b;

	return strcmp(x->m->shards[x->i].file, y->m->shards[y->i].file);
}

static int by_file_then_entry(const void *a, const void *b)
{
	const struct entry_ref *x = a, *y = b;
	int c = by_file(a, b);

	return c ? c : (x->i > y->i) - (x->i < y->i);
}

static int by_identity(const void *a, const void *b)
{
	const struct entry_ref *ra = a, *rb = b;
	const struct shard_identity *x = &ra->m->shards[ra->i].id;
	const struct shard_identity *y = &rb->m->shards[rb->i].id;
	int c = memcmp(x->dataset_id, y->dataset_id, DLS_DATASET_ID_LEN);

	if (c)
		return c;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* "twice (shards 3 and 7)" or "5 times (shards 3, 7, 9, ...)": a run
 * refs[lo..hi) of equal entries, in manifest order within the run. */
static void run_words(const struct entry_ref *refs, uint32_t lo, uint32_t hi,
		      char *buf, size_t len)
{
	uint32_t n = hi - lo, at = 0;
	uint32_t idx[4];

	for (uint32_t k = 0; k < n && k < 4; k++)
		idx[k] = refs[lo + k].i;
	if (n == 2) {
		snprintf(buf, len, "twice (shards %u and %u)", idx[0], idx[1]);
		return;
	}
	at = (uint32_t)snprintf(buf, len, "%u times (shards", n);
	for (uint32_t k = 0; k < n && k < 3 && at < len; k++)
		at += (uint32_t)snprintf(buf + at, len - at, "%s %u",
					 k ? "," : "", idx[k]);
	if (at < len)
		snprintf(buf + at, len - at, "%s)", n > 3 ? ", ..." : "");
}

static int by_identity_then_entry(const void *a, const void *b)
{
	const struct entry_ref *x = a, *y = b;
	int c = by_identity(a, b);

	return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* No file, and no (dataset, index), listed twice.  One line per run of
 * equal entries, so that a shard listed 100,000 times is one problem;
 * a (dataset, index) run whose entries are all one file was said. */
static void check_duplicates(struct reporter *rp, const char *mpath,
			     const struct manifest *m)
{
	struct entry_ref *refs;
	char hex[DATASET_ID_HEX_LEN + 1], words[96];
	uint32_t n = 0, hi;

	if (m->nshards < 2)
		return;
	refs = malloc(m->nshards * sizeof(*refs));
	if (!refs) {
		problem(rp, "%s: out of memory checking for duplicates",
			mpath);
		return;
	}
	for (uint32_t i = 0; i < m->nshards; i++)
		refs[i] = (struct entry_ref){ m, i };
	/* qsort is not stable: ties keep manifest order through i. */
	qsort(refs, m->nshards, sizeof(*refs), by_file_then_entry);
	for (uint32_t lo = 0; lo < m->nshards; lo = hi) {
		for (hi = lo + 1; hi < m->nshards &&
				  by_file(&refs[lo], &refs[hi]) == 0; hi++)
			;
		if (hi - lo < 2)
			continue;
		run_words(refs, lo, hi, words, sizeof(words));
		problem(rp, "%s: lists %s %s", mpath,
			m->shards[refs[lo].i].file, words);
	}
	for (uint32_t i = 0; i < m->nshards; i++)
		if (m->shards[i].id.bound)
			refs[n++] = (struct entry_ref){ m, i };
	qsort(refs, n, sizeof(*refs), by_identity_then_entry);
	for (uint32_t lo = 0; lo < n; lo = hi) {
		const struct manifest_shard *s = &m->shards[refs[lo].i];
		int one_file = 1;

		for (hi = lo + 1; hi < n && by_identity(&refs[lo], &refs[hi]) == 0;
		     hi++)
			one_file &= by_file(&refs[lo], &refs[hi]) == 0;
		if (hi - lo < 2 || one_file)
			continue;
		dataset_id_hex(s->id.dataset_id, hex);
		if (hi - lo == 2)
			problem(rp, "%s: lists shard %u of dataset %s twice "
				"(%s and %s)", mpath, s->id.index, hex,
				s->file, m->shards[refs[lo + 1].i].file);
		else
			problem(rp, "%s: lists shard %u of dataset %s %u times "
				"(%s, %s, ...)", mpath, s->id.index, hex,
				hi - lo, s->file,
				m->shards[refs[lo + 1].i].file);
	}
	free(refs);
}

long identity_check_duplicates(const char *mpath, const struct manifest *m,
			       verify_report_fn report, void *ctx)
{
	struct reporter rp = { report, ctx, 0 };

	check_duplicates(&rp, mpath, m);
	return rp.problems;
}

long identity_check_manifest(const char *mpath, const struct manifest *m,
			     const char *const *paths,
			     const struct shard_identity *ids,
			     verify_report_fn report, void *ctx)
{
	struct reporter rp = { report, ctx, 0 };
	char want[DATASET_ID_HEX_LEN + 1], got[DATASET_ID_HEX_LEN + 1];

	check_duplicates(&rp, mpath, m);
	for (uint32_t i = 0; i < m->nshards; i++) {
		const struct shard_identity *w = &m->shards[i].id;
		const struct shard_identity *g = &ids[i];

		if (!paths[i])
			continue;
		if (!w->bound && !g->bound)
			continue; /* v1: nothing to compare */
		if (!w->bound) {
			problem(&rp, "%s: %s records no identity for this "
				"shard, which has one (a dataset.json older "
				"than its shards?)", paths[i], DLS_MANIFEST_NAME);
			continue;
		}
		if (!g->bound) {
			problem(&rp, "%s: a v1 shard without identity where %s "
				"expects shard %u of a v2 dataset (a foreign "
				"shard)", paths[i], DLS_MANIFEST_NAME, w->index);
			continue;
		}
		if (same_dataset(w, g) && w->index == g->index &&
		    w->checksum == g->checksum)
			continue;
		dataset_id_hex(w->dataset_id, want);
		dataset_id_hex(g->dataset_id, got);
		problem(&rp, "%s: is shard %u of dataset %s (checksum %016llx); "
			"%s lists shard %u of dataset %s (checksum %016llx) "
			"under this name: a duplicated, swapped, foreign or "
			"rewritten shard", paths[i], g->index, got,
			(unsigned long long)g->checksum, DLS_MANIFEST_NAME,
			w->index, want, (unsigned long long)w->checksum);
	}
	return rp.problems;
}
