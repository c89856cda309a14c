/*
 * test_import_parse.c - the importers' parsers on hand-made inputs: the .npy
 * header grammar, tar headers (checksums, octal and base-256 sizes, GNU
 * long names, pax path= and size=, truncation, a non-seekable source),
 * and the --part slice arithmetic.  End-to-end conversions are in
 * tests/test_import.sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "import_common.h"
#include "import_npy_header.h"
#include "import_tar_reader.h"
#include "import_tar_sources.h"
#include "t.h"

static char err[1024];

/* ---------------------------------------------------------------- npy */

static int parse(const char *text, struct npy_header *h)
{
	err[0] = '\0';
	return npy_parse_dict(text, strlen(text), h, err, sizeof(err));
}

static void test_npy_good(void)
{
	struct npy_header h;

	T_OK(parse("{'descr': '<f4', 'fortran_order': False, "
		   "'shape': (3, 4), }          \n", &h));
	T_EQ(h.dtype.code, kDLFloat);
	T_EQ(h.dtype.bits, 32);
	T_EQ(h.item_bytes, 4);
	T_EQ(h.ndim, 2);
	T_EQ(h.shape[0], 3);
	T_EQ(h.shape[1], 4);

	/* keys in any order, double quotes, no trailing comma, 1-tuple */
	T_OK(parse("{\"shape\": (7,), \"fortran_order\": False, "
		   "\"descr\": \"|b1\"}\n", &h));
	T_EQ(h.dtype.code, kDLBool);
	T_EQ(h.ndim, 1);
	T_EQ(h.shape[0], 7);

	T_OK(parse("{'descr': '|i1', 'fortran_order': False, 'shape': ()}",
		   &h));
	T_EQ(h.ndim, 0);
	T_OK(parse("{'descr': '<u8', 'fortran_order': False, "
		   "'shape': (2L, 3L)}\n", &h));
	T_EQ(h.dtype.code, kDLUInt);
	T_EQ(h.dtype.bits, 64);
	T_EQ(h.shape[1], 3);
	T_OK(parse("{'descr': '<i1', 'fortran_order': False, 'shape': (1,)}",
		   &h));
	T_EQ(h.dtype.code, kDLInt);
	T_OK(parse("{'descr': '<f2', 'fortran_order': False, 'shape': (1,)}",
		   &h));
	T_EQ(h.dtype.bits, 16);
}

static void test_npy_bad(void)
{
	static const struct {
		const char *text, *msg;
	} cases[] = {
		{ "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }",
		  "Fortran" },
		{ "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }",
		  "object" },
		{ "{'descr': [('a', '<i4')], 'fortran_order': False, "
		  "'shape': (3,), }",
		  "structured" },
		{ "{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }",
		  "big-endian" },
		{ "{'descr': '|f4', 'fortran_order': False, 'shape': (3,), }",
		  "unsupported dtype" },
		{ "{'descr': '<U8', 'fortran_order': False, 'shape': (3,), }",
		  "unsupported dtype" },
		{ "{'descr': '<f4', 'fortran_order': False}", "missing" },
		{ "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
		  "'shape': (3,)}",
		  "repeated" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), "
		  "'extra': 1}",
		  "unknown" },
		{ "{'descr': '<f4', 'fortran_order': false, 'shape': (3,)}",
		  "fortran_order" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
		  "shape" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",
		  "shape" },
		{ "{'descr': '<f4', 'fortran_order': False, "
		  "'shape': (99999999999999999999999,)}",
		  "shape" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x",
		  "junk" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",
		  "expected" },
		{ "{'descr': '<f\\4', 'fortran_order': False, 'shape': (3,)}",
		  "descr" },
		{ "{'descr': '<f4", "descr" },
		{ "", "expected '{'" },
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (1,2,3,4,"
		  "5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,"
		  "26,27,28,29,30,31,32,33)}",
		  "shape" },
	};
	struct npy_header h;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = parse(cases[i].text, &h);

		if (r != -SLUICE_EINPUT)
			T_FAIL_AT("case %zu (%s): returned %d", i,
				  cases[i].text, r);
		T_CONTAINS(err, cases[i].msg);
	}
}

