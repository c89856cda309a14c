/*
 * import_npy_header.c - the .npy header is a Python dict literal written
 * by numpy; we accept exactly that grammar and nothing else:
 *
 *   { 'descr': STR, 'fortran_order': True|False, 'shape': TUPLE, }
 *
 * keys in any order, each once, quotes ' or ", an optional trailing
 * comma, then space padding and a newline.  The text is untrusted.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "import_common.h"
#include "import_npy_header.h"

struct cursor {
	const char *p, *end;
};

static void skip_ws(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
}

static int eat(struct cursor *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return 1;
	}
	return 0;
}

/* A quoted string without escapes; *@s, *@n point into the text. */
static int parse_string(struct cursor *c, const char **s, size_t *n)
{
	char q;
	const char *start;

	skip_ws(c);
	if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
		return -1;
	q = *c->p++;
	start = c->p;
	while (c->p < c->end && *c->p != q) {
		if (*c->p == '\\' || (unsigned char)*c->p < 0x20)
			return -1;
		c->p++;
	}
	if (c->p >= c->end)
		return -1;
	*s = start;
	*n = (size_t)(c->p - start);
	c->p++;
	return 0;
}

static int parse_uint(struct cursor *c, uint64_t *out)
{
	uint64_t v = 0;
	const char *start;

	skip_ws(c);
	start = c->p;
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*c->p - '0');
		c->p++;
	}
	if (c->p == start)
		return -1;
	if (c->p < c->end && *c->p == 'L')  /* Python 2 longs */
		c->p++;
	*out = v;
	return 0;
}

/* "()", "(N,)", "(N, M)", "(N, M,)". */
static int parse_shape(struct cursor *c, struct npy_header *h)
{
	if (!eat(c, '('))
		return -1;
	h->ndim = 0;
	if (eat(c, ')'))
		return 0;
	for (;;) {
		if (h->ndim == NPY_MAX_DIMS)
			return -1;
		if (parse_uint(c, &h->shape[h->ndim]) < 0)
			return -1;
		h->ndim++;
		if (eat(c, ')'))
			return h->ndim == 1 ? -1 : 0;  /* "(N)" is not a tuple */
		if (!eat(c, ','))
			return -1;
		if (eat(c, ')'))
			return 0;
	}
}

struct npy_dtype_name {
	const char *code;  /* without the byte-order character */
	uint8_t dl_code, bits;
};

static const struct npy_dtype_name dtypes[] = {
	{ "i1", kDLInt, 8 },   { "i2", kDLInt, 16 },  { "i4", kDLInt, 32 },
	{ "i8", kDLInt, 64 },  { "u1", kDLUInt, 8 },  { "u2", kDLUInt, 16 },
	{ "u4", kDLUInt, 32 }, { "u8", kDLUInt, 64 }, { "f2", kDLFloat, 16 },
	{ "f4", kDLFloat, 32 }, { "f8", kDLFloat, 64 }, { "b1", kDLBool, 8 },
};

static int parse_descr(const char *s, size_t n, struct npy_header *h,
		       char *err, size_t errlen)
{
	char order;

	if (n == 2 && memcmp(s, "|O", 2) == 0)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "object arrays ('|O') are not supported");
	if (n != 3)
		goto unsupported;
	order = s[0];
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
		const struct npy_dtype_name *d = &dtypes[i];

		if (memcmp(s + 1, d->code, 2) != 0)
			continue;
		/* Byte order means nothing for one byte; numpy writes '|'. */
		if (d->bits == 8 ? order != '|' && order != '<' &&
					   order != '>' && order != '='
				 : order != '<') {
			if (order == '>')
				return import_fail(err, errlen,
						   -SLUICE_EINPUT,
						   "big-endian dtype '%.3s' is "
						   "not supported (save it as "
						   "'<%.2s')",
						   s, s + 1);
			goto unsupported;
		}
		h->dtype = (DLDataType){ .code = d->dl_code, .bits = d->bits,
					 .lanes = 1 };
		h->item_bytes = d->bits / 8u;
		return 0;
	}
unsupported:
	return import_fail(err, errlen, -SLUICE_EINPUT,
			   "unsupported dtype '%.*s' (supported: |i1 <i2 <i4 "
			   "<i8 |u1 <u2 <u4 <u8 <f2 <f4 <f8 |b1)",
			   (int)(n > 32 ? 32 : n), s);
}

