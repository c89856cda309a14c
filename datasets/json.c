/*
 * json.c - strict recursive-descent JSON into a small tree.  Input is
 * untrusted: depth, string length and element counts are bounded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "shard_internal.h"

struct json_parser {
	const char *s;
	size_t len, pos;
	char *err;
	size_t errlen;
};

static int perr(struct json_parser *p, const char *what)
{
	errf(p->err, p->errlen, "offset %zu: %s", p->pos, what);
	return -SLUICE_ECORRUPT;
}

static void skip_ws(struct json_parser *p)
{
	while (p->pos < p->len &&
	       (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
		p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static int hex4(struct json_parser *p, unsigned *out)
{
	unsigned v = 0;

	if (p->len - p->pos < 4)
		return perr(p, "short \\u escape");
	for (int i = 0; i < 4; i++) {
		char c = p->s[p->pos++];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return perr(p, "bad \\u escape");
	}
	*out = v;
	return 0;
}

/* Appends one code point as UTF-8; @buf has room (checked by caller). */
static size_t put_utf8(char *buf, unsigned cp)
{
	if (cp < 0x80) {
		buf[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		buf[0] = (char)(0xc0 | (cp >> 6));
		buf[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		buf[0] = (char)(0xe0 | (cp >> 12));
		buf[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		buf[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	buf[0] = (char)(0xf0 | (cp >> 18));
	buf[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	buf[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	buf[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int parse_string(struct json_parser *p, char **out)
{
	char buf[JSON_MAX_STRING + 8];
	size_t n = 0;
	unsigned cp, lo;
	int r;

	p->pos++; /* opening quote */
	for (;;) {
		unsigned char c;

		if (p->pos >= p->len)
			return perr(p, "unterminated string");
		if (n > JSON_MAX_STRING)
			return perr(p, "string too long");
		c = (unsigned char)p->s[p->pos++];
		if (c == '"')
			break;
		if (c < 0x20)
			return perr(p, "control character in string");
		if (c != '\\') {
			buf[n++] = (char)c;
			continue;
		}
		if (p->pos >= p->len)
			return perr(p, "unterminated escape");
		c = (unsigned char)p->s[p->pos++];
		switch (c) {
		case '"': case '\\': case '/': buf[n++] = (char)c; break;
		case 'b': buf[n++] = '\b'; break;
		case 'f': buf[n++] = '\f'; break;
		case 'n': buf[n++] = '\n'; break;
		case 'r': buf[n++] = '\r'; break;
		case 't': buf[n++] = '\t'; break;
		case 'u':
			if ((r = hex4(p, &cp)) < 0)
				return r;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return perr(p, "lone low surrogate");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (p->len - p->pos < 2 || p->s[p->pos] != '\\' ||
				    p->s[p->pos + 1] != 'u')
					return perr(p, "lone high surrogate");
				p->pos += 2;
				if ((r = hex4(p, &lo)) < 0)
					return r;
				if (lo < 0xdc00 || lo > 0xdfff)
					return perr(p, "bad surrogate pair");
				cp = 0x10000 + ((cp - 0xd800) << 10) +
				     (lo - 0xdc00);
			}
			if (cp == 0)
				return perr(p, "\\u0000 in string");
			n += put_utf8(buf + n, cp);
			break;
		default:
			return perr(p, "bad escape");
		}
	}
	*out = malloc(n + 1);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, buf, n);
	(*out)[n] = '\0';
	return 0;
}

static int parse_number(struct json_parser *p, struct json_value *v)
{
	uint64_t m = 0;
	size_t start;

	v->type = JSON_INT;
	if (p->s[p->pos] == '-') {
		v->negative = 1;
		p->pos++;
	}
	start = p->pos;
	while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
		unsigned d = (unsigned)(p->s[p->pos] - '0');

		if (__builtin_mul_overflow(m, 10u, &m) ||
		    __builtin_add_overflow(m, d, &m))
			return perr(p, "integer too large");
		p->pos++;
	}
	if (p->pos == start)
		return perr(p, "bad number");
	if (p->pos - start > 1 && p->s[start] == '0')
		return perr(p, "leading zero");
	if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' ||
				p->s[p->pos] == 'E'))
		return perr(p, "only integers are expected here");
	v->magnitude = m;
	return 0;
}

static int parse_value(struct json_parser *p, struct json_value *v, int depth);

/* Grow an array of @size-byte items to hold @n + 1. */
static int grow(void **items, size_t n, size_t *cap, size_t size)
{
	void *nv;

	if (n < *cap)
		return 0;
	*cap = *cap ? *cap * 2 : 4;
	nv = realloc(*items, *cap * size);
	if (!nv)
		return -ENOMEM;
	*items = nv;
	return 0;
}

static int parse_container(struct json_parser *p, struct json_value *v,
			   int depth)
{
	int is_obj = p->s[p->pos] == '{';
	char close = is_obj ? '}' : ']';
	size_t cap = 0, kcap = 0;
	int r;

	v->type = is_obj ? JSON_OBJECT : JSON_ARRAY;
	if (depth >= JSON_MAX_DEPTH)
		return perr(p, "nested too deeply");
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		return 0;
	}
	for (;;) {
		char *key = NULL;

		skip_ws(p);
		if (is_obj) {
			if (p->pos >= p->len || p->s[p->pos] != '"')
				return perr(p, "expected a key");
			if ((r = parse_string(p, &key)) < 0)
				return r;
			for (size_t i = 0; i < v->count; i++) {
				if (strcmp(v->keys[i], key) == 0) {
					free(key);
					return perr(p, "duplicate key");
				}
			}
			if ((r = grow((void **)&v->keys, v->count, &kcap,
				      sizeof(char *))) < 0) {
				free(key);
				return r;
			}
			v->keys[v->count] = key;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':') {
				free(key);
				return perr(p, "expected ':'");
			}
			p->pos++;
		}
		if ((r = grow((void **)&v->items, v->count, &cap,
			      sizeof(*v->items))) < 0) {
			free(key);
			return r;
		}
		memset(&v->items[v->count], 0, sizeof(*v->items));
		/* Count it first so that json_free frees a half-parsed item. */
		v->count++;
		if ((r = parse_value(p, &v->items[v->count - 1], depth + 1)) < 0)
			return r;
		skip_ws(p);
		if (p->pos >= p->len)
			return perr(p, "unterminated container");
		if (p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->s[p->pos] == close) {
			p->pos++;
			return 0;
		}
		return perr(p, "expected ',' or a closing bracket");
	}
}

static int literal(struct json_parser *p, const char *word)
{
	size_t n = strlen(word);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
		return perr(p, "unexpected character");
	p->pos += n;
	return 0;
}

static int parse_value(struct json_parser *p, struct json_value *v, int depth)
{
	char c;

	skip_ws(p);
	if (p->pos >= p->len)
		return perr(p, "unexpected end");
	c = p->s[p->pos];
	switch (c) {
	case '{':
	case '[':
		return parse_container(p, v, depth);
	case '"':
		v->type = JSON_STRING;
		return parse_string(p, &v->string);
	case 't':
		v->type = JSON_BOOL;
		v->magnitude = 1;
		return literal(p, "true");
	case 'f':
		v->type = JSON_BOOL;
		return literal(p, "false");
	case 'n':
		v->type = JSON_NULL;
		return literal(p, "null");
	default:
		if (c == '-' || (c >= '0' && c <= '9'))
			return parse_number(p, v);
		return perr(p, "unexpected character");
	}
}

int json_parse(const char *text, size_t len, struct json_value *out,
	       char *err, size_t errlen)
{
	struct json_parser p = { text, len, 0, err, errlen };
	int r;

	memset(out, 0, sizeof(*out));
	r = parse_value(&p, out, 0);
	if (r == 0) {
		skip_ws(&p);
		if (p.pos != p.len)
			r = perr(&p, "trailing bytes after the value");
	}
	if (r == -ENOMEM)
		errf(err, errlen, "out of memory");
	if (r < 0)
		json_free(out);
	return r;
}

void json_free(struct json_value *v)
{
	if (!v)
		return;
	free(v->string);
	for (size_t i = 0; i < v->count; i++) {
		if (v->items)
			json_free(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	memset(v, 0, sizeof(*v));
}

const struct json_value *json_get(const struct json_value *obj,
				  const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	for (size_t i = 0; i < obj->count; i++)
		if (strcmp(obj->keys[i], key) == 0)
			return &obj->items[i];
	return NULL;
}

int json_u64(const struct json_value *v, uint64_t *out)
{
	if (!v || v->type != JSON_INT || (v->negative && v->magnitude))
		return -1;
	*out = v->magnitude;
	return 0;
}

int json_i64(const struct json_value *v, int64_t *out)
{
	if (!v || v->type != JSON_INT)
		return -1;
	if (v->negative) {
		if (v->magnitude > (uint64_t)INT64_MAX + 1)
			return -1;
		*out = (int64_t)(0 - v->magnitude);
	} else {
		if (v->magnitude > (uint64_t)INT64_MAX)
			return -1;
		*out = (int64_t)v->magnitude;
	}
	return 0;
}
