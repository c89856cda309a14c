/*
 * cuda_gather.c - the CUDA side of device gathers (gpu/device.h): a
 * device mirror of the arena's io part, upload lanes that copy decoded
 * blocks into it, and per-slot run tables for the gather kernel
 * (gather.cu).
 *
 * Ordering.  A gather reads io-mirror bytes that uploads wrote; an
 * upload may overwrite bytes an earlier gather still has to read (the
 * block was evicted once its last batch's gather was enqueued, and its
 * io memory given to another block).  So:
 *   - upload -> gather: the upload is complete (the host waited on its
 *     event) before its cache entry is READY, and a gather is enqueued
 *     only after every entry it reads is READY: plain host order;
 *   - gather -> later upload: every gather records `gathered` on the
 *     copy stream after its kernel, and every upload's stream first waits
 *     on the latest record of it, under one lock so the wait sees the
 *     latest.  The copy stream runs in order, so the latest record comes
 *     after every earlier gather.  The pipeline enqueues a batch's gather
 *     before it unpins the batch's blocks, which happens before any
 *     eviction and so before any upload into their memory.
 * Uploads never touch the batch mirror, which the consumer reads, so
 * they need none of the copy stream's release waits.
 */
#ifdef SLUICE_HAVE_CUDA

#include <pthread.h>
#include <stdlib.h>

#include "cuda_compute.h"
#include "cuda_gather.h"

/* Long runs are cut into pieces of this size, so that one whole-block
 * run spreads over many SMs. */
#define GATHER_PIECE ((size_t)256 << 10)

_Static_assert(GATHER_ZEROS == CUDA_GATHER_ZEROS,
	       "the kernel's zero runs are device.h's");

struct upload_lane {
	cudaStream_t stream;
	cudaEvent_t done;       /* blocking sync: the waiter sleeps */
	int busy;               /* [lock] */
};

struct cuda_gather {
	char *io_mirror;
	uint64_t *dev_sums;     /* a checksum's result, one per lane */
	uint64_t *host_sums;    /* pinned: where it is copied back */
	cudaEvent_t gathered;   /* after the latest gather [lock] */
	pthread_mutex_t lock;
	pthread_cond_t lane_free;
	struct upload_lane *lane;
	uint32_t nlanes, lanes_made;
	struct cuda_gather_desc *host_runs; /* pinned, slots x cap */
	struct cuda_gather_desc *dev_runs;  /* device, slots x cap */
	uint32_t slots;
	size_t cap;             /* descriptors per slot */
};

