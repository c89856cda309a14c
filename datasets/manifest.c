/*
 * manifest.c - dataset.json: atomic writing, and strict reading of the
 * untrusted text back into a struct manifest.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "identity.h"
#include "json.h"
#include "manifest.h"
#include "shard_internal.h"

static void put_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void put_manifest(FILE *f, const struct manifest *m)
{
	char hex[DATASET_ID_HEX_LEN + 1] = "";

	if (m->bound)
		dataset_id_hex(m->dataset_id, hex);
	fprintf(f, "{\"format\":\"dlpack-shard\",\"version\":%u,%s%s%s"
		   "\"records\":%llu,\"raw_bytes\":%llu,\"stored_bytes\":%llu,"
		   "\n\"fields\":[",
		m->bound ? DLS_MANIFEST_VERSION : DLS_VERSION_UNBOUND,
		m->bound ? "\"dataset_id\":\"" : "", hex, m->bound ? "\"," : "",
		(unsigned long long)m->records,
		(unsigned long long)m->raw_bytes,
		(unsigned long long)m->stored_bytes);
	for (uint32_t i = 0; i < m->schema.nfields; i++) {
		const struct sluice_field *fl = &m->schema.fields[i].f;

		fprintf(f, "%s\n {\"name\":", i ? "," : "");
		put_json_string(f, fl->name);
		fprintf(f, ",\"dtype\":\"%s\",\"shape\":[",
			sluice_dtype_name(fl->dtype));
		for (int32_t d = 0; d < fl->ndim; d++)
			fprintf(f, "%s%lld", d ? "," : "",
				(long long)fl->shape[d]);
		fputs("]}", f);
	}
	fputc(']', f);
	if (m->classes.n) {
		fputs(",\n\"classes\":{", f);
		put_json_string(f, m->classes.field);
		fputs(":[", f);
		for (uint32_t i = 0; i < m->classes.n; i++) {
			if (i)
				fputc(',', f);
			put_json_string(f, m->classes.names[i]);
		}
		fputs("]}", f);
	}
	fputs(",\n\"shards\":[", f);
	for (uint32_t i = 0; i < m->nshards; i++) {
		const struct manifest_shard *s = &m->shards[i];

		fprintf(f, "%s\n {\"file\":", i ? "," : "");
		put_json_string(f, s->file);
		fprintf(f, ",\"records\":%llu,\"blocks\":%llu,\"bytes\":%llu",
			(unsigned long long)s->records,
			(unsigned long long)s->blocks,
			(unsigned long long)s->bytes);
		if (s->id.bound) {
			dataset_id_hex(s->id.dataset_id, hex);
			fprintf(f, ",\"dataset_id\":\"%s\",\"index\":%u,"
				   "\"checksum\":\"%016llx\"", hex, s->id.index,
				(unsigned long long)s->id.checksum);
		}
		fputc('}', f);
	}
	fputs("]}\n", f);
}

int manifest_write(const char *dir, const struct manifest *m, char *err,
		   size_t errlen)
{
	char tmp[4096], final[4096];
	FILE *f = NULL;
	int fd = -1, r = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir,
			     DLS_MANIFEST_NAME) >= sizeof(tmp) ||
	    (size_t)snprintf(final, sizeof(final), "%s/%s", dir,
			     DLS_MANIFEST_NAME) >= sizeof(final)) {
		errf(err, errlen, "%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		errf(err, errlen, "%s: %s", tmp, sluice_strerror(r));
		return r;
	}
	f = fdopen(fd, "w");
	if (!f) {
		r = -errno;
		close(fd);
		goto fail;
	}
	put_manifest(f, m);
	if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
		r = -errno;
		if (r == 0)
			r = -EIO;
		fclose(f);
		goto fail;
	}
	if (fclose(f) != 0) {
		r = -errno;
		goto fail;
	}
	if (rename(tmp, final) != 0) {
		r = -errno;
		goto fail;
	}
	/* The rename itself is durable only once the directory is synced. */
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		if (fsync(fd) != 0)
			r = -errno;
		close(fd);
	}
	if (r < 0)
		errf(err, errlen, "%s: fsync: %s", dir, sluice_strerror(r));
	return r;
fail:
	errf(err, errlen, "%s: %s", tmp, sluice_strerror(r));
	unlink(tmp);
	return r;
}

#define BAD(...)                                                           \
	do {                                                               \
		errf(err, errlen, __VA_ARGS__);                            \
		r = -SLUICE_ECORRUPT;                                      \
		goto fail;                                                 \
	} while (0)