int npy_preamble(const uint8_t *p, size_t len, uint64_t *hdr_start,
		 uint32_t *hdr_len, char *err, size_t errlen)
{
	if (len < 10 || memcmp(p, "\x93NUMPY", 6) != 0)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "not a .npy file (bad magic)");
	switch (p[6]) {
	case 1:
		*hdr_start = 10;
		*hdr_len = (uint32_t)p[8] | (uint32_t)p[9] << 8;
		break;
	case 2:
	case 3:
		if (len < 12)
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "truncated .npy preamble");
		*hdr_start = 12;
		*hdr_len = (uint32_t)p[8] | (uint32_t)p[9] << 8 |
			   (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
		break;
	default:
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "unsupported .npy version %u.%u", p[6],
				   p[7]);
	}
	if (*hdr_len == 0 || *hdr_len > NPY_MAX_HEADER)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "implausible .npy header length %u",
				   *hdr_len);
	return 0;
}

static int bad(char *err, size_t errlen, const struct cursor *c,
	       const char *text, const char *what)
{
	return import_fail(err, errlen, -SLUICE_EINPUT,
			   "malformed .npy header at byte %zu: %s",
			   (size_t)(c->p - text), what);
}

int npy_parse_dict(const char *text, size_t len, struct npy_header *out,
		   char *err, size_t errlen)
{
	struct cursor c = { text, text + len };
	int have_descr = 0, have_order = 0, have_shape = 0;
	const char *descr = NULL;
	size_t descr_len = 0;
	int fortran = 0;

	memset(out, 0, sizeof(*out));
	if (!eat(&c, '{'))
		return bad(err, errlen, &c, text, "expected '{'");
	while (!eat(&c, '}')) {
		const char *key;
		size_t klen;

		if (parse_string(&c, &key, &klen) < 0)
			return bad(err, errlen, &c, text, "expected a key");
		if (!eat(&c, ':'))
			return bad(err, errlen, &c, text, "expected ':'");
		skip_ws(&c);
		if (klen == 5 && memcmp(key, "descr", 5) == 0 &&
		    !have_descr) {
			if (c.p < c.end && (*c.p == '[' || *c.p == '{'))
				return import_fail(err, errlen,
						   -SLUICE_EINPUT,
						   "structured dtypes are not "
						   "supported");
			if (parse_string(&c, &descr, &descr_len) < 0)
				return bad(err, errlen, &c, text,
					   "bad 'descr'");
			have_descr = 1;
		} else if (klen == 13 &&
			   memcmp(key, "fortran_order", 13) == 0 &&
			   !have_order) {
			if ((size_t)(c.end - c.p) >= 4 &&
			    memcmp(c.p, "True", 4) == 0) {
				fortran = 1;
				c.p += 4;
			} else if ((size_t)(c.end - c.p) >= 5 &&
				   memcmp(c.p, "False", 5) == 0) {
				c.p += 5;
			} else {
				return bad(err, errlen, &c, text,
					   "bad 'fortran_order'");
			}
			have_order = 1;
		} else if (klen == 5 && memcmp(key, "shape", 5) == 0 &&
			   !have_shape) {
			if (parse_shape(&c, out) < 0)
				return bad(err, errlen, &c, text,
					   "bad 'shape'");
			have_shape = 1;
		} else {
			return bad(err, errlen, &c, text,
				   "unknown or repeated key");
		}
		if (!eat(&c, ',')) {
			if (!eat(&c, '}'))
				return bad(err, errlen, &c, text,
					   "expected ',' or '}'");
			break;
		}
	}
	/* Only padding may follow: spaces, ending in one newline. */
	while (c.p < c.end && *c.p == ' ')
		c.p++;
	if (c.p < c.end && *c.p == '\n')
		c.p++;
	if (c.p != c.end)
		return bad(err, errlen, &c, text, "junk after the dict");
	if (!have_descr || !have_order || !have_shape)
		return bad(err, errlen, &c, text,
			   "'descr', 'fortran_order' or 'shape' missing");
	if (fortran)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "Fortran-order arrays are not supported "
				   "(save with np.ascontiguousarray)");
	return parse_descr(descr, descr_len, out, err, errlen);
}
