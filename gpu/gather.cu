/*
 * gather.cu - the device gather kernel (device_gather_slot()): copy runs
 * of decoded blocks (the io mirror) into a batch (the batch mirror).
 *
 * One block of threads per run at a time, grid-stride over the runs (the
 * host splits long runs, cuda_gather.c, so that a whole-block run does
 * not sit on one SM).  When source and destination share their
 * alignment modulo 16, the run's middle moves as 16-byte vectors and only
 * its ends byte by byte; otherwise byte by byte (records whose fields
 * sit at odd offsets: rare, and still correct).  A run with no source
 * (CUDA_GATHER_ZEROS) writes zeros, the same way: the padding of a
 * padded variable field's rows.
 */
#include <stdint.h>

#include "cuda_compute.h"

#define GATHER_THREADS 256
#define GATHER_BLOCKS_MAX 2048u

/* A run's bytes before its destination's first 16-byte boundary (at
 * most @len), and the 16-byte vectors that follow them. */
static __device__ void split_run(const unsigned char *dst,
				 unsigned long long len,
				 unsigned long long *head,
				 unsigned long long *body)
{
	unsigned long long h = (16u - ((uintptr_t)dst & 15u)) & 15u;

	*head = h < len ? h : len;
	*body = (len - *head) / 16u;
}

static __global__ void gather_kernel(const struct cuda_gather_desc *runs,
				     unsigned n, const unsigned char *src_base,
				     unsigned char *dst_base)
{
	for (unsigned r = blockIdx.x; r < n; r += gridDim.x) {
		unsigned char *dst = dst_base + runs[r].dst;
		unsigned long long len = runs[r].len, head, body, k;
		/* the same for the whole block: no divergence */
		int zeros = runs[r].src == CUDA_GATHER_ZEROS;
		const unsigned char *src = zeros ? dst : src_base + runs[r].src;

		if (!zeros && (((uintptr_t)src ^ (uintptr_t)dst) & 15u)) {
			for (k = threadIdx.x; k < len; k += blockDim.x)
				dst[k] = src[k];
			continue;
		}
		split_run(dst, len, &head, &body);
		const uint4 *s4 = (const uint4 *)(src + head);
		uint4 *d4 = (uint4 *)(dst + head);

		for (k = threadIdx.x; k < head; k += blockDim.x)
			dst[k] = zeros ? 0 : src[k];
		for (k = threadIdx.x; k < body; k += blockDim.x)
			d4[k] = zeros ? make_uint4(0, 0, 0, 0) : s4[k];
		for (k = head + body * 16u + threadIdx.x; k < len;
		     k += blockDim.x)
			dst[k] = zeros ? 0 : src[k];
	}
}

extern "C" cudaError_t cuda_gather_async(cudaStream_t stream,
					 const struct cuda_gather_desc *runs,
					 unsigned n, const void *src_base,
					 void *dst_base)
{
	unsigned blocks = n < GATHER_BLOCKS_MAX ? n : GATHER_BLOCKS_MAX;

	if (n == 0)
		return cudaSuccess;
	/* A launch reports only through cudaGetLastError(): clear what an
	 * earlier call of this thread left there (it reported it itself),
	 * so that the check below sees this launch's own error. */
	(void)cudaGetLastError();
	gather_kernel<<<blocks, GATHER_THREADS, 0, stream>>>(
		runs, n, (const unsigned char *)src_base,
		(unsigned char *)dst_base);
	return cudaGetLastError();
}
