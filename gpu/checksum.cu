/*
 * checksum.cu - a block's XXH3-64 taken on the device, from its upload in
 * the io mirror (device_checksum()), so that the CPU never reads a block
 * it only moves to the GPU.
 *
 * One block of CHECK_THREADS threads per checksum.  XXH3's steps of
 * 1 KiB add sums that depend only on their bytes (xxh3_steps.h): eight
 * loader threads per step, one per accumulator, take a tile of
 * TILE_STEPS steps at once (a warp reads four steps' stripes side by
 * side), while the first eight threads run the previous tile's adds and
 * scrambles in order from shared memory.  Thread 0 ends with the last
 * bytes and the merge.
 */
#include <stdint.h>

#include "cuda_compute.h"
#include "xxh3_steps.h"

#define LOAD_THREADS 512u
#define TILE_STEPS (LOAD_THREADS / 8u)
/* warp 0 runs the chain; the others load */
#define CHECK_THREADS (32u + LOAD_THREADS)

/* Loader @lt's share of the tile of steps from @base: its lane's sums of
 * one step into @sums[step][lane]. */
static __device__ void load_tile(const uint8_t *p, uint64_t nsteps,
				 uint64_t base, int aligned,
				 const struct xxh3s_secret *key, unsigned lt,
				 uint64_t (*sums)[8])
{
	unsigned lane = lt & 7u, step = lt >> 3;
	uint64_t prod = 0, data = 0, other;

	if (base + step < nsteps)
		xxh3s_lane(p + (base + step) * XXH3S_STEP,
			   XXH3S_STEP / XXH3S_STRIPE, aligned, key, lane,
			   &prod, &data);
	/* a lane's words go to its neighbour's accumulator: the neighbour
	 * is the next or previous thread of this warp */
	other = __shfl_xor_sync(0xffffffffu, data, 1);
	sums[step][lane] = prod + other;
}

static __global__ void checksum_kernel(const uint8_t *p, uint64_t len,
				       struct xxh3s_secret s, uint64_t *out)
{
	/* two tiles: the chain reads one while the loaders fill the other */
	__shared__ uint64_t sums[2][TILE_STEPS][8];
	__shared__ struct xxh3s_secret key;
	unsigned t = threadIdx.x;
	uint64_t nsteps = xxh3s_steps(len), base = 0;
	uint64_t acc = t < 8 ? xxh3s_init(t) : 0;
	int aligned = ((uintptr_t)p & 7u) == 0, cur = 0;

	/* each thread reads its own words of it: from shared memory, not
	 * from a per-thread copy of the parameter */
	if (t < XXH3S_SECRET / 8)
		key.w[t] = s.w[t];
	__syncthreads();
	if (t >= 32 && nsteps)
		load_tile(p, nsteps, 0, aligned, &key, t - 32, sums[0]);
	__syncthreads();
	for (; base < nsteps; base += TILE_STEPS, cur ^= 1) {
		if (t < 8) {
			uint64_t n = nsteps - base < TILE_STEPS
				? nsteps - base : TILE_STEPS;

			for (uint64_t k = 0; k < n; k++)
				acc = xxh3s_scramble(acc + sums[cur][k][t],
						     &key, t);
		} else if (t >= 32 && base + TILE_STEPS < nsteps) {
			load_tile(p, nsteps, base + TILE_STEPS, aligned, &key,
				  t - 32, sums[cur ^ 1]);
		}
		__syncthreads();
	}
	if (t < 8)
		sums[0][0][t] = acc;
	__syncthreads();
	if (t == 0)
		*out = xxh3s_finish(sums[0][0], p, len, &key);
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
