/*
 * import_tar.c - a WebDataset tar becomes one record per sample.
 *
 * A member's key is its path up to the first dot of its base name (the
 * directory part kept), its extension the rest ("a/x.seg.png" -> key
 * "a/x", field "seg.png").  Consecutive members with one key form a
 * sample; each extension is a uint8[-1] field, in the order the first
 * sample lists them.  Like WebDataset, members whose base name has no dot
 * or starts with one are passed over.  Every later sample must carry
 * exactly the first sample's fields (in any order).
 *
 * The tar is streamed: only the current sample's values are in memory.
 * --part I/N needs the sample count n upfront, so it first runs a
 * counting pass over the headers alone (data is seeked over), which also
 * checks every sample's field names; then it converts samples
 * [I*n/N, (I+1)*n/N) by sample index.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import_common.h"
#include "import_tar_reader.h"

#define COUNT_BUF (16u << 10)   /* headers only: small reads, seeks */
#define CONVERT_BUF (1u << 20)

struct tar_walk {
	const struct import_options *o;
	int convert;              /* 0: counting pass */
	uint64_t lo, hi;          /* samples to convert */
	/* the schema, from the first sample */
	int nfields;
	int schema_known;
	struct sluice_field fields[SLUICE_MAX_FIELDS];
	/* the current sample */
	uint64_t sample;          /* its index; UINT64_MAX before the first */
	char *key;
	int seen[SLUICE_MAX_FIELDS];
	struct import_buf values[SLUICE_MAX_FIELDS];
	struct import_sink sink;
	int sink_open;
	uint64_t total;           /* records this run converts, 0: unknown */
};

/* Split @path into key length and extension; 0 when it is not a sample
 * member (no dot in the base name, or a hidden one). */
static int split_key(const char *path, size_t *key_len, const char **ext)
{
	const char *base = strrchr(path, '/');
	const char *dot;

	base = base ? base + 1 : path;
	if (base[0] == '\0' || base[0] == '.')
		return 0;
	dot = strchr(base, '.');
	if (!dot || dot[1] == '\0')
		return 0;
	*key_len = (size_t)(dot - path);
	*ext = dot + 1;
	return 1;
}

static int find_field(const struct tar_walk *t, const char *ext)
{
	for (int i = 0; i < t->nfields; i++)
		if (strcmp(t->fields[i].name, ext) == 0)
			return i;
	return -1;
}

static int add_schema_field(struct tar_walk *t, const char *ext,
			    const char *member, char *err, size_t errlen)
{
	struct sluice_field *f;

	if (strlen(ext) >= SLUICE_NAME_MAX)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: member '%s': extension longer than "
				   "%d bytes",
				   t->o->src, member, SLUICE_NAME_MAX - 1);
	if (t->nfields == SLUICE_MAX_FIELDS)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: key '%s': more than %d fields",
				   t->o->src, t->key, SLUICE_MAX_FIELDS);
	f = &t->fields[t->nfields++];
	memset(f, 0, sizeof(*f));
	strcpy(f->name, ext);
	f->dtype = (DLDataType){ .code = kDLUInt, .bits = 8, .lanes = 1 };
	f->ndim = 1;
	f->shape[0] = -1;
	return 0;
}

static int in_range(const struct tar_walk *t)
{
	return t->convert && t->sample >= t->lo && t->sample < t->hi;
}

/* The current sample is complete: check it, and write it when in range. */
static int finish_sample(struct tar_walk *t, char *err, size_t errlen)
{
	const void *values[SLUICE_MAX_FIELDS];
	uint64_t lengths[SLUICE_MAX_FIELDS];
	int r;

	if (!t->key)
		return 0;
	t->schema_known = 1;
	for (int i = 0; i < t->nfields; i++)
		if (!t->seen[i])
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: key '%s' lacks field '%s' "
					   "(the first sample has it)",
					   t->o->src, t->key,
					   t->fields[i].name);
	if (!in_range(t))
		return 0;
	if (!t->sink_open) {
		r = import_sink_open(&t->sink, t->o, t->fields, t->nfields,
				     t->total, err, errlen);
		if (r < 0)
			return r;
		t->sink_open = 1;
	}
	for (int i = 0; i < t->nfields; i++) {
		values[i] = t->values[i].p;
		lengths[i] = t->values[i].len;
	}
	return import_sink_add(&t->sink, values, lengths, t->key, err, errlen);
}