static void test_npy_preamble(void)
{
	uint8_t v1[12] = "\x93NUMPY\x01\x00\x46\x00";
	uint8_t v2[12] = "\x93NUMPY\x02\x00\x10\x00\x01\x00";
	uint64_t start;
	uint32_t len;

	T_OK(npy_preamble(v1, 12, &start, &len, err, sizeof(err)));
	T_EQ(start, 10);
	T_EQ(len, 0x46);
	/* v2 with a 65552-byte header is over the sanity limit */
	T_EQ(npy_preamble(v2, 12, &start, &len, err, sizeof(err)),
	     -SLUICE_EINPUT);
	T_CONTAINS(err, "header length");
	v2[10] = 0;
	T_OK(npy_preamble(v2, 12, &start, &len, err, sizeof(err)));
	T_EQ(start, 12);
	T_EQ(len, 16);
	T_EQ(npy_preamble(v2, 11, &start, &len, err, sizeof(err)),
	     -SLUICE_EINPUT);
	v1[6] = 4;
	T_EQ(npy_preamble(v1, 12, &start, &len, err, sizeof(err)),
	     -SLUICE_EINPUT);
	T_CONTAINS(err, "version 4");
	T_EQ(npy_preamble((const uint8_t *)"\x93NUMPX\x01\x00\x46\x00", 10,
			  &start, &len, err, sizeof(err)),
	     -SLUICE_EINPUT);
	T_CONTAINS(err, "magic");
}

/* ---------------------------------------------------------------- tar */

struct tarbuf {
	uint8_t *p;
	size_t len;
};

static void tb_add(struct tarbuf *t, const void *data, size_t n)
{
	t->p = realloc(t->p, t->len + n);
	T_ASSERT(t->p);
	memcpy(t->p + t->len, data, n);
	t->len += n;
}

static void set_checksum(uint8_t *h, int signed_sum)
{
	long sum = 0;

	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += signed_sum ? (signed char)h[i] : h[i];
	snprintf((char *)h + 148, 8, "%06lo", sum);
	h[155] = ' ';
}

/* One header (+ data, padded) with @size written in octal, or base-256
 * when @b256. */
static void tb_member(struct tarbuf *t, const char *name, char type,
		      const void *data, uint64_t size, int b256)
{
	uint8_t h[512] = { 0 }, pad[512] = { 0 };

	strncpy((char *)h, name, 100);
	memcpy(h + 100, "0000644", 8);
	if (b256) {
		h[124] = 0x80;
		for (int i = 0; i < 8; i++)
			h[135 - i] = (uint8_t)(size >> (8 * i));
	} else {
		snprintf((char *)h + 124, 12, "%011llo",
			 (unsigned long long)size);
	}
	h[156] = (uint8_t)type;
	memcpy(h + 257, "ustar\0" "00", 8);
	set_checksum(h, 0);
	tb_add(t, h, 512);
	if (data && size) {
		tb_add(t, data, (size_t)size);
		if (size % 512)
			tb_add(t, pad, 512 - (size_t)(size % 512));
	}
}

static void tb_end(struct tarbuf *t)
{
	uint8_t z[1024] = { 0 };

	tb_add(t, z, sizeof(z));
}

static const char *tmp_path(const char *name)
{
	static char path[512];
	const char *dir = getenv("TMPDIR");

	snprintf(path, sizeof(path), "%s/test_import_%d_%s",
		 dir ? dir : "/tmp", (int)getpid(), name);
	return path;
}

static const char *tb_write(const struct tarbuf *t, const char *name)
{
	const char *path = tmp_path(name);
	FILE *f = fopen(path, "wb");

	T_ASSERT(f);
	T_EQ(fwrite(t->p, 1, t->len, f), t->len);
	T_EQ(fclose(f), 0);
	return path;
}

