/*
 * cuda_compute.h - private to gpu/ (and its tests): the device code that
 * nvcc compiles (gpu/compute.cu, gpu/gather.cu,
 * gpu/checksum.cu), callable from C.
 */
#ifndef SLUICE_GPU_CUDA_COMPUTE_H
#define SLUICE_GPU_CUDA_COMPUTE_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * cuda_spin_async - enqueue on @stream a kernel that keeps every SM of the
 * current device busy for @ms milliseconds of the GPU's global timer
 * (wall time, whatever the clock rate).  Nothing for @ms <= 0.  Does not
 * block.  @return: cudaSuccess or the launch's error.
 */
__attribute__((visibility("hidden")))
cudaError_t cuda_spin_async(cudaStream_t stream, double ms);

/* One run of a device gather, as the kernel reads it: @len bytes from
 * io mirror byte @src to batch mirror byte @dst. */
struct cuda_gather_desc {
	unsigned long long src;     /* CUDA_GATHER_ZEROS: none, zeros */
	unsigned long long dst;
	unsigned long long len;
};

/* gpu/device.h's GATHER_ZEROS, for the kernel's side */
#define CUDA_GATHER_ZEROS 0xffffffffffffffffull

/*
 * cuda_gather_async - enqueue on @stream one kernel that copies each of
 * the @n runs (@runs in device memory) from @src_base + src to @dst_base
 * + dst.  Does not block.  Nothing for @n 0.
 * @return: cudaSuccess or the launch's error.
 */
__attribute__((visibility("hidden")))
cudaError_t cuda_gather_async(cudaStream_t stream,
			      const struct cuda_gather_desc *runs, unsigned n,
			      const void *src_base, void *dst_base);

struct xxh3s_secret;

/*
 * cuda_checksum_async - enqueue on @stream a kernel that writes the
 * XXH3-64 (with @secret, the default: xxh3_steps.h) of the @len bytes at
 * device address @p to the device word @out.  @len must be over 240
 * bytes (XXH3's long inputs).  Does not block.
 * @return: cudaSuccess, cudaErrorInvalidValue for a short @len, or the
 *	launch's error.
 */
__attribute__((visibility("hidden")))
cudaError_t cuda_checksum_async(cudaStream_t stream, const void *p,
				uint64_t len, const struct xxh3s_secret *secret,
				uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_GPU_CUDA_COMPUTE_H */
