/*
 * json.h - a small strict JSON reader for untrusted manifests: integers
 * only (no fractions or exponents), bounded depth and sizes, duplicate
 * keys rejected.  Never crashes on any input.
 */
#ifndef SLUICE_DATASETS_JSON_H
#define SLUICE_DATASETS_JSON_H

#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 32
#define JSON_MAX_STRING 4096

enum json_type { JSON_NULL, JSON_BOOL, JSON_INT, JSON_STRING, JSON_ARRAY,
		 JSON_OBJECT };

struct json_value {
	enum json_type type;
	int negative;           /* JSON_INT: sign */
	uint64_t magnitude;     /* JSON_INT: absolute value; JSON_BOOL: 0/1 */
	char *string;           /* JSON_STRING */
	size_t count;           /* ARRAY / OBJECT */
	struct json_value *items;
	char **keys;            /* OBJECT */
};

/* Parse the whole of @text.  @return 0, -SLUICE_ECORRUPT ("offset N:
 * what" in @err) or -ENOMEM. */
int json_parse(const char *text, size_t len, struct json_value *out,
	       char *err, size_t errlen);
void json_free(struct json_value *v);

/* Member @key of object @obj, or NULL. */
const struct json_value *json_get(const struct json_value *obj,
				  const char *key);

/* JSON_INT within [0, UINT64_MAX] or [INT64_MIN, INT64_MAX]: 0 or -1. */
int json_u64(const struct json_value *v, uint64_t *out);
int json_i64(const struct json_value *v, int64_t *out);

#endif /* SLUICE_DATASETS_JSON_H */