static void test_tar_members(void)
{
	struct tarbuf t = { 0 };
	struct tar_reader r;
	struct tar_member m;
	struct import_buf b = { 0 };
	char longname[300], pax[128];
	const char *path;
	int n;

	memset(longname, 'n', sizeof(longname));
	strcpy(longname + 280, "/key.jpg");
	tb_member(&t, "dir/", '5', NULL, 0, 0);
	tb_member(&t, "a.txt", '0', "hello", 5, 0);
	tb_member(&t, "big.bin", '0', "base256", 7, 1);
	tb_member(&t, "././@LongLink", 'L', longname, strlen(longname) + 1, 0);
	tb_member(&t, "truncated-name", '0', "L", 1, 0);
	/* pax: path= and size= apply to the next header only */
	n = snprintf(pax, sizeof(pax), "%d path=p/x.cls\n",
		     (int)strlen(" path=p/x.cls\n") + 2);
	T_EQ(n, 16);
	n += snprintf(pax + n, sizeof(pax) - (size_t)n, "10 size=3\n");
	n += snprintf(pax + n, sizeof(pax) - (size_t)n, "13 mtime=1.5\n");
	tb_member(&t, "PaxHeader", 'x', pax, (uint64_t)n, 0);
	/* header says 0 bytes, pax says 3: the data is 3 bytes */
	{
		uint8_t h[512] = { 0 }, d[512] = "abc";

		memcpy(h, "ignored", 7);
		memcpy(h + 124, "00000000000", 11);
		h[156] = '0';
		h[265] = 0xe9;  /* uname: makes signed and unsigned sums differ */
		set_checksum(h, 1); /* the old signed-sum convention */
		tb_add(&t, h, 512);
		tb_add(&t, d, 512);
	}
	tb_member(&t, "link", '2', NULL, 0, 0);
	tb_member(&t, "last.jpg", '0', "", 0, 0);
	tb_end(&t);
	path = tb_write(&t, "members.tar");

	T_OK(tar_open(&r, path, 1024, err, sizeof(err)));
	T_EQ(tar_next(&r, &m, err, sizeof(err)), 1);
	T_ASSERT(strcmp(m.path, "a.txt") == 0);
	T_EQ(m.size, 5);
	T_EQ(m.header_offset, 512);
	T_OK(tar_read_data(&r, &m, &b, err, sizeof(err)));
	T_MEMEQ(b.p, "hello", 5);
	/* big.bin's data is skipped without reading it */
	T_EQ(tar_next(&r, &m, err, sizeof(err)), 1);
	T_ASSERT(strcmp(m.path, "big.bin") == 0);
	T_EQ(m.size, 7);
	T_EQ(tar_next(&r, &m, err, sizeof(err)), 1);
	T_ASSERT(strcmp(m.path, longname) == 0);
	T_OK(tar_read_data(&r, &m, &b, err, sizeof(err)));
	T_MEMEQ(b.p, "L", 1);
	T_EQ(tar_next(&r, &m, err, sizeof(err)), 1);
	T_ASSERT(strcmp(m.path, "p/x.cls") == 0);
	T_EQ(m.size, 3);
	T_OK(tar_read_data(&r, &m, &b, err, sizeof(err)));
	T_MEMEQ(b.p, "abc", 3);
	/* a symlink is handed over as special, for the importer to count
	 * as skipped (it was passed over silently) */
	T_EQ(tar_next(&r, &m, err, sizeof(err)), 1);
	T_ASSERT(strcmp(m.path, "link") == 0);
	T_EQ(m.special, '2');
	T_EQ(tar_next(&r, &m, err, sizeof(err)), 1);
	T_ASSERT(strcmp(m.path, "last.jpg") == 0);
	T_EQ(m.size, 0);
	T_EQ(m.special, 0);
	T_EQ(tar_next(&r, &m, err, sizeof(err)), 0);
	tar_close(&r);

	/* the same archive through a pipe: no seeking */
	{
		const char *fifo = tmp_path("members.fifo");
		pid_t pid;
		int status;

		unlink(fifo);
		T_EQ(mkfifo(fifo, 0600), 0);
		pid = fork();
		T_ASSERT(pid >= 0);
		if (pid == 0) {
			int fd = open(fifo, O_WRONLY);
			size_t off = 0;

			while (fd >= 0 && off < t.len) {
				ssize_t k = write(fd, t.p + off, t.len - off);

				if (k <= 0)
					_exit(1);
				off += (size_t)k;
			}
			_exit(fd >= 0 ? 0 : 1);
		}
		T_OK(tar_open(&r, fifo, 700, err, sizeof(err)));
		T_EQ(r.seekable, 0);
		n = 0;
		while (tar_next(&r, &m, err, sizeof(err)) == 1) {
			if (strcmp(m.path, "p/x.cls") == 0) {
				T_OK(tar_read_data(&r, &m, &b, err,
						   sizeof(err)));
				T_MEMEQ(b.p, "abc", 3);
			}
			n++;
		}
		T_EQ(n, 6);
		tar_close(&r);
		T_EQ(waitpid(pid, &status, 0), pid);
		T_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		unlink(fifo);
	}
	unlink(path);
	import_buf_free(&b);
	free(t.p);
}

