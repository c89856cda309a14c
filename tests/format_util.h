/*
 * format_util.h - helpers shared by the format tests: a scratch
 * directory, and a deterministic record generator over a schema with
 * fixed fields of several dtypes and two variable fields.
 */
#ifndef SLUICE_TESTS_FORMAT_UTIL_H
#define SLUICE_TESTS_FORMAT_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "dlpack_shard.h"
#include "sluice.h"
#include "t.h"

/* snprintf into an array, failing the test on truncation. */
#define TU_FMT(buf, ...)                                                    \
	do {                                                                \
		if ((size_t)snprintf((buf), sizeof(buf), __VA_ARGS__) >=    \
		    sizeof(buf))                                            \
			T_FAIL_AT("string too long");                       \
	} while (0)

static int tu_rm_one(const char *p, const struct stat *sb, int flag,
		     struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p);
}

static inline void tu_rmrf(const char *dir)
{
	nftw(dir, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char tu_root[512];

static void tu_cleanup(void)
{
	if (tu_root[0])
		tu_rmrf(tu_root);
}

/* A fresh scratch directory, removed at exit. */
static inline const char *tu_scratch(const char *name)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(tu_root, sizeof(tu_root), "%s/sluice-%s-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp", name);
	if (!mkdtemp(tu_root))
		T_FAIL_AT("mkdtemp %s failed", tu_root);
	atexit(tu_cleanup);
	return tu_root;
}

static inline void tu_field(struct sluice_field *f, const char *name,
			    const char *dtype, int ndim, int64_t d0,
			    int64_t d1)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	T_OK(sluice_dtype_parse(dtype, &f->dtype));
	f->ndim = ndim;
	f->shape[0] = d0;
	f->shape[1] = d1;
}

/* label int64 scalar, feat float32 [3,4], half float16 [2],
 * flag bool [1], img uint8 [-1], tokens int32 [-1]. */
#define TU_NFIELDS 6
static inline void tu_schema(struct sluice_field *f)
{
	tu_field(&f[0], "label", "int64", 0, 0, 0);
	tu_field(&f[1], "feat", "float32", 2, 3, 4);
	tu_field(&f[2], "half", "float16", 1, 2, 0);
	tu_field(&f[3], "flag", "bool", 1, 1, 0);
	tu_field(&f[4], "img", "uint8", 1, -1, 0);
	tu_field(&f[5], "tokens", "int32", 1, -1, 0);
}

/* The values of record @i, into @buf (>= 64 KiB); every 5th record has
 * an empty img, every 11th no tokens.  @big makes img @big bytes. */
struct tu_record {
	const void *values[TU_NFIELDS];
	uint64_t lengths[TU_NFIELDS];
};

static inline void tu_make(uint64_t i, uint8_t *buf, uint64_t big,
			   struct tu_record *r)
{
	int64_t label = (int64_t)(i * 7) - 3;
	uint8_t *p = buf;
	uint64_t n;

	memcpy(p, &label, 8);
	r->values[0] = p; r->lengths[0] = 8; p += 8;
	for (int k = 0; k < 12; k++) {
		float v = (float)i + (float)k * 0.25f;
		memcpy(p + 4 * k, &v, 4);
	}
	r->values[1] = p; r->lengths[1] = 48; p += 48;
	p[0] = (uint8_t)i; p[1] = 0x3c; p[2] = (uint8_t)(i >> 8); p[3] = 0x40;
	r->values[2] = p; r->lengths[2] = 4; p += 4;
	p[0] = (uint8_t)(i & 1);
	r->values[3] = p; r->lengths[3] = 1; p += 1;
	n = big ? big : (i % 5 == 0 ? 0 : (i * 37) % 300);
	for (uint64_t k = 0; k < n; k++)
		p[k] = (uint8_t)(i + k / 3);
	r->values[4] = p; r->lengths[4] = n; p += n;
	n = i % 11;
	for (uint64_t k = 0; k < n; k++) {
		int32_t t = (int32_t)(i * 100 + k);
		memcpy(p + 4 * k, &t, 4);
	}
	r->values[5] = p; r->lengths[5] = 4 * n;
}

