/*
 * bench/copy_destination.c - what a page-cache read costs the CPU by
 * where it lands: pread() of 2 MiB pieces of FILE into a ring of RING_MIB
 * MiB, reused from its start when full (one thread; stops after 6 GB or
 * at the end of the file).  A ring that the last-level cache holds stands
 * for KvikIO's reused bounce buffers; a large one for sluice's io memory,
 * whose 64 MiB blocks are cold when a read lands in them.
 *
 *   cc -O2 bench/copy_destination.c -o /tmp/copy_destination
 *   /tmp/copy_destination FILE RING_MIB
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PIECE ((size_t)2 << 20)
#define MAX_BYTES ((uint64_t)6 << 30)

static double cpu_seconds(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	size_t ring, pos = 0;
	uint64_t total = 0;
	off_t off = 0;
	double c0;
	char *buf;
	int fd;

	if (argc != 3 || atol(argv[2]) < 2) {
		fprintf(stderr, "usage: %s FILE RING_MIB (2 or more)\n", argv[0]);
		return 2;
	}
	ring = (size_t)atol(argv[2]) << 20;
	buf = mmap(NULL, ring, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	fd = open(argv[1], O_RDONLY);
	if (buf == MAP_FAILED || fd < 0) {
		perror(argv[1]);
		return 1;
	}
	/* as sluice's arena: huge pages, every page faulted in first */
	(void)madvise(buf, ring, MADV_HUGEPAGE);
	memset(buf, 1, ring);
	c0 = cpu_seconds();
	while (total < MAX_BYTES) {
		ssize_t n = pread(fd, buf + pos, PIECE, off);

		if (n <= 0)
			break;
		off += n;
		total += (uint64_t)n;
		pos += PIECE;
		if (pos + PIECE > ring)
			pos = 0;
	}
	printf("ring %s MiB: %.2f GB, %.3f CPU s/GB\n", argv[2],
	       (double)total / 1e9, (cpu_seconds() - c0) / ((double)total / 1e9));
	close(fd);
	return 0;
}