static int start_sample(struct tar_walk *t, const char *path, size_t key_len,
			char *err, size_t errlen)
{
	free(t->key);
	t->key = strndup(path, key_len);
	if (!t->key)
		return import_fail(err, errlen, -ENOMEM, "out of memory");
	t->sample = t->sample == UINT64_MAX ? 0 : t->sample + 1;
	memset(t->seen, 0, sizeof(t->seen));
	return 0;
}

/*
 * One pass over the archive.  Returns 1 when it stopped early (all
 * wanted samples written), 0 at the end of the archive, or a negative
 * code.
 */
static int walk(struct tar_walk *t, char *err, size_t errlen)
{
	struct tar_reader rd;
	struct tar_member m;
	int r;

	r = tar_open(&rd, t->o->src, t->convert ? CONVERT_BUF : COUNT_BUF,
		     err, errlen);
	if (r < 0)
		goto out;
	t->sample = UINT64_MAX;
	free(t->key);
	t->key = NULL;
	while ((r = tar_next(&rd, &m, err, errlen)) == 1) {
		const char *ext;
		size_t key_len;
		int f;

		if (!split_key(m.path, &key_len, &ext))
			continue;
		if (!t->key || strlen(t->key) != key_len ||
		    memcmp(t->key, m.path, key_len) != 0) {
			r = finish_sample(t, err, errlen);
			if (r < 0)
				goto out;
			if (t->convert && t->sample != UINT64_MAX &&
			    t->sample + 1 >= t->hi) {
				r = 1;
				goto out;
			}
			r = start_sample(t, m.path, key_len, err, errlen);
			if (r < 0)
				goto out;
		}
		f = find_field(t, ext);
		if (f < 0 && !t->schema_known) {
			r = add_schema_field(t, ext, m.path, err, errlen);
			if (r < 0)
				goto out;
			f = t->nfields - 1;
		} else if (f < 0) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: key '%s' has field '%s' that the "
					"first sample lacks",
					t->o->src, t->key, ext);
			goto out;
		}
		if (t->seen[f]) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: key '%s' has field '%s' twice "
					"(offset %llu)",
					t->o->src, t->key, ext,
					(unsigned long long)m.header_offset);
			goto out;
		}
		t->seen[f] = 1;
		if (in_range(t)) {
			r = tar_read_data(&rd, &m, &t->values[f], err, errlen);
			if (r < 0)
				goto out;
		}
	}
	if (r == 0)
		r = finish_sample(t, err, errlen);
out:
	tar_close(&rd);
	return r;
}

int import_tar(const struct import_options *o,
	       struct sluice_writer_summary *sum, char *err, size_t errlen)
{
	struct tar_walk t;
	int r;

	r = import_check_part(o, err, errlen);
	if (r < 0)
		return r;
	memset(&t, 0, sizeof(t));
	t.o = o;
	t.lo = 0;
	t.hi = UINT64_MAX;
	if (o->part_count > 1) {
		struct stat st;

		if (stat(o->src, &st) == 0 && !S_ISREG(st.st_mode)) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: --part needs a regular file: it "
					"reads the tar twice (a first pass "
					"counts samples), and a pipe cannot be "
					"read twice",
					o->src);
			goto out;
		}
		r = walk(&t, err, errlen);
		if (r < 0)
			goto out;
		/* sample is the last index: n - 1, or UINT64_MAX for none */
		import_part_range(o, t.sample + 1, &t.lo, &t.hi);
		t.total = t.hi - t.lo;
	}
	t.convert = 1;
	r = walk(&t, err, errlen);
	if (r < 0)
		goto out;
	if (!t.schema_known) {
		r = import_fail(err, errlen, -SLUICE_EINPUT,
				"%s: no samples (no member named KEY.EXT)",
				o->src);
		goto out;
	}
	if (!t.sink_open) {
		/* This part has no samples: still a (empty) dataset. */
		r = import_sink_open(&t.sink, o, t.fields, t.nfields, 0, err,
				     errlen);
		if (r < 0)
			goto out;
		t.sink_open = 1;
	}
	r = import_sink_close(&t.sink, sum, err, errlen);
	t.sink_open = 0;
out:
	if (t.sink_open)
		import_sink_abort(&t.sink);
	for (int i = 0; i < SLUICE_MAX_FIELDS; i++)
		import_buf_free(&t.values[i]);
	free(t.key);
	return r;
}
