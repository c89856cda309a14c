/*
 * fault.c - test-only hooks (SLUICE_TESTING builds): the fault-injection
 * hook every completion passes through, the iovec size override, and
 * mincore in place of cachestat.
 */
#include "ring_private.h"
#include "ring_test.h"

#ifdef SLUICE_TESTING
#include <pthread.h>

/* Set by the test's thread, read by the ring's: a lock keeps TSan and
 * the pair (fn, ctx) consistent. */
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static io_fault_fn fault_fn;
static void *fault_ctx;
static size_t iovec_max_override;
static int no_cachestat;
static uint32_t dio_alignment_override;

void io_ring_set_fault(io_fault_fn fn, void *ctx)
{
	pthread_mutex_lock(&fault_lock);
	fault_fn = fn;
	fault_ctx = ctx;
	pthread_mutex_unlock(&fault_lock);
}

void ring_fault_apply(uint32_t file, uint64_t offset, uint64_t length,
		      int *res)
{
	io_fault_fn fn;
	void *ctx;

	pthread_mutex_lock(&fault_lock);
	fn = fault_fn;
	ctx = fault_ctx;
	pthread_mutex_unlock(&fault_lock);
	if (fn)
		fn(ctx, file, offset, length, res);
}

void io_ring_test_set_iovec_max(size_t bytes)
{
	pthread_mutex_lock(&fault_lock);
	iovec_max_override = bytes;
	pthread_mutex_unlock(&fault_lock);
}

size_t ring_test_iovec_max(void)
{
	size_t v;

	pthread_mutex_lock(&fault_lock);
	v = iovec_max_override;
	pthread_mutex_unlock(&fault_lock);
	return v;
}

void io_ring_test_no_cachestat(int on)
{
	pthread_mutex_lock(&fault_lock);
	no_cachestat = on;
	pthread_mutex_unlock(&fault_lock);
}

int ring_test_no_cachestat(void)
{
	int v;

	pthread_mutex_lock(&fault_lock);
	v = no_cachestat;
	pthread_mutex_unlock(&fault_lock);
	return v;
}

void io_ring_test_set_dio_alignment(uint32_t bytes)
{
	pthread_mutex_lock(&fault_lock);
	dio_alignment_override = bytes;
	pthread_mutex_unlock(&fault_lock);
}

uint32_t ring_test_dio_alignment(void)
{
	uint32_t v;

	pthread_mutex_lock(&fault_lock);
	v = dio_alignment_override;
	pthread_mutex_unlock(&fault_lock);
	return v;
}
#else
/* ISO C wants something in every translation unit. */
typedef int ring_fault_unused;
#endif
