/*
 * device.h - the one interface the pipeline uses to reach a device.
 * Three implementations: `cuda` (gpu/cuda_device.c), `host`
 * (gpu/host_device.c) and `sim` (gpu/sim_device.c: an asynchronous
 * device simulated with threads, for tests; SLUICE_DEVICE_SIM).  Each
 * states what it can do in device_info.caps, which the pipeline asks
 * instead of naming an implementation.  Knows nothing of shards or
 * io_uring.
 *
 * Model: one pinned host arena holds io buffers and host batch memory; the
 * device holds a mirror of the batch part (mirror_offset, mirror_bytes):
 * host byte mirror_offset + x lives at device byte x.  A copy moves some
 * ranges of a batch to their mirror asynchronously and records the
 * slot's event (slots are the batches in flight, not memory).  On the
 * host implementation the mirror IS the host memory and the copy
 * completes at once.
 *
 * Device gather (gather.cu): the device may also mirror the arena's first
 * io_mirror_bytes (the io part: decoded blocks), host byte x at device
 * byte x of a second allocation.  device_upload() copies a decoded block
 * there once; device_gather_slot() then assembles a batch from those
 * bytes on the device, so the batch's host memory is never written.
 */
#ifndef SLUICE_GPU_DEVICE_H
#define SLUICE_GPU_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice_dlpack.h"

struct device;

struct device_config {
	int kind;               /* enum sluice_device_kind */
	int device_id;          /* -1: $LOCAL_RANK, else 0 */
	size_t arena_bytes;     /* pinned host arena (io buffers + batches) */
	uint32_t slots;         /* prefetch depth: batches with events */
	size_t mirror_offset;   /* the arena's batch part, mirrored on the */
	size_t mirror_bytes;    /* device */
	int pageable;           /* 1: no cudaHostRegister (forces the
				   pageable-copy fallback, for tests) */
	size_t io_mirror_bytes; /* arena [0, this) mirrored for gathers;
				   0: no gathers */
	uint32_t gather_runs_max; /* runs one device_gather_slot() call may
				     pass (per slot) */
	uint32_t upload_lanes;  /* uploads and checksums that may run at
				   once (more wait for a lane); a started
				   upload holds one until its finish */
};

/* What a device can do (device_info.caps); the pipeline asks these,
 * never which implementation it holds. */
enum device_cap {
	/* Batches are copied from the arena to device memory of their own
	 * (device_copy_slot, device_mirror_ptr): the copy, export, release
	 * and wait_copied calls order real work, and a slot's host memory
	 * must lie in the mirrored part of the arena (no memory from
	 * elsewhere, no slots made after open). */
	DEVICE_CAP_MIRROR = 1u << 0,
	/* Gathers run on the device (device_gather_slot): worth doing by
	 * default where the dataset suits them (device_gather AUTO). */
	DEVICE_CAP_GATHER = 1u << 1,
	/* The arena is page-locked for the device's DMA (cudaHostRegister
	 * held). */
	DEVICE_CAP_PINNED = 1u << 2,
	/* device_slot_export() makes a consumer stream wait without
	 * blocking the host; device_slot_release() orders later copies
	 * after that stream's queued work. */
	DEVICE_CAP_STREAMS = 1u << 3,
	/* device_checksum() takes the XXH3-64 of uploaded bytes on the
	 * device (cuda: once open found it equal to the CPU's). */
	DEVICE_CAP_CHECKSUM = 1u << 4,
};

struct device_info {
	DLDevice dl;            /* kDLCPU/0 or kDLCUDA/id */
	unsigned caps;          /* enum device_cap bits */
	int arena_pinned;       /* cudaHostRegister held (cuda) / mlock (host) */
	uint64_t arena_resident_ns; /* open's time making the arena resident:
				       mlock, or faulting it in (host) */
	int huge_pages;
	uint64_t device_bytes;  /* GPU memory held: mirrors, run tables */
	char fallbacks[256];    /* e.g. "no CUDA GPU found: ...; host batches" */
};

/*
 * device_offloads - would device_open() with @kind (enum sluice_device)
 * and @device_id choose a device other than the host's: a usable GPU, or
 * the simulated one?  For what the budget sets aside before the arena is
 * sized; device_open decides again.
 */
int device_offloads(int kind, int device_id);

