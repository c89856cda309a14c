/*
 * import_tar.c - a WebDataset (one or many tars, in order: a list, a glob
 * or a brace pattern, see import_tar_sources.h) becomes one record per
 * sample.
 *
 * A member's key is its path up to the first dot of its base name (the
 * directory part kept), its extension the rest ("a/x.seg.png" -> key
 * "a/x", field "seg.png").  Consecutive members with one key form a
 * sample (never across tars); each extension is a uint8[-1] field, in the
 * order the first sample lists them, after "__key__" (the key's bytes,
 * uint8[-1]) unless o->tar_drop_key.  Label extensions (.cls, .cls2,
 * .index) whose value in the first sample parses as a decimal integer are
 * int64 scalars, as WebDataset decodes them; a later value that does not
 * parse then fails the conversion.  Like WebDataset, members whose base
 * name has no dot or starts with one are passed over.  Every later sample
 * must carry exactly the first sample's fields (in any order).
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
#include "import_tar_sources.h"

#define COUNT_BUF (16u << 10)   /* headers only: small reads, seeks */
#define CONVERT_BUF (1u << 20)

struct tar_walk {
	const struct import_options *o;
	struct tar_sources src;
	const char *path;         /* the tar being read */
	int convert;              /* 0: counting pass */
	uint64_t lo, hi;          /* samples to convert */
	/* the schema, from the first sample */
	int nfields;
	int schema_known;
	int key_field;            /* index of __key__, or -1 */
	struct sluice_field fields[SLUICE_MAX_FIELDS];
	int label[SLUICE_MAX_FIELDS];   /* .cls/.cls2/.index: int64 if ints */
	int64_t ints[SLUICE_MAX_FIELDS]; /* their parsed values */
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

static const char KEY_FIELD[] = "__key__";

static int is_label(const char *ext)
{
	return strcmp(ext, "cls") == 0 || strcmp(ext, "cls2") == 0 ||
	       strcmp(ext, "index") == 0;
}

/* A decimal integer, surrounded by ASCII whitespace at most ("7\n"). */
static int parse_label(const struct import_buf *b, int64_t *out)
{
	char text[32], *end;
	size_t lo = 0, hi = b->len;
	long long v;

	while (lo < hi && strchr(" \t\r\n", b->p[lo]))
		lo++;
	while (hi > lo && strchr(" \t\r\n", b->p[hi - 1]))
		hi--;
	if (hi == lo || hi - lo >= sizeof(text) ||
	    memchr(b->p + lo, '\0', hi - lo))
		return 0;
	memcpy(text, b->p + lo, hi - lo);
	text[hi - lo] = '\0';
	if (!strchr("+-0123456789", text[0]) ||
	    ((text[0] == '+' || text[0] == '-') &&
	     !strchr("0123456789", text[1])))
		return 0;
	errno = 0;
	v = strtoll(text, &end, 10);
	if (*end || errno)
		return 0;
	*out = v;
	return 1;
}

static void set_bytes_field(struct sluice_field *f, const char *name)
{
	memset(f, 0, sizeof(*f));
	strcpy(f->name, name);
	f->dtype = (DLDataType){ .code = kDLUInt, .bits = 8, .lanes = 1 };
	f->ndim = 1;
	f->shape[0] = -1;
}

static int add_schema_field(struct tar_walk *t, const char *ext,
			    const char *member, char *err, size_t errlen)
{
	if (t->key_field >= 0 && strcmp(ext, KEY_FIELD) == 0)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: member '%s': extension '%s' is the "
				   "key field's name (convert with --drop-key)",
				   t->path, member, KEY_FIELD);
	if (strlen(ext) >= SLUICE_NAME_MAX)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: member '%s': extension longer than "
				   "%d bytes",
				   t->path, member, SLUICE_NAME_MAX - 1);
	if (t->nfields == SLUICE_MAX_FIELDS)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: key '%s': more than %d fields",
				   t->path, t->key, SLUICE_MAX_FIELDS);
	t->label[t->nfields] = is_label(ext);
	set_bytes_field(&t->fields[t->nfields++], ext);
	return 0;
}

