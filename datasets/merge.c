/*
 * merge.c - sluice_merge: join dataset directories written as parts into
 * one dataset.  Shards are hard-linked (copied when linking fails) under
 * new names in order; no block is rewritten.  dataset.json comes last.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		r = -errno;
		free(buf);
		return r;
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

SLUICE_API int sluice_merge(const char *const *parts, int nparts,
			    const char *out_dir,
			    struct sluice_writer_summary *summary, char *err,
			    size_t errlen)
{
	struct manifest out = { 0 }, *in = NULL;
	struct timespec t0, t1;
	char src[MERGE_PATH_CAP], dst[MERGE_PATH_CAP], tmp[MERGE_PATH_CAP];
	char what[600];
	uint64_t total_shards = 0;
	uint64_t blocks = 0;
	int r = 0, i;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (summary)
		memset(summary, 0, sizeof(*summary));
	if (!parts || nparts < 1 || !out_dir || !*out_dir ||
	    strlen(out_dir) > 4000) {
		errf(err, errlen, "merge: no parts or no output directory");
		return -EINVAL;
	}
	in = calloc((size_t)nparts, sizeof(*in));
	if (!in)
		return -ENOMEM;
	/* Check every part fully before touching the output. */
	for (i = 0; i < nparts; i++) {
		struct dataset ds;

		r = dataset_load(parts[i], &ds, what, sizeof(what));
		if (r < 0) {
			errf(err, errlen, "%s", what);
			goto out;
		}
		dataset_free(&ds);
		r = manifest_read(parts[i], &in[i], what, sizeof(what));
		if (r < 0) {
			errf(err, errlen, "%s", what);
			goto out;
		}
		if (!schema_equal(&in[i].schema, &in[0].schema)) {
			r = -SLUICE_ESCHEMA;
			errf(err, errlen, "%s: schema differs from %s", parts[i],
			     parts[0]);
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
	out.shards = calloc(total_shards ? total_shards : 1,
			    sizeof(*out.shards));
	if (!out.shards) {
		r = -ENOMEM;
		goto out;
	}
	if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
		r = -errno;
		errf(err, errlen, "%s: %s", out_dir, sluice_strerror(r));
		goto out;
	}
	for (i = 0; i < nparts; i++) {
		for (uint32_t s = 0; s < in[i].nshards; s++) {
			struct manifest_shard *ms = &out.shards[out.nshards];

			*ms = in[i].shards[s];
			snprintf(ms->file, sizeof(ms->file), "data-%05u%s",
				 out.nshards, DLS_SHARD_SUFFIX);
			snprintf(src, sizeof(src), "%s/%s", parts[i],
				 in[i].shards[s].file);
			snprintf(dst, sizeof(dst), "%s/%s", out_dir, ms->file);
			snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", out_dir,
				 ms->file);
			unlink(dst);
			if (link(src, dst) != 0) {
				r = copy_file(src, dst, tmp);
				if (r < 0) {
					errf(err, errlen, "%s -> %s: %s", src,
					     dst, sluice_strerror(r));
					goto out;
				}
			}
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
		summary->records = out.records;
		summary->blocks = blocks;
		summary->shards = out.nshards;
		summary->raw_bytes = out.raw_bytes;
		summary->stored_bytes = out.stored_bytes;
		summary->seconds = (double)(t1.tv_sec - t0.tv_sec) +
				   (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	}
out:
	for (i = 0; in && i < nparts; i++)
		manifest_free(&in[i]);
	free(in);
	manifest_free(&out);
	return r;
}
