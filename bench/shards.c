/*
 * shards.c - the shard files behind a PATH and their block tables, read
 * straight from the public on-disk format (include/dlpack_shard.h) so the
 * limit probes can read the same bytes the loader reads.  The loader's
 * view of blocks is private; this is a second, independent reader.
 * Every number from a file is checked against the file size and for
 * overflow before use.  The format is little-endian; so is every host
 * sluice runs on (x86-64, aarch64).
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "dlpack_shard.h"
#include "sluice_cli.h"

static int add_path(struct shard_set *s, const char *path)
{
	struct shard_info *v = realloc(s->v, (s->n + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	s->v = v;
	memset(&v[s->n], 0, sizeof(v[s->n]));
	v[s->n].path = strdup(path);
	if (!v[s->n].path)
		return -ENOMEM;
	s->n++;
	return 0;
}

static int add_glob(struct shard_set *s, const char *pattern)
{
	glob_t g;
	int r = glob(pattern, 0, NULL, &g);

	if (r == GLOB_NOMATCH)
		return -ENOENT;
	if (r)
		return -EIO;
	for (size_t i = 0; i < g.gl_pathc && !r; i++)
		r = add_path(s, g.gl_pathv[i]);   /* glob sorts them */
	globfree(&g);
	return r;
}

/* The same forms sluice_dataset_open accepts. */
static int resolve(const char *path, struct shard_set *s, char *err,
		   size_t errlen)
{
	struct stat st;
	int r = 0;

	if (strchr(path, ',')) {
		char *copy = strdup(path), *save = NULL, *tok;

		if (!copy)
			return -ENOMEM;
		for (tok = strtok_r(copy, ",", &save); tok && !r;
		     tok = strtok_r(NULL, ",", &save))
			r = add_path(s, tok);
		free(copy);
	} else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		char *pattern;

		if (asprintf(&pattern, "%s/*" DLS_SHARD_SUFFIX, path) < 0)
			return -ENOMEM;
		r = add_glob(s, pattern);
		free(pattern);
	} else if (strpbrk(path, "*?[")) {
		r = add_glob(s, path);
	} else {
		r = add_path(s, path);
	}
	if (r)
		snprintf(err, errlen, "%s: %s", path,
			 r == -ENOENT ? "no shard files" : strerror(-r));
	return r;
}

static int bad(char *err, size_t errlen, const char *path, const char *what,
	       unsigned long long value)
{
	snprintf(err, errlen, "%s: %s (%llu)", path, what, value);
	return -SLUICE_ECORRUPT;
}

static int parse_index(struct shard_info *si, int fd,
		       const struct dls_header_disk *h, char *err,
		       size_t errlen)
{
	struct dls_index_entry_disk *idx;
	uint64_t n = h->block_count;
	int r = 0;

	if (n > si->file_bytes / sizeof(*idx) ||
	    h->index_length != n * sizeof(*idx))
		return bad(err, errlen, si->path, "index length",
			   h->index_length);
	if (h->index_offset < DLS_HEADER_SIZE ||
	    h->index_offset > si->file_bytes ||
	    h->index_length > si->file_bytes - h->index_offset)
		return bad(err, errlen, si->path, "index offset",
			   h->index_offset);
	idx = malloc(n ? n * sizeof(*idx) : 1);
	si->blocks = calloc(n ? n : 1, sizeof(*si->blocks));
	if (!idx || !si->blocks) {
		free(idx);
		return -ENOMEM;
	}
	if (pread(fd, idx, h->index_length, (off_t)h->index_offset) !=
	    (ssize_t)h->index_length) {
		free(idx);
		snprintf(err, errlen, "%s: short read of the index", si->path);
		return -EIO;
	}
	if (XXH3_64bits(idx, h->index_length) != h->index_checksum) {
		free(idx);
		return bad(err, errlen, si->path, "index checksum mismatch",
			   h->index_offset);
	}
	for (uint64_t b = 0; b < n && !r; b++) {
		const struct dls_index_entry_disk *e = &idx[b];

		if (e->offset < DLS_HEADER_SIZE ||
		    e->offset > h->index_offset ||
		    e->stored_size > h->index_offset - e->offset ||
		    e->stored_size > DLS_MAX_BLOCK_BYTES ||
		    e->raw_size > DLS_MAX_BLOCK_BYTES ||
		    e->codec > DLS_CODEC_ZSTD || e->record_count == 0 ||
		    (e->codec == DLS_CODEC_RAW &&
		     e->raw_size != e->stored_size)) {
			r = bad(err, errlen, si->path, "bad index entry", b);
			break;
		}
		si->blocks[b] = (struct shard_block){
			.offset = e->offset,
			.stored = e->stored_size,
			.raw = e->raw_size,
			.codec = e->codec,
			.records = e->record_count,
		};
		si->stored_bytes += e->stored_size;
		si->raw_bytes += e->raw_size;
		si->records += e->record_count;
	}
	si->nblocks = n;
	free(idx);
	return r;
}

