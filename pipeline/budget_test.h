/*
 * budget_test.h - test-only knobs of the memory budget (SLUICE_TESTING
 * builds).
 */
#ifndef SLUICE_PIPELINE_BUDGET_TEST_H
#define SLUICE_PIPELINE_BUDGET_TEST_H

#ifdef SLUICE_TESTING
#include <stdint.h>

struct loader_core;

/* Called by a release after the batch's last reference is gone and
 * before its memory is back, outside the lock: where a CUDA release
 * waits for the batch's copy.  NULL (the default): nothing. */
extern void (*budget_test_release_hook)(struct loader_core *c);

/* The default budget's cap in bytes (before it is divided among
 * $LOCAL_WORLD_SIZE ranks), instead of a share of this machine's memory;
 * 0 (the default): the machine's. */
extern uint64_t budget_test_default_cap;
#endif

#endif /* SLUICE_PIPELINE_BUDGET_TEST_H */
