/*
 * compute.cu - the stand-in for a training step: a kernel that keeps every
 * SM busy for a given wall time, so copies overlapping it are measured
 * against real GPU occupancy rather than an idle device.
 */
#include "cuda_compute.h"

/* The SM's nanosecond wall clock.  clock64() counts cycles, which at
 * clocks below the peak would make the step longer than asked and the
 * benchmark's idle fraction wrong. */
static __device__ __forceinline__ unsigned long long global_ns(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* static: nvcc's host stubs for it stay out of the library's exports. */
static __global__ void spin_kernel(unsigned long long ns)
{
	unsigned long long start = global_ns();

	while (global_ns() - start < ns)
		;
}

extern "C" cudaError_t cuda_spin_async(cudaStream_t stream, double ms)
{
	int dev, sms;
	cudaError_t e;

	if (!(ms > 0))
		return cudaSuccess;
	e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
					   dev);
	if (e != cudaSuccess)
		return e;
	if (sms <= 0)
		sms = 1;
	/* as cuda_gather_async: this launch's error, not an earlier one
	 * of this thread's (a caller's, say) */
	(void)cudaGetLastError();
	spin_kernel<<<sms, 32, 0, stream>>>((unsigned long long)(ms * 1e6));
	return cudaGetLastError();
}