static int parse_shard(struct shard_info *si, char *err, size_t errlen)
{
	static _Alignas(8) unsigned char page[DLS_HEADER_SIZE];
	struct dls_header_disk h;
	uint64_t sum;
	struct stat st;
	int fd, r;

	fd = open(si->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", si->path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) || pread(fd, page, sizeof(page), 0) !=
				      (ssize_t)sizeof(page)) {
		close(fd);
		snprintf(err, errlen, "%s: shorter than a shard header",
			 si->path);
		return -SLUICE_EFORMAT;
	}
	si->file_bytes = (uint64_t)st.st_size;
	memcpy(&h, page, sizeof(h));
	memcpy(&sum, page + DLS_HEADER_CHECKSUM_OFFSET, sizeof(sum));
	if (memcmp(h.magic, DLS_MAGIC, DLS_MAGIC_LEN) != 0 ||
	    (h.version != DLS_VERSION && h.version != DLS_VERSION_UNBOUND) ||
	    h.header_size != DLS_HEADER_SIZE) {
		close(fd);
		snprintf(err, errlen, "%s: not a dlpack-shard v1/v2 file",
			 si->path);
		return -SLUICE_EFORMAT;
	}
	if (XXH3_64bits(page, DLS_HEADER_CHECKSUM_OFFSET) != sum) {
		close(fd);
		return bad(err, errlen, si->path, "header checksum mismatch",
			   0);
	}
	r = parse_index(si, fd, &h, err, errlen);
	close(fd);
	if (!r && si->records != h.record_count)
		r = bad(err, errlen, si->path,
			"block records do not add up to the header's",
			h.record_count);
	return r;
}

int shards_load(const char *path, struct shard_set *s, char *err,
		size_t errlen)
{
	int r;

	memset(s, 0, sizeof(*s));
	r = resolve(path, s, err, errlen);
	for (uint32_t i = 0; i < s->n && !r; i++) {
		const struct shard_info *si = &s->v[i];

		r = parse_shard(&s->v[i], err, errlen);
		if (r)
			break;
		s->records += si->records;
		s->stored_bytes += si->stored_bytes;
		s->raw_bytes += si->raw_bytes;
		s->file_bytes += si->file_bytes;
		s->blocks += si->nblocks;
		for (uint64_t b = 0; b < si->nblocks; b++) {
			const struct shard_block *bl = &si->blocks[b];

			s->zstd_blocks += bl->codec == DLS_CODEC_ZSTD;
			if (bl->stored > s->max_stored)
				s->max_stored = bl->stored;
			if (bl->raw > s->max_raw)
				s->max_raw = bl->raw;
		}
	}
	if (r)
		shards_free(s);
	return r;
}

void shards_free(struct shard_set *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; i < s->n; i++) {
		free(s->v[i].path);
		free(s->v[i].blocks);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}
