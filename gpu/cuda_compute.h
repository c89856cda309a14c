/*
 * cuda_compute.h - private to gpu/ (and its tests): the device code that
 * nvcc compiles (gpu/compute.cu), callable from C.
 */
#ifndef SLUICE_GPU_CUDA_COMPUTE_H
#define SLUICE_GPU_CUDA_COMPUTE_H

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

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_GPU_CUDA_COMPUTE_H */
