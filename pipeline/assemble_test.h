/*
 * assemble_test.h - test-only knobs of batch assembly (SLUICE_TESTING
 * builds).
 */
#ifndef SLUICE_PIPELINE_ASSEMBLE_TEST_H
#define SLUICE_PIPELINE_ASSEMBLE_TEST_H

#ifdef SLUICE_TESTING
struct loader_core;

/* Called by the worker that copied a batch's last part, outside the
 * lock, before it finishes the batch (slot_finish): where other threads
 * may plan, claim and release meanwhile.  NULL (the default): nothing. */
extern void (*assemble_test_finish_hook)(struct loader_core *c);
#endif

#endif /* SLUICE_PIPELINE_ASSEMBLE_TEST_H */
