/*
 * sim_device.h - private to gpu/ and the tests: the simulated
 * asynchronous device (sim_device.c).  The pipeline never names it: it
 * reaches it through device.h, chosen by SLUICE_DEVICE_SIM, and asks its
 * capabilities like any other device's.
 *
 * Environment (read by device_open()):
 *   SLUICE_DEVICE_SIM=SEED   kind AUTO or CUDA opens the simulation, its
 *                            streams' delays drawn from SEED (a number)
 *   SLUICE_SIM_DELAY_US=N    the longest random delay before a queued
 *                            operation runs (default 300 microseconds)
 *
 * The seed fixes each stream's sequence of delays, not the threads'
 * scheduling: a failing seed makes the failure likely again, not certain.
 */
#ifndef SLUICE_GPU_SIM_DEVICE_H
#define SLUICE_GPU_SIM_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"

/* The byte the simulated device memory holds where no copy has landed:
 * at open, before each copy lands, and once a released slot's consumers
 * are done with it. */
#define SIM_POISON 0xa5

/*
 * Consumer streams for tests, as a CUDA consumer has its own: a thread
 * that runs what is queued on it, in order, each after a random delay
 * drawn from @seed (up to @delay_us).  The handle is what
 * sluice_batch_tensor() takes as its stream; 0 and -1 keep their meaning
 * (0: the calling thread is the consumer, export waits on it; -1: no
 * synchronisation).  @return: the handle, or 0 when out of memory or
 * threads.
 */
int64_t sim_stream_create(uint64_t seed, unsigned delay_us);
/* Runs what is queued, then stops the thread.  Events recorded on the
 * stream stay valid (they are complete). */
void sim_stream_destroy(int64_t stream);
/* Queue @fn(@arg) on @stream; it runs on the stream's thread after
 * everything queued before it.  @return 0, -EINVAL (not a stream),
 * -ENOMEM. */
int sim_stream_call(int64_t stream, void (*fn)(void *), void *arg);
/* Block the caller until everything queued on @stream so far ran. */
int sim_stream_synchronize(int64_t stream);

/* Open the simulation (device.c does, for SLUICE_DEVICE_SIM=@seed). */
int sim_device_open(const struct device_config *cfg, uint64_t seed,
		    unsigned delay_us, struct device **out, char *err,
		    size_t errlen);

/*
 * Deliberately wrong orderings, to show the sim tests catch them: set in
 * sim_test_faults, which only the testing build has (read when a device
 * opens).  Each stands for a pipeline bug:
 */
enum sim_fault {
	/* device_slot_wait_copied() returns at once: the host memory of a
	 * released slot is reused before its copy has read it. */
	SIM_FAULT_EARLY_RELEASE = 1u << 0,
	/* device_slot_export() does not make the consumer wait on the
	 * slot's ready event. */
	SIM_FAULT_NO_CONSUMER_WAIT = 1u << 1,
	/* device_slot_release() does not make the copy stream wait on the
	 * consumer: the mirror is poisoned and reused while the consumer's
	 * queued work still reads it. */
	SIM_FAULT_EARLY_REUSE = 1u << 2,
	/* device_upload() does not wait for the gathers queued before it:
	 * a block's io memory is overwritten while a gather still has to
	 * read it. */
	SIM_FAULT_EARLY_UPLOAD = 1u << 4,
	/* The sim_test_fail_copy-th copy or gather (counted from 1) fails
	 * with -SLUICE_ECUDA: an error in the copy stage. */
	SIM_FAULT_COPY_ERROR = 1u << 3,
	/* Every device_checksum() fails with -SLUICE_ECUDA: the device,
	 * not the data, is at fault. */
	SIM_FAULT_CHECKSUM_ERROR = 1u << 5,
	/* The sim_test_fail_copy-th device_upload() (counted from 1) fails
	 * with -SLUICE_ECUDA: a block's copy to the device is lost. */
	SIM_FAULT_UPLOAD_ERROR = 1u << 6,
	/* The sim_test_fail_copy-th upload (counted from 1) lands, but its
	 * device_upload_finish() fails with -SLUICE_ECUDA: a copy that
	 * failed in flight. */
	SIM_FAULT_FINISH_ERROR = 1u << 7,
};
#ifdef SLUICE_TESTING
extern unsigned sim_test_faults;
extern uint64_t sim_test_fail_copy;
#endif

#endif /* SLUICE_GPU_SIM_DEVICE_H */