/*
 * device_memory_total - the memory of the device device_open() would
 * choose with @kind and @device_id, in bytes: a GPU's total memory (the
 * simulated device's: SLUICE_SIM_DEVICE_MEMORY, when set); 0 for the
 * host, or when not known.  For the default budget's cap.
 */
uint64_t device_memory_total(int kind, int device_id);

/*
 * device_open - choose and set up a device.  With kind AUTO and no usable
 * GPU (no driver, no device, CUDA=0 build) the host implementation is
 * used and info.fallbacks says why; with kind CUDA that is
 * -SLUICE_ENODEVICE.  Allocates the arena (mmap, anonymous, huge pages
 * when available) and the device mirror; nothing is allocated later.
 */
int device_open(const struct device_config *cfg, struct device **out,
		char *err, size_t errlen);
void device_close(struct device *d);   /* waits for copies in flight */
void device_get_info(const struct device *d, struct device_info *info);

/* The pinned arena: the region to register with io_uring. */
void *device_arena(const struct device *d, size_t *len);

/* The device address that mirrors @host (inside the mirrored part of the
 * arena); on host: @host itself.  NULL when @host is outside it. */
void *device_mirror_ptr(const struct device *d, const void *host);

/*
 * device_copy_slot - copy @len bytes from @host (inside the mirrored part
 * of the arena) to their mirror on the copy stream, for slot @i (the
 * batch in flight); records the slot's ready event.  The copy stream
 * already waits for every release before it (device_slot_release()).
 * Does not block the caller.  Host: no-op.
 */
int device_copy_slot(struct device *d, uint32_t i, const void *host,
		     size_t len);

/* A piece of a slot: bytes [offset, offset + len). */
struct slot_range {
	uint64_t offset;
	uint64_t len;
};

/*
 * device_copy_slot_ranges - like device_copy_slot(), for @n pieces of a
 * batch: host + offset goes to the mirror of host + offset, so only what
 * the tensors hold moves.  @host is the batch's start.  One ready event
 * after the last piece.
 */
int device_copy_slot_ranges(struct device *d, uint32_t i, const void *host,
			    const struct slot_range *ranges, unsigned n);

/* One piece of a gather: @len bytes from arena offset @src (inside the
 * io mirror) to arena offset @dst (inside the batch mirror); or, where
 * @src is GATHER_ZEROS, @len zero bytes (a padded variable field's rows
 * past their values). */
struct gather_run {
	uint64_t src;
	uint64_t dst;
	uint64_t len;
};

#define GATHER_ZEROS UINT64_MAX

/*
 * device_upload - copy @len bytes at @host (inside the arena's first
 * io_mirror_bytes) to their device mirror, and return once the copy is
 * complete, so that the caller may reuse @host at once and a later
 * gather finds the bytes.  The upload first waits (on the device) for
 * every gather enqueued before it: those may still read the mirror this
 * overwrites.  The wait for the copy sleeps (cudaEventBlockingSync).
 * Any thread; at most upload_lanes at once run, more wait.  Host: no-op
 * (the io memory is its own mirror).
 * @return: 0; -EINVAL (outside the io mirror, or no io mirror);
 *	-SLUICE_ECUDA (message in device_last_error()).
 */
int device_upload(struct device *d, const void *host, size_t len);

/* An upload in flight: device_upload_start() fills it, and
 * device_upload_finish() waits for it and lets go of what it holds. */
struct device_upload {
	size_t offset, len;     /* in the io mirror: for its error */
	void *handle;           /* the implementation's: cuda, the lane it
				   holds; sim, the stream it is queued on */
	uint64_t at;            /* sim: its point on that stream */
};

/*
 * device_upload_start - device_upload() in two halves, so that the
 * caller works while the copy runs, and from @src, anywhere in the
 * arena, to @io's device mirror: a fetched part in its staging buffer
 * (pipeline/fetch.c), whose host bytes at @io are never written.  Start
 * returns once the copy is queued, and @src must stay untouched until
 * device_upload_finish(@u) returns, which waits for it (sleeping) and
 * must follow, on any path.
 * An upload lane is held in between: a thread has at most one upload
 * started, and takes no other lane (an upload, a checksum) until it
 * finishes it.  Host: the memcpy that puts the bytes at @io, all in
 * start.
 * @return: start, as device_upload() (-EINVAL also for @src outside the
 *	arena); when it fails, nothing is in flight and finish must not be
 *	called.  Finish: 0, or
 *	-SLUICE_ECUDA when the copy failed (message in
 *	device_last_error()); the lane is let go either way, and nothing
 *	reads @src any more.
 */
