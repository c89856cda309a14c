/*
 * fuzz_tar_reader.c - the input is a tar archive.  It is read twice: from
 * a regular (memory) file, where skips seek and sizes are checked against
 * the file, and from a pipe, where sizes are only claims and every byte
 * is read; members' data is read or skipped in turn, with a small
 * read-ahead buffer so that headers straddle refills.  Whatever is read
 * must be exactly the size the member declared, and memory must stay
 * bounded by the input (ASan's allocation limit catches a buffer sized by
 * a claim).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "import_tar_reader.h"

#define FUZZ_MAX_MEMBERS 4096
#define PIPE_CAP (1u << 16)  /* a pipe's default capacity */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);

		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static void walk(int fd, size_t buf_size, int pipe_mode)
{
	struct tar_reader r;
	struct tar_member m;
	struct import_buf b = { 0 };
	char err[512];
	int n = 0, rc;

	if (tar_open_fd(&r, fd, pipe_mode ? "fuzz-pipe" : "fuzz.tar",
			buf_size, err, sizeof(err)) != 0)
		goto out;
	while (n++ < FUZZ_MAX_MEMBERS &&
	       (rc = tar_next(&r, &m, err, sizeof(err))) == 1) {
		if (strlen(m.path) != r.name.len)
			abort();
		if (n % 2)
			continue;  /* skipped by the next tar_next() */
		if (tar_read_data(&r, &m, &b, err, sizeof(err)) != 0)
			break;
		if (b.len != m.size)
			abort();
	}
out:
	tar_close(&r);
	import_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd, p[2];

	fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd >= 0) {
		if (write_all(fd, data, size) == 0 &&
		    lseek(fd, 0, SEEK_SET) == 0)
			walk(fd, 512, 0);
		else
			close(fd);
	}
	/* The whole input must fit in the pipe: no writer thread. */
	if (size <= PIPE_CAP && pipe2(p, O_CLOEXEC) == 0) {
		if (write_all(p[1], data, size) == 0) {
			close(p[1]);
			walk(p[0], 1024, 1);
		} else {
			close(p[0]);
			close(p[1]);
		}
	}
	return 0;
}
