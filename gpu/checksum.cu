/*
 * checksum.cu - a block's XXH3-64 taken on the device, from its upload in
 * the io mirror (device_checksum()), so that the CPU never reads a block
 * it only moves to the GPU.
 *
 * One block of CHECK_THREADS threads per checksum.  XXH3's steps of
 * 1 KiB add sums that depend only on their bytes (xxh3_steps.h): eight
 * threads per step, one per accumulator, take a tile of TILE_STEPS steps
 * at once (a warp reads four steps' stripes side by side), and then the
 * first eight threads run the tile's adds and scrambles in order from
 * shared memory.  Thread 0 ends with the last bytes and the merge.
 */
#include <stdint.h>

#include "cuda_compute.h"
#include "xxh3_steps.h"

#define CHECK_THREADS 512u
#define TILE_STEPS (CHECK_THREADS / 8u)

static __global__ void checksum_kernel(const uint8_t *p, uint64_t len,
				       struct xxh3s_secret s, uint64_t *out)
{
	__shared__ uint64_t sums[TILE_STEPS][8];
	__shared__ struct xxh3s_secret key;
	unsigned t = threadIdx.x, lane = t & 7u, step = t >> 3;
	uint64_t nsteps = xxh3s_steps(len);
	uint64_t acc = t < 8 ? xxh3s_init(t) : 0;
	int aligned = ((uintptr_t)p & 7u) == 0;

	/* each thread reads its own words of it: from shared memory, not
	 * from a per-thread copy of the parameter */
	if (t < XXH3S_SECRET / 8)
		key.w[t] = s.w[t];
	__syncthreads();
	for (uint64_t base = 0; base < nsteps; base += TILE_STEPS) {
		uint64_t prod = 0, data = 0, other;

		if (base + step < nsteps)
			xxh3s_lane(p + (base + step) * XXH3S_STEP,
				   XXH3S_STEP / XXH3S_STRIPE, aligned, &key, lane,
				   &prod, &data);
		/* a lane's words go to its neighbour's accumulator: the
		 * neighbour is the next or previous thread of this warp */
		other = __shfl_xor_sync(0xffffffffu, data, 1);
		sums[step][lane] = prod + other;
		__syncthreads();
		if (t < 8) {
			uint64_t n = nsteps - base < TILE_STEPS
				? nsteps - base : TILE_STEPS;

			for (uint64_t k = 0; k < n; k++)
				acc = xxh3s_scramble(acc + sums[k][t], &key, t);
		}
		__syncthreads();
	}
	if (t < 8)
		sums[0][t] = acc;
	__syncthreads();
	if (t == 0)
		*out = xxh3s_finish(sums[0], p, len, &key);
}

extern "C" cudaError_t cuda_checksum_async(cudaStream_t stream,
					   const void *p, uint64_t len,
					   const struct xxh3s_secret *secret,
					   uint64_t *out)
{
	if (len <= XXH3S_MIDSIZE_MAX)
		return cudaErrorInvalidValue;
	/* as cuda_gather_async: this launch's error, not an earlier one */
	(void)cudaGetLastError();
	checksum_kernel<<<1, CHECK_THREADS, 0, stream>>>(
		(const uint8_t *)p, len, *secret, out);
	return cudaGetLastError();
}
