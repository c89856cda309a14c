/*
 * test_corrupt.c - damaged shards and manifests: truncation, flipped
 * bytes in header, index and blocks, wrong magic, absurd sizes with valid
 * checksums, a missing shard, garbage JSON.  Each must fail cleanly with
 * a message naming the file (and block and offset where they apply).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "format_util.h"
#include "manifest.h"
#include "shard.h"

static char base[1024];     /* the pristine dataset */
static char work[1024];     /* a damaged copy */
static char shard[1100];    /* work/data-00000.dls */
static int copies;

static void spit(const char *p, const void *b, size_t n)
{
	FILE *f = fopen(p, "wb");

	T_ASSERT(f);
	T_EQ(fwrite(b, 1, n, f), n);
	T_EQ(fclose(f), 0);
}

/* A fresh copy of the pristine dataset; returns the shard image. */
static uint8_t *fresh_copy(const char *root, size_t *n)
{
	char src[1100], dst[1100];
	uint8_t *b;
	size_t mn;

	TU_FMT(work, "%s/copy%d", root, copies++);
	T_EQ(mkdir(work, 0755), 0);
	TU_FMT(src, "%s/dataset.json", base);
	TU_FMT(dst, "%s/dataset.json", work);
	b = tu_slurp(src, &mn);
	spit(dst, b, mn);
	free(b);
	TU_FMT(src, "%s/data-00000.dls", base);
	TU_FMT(shard, "%s/data-00000.dls", work);
	b = tu_slurp(src, n);
	spit(shard, b, *n);
	return b;
}

struct lines {
	char text[8192];
	int count;
};

static void collect(void *ctx, const char *line)
{
	struct lines *l = ctx;
	size_t used = strlen(l->text);

	snprintf(l->text + used, sizeof(l->text) - used, "%s\n", line);
	l->count++;
}

/* Opening @what fails with @code and a message containing @needle. */
static void expect_open_fails(const char *what, int code, const char *needle)
{
	sluice_dataset *ds;
	char msg[512];
	int r = sluice_dataset_open(what, &ds);

	if (r != code) {
		sluice_dataset_error(ds, msg, sizeof(msg));
		T_FAIL_AT("open %s: %d (%s), expected %d; message: %s", what, r,
			  sluice_strerror(r), code, msg);
	}
	sluice_dataset_error(ds, msg, sizeof(msg));
	T_CONTAINS(msg, needle);
	sluice_dataset_close(ds);
}

static void rewrite_header_checksum(uint8_t *img)
{
	uint64_t sum = XXH3_64bits(img, DLS_HEADER_CHECKSUM_OFFSET);

	memcpy(img + DLS_HEADER_CHECKSUM_OFFSET, &sum, 8);
}

static void test_truncation(const char *root, const uint8_t *img, size_t n)
{
	struct dls_header_disk h;
	size_t cuts[8];
	int ncuts = 0;

	memcpy(&h, img, sizeof(h));
	cuts[ncuts++] = 0;
	cuts[ncuts++] = 100;
	cuts[ncuts++] = DLS_HEADER_SIZE - 1;
	cuts[ncuts++] = DLS_HEADER_SIZE + 100;          /* inside block 0 */
	cuts[ncuts++] = (size_t)h.index_offset - 1;     /* before the index */
	cuts[ncuts++] = (size_t)h.index_offset + 10;    /* inside the index */
	cuts[ncuts++] = n - 1;
	for (int i = 0; i < ncuts; i++) {
		struct lines l = { { 0 }, 0 };
		size_t dummy;

		free(fresh_copy(root, &dummy));
		spit(shard, img, cuts[i]);
		expect_open_fails(shard, -SLUICE_ECORRUPT, "truncated");
		expect_open_fails(work, -SLUICE_ECORRUPT, "data-00000.dls");
		T_ASSERT(dataset_verify(work, collect, &l) >= 1);
		T_CONTAINS(l.text, "data-00000.dls");
	}
}