/* The first sample is complete: its label values decide their type. */
static void settle_schema(struct tar_walk *t)
{
	for (int i = 0; i < t->nfields; i++) {
		struct sluice_field *f = &t->fields[i];
		int64_t v;

		if (!t->label[i])
			continue;
		if (!parse_label(&t->values[i], &v)) {
			t->label[i] = 0;    /* not an integer: bytes */
			continue;
		}
		f->dtype = (DLDataType){ .code = kDLInt, .bits = 64,
					 .lanes = 1 };
		f->ndim = 0;
		f->shape[0] = 0;
	}
	t->schema_known = 1;
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
	if (t->key_field >= 0)
		t->seen[t->key_field] = 1;
	for (int i = 0; i < t->nfields; i++)
		if (!t->seen[i])
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: key '%s' lacks field '%s' "
					   "(the first sample has it)",
					   t->path, t->key,
					   t->fields[i].name);
	if (!t->schema_known)
		settle_schema(t);
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
		if (i == t->key_field) {
			values[i] = t->key;
			lengths[i] = strlen(t->key);
		} else if (t->label[i]) {
			if (!parse_label(&t->values[i], &t->ints[i]))
				return import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: key '%s': '%s' is not an integer, "
					"though the first sample's is (the "
					"field is int64)",
					t->path, t->key, t->fields[i].name);
			values[i] = &t->ints[i];
			lengths[i] = sizeof(t->ints[i]);
		}
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
 * One tar of the pass.  Returns 1 when it stopped early (all wanted
 * samples written), 0 at the end of the archive, or a negative code.
 */
static int walk_tar(struct tar_walk *t, char *err, size_t errlen)
{
	struct tar_reader rd;
	struct tar_member m;
	int r;

	r = tar_open(&rd, t->path, t->convert ? CONVERT_BUF : COUNT_BUF,
		     err, errlen);
	if (r < 0)
		goto out;
	while ((r = tar_next(&rd, &m, err, errlen)) == 1) {
		const char *ext;
		size_t key_len;
		int f;

		if (m.special) {
			char *what = NULL;

			/* counted once, in the converting pass */
			if (!t->convert)
				continue;
			if (asprintf(&what, "%s: %s", t->path, m.path) < 0) {
				r = import_fail(err, errlen, -ENOMEM,
						"out of memory");
				goto out;
			}
			r = import_skip(t->o, IMPORT_SKIP_TAR_ENTRY, what, err,
					errlen);
			free(what);
			if (r < 0)
				goto out;
			continue;
		}
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
			if (t->nfields == 0 && t->key_field == 0)
				set_bytes_field(&t->fields[t->nfields++],
						KEY_FIELD);
			r = add_schema_field(t, ext, m.path, err, errlen);
			if (r < 0)
				goto out;
			f = t->nfields - 1;
		} else if (f < 0 || f == t->key_field) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: key '%s' has field '%s' that the "
					"first sample lacks",
					t->path, t->key, ext);
			goto out;
		}
		if (t->seen[f]) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: key '%s' has field '%s' twice "
					"(offset %llu)",
					t->path, t->key, ext,
					(unsigned long long)m.header_offset);
			goto out;
		}
		t->seen[f] = 1;
		/* labels of the first sample decide the schema */
		if (in_range(t) || (t->label[f] && !t->schema_known)) {
			r = tar_read_data(&rd, &m, &t->values[f], err, errlen);
			if (r < 0)
				goto out;
		}
	}
	if (r == 0)
		r = finish_sample(t, err, errlen);
	/* a sample never spans two tars */
	free(t->key);
	t->key = NULL;
out:
	tar_close(&rd);
	return r;
}

/* One pass over every tar, in order; returns as walk_tar(). */
static int walk(struct tar_walk *t, char *err, size_t errlen)
{
	int r = 0;

	t->sample = UINT64_MAX;
	free(t->key);
	t->key = NULL;
	for (size_t k = 0; r == 0 && k < t->src.n; k++) {
		t->path = t->src.paths[k];
		r = walk_tar(t, err, errlen);
	}
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
	t.key_field = o->tar_drop_key ? -1 : 0;
	t.path = o->src;
	r = tar_sources_expand(o->src, &t.src, err, errlen);
	if (r < 0)
		return r;
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
	tar_sources_free(&t.src);
	return r;
}
