/*
 * compute.cu - the stand-in for a training step: a kernel that spins on
 * the SM clock, so copies overlapping it are measured against real GPU
 * occupancy rather than an idle device.
 */
#include "cuda_compute.h"

/* static: nvcc's host stubs for it stay out of the library's exports. */
static __global__ void spin_kernel(long long cycles)
{
	long long start = clock64();

	while (clock64() - start < cycles)
		;
}

extern "C" cudaError_t cuda_spin_async(cudaStream_t stream, double ms)
{
	int dev, khz, sms;
	cudaError_t e;

	if (!(ms > 0))
		return cudaSuccess;
	e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
					   dev);
	if (e != cudaSuccess)
		return e;
	if (khz <= 0)
		khz = 1000000;  /* unknown: assume 1 GHz */
	if (sms <= 0)
		sms = 1;
	spin_kernel<<<sms, 32, 0, stream>>>((long long)(ms * khz));
	return cudaGetLastError();
}