/* Check every field of record @idx of @ds against record @i. */
static inline void tu_check(sluice_dataset *ds, uint64_t idx, uint64_t i,
			    uint64_t big)
{
	static uint8_t want[1 << 20], got[1 << 20];
	static const char *names[TU_NFIELDS] = { "label", "feat", "half",
						 "flag", "img", "tokens" };
	struct tu_record r;
	size_t len;

	tu_make(i, want, big, &r);
	for (int f = 0; f < TU_NFIELDS; f++) {
		int rc = sluice_dataset_read(ds, idx, names[f], got,
					     sizeof(got), &len);
		if (rc != 0) {
			char msg[512];
			sluice_dataset_error(ds, msg, sizeof(msg));
			T_FAIL_AT("record %llu field %s: %s (%s)",
				  (unsigned long long)idx, names[f],
				  sluice_strerror(rc), msg);
		}
		T_EQ(len, r.lengths[f]);
		T_MEMEQ(got, r.values[f], len);
	}
}

/* Write @n records (record i from tu_make) into @dir. */
static inline int tu_write(const char *dir,
			   const struct sluice_writer_config *cfg,
			   uint64_t n, uint64_t first,
			   struct sluice_writer_summary *sum)
{
	static uint8_t buf[1 << 20];
	struct sluice_field f[TU_NFIELDS];
	struct tu_record r;
	sluice_writer *w;
	int rc;

	tu_schema(f);
	rc = sluice_writer_open(dir, f, TU_NFIELDS, cfg, &w);
	if (rc < 0) {
		sluice_writer_abort(w);
		return rc;
	}
	for (uint64_t i = first; i < first + n; i++) {
		tu_make(i, buf, 0, &r);
		rc = sluice_writer_add(w, r.values, r.lengths);
		if (rc < 0) {
			sluice_writer_abort(w);
			return rc;
		}
	}
	return sluice_writer_close(w, sum);
}

/* The whole file @p in memory (caller frees); *@n its size. */
static inline uint8_t *tu_slurp(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	uint8_t *b;
	long sz;

	T_ASSERT(f);
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)sz + 1);
	T_ASSERT(b);
	T_EQ(fread(b, 1, (size_t)sz, f), sz);
	fclose(f);
	*n = (size_t)sz;
	return b;
}

/*
 * Turn the shard image @img (*@n bytes, format v3) into a format v2 one:
 * the record checksums cut off the end, their header fields zeroed, the
 * header checksum redone.  *@n becomes the shorter size.  Older datasets
 * for the tests that they still load.
 */
static inline void tu_drop_record_sums(uint8_t *img, size_t *n)
{
	struct dls_header_disk h;
	uint64_t sum;

	memcpy(&h, img, sizeof(h));
	T_EQ(h.version, DLS_VERSION);
	T_ASSERT(h.record_sums_offset + h.record_sums_length == *n);
	*n = (size_t)h.record_sums_offset;
	h.version = DLS_VERSION_NO_RECORD_SUMS;
	h.record_sums_offset = h.record_sums_length = 0;
	h.record_sums_checksum = 0;
	memcpy(img, &h, sizeof(h));
	sum = XXH3_64bits(img, DLS_HEADER_CHECKSUM_OFFSET);
	memcpy(img + DLS_HEADER_CHECKSUM_OFFSET, &sum, 8);
}

/* Write @n bytes of @img to @p (replacing it). */
static inline void tu_spit(const char *p, const uint8_t *img, size_t n)
{
	FILE *f = fopen(p, "wb");

	T_ASSERT(f);
	T_EQ(fwrite(img, 1, n, f), n);
	T_EQ(fclose(f), 0);
}

#endif /* SLUICE_TESTS_FORMAT_UTIL_H */