/* Expect the first tar_next() that does not return 1 to fail with @msg. */
static void expect_tar_error(struct tarbuf *t, const char *msg)
{
	const char *path = tb_write(t, "bad.tar");
	struct tar_reader r;
	struct tar_member m;
	int rc;

	T_OK(tar_open(&r, path, 4096, err, sizeof(err)));
	err[0] = '\0';
	while ((rc = tar_next(&r, &m, err, sizeof(err))) == 1)
		;
	tar_close(&r);
	unlink(path);
	if (rc >= 0)
		T_FAIL_AT("want an error containing '%s', got %d", msg, rc);
	T_CONTAINS(err, msg);
}

static void test_tar_errors(void)
{
	struct tarbuf t = { 0 };
	char pax[64];

	/* a negative base-256 size */
	tb_member(&t, "a.jpg", '0', NULL, 0, 0);
	t.p[124] = 0xff;
	set_checksum(t.p, 0);
	tb_end(&t);
	expect_tar_error(&t, "offset 0: bad size field");

	/* a size that is not octal */
	t.len = 0;
	tb_member(&t, "a.jpg", '0', NULL, 0, 0);
	memcpy(t.p + 124, "0000000009a", 11);
	set_checksum(t.p, 0);
	tb_end(&t);
	expect_tar_error(&t, "bad size field");

	/* a huge base-256 size in a small file */
	t.len = 0;
	tb_member(&t, "ok.jpg", '0', "x", 1, 0);
	tb_member(&t, "a.jpg", '0', NULL, 1ull << 40, 1);
	tb_end(&t);
	expect_tar_error(&t, "truncated tar at offset 2560: member data runs");

	/* a size beyond any plausible member */
	t.len = 0;
	tb_member(&t, "a.jpg", '0', NULL, 1ull << 60, 1);
	tb_end(&t);
	expect_tar_error(&t, "implausible");

	/* malformed pax records */
	t.len = 0;
	snprintf(pax, sizeof(pax), "99 path=x.jpg\n");
	tb_member(&t, "PaxHeader", 'x', pax, strlen(pax), 0);
	tb_end(&t);
	expect_tar_error(&t, "offset 0: malformed pax record");
	t.len = 0;
	snprintf(pax, sizeof(pax), "9 path\n");
	tb_member(&t, "PaxHeader", 'x', pax, strlen(pax), 0);
	tb_end(&t);
	expect_tar_error(&t, "malformed pax record");
	t.len = 0;
	snprintf(pax, sizeof(pax), "11 size=x1\n");
	tb_member(&t, "PaxHeader", 'x', pax, strlen(pax), 0);
	tb_end(&t);
	expect_tar_error(&t, "bad pax size");

	/* a long name that is too long to be a name */
	t.len = 0;
	tb_member(&t, "././@LongLink", 'L', NULL, 2u << 20, 0);
	tb_end(&t);
	expect_tar_error(&t, "truncated");

	/* sparse members would read back wrong */
	t.len = 0;
	tb_member(&t, "a.jpg", 'S', NULL, 0, 0);
	tb_end(&t);
	expect_tar_error(&t, "sparse");

	/* a header whose checksum field is garbage */
	t.len = 0;
	tb_member(&t, "a.jpg", '0', NULL, 0, 0);
	memcpy(t.p + 148, "zzzzzzzz", 8);
	tb_end(&t);
	expect_tar_error(&t, "offset 0: bad tar header checksum");

	/* data cut short inside the member */
	t.len = 0;
	tb_member(&t, "a.jpg", '0', "0123456789", 10, 0);
	t.len = 512 + 4;
	expect_tar_error(&t, "truncated tar at offset 516");
	free(t.p);
}

