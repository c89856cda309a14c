/*
 * cuda_gather.h - private to gpu/: the CUDA side of device gathers
 * (cuda_gather.c): the io mirror, the upload lanes (uploads and the
 * device's checksums), the run tables.
 */
#ifndef SLUICE_GPU_CUDA_GATHER_H
#define SLUICE_GPU_CUDA_GATHER_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "device.h"

struct cuda_gather;

/* Sizes and counts the gather state is made for. */
struct cuda_gather_config {
	size_t io_bytes;        /* the io mirror */
	size_t batch_bytes;     /* the batch mirror (bounds a slot's bytes) */
	uint32_t slots;
	uint32_t runs_max;      /* per gather, before long runs are split */
	uint32_t lanes;         /* concurrent uploads */
};

/*
 * cuda_gather_open - allocate on the current device: the io mirror, the
 * device run tables, pinned host run tables (one per slot), upload
 * streams and events.  On failure *@what names the call that failed.
 * @device_bytes: out, GPU memory taken.
 */
cudaError_t cuda_gather_open(const struct cuda_gather_config *cfg,
			     struct cuda_gather **out, size_t *device_bytes,
			     const char **what);
/* Waits for uploads in flight; the caller synchronised the copy stream. */
void cuda_gather_close(struct cuda_gather *g);

/* Copy @len bytes at @host to io mirror byte @offset, after every gather
 * enqueued so far; return when the copy is complete. */
cudaError_t cuda_gather_upload(struct cuda_gather *g, size_t offset,
			       const void *host, size_t len,
			       const char **what);
/* The same in two halves: start holds an upload lane (*@lane) until
 * finish, which waits for the copy; when start fails it holds none. */
cudaError_t cuda_gather_upload_start(struct cuda_gather *g, size_t offset,
				     const void *host, size_t len,
				     void **lane, const char **what);
cudaError_t cuda_gather_upload_finish(struct cuda_gather *g, void *lane,
				      const char **what);

struct xxh3s_secret;

/* The XXH3-64 of io mirror bytes [@offset, @offset + @len), uploaded
 * before this call, taken on an upload lane (checksum.cu); returns once
 * *@sum holds it.  @len over 240 bytes. */
cudaError_t cuda_gather_checksum(struct cuda_gather *g, size_t offset,
				 size_t len, const struct xxh3s_secret *secret,
				 uint64_t *sum, const char **what);

/*
 * cuda_gather_enqueue - on @stream: copy slot @slot's run table to the
 * device, launch the gather into @batch_mirror (run.dst less
 * @mirror_offset), and mark the point later uploads wait for.  The
 * caller made sure the slot's previous table copy is done.
 */
cudaError_t cuda_gather_enqueue(struct cuda_gather *g, uint32_t slot,
				const struct gather_run *runs, unsigned n,
				cudaStream_t stream, void *batch_mirror,
				size_t mirror_offset, const char **what);

#endif /* SLUICE_GPU_CUDA_GATHER_H */
