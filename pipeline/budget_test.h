/*
 * budget_test.h - test-only knobs of the memory budget (SLUICE_TESTING
 * builds).
 */
#ifndef SLUICE_PIPELINE_BUDGET_TEST_H
#define SLUICE_PIPELINE_BUDGET_TEST_H

#ifdef SLUICE_TESTING
struct loader_core;

/* Called by a release after the batch's last reference is gone and
 * before its memory is back, outside the lock: where a CUDA release
 * waits for the batch's copy.  NULL (the default): nothing. */
extern void (*budget_test_release_hook)(struct loader_core *c);
#endif

#endif /* SLUICE_PIPELINE_BUDGET_TEST_H */