int device_upload_start(struct device *d, const void *io, const void *src,
			size_t len, struct device_upload *u);
int device_upload_finish(struct device *d, struct device_upload *u);

/*
 * device_checksum - the XXH3-64 (seed 0: a block's checksum in the shard
 * format) of the io mirror's copy of @host..@host + @len, taken on the
 * device from the bytes that uploads finished before this call put there
 * (device_upload(), or device_upload_finish()).  Blocks until *@sum
 * holds it (sleeping).  Where the CPU never reads a block it uploads,
 * this is the one check of its bytes, and of the copy the gathers read.
 * Any thread; an upload lane each, as device_upload(): never by a thread
 * that holds a started upload.
 * @return: 0; -ENOTSUP (no DEVICE_CAP_CHECKSUM); -EINVAL (outside the io
 *	mirror, or @len of 240 bytes or less: hash those on the CPU);
 *	-SLUICE_ECUDA (message in device_last_error()).
 */
int device_checksum(struct device *d, const void *host, size_t len,
		    uint64_t *sum);

/*
 * device_gather_slot - assemble slot @i's batch on the device: for each
 * of @n runs, copy the io mirror's bytes at run.src to the batch mirror at
 * run.dst (or write zeros there: GATHER_ZEROS), then record the slot's
 * ready event (as device_copy_slot() does); the copy stream's order puts
 * it after every earlier release.
 * Every run's source must have been uploaded (device_upload()) and stay
 * untouched by uploads until this returns; later uploads wait for it.
 * Host: the same copies with memcpy, within the arena, before returning.
 * Does not block on CUDA (but for the slot's previous gather, long done).
 * @return: 0; -EINVAL (a run outside its mirror, @n over
 *	gather_runs_max, no io mirror); -SLUICE_ECUDA.
 */
int device_gather_slot(struct device *d, uint32_t i,
		       const struct gather_run *runs, unsigned n);

/* device_slot_wait_copied - block until slot @i's last copy finished:
 * before its host memory is written again. */
int device_slot_wait_copied(struct device *d, uint32_t i);

/*
 * device_slot_export - make consumer stream @stream (cudaStream_t as an
 * integer; 0 legacy default; -1: no synchronisation) wait on slot @i's
 * ready event without blocking the host.  Host: no-op.
 */
int device_slot_export(struct device *d, uint32_t i, int64_t stream);

/*
 * device_slot_release - the consumer is done with slot @i: record an event
 * on each stream it was exported to, and make the copy stream wait on
 * them, so that no later copy (of any slot: the memory is reused by
 * whichever batch gets it) overwrites the mirror before the consumer's
 * queued work has read it.  Any thread.  Host: no-op.
 */
int device_slot_release(struct device *d, uint32_t i);

/*
 * device_last_error - copy the message of the last failed call on @d (the
 * CUDA runtime's own words, e.g. "cudaMemcpyAsync host to device (slot 2):
 * an illegal memory access was encountered") into @buf; "" when none failed.
 * @return: the message length (as snprintf).  Any thread.
 */
int device_last_error(struct device *d, char *buf, size_t len);

/*
 * device_measure_h2d - host-to-device bandwidth of this device's own
 * arena: @iters cudaMemcpyAsync of @bytes (capped at the arena) from the
 * arena's end, where the pipeline keeps its batch slots, on the copy
 * stream (so behind copies in flight, timed by events around itself).
 * The destination is a scratch cudaMalloc, not the device slots, whose
 * batches may still be in use.  Pinned unless the arena's registration
 * failed or was turned off (info.arena_pinned says which).
 * @bps: receives bytes per second.
 * @return: 0; -SLUICE_ENODEVICE on the host; -SLUICE_ECUDA (message in
 *	device_last_error); -EINVAL.
 */
int device_measure_h2d(struct device *d, size_t bytes, int iters,
		       double *bps);

/*
 * device_compute - a stand-in for a training step: on the GPU, enqueue on
 * @stream (cudaStream_t as an integer, 0 the legacy default) a kernel
 * that keeps every SM busy for @ms milliseconds (none when @ms is 0),
 * then wait until @stream has finished all its work; on the host, spin
 * the calling thread for @ms.
 * @return: 0; -SLUICE_ECUDA; -EINVAL.
 */
int device_compute(struct device *d, int64_t stream, double ms);

#endif /* SLUICE_GPU_DEVICE_H */