static void test_header_index_flips(const char *root)
{
	struct dls_header_disk h;
	uint8_t *img;
	size_t n;

	/* A flipped header byte (the field count). */
	img = fresh_copy(root, &n);
	img[offsetof(struct dls_header_disk, field_count)] ^= 0x40;
	spit(shard, img, n);
	expect_open_fails(shard, -SLUICE_ECORRUPT, "header checksum mismatch");
	expect_open_fails(shard, -SLUICE_ECORRUPT, "offset 4088");
	free(img);

	/* A flipped index byte. */
	img = fresh_copy(root, &n);
	memcpy(&h, img, sizeof(h));
	img[h.index_offset + 50] ^= 1;
	spit(shard, img, n);
	expect_open_fails(shard, -SLUICE_ECORRUPT, "index checksum mismatch");
	free(img);

	/* Wrong magic. */
	img = fresh_copy(root, &n);
	img[0] = 'X';
	spit(shard, img, n);
	expect_open_fails(shard, -SLUICE_EFORMAT, "magic");
	free(img);

	/* A future version (valid checksum). */
	img = fresh_copy(root, &n);
	memcpy(&h, img, sizeof(h));
	h.version = DLS_VERSION + 1;
	memcpy(img, &h, sizeof(h));
	rewrite_header_checksum(img);
	spit(shard, img, n);
	expect_open_fails(shard, -SLUICE_EFORMAT, "version");
	free(img);
}