static int parse_fields(const struct json_value *arr, struct shard_schema *s,
			char *err, size_t errlen)
{
	struct sluice_field fields[DLS_MAX_FIELDS];
	char what[200];
	int r = 0;

	if (!arr || arr->type != JSON_ARRAY || arr->count < 1 ||
	    arr->count > DLS_MAX_FIELDS)
		BAD("\"fields\": expected an array of 1..%u fields",
		    DLS_MAX_FIELDS);
	memset(fields, 0, sizeof(fields));
	for (size_t i = 0; i < arr->count; i++) {
		const struct json_value *f = &arr->items[i];
		const struct json_value *name = json_get(f, "name");
		const struct json_value *dtype = json_get(f, "dtype");
		const struct json_value *shape = json_get(f, "shape");

		if (!name || name->type != JSON_STRING ||
		    strlen(name->string) >= SLUICE_NAME_MAX)
			BAD("fields[%zu]: bad \"name\"", i);
		memcpy(fields[i].name, name->string, strlen(name->string));
		if (!dtype || dtype->type != JSON_STRING ||
		    sluice_dtype_parse(dtype->string, &fields[i].dtype) < 0)
			BAD("fields[%zu]: bad \"dtype\"", i);
		if (!shape || shape->type != JSON_ARRAY ||
		    shape->count > SLUICE_MAX_NDIM)
			BAD("fields[%zu]: bad \"shape\"", i);
		fields[i].ndim = (int32_t)shape->count;
		for (size_t d = 0; d < shape->count; d++)
			if (json_i64(&shape->items[d], &fields[i].shape[d]) < 0)
				BAD("fields[%zu]: bad \"shape\"", i);
	}
	r = schema_from_fields(fields, (int)arr->count, s, what, sizeof(what));
	if (r < 0)
		BAD("\"fields\": %s", what);
	return 0;
fail:
	return r;
}

/* 16 lower-case hex digits. */
static int parse_checksum(const struct json_value *v, uint64_t *out)
{
	uint64_t x = 0;

	if (!v || v->type != JSON_STRING || strlen(v->string) != 16)
		return -1;
	for (const char *p = v->string; *p; p++) {
		int d = *p >= '0' && *p <= '9'   ? *p - '0'
			: *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
						 : -1;
		if (d < 0)
			return -1;
		x = x << 4 | (uint64_t)d;
	}
	*out = x;
	return 0;
}

static int parse_id(const struct json_value *v, uint8_t *id)
{
	return v && v->type == JSON_STRING &&
			       dataset_id_parse(v->string, id) == 0 ? 0 : -1;
}

/* A shard's identity: all three keys (v2) or none (a v1 shard). */
static int parse_shard_identity(const struct json_value *s,
				struct shard_identity *id)
{
	const struct json_value *did = json_get(s, "dataset_id");
	const struct json_value *idx = json_get(s, "index");
	const struct json_value *sum = json_get(s, "checksum");
	uint64_t index;

	memset(id, 0, sizeof(*id));
	if (!did && !idx && !sum)
		return 0;
	if (parse_id(did, id->dataset_id) < 0 || json_u64(idx, &index) < 0 ||
	    index >= UINT32_MAX || parse_checksum(sum, &id->checksum) < 0)
		return -1;
	id->bound = 1;
	id->index = (uint32_t)index;
	return 0;
}

void dataset_classes_free(struct dataset_classes *c)
{
	for (uint32_t i = 0; i < c->n; i++)
		free(c->names[i]);
	free(c->names);
	memset(c, 0, sizeof(*c));
}

int dataset_classes_set(struct dataset_classes *c, const char *field,
			const char *const *names, uint32_t n)
{
	char **v = NULL;

	if (strlen(field) >= sizeof(c->field) ||
	    n > MANIFEST_MAX_CLASSES)
		return -EINVAL;
	if (n) {
		v = calloc(n, sizeof(*v));
		if (!v)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (strlen(names[i]) >= JSON_MAX_STRING ||
		    !(v[i] = strdup(names[i]))) {
			int r = v[i] || strlen(names[i]) >= JSON_MAX_STRING
					? -EINVAL : -ENOMEM;

			while (i--)
				free(v[i]);
			free(v);
			return r;
		}
	}
	dataset_classes_free(c);
	strcpy(c->field, field);
	c->names = v;
	c->n = n;
	return 0;
}

/* "classes": {"FIELD": ["name", ...]}, optional; the field must be an
 * int64 scalar of the schema. */
static int parse_classes(const struct json_value *v, struct manifest *m,
			 char *err, size_t errlen)
{
	const struct json_value *names;
	const char **list;
	int r;

	if (!v)
		return 0;
	if (v->type != JSON_OBJECT || v->count != 1 ||
	    v->items[0].type != JSON_ARRAY ||
	    v->items[0].count > MANIFEST_MAX_CLASSES) {
		errf(err, errlen, "\"classes\": expected {\"FIELD\": [names]}");
		return -SLUICE_ECORRUPT;
	}
	names = &v->items[0];
	if (strlen(v->keys[0]) >= sizeof(m->classes.field)) {
		errf(err, errlen, "\"classes\": field name too long");
		return -SLUICE_ECORRUPT;
	}
	list = calloc(names->count ? names->count : 1, sizeof(*list));
	if (!list) {
		errf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < names->count; i++) {
		if (names->items[i].type != JSON_STRING) {
			free(list);
			errf(err, errlen, "\"classes\"[%zu]: not a string", i);
			return -SLUICE_ECORRUPT;
		}
		list[i] = names->items[i].string;
	}
	r = dataset_classes_set(&m->classes, v->keys[0], list,
				 (uint32_t)names->count);
	free(list);
	if (r < 0)
		errf(err, errlen, "\"classes\": %s", sluice_strerror(r));
	return r;
}