void cuda_gather_close(struct cuda_gather *g)
{
	if (!g)
		return;
	for (uint32_t k = 0; k < g->lanes_made; k++) {
		if (g->lane[k].stream) {
			(void)cudaStreamSynchronize(g->lane[k].stream);
			(void)cudaStreamDestroy(g->lane[k].stream);
		}
		if (g->lane[k].done)
			(void)cudaEventDestroy(g->lane[k].done);
	}
	free(g->lane);
	if (g->dev_sums)
		(void)cudaFree(g->dev_sums);
	if (g->host_sums)
		(void)cudaFreeHost(g->host_sums);
	if (g->gathered)
		(void)cudaEventDestroy(g->gathered);
	if (g->host_runs)
		(void)cudaFreeHost(g->host_runs);
	if (g->dev_runs)
		(void)cudaFree(g->dev_runs);
	if (g->io_mirror)
		(void)cudaFree(g->io_mirror);
	pthread_cond_destroy(&g->lane_free);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

cudaError_t cuda_gather_open(const struct cuda_gather_config *cfg,
			     struct cuda_gather **out, size_t *device_bytes,
			     const char **what)
{
	struct cuda_gather *g;
	cudaError_t e;
	size_t table;

	*out = NULL;
	*device_bytes = 0;
	*what = "out of host memory for the gather state";
	g = calloc(1, sizeof(*g));
	if (!g)
		return cudaErrorMemoryAllocation;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->lane_free, NULL);
	g->slots = cfg->slots;
	/* A slot's runs write disjoint bytes of the batch mirror, so
	 * cutting them adds at most batch_bytes / GATHER_PIECE pieces. */
	g->cap = (size_t)cfg->runs_max + cfg->batch_bytes / GATHER_PIECE + 1;
	table = (size_t)cfg->slots * g->cap * sizeof(struct cuda_gather_desc);
	g->nlanes = cfg->lanes ? cfg->lanes : 1;
	g->lane = calloc(g->nlanes, sizeof(*g->lane));
	if (!g->lane) {
		e = cudaErrorMemoryAllocation;
		goto fail;
	}
	*what = "cudaMalloc of the device io mirror";
	e = cudaMalloc((void **)&g->io_mirror, cfg->io_bytes);
	if (e != cudaSuccess)
		goto fail;
	*what = "cudaMalloc of the gather run tables";
	e = cudaMalloc((void **)&g->dev_runs, table);
	if (e != cudaSuccess)
		goto fail;
	*what = "cudaHostAlloc of the gather run tables";
	e = cudaHostAlloc((void **)&g->host_runs, table, cudaHostAllocDefault);
	if (e != cudaSuccess)
		goto fail;
	*what = "cudaMalloc of the checksums' results";
	e = cudaMalloc((void **)&g->dev_sums, g->nlanes * sizeof(uint64_t));
	if (e != cudaSuccess)
		goto fail;
	*what = "cudaHostAlloc of the checksums' results";
	e = cudaHostAlloc((void **)&g->host_sums, g->nlanes * sizeof(uint64_t),
			  cudaHostAllocDefault);
	if (e != cudaSuccess)
		goto fail;
	*what = "cudaEventCreateWithFlags for gathers";
	e = cudaEventCreateWithFlags(&g->gathered, cudaEventDisableTiming);
	if (e != cudaSuccess)
		goto fail;
	*what = "an upload stream or event";
	for (uint32_t k = 0; k < g->nlanes; k++) {
		g->lanes_made = k + 1;
		e = cudaStreamCreateWithFlags(&g->lane[k].stream,
					      cudaStreamNonBlocking);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&g->lane[k].done,
						     cudaEventBlockingSync |
						     cudaEventDisableTiming);
		if (e != cudaSuccess)
			goto fail;
	}
	*device_bytes = cfg->io_bytes + table + g->nlanes * sizeof(uint64_t);
	*out = g;
	return cudaSuccess;
fail:
	cuda_gather_close(g);
	return e;
}

/* A free lane, waiting for one; then held by the caller. [lock] */
static struct upload_lane *lane_take_locked(struct cuda_gather *g)
{
	for (;;) {
		for (uint32_t k = 0; k < g->nlanes; k++)
			if (!g->lane[k].busy) {
				g->lane[k].busy = 1;
				return &g->lane[k];
			}
		pthread_cond_wait(&g->lane_free, &g->lock);
	}
}

static void lane_give(struct cuda_gather *g, struct upload_lane *l)
{
	pthread_mutex_lock(&g->lock);
	l->busy = 0;
	pthread_cond_signal(&g->lane_free);
	pthread_mutex_unlock(&g->lock);
}

/* Wait for what @e says was enqueued on @l, or, when enqueueing failed,
 * for whatever of it did get queued. */
static cudaError_t lane_finish(struct upload_lane *l, cudaError_t e,
			       const char **what)
{
	if (e == cudaSuccess) {
		*what = "cudaEventSynchronize on an upload lane";
		return cudaEventSynchronize(l->done);
	}
	/* The caller reuses the host memory once this returns: nothing
	 * enqueued may still read it. */
	(void)cudaStreamSynchronize(l->stream);
	return e;
}

/* Mark the end of what was enqueued on @l (its done event). */
static cudaError_t lane_record(struct upload_lane *l, cudaError_t e,
			       const char **what)
{
	if (e != cudaSuccess)
		return e;
	*what = "cudaEventRecord on an upload lane";
	return cudaEventRecord(l->done, l->stream);
}

cudaError_t cuda_gather_upload_start(struct cuda_gather *g, size_t offset,
				     const void *host, size_t len,
				     void **lane, const char **what)
{
	struct upload_lane *l;
	cudaError_t e;

	pthread_mutex_lock(&g->lock);
	l = lane_take_locked(g);
	/* After every gather enqueued so far (see the top of the file). */
	*what = "cudaStreamWaitEvent of an upload on the gathers";
	e = cudaStreamWaitEvent(l->stream, g->gathered, 0);
	pthread_mutex_unlock(&g->lock);
	if (e == cudaSuccess) {
		*what = "cudaMemcpyAsync of a block to the device";
		e = cudaMemcpyAsync(g->io_mirror + offset, host, len,
				    cudaMemcpyHostToDevice, l->stream);
	}
	e = lane_record(l, e, what);
	if (e != cudaSuccess) {
		(void)lane_finish(l, e, what);
		lane_give(g, l);
		return e;
	}
	*lane = l;
	return cudaSuccess;
}

