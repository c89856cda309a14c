/*
 * merge.c - sluice_merge: join dataset directories written as parts into
 * one new dataset.  Every part is checked before anything is written; the
 * destination must be new or empty and not a part, and is locked.
 * Shards are hard-linked (copied when linking fails) under new names in
 * order; no block is rewritten and no source file is touched.
 * dataset.json comes last.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dir_lock.h"
#include "identity.h"
#include "manifest.h"
#include "shard_internal.h"

#define MERGE_PATH_CAP 4400

/* Copy @src to @dst via a temporary name, fsynced, renamed. */
static int copy_file(const char *src, const char *dst, const char *tmp)
{
	static const size_t chunk = 1u << 20;
	int in, out, r = 0;
	char *buf;

	buf = malloc(chunk);
	if (!buf)
		return -ENOMEM;
	in = file_open_regular(src, O_RDONLY, NULL, NULL, 0);
	if (in < 0) {
		free(buf);
		return in;
	}
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		r = -errno;
		goto out_in;
	}
	for (;;) {
		ssize_t n = read(in, buf, chunk), done = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		while (done < n) {
			ssize_t m = write(out, buf + done, (size_t)(n - done));

			if (m < 0 && errno == EINTR)
				continue;
			if (m <= 0) {
				r = m < 0 ? -errno : -EIO;
				break;
			}
			done += m;
		}
		if (r < 0)
			break;
	}
	if (r == 0 && fsync(out) != 0)
		r = -errno;
	close(out);
	if (r == 0 && rename(tmp, dst) != 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
out_in:
	close(in);
	free(buf);
	return r;
}

/* Is @out_dir (when it exists) the same folder as a part? */
static int out_is_a_part(const char *const *parts, int nparts,
			 const char *out_dir, int *which)
{
	struct stat o, p;

	if (stat(out_dir, &o) != 0)
		return 0;
	for (int i = 0; i < nparts; i++)
		if (stat(parts[i], &p) == 0 && p.st_dev == o.st_dev &&
		    p.st_ino == o.st_ino) {
			*which = i;
			return 1;
		}
	return 0;
}

struct verify_first {
	char line[600];
	long n;
};

static void keep_first_line(void *ctx, const char *line)
{
	struct verify_first *vf = ctx;

	if (!vf->n++)
		snprintf(vf->line, sizeof(vf->line), "%s", line);
}

/* Parts of one conversion (an ImageFolder split with --part) have the
 * same class names: they list every class folder, whatever their slice. */
static int classes_equal(const struct dataset_classes *a,
			 const struct dataset_classes *b)
{
	if (a->n != b->n || (a->n && strcmp(a->field, b->field)))
		return 0;
	for (uint32_t i = 0; i < a->n; i++)
		if (strcmp(a->names[i], b->names[i]))
			return 0;
	return 1;
}

/* Load part @i fully (shards against its dataset.json: records, blocks,
 * sizes, identities), optionally verify every block, and read its
 * manifest into @m. */
static int check_part(const char *part, unsigned flags, struct manifest *m,
		      char *err, size_t errlen)
{
	struct verify_first vf = { "", 0 };
	struct dataset ds;
	char what[600];
	long got;
	int r;

	r = dataset_load(part, &ds, what, sizeof(what));
	if (r < 0) {
		errf(err, errlen, "%s", what);
		return r;
	}
	dataset_free(&ds);
	if (flags & SLUICE_MERGE_VERIFY) {
		got = dataset_verify(part, keep_first_line, &vf);
		if (got != 0) {
			errf(err, errlen, "%s: verify found %ld problem%s; the "
			     "first: %s", part, got < 0 ? 1 : got,
			     got == 1 ? "" : "s", vf.line);
			return got < 0 ? (int)got : -SLUICE_ECORRUPT;
		}
	}
	r = manifest_read(part, m, what, sizeof(what));
	if (r < 0)
		errf(err, errlen, "%s", what);
	return r;
}

/* Create (or take, when it exists and is empty) and lock @out_dir. */
static int claim_out_dir(const char *out_dir, int *lock_fd, int *created,
			 char *err, size_t errlen)
{
	char what[600], found[256];
	int r;

	*created = mkdir(out_dir, 0755) == 0;
	if (!*created && errno != EEXIST) {
		r = -errno;
		errf(err, errlen, "%s: %s", out_dir, sluice_strerror(r));
		return r;
	}
	r = dir_lock(out_dir, lock_fd, what, sizeof(what));
	if (r < 0) {
		errf(err, errlen, "%s", what);
		return r;
	}
	r = dir_first_entry(out_dir, NULL, found, sizeof(found));
	if (r > 0) {
		errf(err, errlen, "%s: not empty (it holds %s): stale files "
		     "would outlive the merged dataset; merge into a new or "
		     "empty folder", out_dir, found);
		return -ENOTEMPTY;
	}
	if (r < 0)
		errf(err, errlen, "%s: %s", out_dir, sluice_strerror(r));
	return r;
}

