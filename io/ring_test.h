/*
 * ring_test.h - test-only knobs of the io ring (SLUICE_TESTING builds).
 */
#ifndef SLUICE_IO_RING_TEST_H
#define SLUICE_IO_RING_TEST_H

#ifdef SLUICE_TESTING
#include <stddef.h>
#include <stdint.h>

#include "ring.h"

/* Data SQEs this ring has prepared (resubmissions included). */
uint64_t io_ring_test_sqes(const struct io_ring *r);
/* Files opened on demand (more shards than RLIMIT_NOFILE allows). */
uint64_t io_ring_test_reopens(const struct io_ring *r);

/* Register the arena in iovecs of @bytes (0: the 1 GiB default), for
 * rings created after the call: lets a small arena span several. */
void io_ring_test_set_iovec_max(size_t bytes);

/* 1: file residency comes from mincore, as on kernels before cachestat. */
void io_ring_test_no_cachestat(int on);

/* O_DIRECT files of rings created after the call take at least this
 * alignment (0: theirs): a block the loader reads O_DIRECT then starts
 * past its read's aligned start, as on a device of 4 KiB sectors. */
void io_ring_test_set_dio_alignment(uint32_t bytes);
#endif

#endif /* SLUICE_IO_RING_TEST_H */