/* Absurd header values, each with a valid header checksum. */
static void test_absurd(const char *root)
{
	static const struct {
		size_t off;
		uint64_t value;
		int width;
		const char *needle;
	} cases[] = {
		{ offsetof(struct dls_header_disk, block_count), 1ull << 58, 8,
		  "index length" },
		{ offsetof(struct dls_header_disk, block_count), UINT64_MAX, 8,
		  "index length" },
		{ offsetof(struct dls_header_disk, index_length), UINT64_MAX, 8,
		  "index length" },
		{ offsetof(struct dls_header_disk, index_offset),
		  UINT64_MAX - 4095, 8, "index" },
		{ offsetof(struct dls_header_disk, record_count), UINT64_MAX, 8,
		  "record" },
		{ offsetof(struct dls_header_disk, raw_bytes), 1, 8, "raw" },
		{ offsetof(struct dls_header_disk, alignment), 3000, 4,
		  "alignment" },
		{ offsetof(struct dls_header_disk, field_count), 1000, 4,
		  "field count" },
		{ offsetof(struct dls_header_disk, fields[0].ndim), 99, 4,
		  "ndim" },
		{ offsetof(struct dls_header_disk, fields[0].shape[0]),
		  (uint64_t)-5, 8, "dim" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *img;
		size_t n;

		img = fresh_copy(root, &n);
		memcpy(img + cases[i].off, &cases[i].value, (size_t)cases[i].width);
		rewrite_header_checksum(img);
		spit(shard, img, n);
		expect_open_fails(shard, -SLUICE_ECORRUPT, cases[i].needle);
		free(img);
	}
}

/* Absurd index entries, with valid index and header checksums. */
static void test_absurd_index(const char *root)
{
	static const struct {
		size_t field;
		uint64_t value;
		const char *needle;
	} cases[] = {
		{ offsetof(struct dls_index_entry_disk, raw_size), 1ull << 40,
		  "raw size" },
		{ offsetof(struct dls_index_entry_disk, stored_size),
		  UINT64_MAX - 10, "stored size" },
		{ offsetof(struct dls_index_entry_disk, offset), 8192 + 512,
		  "not a multiple" },
		{ offsetof(struct dls_index_entry_disk, first_record), 7,
		  "first record" },
		{ offsetof(struct dls_index_entry_disk, record_count), 0,
		  "no records" },
		{ offsetof(struct dls_index_entry_disk, codec), 9, "codec" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct dls_header_disk h;
		uint8_t *img;
		size_t n, width;

		img = fresh_copy(root, &n);
		memcpy(&h, img, sizeof(h));
		width = cases[i].field ==
					offsetof(struct dls_index_entry_disk,
						 record_count) ||
				cases[i].field ==
					offsetof(struct dls_index_entry_disk,
						 codec)
			? 4 : 8;
		/* block 1: its offset is the one after block 0 */
		memcpy(img + h.index_offset + 48 + cases[i].field,
		       &cases[i].value, width);
		h.index_checksum = XXH3_64bits(img + h.index_offset,
					       h.index_length);
		memcpy(img, &h, sizeof(h));
		rewrite_header_checksum(img);
		spit(shard, img, n);
		expect_open_fails(shard, -SLUICE_ECORRUPT, cases[i].needle);
		free(img);
	}
}

static void test_block_flip(const char *root)
{
	struct dls_index_entry_disk e;
	struct dls_header_disk h;
	struct lines l = { { 0 }, 0 };
	sluice_dataset *ds;
	char msg[512], want[128];
	uint8_t *img, buf[4096];
	size_t n, len;

	img = fresh_copy(root, &n);
	memcpy(&h, img, sizeof(h));
	memcpy(&e, img + h.index_offset + 2 * 48, sizeof(e));
	img[e.offset + e.stored_size / 2] ^= 0x10;
	spit(shard, img, n);
	free(img);

	T_EQ(dataset_verify(work, collect, &l), 1);
	TU_FMT(want, "data-00000.dls: block 2: offset %llu: checksum mismatch",
	       (unsigned long long)e.offset);
	T_CONTAINS(l.text, want);

	T_OK(sluice_dataset_open(work, &ds));
	T_OK(sluice_dataset_read(ds, 0, "img", buf, sizeof(buf), &len));
	T_EQ(sluice_dataset_read(ds, e.first_record, "label", buf, sizeof(buf),
				 &len),
	     -SLUICE_ECORRUPT);
	sluice_dataset_error(ds, msg, sizeof(msg));
	T_CONTAINS(msg, shard);
	TU_FMT(want, "block 2: offset %llu", (unsigned long long)e.offset);
	T_CONTAINS(msg, want);
	sluice_dataset_close(ds);
}

/* A block whose stored bytes decode to a bad offset table: the checksum
 * matches (it is recomputed), so only the layout check catches it. */
static void test_bad_layout(const char *root)
{
	struct dls_index_entry_disk e;
	struct dls_header_disk h;
	struct lines l = { { 0 }, 0 };
	sluice_dataset *ds;
	uint8_t *img, buf[4096];
	size_t n, len;
	char msg[512];

	img = fresh_copy(root, &n);
	memcpy(&h, img, sizeof(h));
	T_ASSERT(h.block_count >= 2);
	memcpy(&e, img + h.index_offset + 48, sizeof(e));
	T_EQ(e.codec, DLS_CODEC_RAW);
	/* The img offsets table: after label (8n), feat (48n), half (4n),
	 * flag (n, padded); set offsets[1] past the block. */
	{
		uint64_t nrec = e.record_count, off = 0, bad = 1ull << 40;

		off += 8 * nrec;
		off += 48 * nrec;
		off += 4 * nrec;
		off = (off + nrec + 7) & ~7ull;
		memcpy(img + e.offset + off + 8, &bad, 8);
	}
	e.checksum = XXH3_64bits(img + e.offset, e.stored_size);
	memcpy(img + h.index_offset + 48, &e, sizeof(e));
	h.index_checksum = XXH3_64bits(img + h.index_offset, h.index_length);
	memcpy(img, &h, sizeof(h));
	rewrite_header_checksum(img);
	spit(shard, img, n);
	free(img);

	T_EQ(dataset_verify(shard, collect, &l), 1);
	T_CONTAINS(l.text, "block 1: offset");
	T_CONTAINS(l.text, "layout");
	T_OK(sluice_dataset_open(shard, &ds));
	T_EQ(sluice_dataset_read(ds, e.first_record, "img", buf, sizeof(buf),
				 &len),
	     -SLUICE_ECORRUPT);
	sluice_dataset_error(ds, msg, sizeof(msg));
	T_CONTAINS(msg, "block 1: offset");
	sluice_dataset_close(ds);
}

static void test_manifests(const char *root)
{
	static const char *garbage[] = {
		"",
		"{",
		"nonsense",
		"[]",
		"{\"format\":\"dlpack-shard\"}",
		"{\"format\":\"dlpack-shard\",\"version\":1,\"records\":1.5}",
		"{\"format\":\"dlpack-shard\",\"version\":1,\"records\":0,"
		"\"raw_bytes\":0,\"stored_bytes\":0,\"fields\":[{\"name\":\"a\","
		"\"dtype\":\"uint8\",\"shape\":[]}],\"shards\":[{\"file\":"
		"\"../etc/passwd\",\"records\":0,\"blocks\":0,\"bytes\":0}]}",
		"{\"format\":\"dlpack-shard\",\"version\":1,\"records\":0,"
		"\"raw_bytes\":0,\"stored_bytes\":0,\"fields\":[{\"name\":\"a\","
		"\"dtype\":\"uint8\",\"shape\":[-1,-1]}],\"shards\":[]}",
		"{\"a\":1,\"a\":2}",
		"\"\\ud800\"",
		"{\"format\":\"dlpack-shard\",\"version\":99999999999999999999}",
	};
	struct lines l = { { 0 }, 0 };
	char path[1200], deep[20000];
	size_t n;

	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		free(fresh_copy(root, &n));
		TU_FMT(path, "%s/dataset.json", work);
		spit(path, garbage[i], strlen(garbage[i]));
		expect_open_fails(work, -SLUICE_ECORRUPT, "dataset.json");
	}
	memset(deep, '[', sizeof(deep));
	free(fresh_copy(root, &n));
	TU_FMT(path, "%s/dataset.json", work);
	spit(path, deep, sizeof(deep));
	expect_open_fails(work, -SLUICE_ECORRUPT, "nested too deeply");

	/* A missing shard is named. */
	free(fresh_copy(root, &n));
	T_EQ(unlink(shard), 0);
	expect_open_fails(work, -ENOENT, "data-00000.dls");
	T_ASSERT(dataset_verify(work, collect, &l) >= 1);
	T_CONTAINS(l.text, "data-00000.dls");

	/* A leftover temporary file is reported. */
	free(fresh_copy(root, &n));
	l.text[0] = '\0';
	TU_FMT(path, "%s/.data-00001.dls.tmp", work);
	spit(path, "x", 1);
	T_EQ(dataset_verify(work, collect, &l), 1);
	T_CONTAINS(l.text, "incomplete");
}

int main(void)
{
	struct sluice_writer_config cfg;
	struct lines l = { { 0 }, 0 };
	const char *root = tu_scratch("corrupt");
	uint8_t *img;
	size_t n;

	/* Raw blocks for the layout test; zstd is covered by the flips. */
	sluice_writer_config_init(&cfg);
	cfg.block_size = 4096;
	cfg.compression_level = 0;
	cfg.threads = 1;
	TU_FMT(base, "%s/base", root);
	T_OK(tu_write(base, &cfg, 300, 0, NULL));
	T_EQ(dataset_verify(base, collect, &l), 0);

	img = fresh_copy(root, &n);
	test_truncation(root, img, n);
	free(img);
	test_header_index_flips(root);
	test_absurd(root);
	test_absurd_index(root);
	test_block_flip(root);
	test_bad_layout(root);
	test_manifests(root);

	/* The same block flip on zstd blocks. */
	cfg.compression_level = 3;
	TU_FMT(base, "%s/basez", root);
	T_OK(tu_write(base, &cfg, 300, 0, NULL));
	l.count = 0;
	T_EQ(dataset_verify(base, collect, &l), 0);
	test_block_flip(root);
	return 0;
}