SLUICE_API int sluice_merge(const char *const *parts, int nparts,
			    const char *out_dir, unsigned flags,
			    struct sluice_writer_summary *summary, char *err,
			    size_t errlen)
{
	struct sluice_writer_summary all = { .size = sizeof(all) };
	struct manifest out = { 0 }, *in = NULL;
	struct timespec t0, t1;
	char src[MERGE_PATH_CAP], dst[MERGE_PATH_CAP], tmp[MERGE_PATH_CAP];
	char what[600];
	uint64_t total_shards = 0;
	uint64_t blocks = 0;
	int r = 0, i, which = 0, lock_fd = -1, created = 0;
	uint32_t made = 0;          /* files created in out_dir */

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (summary && summary->size == 0) {
		errf(err, errlen, "merge: the summary's size field is 0 (set it to sizeof(struct sluice_writer_summary))");
		return -EINVAL;
	}
	if (summary)
		writer_summary_copy(summary, &all);
	if (!parts || nparts < 1 || !out_dir || !*out_dir ||
	    strlen(out_dir) > 4000 || (flags & ~(SLUICE_MERGE_VERIFY | SLUICE_MERGE_COPY))) {
		errf(err, errlen, "merge: no parts or no output directory");
		return -EINVAL;
	}
	if (out_is_a_part(parts, nparts, out_dir, &which)) {
		errf(err, errlen, "%s: is also part %d (%s): merge into a new "
		     "folder, the parts are never written", out_dir, which + 1,
		     parts[which]);
		return -EINVAL;
	}
	in = calloc((size_t)nparts, sizeof(*in));
	if (!in)
		return -ENOMEM;
	/* Check every part fully before touching the output. */
	for (i = 0; i < nparts; i++) {
		r = check_part(parts[i], flags, &in[i], err, errlen);
		if (r < 0)
			goto out;
		if (!schema_equal(&in[i].schema, &in[0].schema)) {
			r = -SLUICE_ESCHEMA;
			errf(err, errlen, "%s: schema differs from %s", parts[i],
			     parts[0]);
			goto out;
		}
		if (!classes_equal(&in[i].classes, &in[0].classes)) {
			r = -SLUICE_ESCHEMA;
			errf(err, errlen, "%s: class names differ from %s's",
			     parts[i], parts[0]);
			goto out;
		}
		total_shards += in[i].nshards;
	}
	if (total_shards > 99999u * 10) {
		r = -E2BIG;
		errf(err, errlen, "merge: too many shards");
		goto out;
	}
	out.schema = in[0].schema;
	r = dataset_classes_set(&out.classes, in[0].classes.field,
				(const char *const *)in[0].classes.names,
				in[0].classes.n);
	if (r < 0)
		goto out;
	out.bound = 1;
	r = dataset_id_new(out.dataset_id);
	if (r < 0) {
		errf(err, errlen, "getrandom: %s", sluice_strerror(r));
		goto out;
	}
	out.shards = calloc(total_shards ? total_shards : 1,
			    sizeof(*out.shards));
	if (!out.shards) {
		r = -ENOMEM;
		goto out;
	}
	/* The merged list first, so that a part given twice (or a part
	 * merged into another given too) is refused before any write. */
	for (i = 0; i < nparts; i++) {
		for (uint32_t s = 0; s < in[i].nshards; s++) {
			struct manifest_shard *ms = &out.shards[out.nshards++];

			/* Keeps the shard's own identity (its part's id). */
			*ms = in[i].shards[s];
			snprintf(ms->file, sizeof(ms->file), "data-%05u%s",
				 out.nshards - 1, DLS_SHARD_SUFFIX);
		}
	}
	{
		struct verify_first dup = { "", 0 };

		snprintf(dst, sizeof(dst), "%s/%s", out_dir, DLS_MANIFEST_NAME);
		if (identity_check_duplicates(dst, &out, keep_first_line,
					      &dup) > 0) {
			errf(err, errlen, "merge: the parts hold the same shard "
			     "twice (a part given twice?): %s", dup.line);
			r = -EINVAL;
			goto out;
		}
	}
	out.nshards = 0;
	r = claim_out_dir(out_dir, &lock_fd, &created, err, errlen);
	if (r < 0)
		goto out;
	for (i = 0; i < nparts; i++) {
		for (uint32_t s = 0; s < in[i].nshards; s++) {
			struct manifest_shard *ms = &out.shards[out.nshards];

			snprintf(src, sizeof(src), "%s/%s", parts[i],
				 in[i].shards[s].file);
			snprintf(dst, sizeof(dst), "%s/%s", out_dir, ms->file);
			snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", out_dir,
				 ms->file);
			if ((flags & SLUICE_MERGE_COPY) ||
			    link(src, dst) != 0) {
				r = !(flags & SLUICE_MERGE_COPY) &&
						    errno == EEXIST
					    ? -EEXIST
					    : copy_file(src, dst, tmp);
				if (r < 0) {
					errf(err, errlen, "%s -> %s: %s", src,
					     dst, sluice_strerror(r));
					goto out;
				}
			}
			made++;
			out.nshards++;
			out.records += ms->records;
			blocks += ms->blocks;
		}
		out.raw_bytes += in[i].raw_bytes;
		out.stored_bytes += in[i].stored_bytes;
	}
	r = manifest_write(out_dir, &out, what, sizeof(what));
	if (r < 0) {
		errf(err, errlen, "%s", what);
		goto out;
	}
	if (summary) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		all.records = out.records;
		all.blocks = blocks;
		all.shards = out.nshards;
		all.raw_bytes = out.raw_bytes;
		all.stored_bytes = out.stored_bytes;
		all.seconds = (double)(t1.tv_sec - t0.tv_sec) +
			      (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		writer_summary_copy(summary, &all);
	}
out:
	/* A failed merge leaves no partial dataset: only names it made in
	 * the folder it found empty (links to the parts' files, or copies)
	 * are removed, never a part's file. */
	if (r < 0 && lock_fd >= 0) {
		for (uint32_t k = 0; k < made; k++) {
			snprintf(dst, sizeof(dst), "%s/%s", out_dir,
				 out.shards[k].file);
			unlink(dst);
		}
	}
	dir_unlock(out_dir, lock_fd);
	if (r < 0 && created && lock_fd >= 0)
		rmdir(out_dir);
	for (i = 0; in && i < nparts; i++)
		manifest_free(&in[i]);
	free(in);
	manifest_free(&out);
	return r;
}