/* ---------------------------------------------------------------- parts */

static void test_part_range(void)
{
	static const uint64_t ns[] = { 0, 1, 2, 3, 10, 11, 1000003,
				       UINT64_MAX / 3, UINT64_MAX };
	struct import_options o;

	memset(&o, 0, sizeof(o));
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
		for (uint32_t parts = 1; parts <= 7; parts++) {
			uint64_t prev_hi = 0, lo, hi, min = UINT64_MAX, max = 0;

			o.part_count = parts;
			for (uint32_t i = 0; i < parts; i++) {
				o.part_index = i;
				import_part_range(&o, ns[k], &lo, &hi);
				if (lo != prev_hi || hi < lo)
					T_FAIL_AT("n %llu part %u/%u: [%llu, "
						  "%llu) after %llu",
						  (unsigned long long)ns[k], i,
						  parts, (unsigned long long)lo,
						  (unsigned long long)hi,
						  (unsigned long long)prev_hi);
				if (hi - lo < min)
					min = hi - lo;
				if (hi - lo > max)
					max = hi - lo;
				prev_hi = hi;
			}
			T_ASSERT(prev_hi == ns[k]);
			T_ASSERT(max - min <= 1);  /* balanced */
		}
	o.part_count = 3;
	o.part_index = 1;
	{
		uint64_t lo, hi;

		import_part_range(&o, 10, &lo, &hi);
		T_EQ(lo, 3);  /* floor(1 * 10 / 3) */
		T_EQ(hi, 6);  /* floor(2 * 10 / 3) */
	}
	o.part_index = 3;
	T_EQ(import_check_part(&o, err, sizeof(err)), -EINVAL);
}

/* @spec expands to the '|'-joined @want (no globbing: no * ? [). */
static void expands_to(const char *spec, const char *want)
{
	struct tar_sources s;
	char msg[256] = "", got[4096] = "";

	T_OK(tar_sources_expand(spec, &s, msg, sizeof(msg)));
	for (size_t i = 0; i < s.n; i++) {
		if (i)
			strcat(got, "|");
		strcat(got, s.paths[i]);
	}
	if (strcmp(got, want) != 0)
		T_FAIL_AT("'%s' expands to '%s', want '%s'", spec, got, want);
	tar_sources_free(&s);
}

static void refuses(const char *spec, const char *msg)
{
	struct tar_sources s;
	char why[256] = "";

	T_EQ(tar_sources_expand(spec, &s, why, sizeof(why)), -SLUICE_EINPUT);
	T_CONTAINS(why, msg);
	T_EQ(s.n, 0);
}

static void test_tar_sources(void)
{
	expands_to("a.tar", "a.tar");
	expands_to("a.tar,b.tar", "a.tar|b.tar");
	expands_to("s-{000..003}.tar", "s-000.tar|s-001.tar|s-002.tar|s-003.tar");
	expands_to("s-{8..11}.tar", "s-8.tar|s-9.tar|s-10.tar|s-11.tar");
	expands_to("s-{2..0}.tar", "s-2.tar|s-1.tar|s-0.tar");
	expands_to("s-{-1..1}", "s--1|s-0|s-1");
	expands_to("{train,val}-{0..1}.tar",
		   "train-0.tar|train-1.tar|val-0.tar|val-1.tar");
	expands_to("x{,y}", "x|xy");
	expands_to("s-{0..1}.tar,t.tar", "s-0.tar|s-1.tar|t.tar");
	expands_to("{a,b},c", "a|b|c");
	expands_to("s-{x..y}", "s-x..y");       /* not a range: one item */
	refuses("s-{0,{1}}", "nested braces");
	refuses("s-{0..1", "unbalanced");
	refuses("a,,b", "empty path");
	refuses("", "empty path");
	refuses("s-{0..99999999999}", "range of more than");
	refuses("/nonexistent-dir-sluice/*.tar", "no file matches");
	printf("tar sources: ok\n");
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_npy_good();
	test_npy_bad();
	test_npy_preamble();
	test_tar_members();
	test_tar_errors();
	test_part_range();
	test_tar_sources();
	printf("test_import_parse: ok\n");
	return 0;
}