cudaError_t cuda_gather_upload_finish(struct cuda_gather *g, void *lane,
				      const char **what)
{
	struct upload_lane *l = lane;
	cudaError_t e = lane_finish(l, cudaSuccess, what);

	lane_give(g, l);
	return e;
}

cudaError_t cuda_gather_upload(struct cuda_gather *g, size_t offset,
			       const void *host, size_t len,
			       const char **what)
{
	void *lane;
	cudaError_t e = cuda_gather_upload_start(g, offset, host, len, &lane,
						 what);

	return e == cudaSuccess ? cuda_gather_upload_finish(g, lane, what) : e;
}

cudaError_t cuda_gather_checksum(struct cuda_gather *g, size_t offset,
				 size_t len, const struct xxh3s_secret *secret,
				 uint64_t *sum, const char **what)
{
	struct upload_lane *l;
	uint32_t k;
	cudaError_t e;

	/* The bytes' uploads returned: complete, in host order.  Gathers
	 * only read the io mirror, so no wait on them. */
	pthread_mutex_lock(&g->lock);
	l = lane_take_locked(g);
	pthread_mutex_unlock(&g->lock);
	k = (uint32_t)(l - g->lane);
	*what = "the checksum kernel's launch";
	e = cuda_checksum_async(l->stream, g->io_mirror + offset, len, secret,
				g->dev_sums + k);
	if (e == cudaSuccess) {
		*what = "cudaMemcpyAsync of a checksum to the host";
		e = cudaMemcpyAsync(g->host_sums + k, g->dev_sums + k,
				    sizeof(uint64_t), cudaMemcpyDeviceToHost,
				    l->stream);
	}
	e = lane_finish(l, lane_record(l, e, what), what);
	if (e == cudaSuccess)
		*sum = g->host_sums[k];
	lane_give(g, l);
	return e;
}

cudaError_t cuda_gather_enqueue(struct cuda_gather *g, uint32_t slot,
				const struct gather_run *runs, unsigned n,
				cudaStream_t stream, void *batch_mirror,
				size_t mirror_offset, const char **what)
{
	struct cuda_gather_desc *h = g->host_runs + (size_t)slot * g->cap;
	struct cuda_gather_desc *dv = g->dev_runs + (size_t)slot * g->cap;
	size_t m = 0;
	cudaError_t e;

	*what = "gather run table overflow";
	for (unsigned k = 0; k < n; k++) {
		/* device_gather_slot() put dst inside the batch mirror */
		unsigned long long src = runs[k].src;
		unsigned long long dst = runs[k].dst - mirror_offset;
		unsigned long long left = runs[k].len;

		while (left) {
			unsigned long long piece = left < GATHER_PIECE
				? left : GATHER_PIECE;

			if (m == g->cap)
				return cudaErrorInvalidValue;
			h[m++] = (struct cuda_gather_desc){ src, dst, piece };
			if (src != CUDA_GATHER_ZEROS)
				src += piece;
			dst += piece;
			left -= piece;
		}
	}
	if (m == 0)
		return cudaSuccess;
	/* The grid-stride loop takes any count, but the launcher's is an
	 * unsigned; cap <= runs_max + batch pieces fits by far. */
	*what = "cudaMemcpyAsync of the gather's run table";
	e = cudaMemcpyAsync(dv, h, m * sizeof(*h), cudaMemcpyHostToDevice,
			    stream);
	if (e == cudaSuccess) {
		*what = "the gather kernel's launch";
		e = cuda_gather_async(stream, dv, (unsigned)m, g->io_mirror,
				      batch_mirror);
	}
	if (e == cudaSuccess) {
		*what = "cudaEventRecord after a gather";
		pthread_mutex_lock(&g->lock);
		e = cudaEventRecord(g->gathered, stream);
		pthread_mutex_unlock(&g->lock);
	}
	return e;
}

#endif /* SLUICE_HAVE_CUDA */