int manifest_parse(const char *text, size_t len, struct manifest *m,
		   char *err, size_t errlen)
{
	const struct json_value *v, *shards;
	struct json_value root;
	uint64_t version;
	int r;

	memset(m, 0, sizeof(*m));
	r = json_parse(text, len, &root, err, errlen);
	if (r < 0)
		return r;
	if (root.type != JSON_OBJECT)
		BAD("not a JSON object");
	v = json_get(&root, "format");
	if (!v || v->type != JSON_STRING || strcmp(v->string, "dlpack-shard"))
		BAD("\"format\" is not \"dlpack-shard\"");
	if (json_u64(json_get(&root, "version"), &version) < 0 ||
	    (version != DLS_MANIFEST_VERSION && version != DLS_VERSION_UNBOUND))
		BAD("\"version\" is not %u or %u", DLS_VERSION_UNBOUND,
		    DLS_MANIFEST_VERSION);
	if (version == DLS_MANIFEST_VERSION) {
		if (parse_id(json_get(&root, "dataset_id"), m->dataset_id) < 0)
			BAD("\"dataset_id\": expected %u hex digits",
			    DATASET_ID_HEX_LEN);
		m->bound = 1;
	}
	if (json_u64(json_get(&root, "records"), &m->records) < 0 ||
	    json_u64(json_get(&root, "raw_bytes"), &m->raw_bytes) < 0 ||
	    json_u64(json_get(&root, "stored_bytes"), &m->stored_bytes) < 0)
		BAD("\"records\", \"raw_bytes\" or \"stored_bytes\" missing or "
		    "not a count");
	r = parse_fields(json_get(&root, "fields"), &m->schema, err, errlen);
	if (r < 0)
		goto fail;
	r = parse_classes(json_get(&root, "classes"), m, err, errlen);
	if (r < 0)
		goto fail;
	shards = json_get(&root, "shards");
	if (!shards || shards->type != JSON_ARRAY || shards->count > UINT32_MAX)
		BAD("\"shards\": expected an array");
	if (shards->count) {
		m->shards = calloc(shards->count, sizeof(*m->shards));
		if (!m->shards) {
			r = -ENOMEM;
			errf(err, errlen, "out of memory");
			goto fail;
		}
	}
	m->nshards = (uint32_t)shards->count;
	for (size_t i = 0; i < shards->count; i++) {
		const struct json_value *s = &shards->items[i];
		const struct json_value *file = json_get(s, "file");
		struct manifest_shard *ms = &m->shards[i];

		if (!file || file->type != JSON_STRING ||
		    strlen(file->string) >= MANIFEST_FILE_MAX ||
		    !shard_name_is_plain(file->string))
			BAD("shards[%zu]: \"file\" is not a plain file name", i);
		strcpy(ms->file, file->string);
		if (json_u64(json_get(s, "records"), &ms->records) < 0 ||
		    json_u64(json_get(s, "blocks"), &ms->blocks) < 0 ||
		    json_u64(json_get(s, "bytes"), &ms->bytes) < 0)
			BAD("shards[%zu]: bad \"records\", \"blocks\" or "
			    "\"bytes\"", i);
		if (parse_shard_identity(s, &ms->id) < 0 ||
		    (ms->id.bound && !m->bound))
			BAD("shards[%zu]: bad \"dataset_id\", \"index\" or "
			    "\"checksum\" (all three, in a version %u manifest)",
			    i, DLS_MANIFEST_VERSION);
	}
	json_free(&root);
	return 0;
fail:
	json_free(&root);
	manifest_free(m);
	return r;
}

int manifest_read(const char *dir, struct manifest *m, char *err,
		  size_t errlen)
{
	char path[4096], what[300];
	struct stat st;
	char *text = NULL;
	size_t got = 0;
	int fd, r = 0;

	memset(m, 0, sizeof(*m));
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
			     DLS_MANIFEST_NAME) >= sizeof(path)) {
		errf(err, errlen, "%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	fd = file_open_regular(path, O_RDONLY, &st, err, errlen);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > MANIFEST_MAX_BYTES) {
		r = -SLUICE_ECORRUPT;
		errf(err, errlen, "%s: %llu bytes, more than a manifest's %u",
		     path, (unsigned long long)st.st_size, MANIFEST_MAX_BYTES);
		goto out;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		r = -ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			errf(err, errlen, "%s: %s", path, sluice_strerror(r));
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	r = manifest_parse(text, got, m, what, sizeof(what));
	if (r < 0)
		errf(err, errlen, "%s: %s", path, what);
out:
	free(text);
	close(fd);
	return r;
}

void manifest_free(struct manifest *m)
{
	if (!m)
		return;
	free(m->shards);
	dataset_classes_free(&m->classes);
	memset(m, 0, sizeof(*m));
}
