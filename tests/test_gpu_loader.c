/*
 * test_gpu_loader.c - the loader on a CUDA device (`make test-gpu`).
 *
 * - Content: every tensor delivered to the GPU, copied back, equals the
 *   host path's bytes for the same (seed, epoch) order.
 * - Stream safety: a consumer that keeps the tensors of several batches
 *   across next() calls and runs slow kernels before reading them sees no
 *   corruption: the copy stream waits on the release event instead.
 *
 * - Fallbacks: the content check again with pageable copies (no
 *   cudaHostRegister) and with plain reads (no registered buffers).
 * - Fetches: fixed-shape data larger than the budget, its raw blocks
 *   read by the workers through staging buffers in cache straight to
 *   the GPU (pipeline/fetch.c), equals the host path's bytes over two
 *   epochs.
 * - Variable-size fields gathered on the GPU (raw blocks), flat and
 *   padded (the kernel's zero runs), equal the host path's bytes.
 *
 * SLUICE_GPU_LOADER_QUICK=1 (under compute-sanitizer, whose racecheck
 * makes the checksum kernel slow): each kind of device work once - the
 * zstd content check, the padded variable gather, fetches with block
 * and full shuffle.
 *
 * Skips (77) without CUDA or without a GPU, unless SLUICE_REQUIRE_GPU=1,
 * where that is a failure.
 */
#include "loader_fixture.h"
#include "sluice_tools.h"

#ifndef SLUICE_HAVE_CUDA
int main(void)
{
	if (getenv("SLUICE_REQUIRE_GPU"))
		T_FAIL_AT("SLUICE_REQUIRE_GPU=1 but built without CUDA");
	T_SKIP_BECAUSE("built without CUDA (CUDA=0)");
}
#else
#include <cuda_runtime_api.h>

#include "cuda_compute.h"
#include "device.h"             /* device_memory_total */

#define N 3000
#define B 100

/* @fallback: 0, FB_PAGEABLE or FB_PLAIN_READS. */
#define FB_PAGEABLE 1
#define FB_PLAIN_READS 2

/* The loaders' pad_length (0: variable fields flat, with offsets). */
static uint32_t pad_length;

static sluice_loader *open_on(sluice_dataset *ds, int device, uint32_t depth,
			      int fallback)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	int r;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.seed = 5;
	cfg.prefetch_depth = depth;
	cfg.decode_threads = 2;
	cfg.device = device;
	cfg.device_id = 0;
	cfg.pad_length = pad_length;
	if (fallback == FB_PAGEABLE)
		sluice_loader_config_force(&cfg, SLUICE_FORCE_PAGEABLE_COPIES);
	if (fallback == FB_PLAIN_READS)
		sluice_loader_config_force(&cfg, SLUICE_FORCE_PLAIN_READS);
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r == -SLUICE_ENODEVICE) {
		char msg[512];

		sluice_loader_error(ld, msg, sizeof(msg));
		sluice_loader_close(ld);
		if (getenv("SLUICE_REQUIRE_GPU"))
			T_FAIL_AT("SLUICE_REQUIRE_GPU=1 but no GPU: %s", msg);
		T_SKIP_BECAUSE("no usable GPU: %s", msg);
	}
	T_OK(r);
	return ld;
}

/* Copy tensor @name of a CUDA batch to host memory after @stream. */
static void *to_host(sluice_batch *b, const char *name, cudaStream_t stream,
		     size_t *bytes)
{
	DLManagedTensor *t;
	size_t n = 1;
	void *h;

	T_OK(sluice_batch_tensor(b, name, (int64_t)(intptr_t)stream, &t));
	T_EQ(t->dl_tensor.device.device_type, kDLCUDA);
	for (int k = 0; k < t->dl_tensor.ndim; k++)
		n *= (size_t)t->dl_tensor.shape[k];
	n *= t->dl_tensor.dtype.bits / 8u;
	h = malloc(n ? n : 1);
	T_ASSERT(h);
	T_EQ(cudaMemcpyAsync(h, t->dl_tensor.data, n, cudaMemcpyDeviceToHost,
			     stream), cudaSuccess);
	T_EQ(cudaStreamSynchronize(stream), cudaSuccess);
	t->deleter(t);
	*bytes = n;
	return h;
}

/* Tensor @name of GPU batch @gb, copied back, equals host batch @hb's. */
static void expect_same(sluice_batch *hb, sluice_batch *gb, const char *name)
{
	DLManagedTensor *ht;
	size_t n;
	void *g = to_host(gb, name, 0, &n);

	T_OK(sluice_batch_tensor(hb, name, -1, &ht));
	T_MEMEQ(g, ht->dl_tensor.data, n);
	ht->deleter(ht);
	free(g);
}

/* @return: the batches the GPU loader gathered on the device. */
static uint64_t check_content(sluice_dataset *ds, int fallback)
{
	static const char *flat[] = { "x", "v", "v.offsets" };
	static const char *padded[] = { "x", "v", "v.lengths" };
	const char *const *names = pad_length ? padded : flat;
	sluice_loader *host = open_on(ds, SLUICE_DEVICE_HOST, 3, 0);
	sluice_loader *gpu = open_on(ds, SLUICE_DEVICE_CUDA, 3, fallback);
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_batch *hb, *gb;
	int rh, rg;

	while ((rh = sluice_loader_next(host, &hb)) == 0) {
		T_OK(rg = sluice_loader_next(gpu, &gb));
		T_EQ(sluice_batch_size(hb), sluice_batch_size(gb));
		for (int k = 0; k < 3; k++)
			expect_same(hb, gb, names[k]);
		sluice_batch_release(hb);
		sluice_batch_release(gb);
	}
	T_EQ(rh, SLUICE_EOF);
	T_EQ(sluice_loader_next(gpu, &gb), SLUICE_EOF);
	T_OK(sluice_loader_stats(gpu, &st));
	if (fallback == FB_PAGEABLE) {
		T_EQ(st.device_pinned, 0);
		T_CONTAINS(st.fallbacks, "cudaHostRegister off (asked)");
	}
	if (fallback == FB_PLAIN_READS) {
		T_EQ(st.registered_buffers, 0);
		T_CONTAINS(st.fallbacks, "buffer registration off (asked)");
	}
	printf("content equal (fallback %d, pad %u): pinned %d, registered buffers %d, %llu of %llu batches gathered\n",
	       fallback, pad_length, st.device_pinned, st.registered_buffers,
	       (unsigned long long)st.batches_gathered,
	       (unsigned long long)st.batches);
	sluice_loader_close(host);
	sluice_loader_close(gpu);
	return st.batches_gathered;
}

/* Fixed-shape records of 256 KiB, 48 to a 12 MiB block, 151 MB: more
 * than twice the 64 MiB budget of check_staged's loaders. */
static void write_fixed(const char *dir)
{
	const uint64_t img = 256u << 10;
	struct sluice_field f = t_field("img", (DLDataType){ kDLUInt, 8, 1 },
					(int64_t)img);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t *v = malloc(img);

	T_ASSERT(v != NULL);
	sluice_writer_config_init(&wc);
	wc.block_size = 12u << 20;
	wc.records_per_shard = 144;
	wc.compression_level = 0;      /* raw: only raw blocks stage */
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint64_t i = 0; i < 576; i++) {
		const void *vals[1] = { v };
		uint64_t lens[1] = { img };

		for (uint64_t k = 0; k < img; k++)
			v[k] = (uint8_t)(i * 131 + k * 7 + (k >> 12));
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(v);
}

/* Raw blocks staged to the GPU: the same bytes as the host path's, two
 * epochs, most of the reads staged, by @workers decode threads (one
 * alone always reads its next part while the last one uploads).  Under
 * @shuffle full, the records' ranges are staged instead, and every batch
 * gathered from them (ranges.device). */
static void check_staged(const char *dir, uint32_t workers, int shuffle)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *host = NULL, *gpu = NULL;
	sluice_dataset *ds = NULL;
	sluice_batch *hb, *gb;
	int rh;

	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.batch_size = 16;
	cfg.shuffle = shuffle;
	cfg.seed = 9;
	cfg.memory_bytes = 64u << 20;
	cfg.decode_threads = workers;
	cfg.direct_io = SLUICE_DIRECT_IO_OFF;
	cfg.device = SLUICE_DEVICE_HOST;
	if (sluice_loader_open(ds, &cfg, &host)) {
		char msg[512];

		sluice_loader_error(host, msg, sizeof(msg));
		T_FAIL_AT("open: %s", msg);
	}
	cfg.device = SLUICE_DEVICE_CUDA;
	cfg.device_id = 0;
	if (sluice_loader_open(ds, &cfg, &gpu)) {
		char msg[512];

		sluice_loader_error(gpu, msg, sizeof(msg));
		T_FAIL_AT("open: %s", msg);
	}
	for (int epoch = 0; epoch < 2; epoch++) {
		while ((rh = sluice_loader_next(host, &hb)) == 0) {
			T_OK(sluice_loader_next(gpu, &gb));
			expect_same(hb, gb, "img");
			sluice_batch_release(hb);
			sluice_batch_release(gb);
		}
		T_EQ(rh, SLUICE_EOF);
		T_EQ(sluice_loader_next(gpu, &gb), SLUICE_EOF);
	}
	T_OK(sluice_loader_stats(gpu, &st));
	printf("staged, %u workers: %.1f of %.1f MB read (%.1f MB uploaded while the next part was read), %.1f MB checked on the GPU, %llu of %llu batches gathered\n",
	       workers, st.bytes_staged / 1e6, st.read.bytes / 1e6,
	       st.bytes_staged_overlapped / 1e6,
	       st.bytes_verified_device / 1e6,
	       (unsigned long long)st.batches_gathered,
	       (unsigned long long)st.batches);
	/* every block fetched by the workers (fetch.c) */
	T_LT(st.read.bytes / 2, st.bytes_staged);
	/* and the read-ahead's blocks still coming in (not read yet) */
	T_ASSERT(st.bytes_staged <= st.read.bytes + st.io_memory_bytes);
	/* the uploads in flight while reads went on (fetch.c) */
	T_ASSERT(st.bytes_staged_overlapped <= st.bytes_staged);
	if (workers == 1 && shuffle != SLUICE_SHUFFLE_FULL)
		T_LT(0, st.bytes_staged_overlapped);
	if (shuffle == SLUICE_SHUFFLE_FULL) {
		T_LT(0, st.range_records);
		T_EQ(st.batches_gathered, st.batches);
	}
	sluice_loader_close(host);
	sluice_loader_close(gpu);
	sluice_dataset_close(ds);
}

/*
 * For each batch: queue a 30 ms kernel and then a read of its "x" tensor
 * on the consumer stream, release the batch at once (the read has not run
 * yet) and go on loading; check the reads only every few batches.  The
 * loader reuses the released slots meanwhile, so without the release
 * event the queued reads would see newer batches' bytes.
 */
struct pending {
	uint32_t n;
	uint64_t idx[B];
	int32_t x[B * 4];
};

static void check_pending(struct pending *p, int count)
{
	for (int k = 0; k < count; k++)
		for (uint32_t i = 0; i < p[k].n; i++) {
			int32_t want[4];

			fx_x(p[k].idx[i], want);
			T_MEMEQ(p[k].x + 4 * i, want, sizeof(want));
		}
}

static void check_stream_safety(sluice_dataset *ds)
{
	sluice_loader *gpu = open_on(ds, SLUICE_DEVICE_CUDA, 2, 0);
	struct pending *p = NULL;
	cudaStream_t s;
	sluice_batch *b;
	int r, queued = 0;

	/* pinned: a copy into pageable memory would block the host until
	 * it ran, and the release would come too late to matter */
	T_EQ(cudaMallocHost((void **)&p, 4 * sizeof(*p)), cudaSuccess);
	T_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	while ((r = sluice_loader_next(gpu, &b)) == 0) {
		struct pending *q = &p[queued++];
		DLManagedTensor *t;

		q->n = sluice_batch_size(b);
		memcpy(q->idx, sluice_batch_indices(b), q->n * sizeof(uint64_t));
		T_OK(sluice_batch_tensor(b, "x", (int64_t)(intptr_t)s, &t));
		T_EQ(cuda_spin_async(s, 30), cudaSuccess);
		T_EQ(cudaMemcpyAsync(q->x, t->dl_tensor.data, (size_t)q->n * 16,
				     cudaMemcpyDeviceToHost, s), cudaSuccess);
		t->deleter(t);
		sluice_batch_release(b);
		if (queued == 4) {
			T_EQ(cudaStreamSynchronize(s), cudaSuccess);
			check_pending(p, queued);
			queued = 0;
		}
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(cudaStreamSynchronize(s), cudaSuccess);
	check_pending(p, queued);
	cudaStreamDestroy(s);
	cudaFreeHost(p);
	sluice_loader_close(gpu);
}

/* The default budget's cap reads the GPU's memory (an eighth of it at
 * most, budget.c): the runtime's own figure, for the device asked. */
static void check_device_memory(void)
{
	struct cudaDeviceProp prop;
	uint64_t total;
	int n = 0;

	/* no GPU: the first loader's open says so and skips */
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		(void)cudaGetLastError();
		return;
	}
	total = device_memory_total(SLUICE_DEVICE_CUDA, 0);
	T_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
	T_LT(0, total);
	T_EQ(total, (uint64_t)prop.totalGlobalMem);
	T_EQ(device_memory_total(SLUICE_DEVICE_HOST, 0), 0);
	printf("device 0: %.1f GB, so a default budget of at most %.1f GB\n",
	       (double)total / 1e9, (double)total / 8e9);
}

int main(void)
{
	const int quick = getenv("SLUICE_GPU_LOADER_QUICK") != NULL;
	char *dir = fx_tmpdir();
	char path[600];
	sluice_dataset *ds = NULL;

	check_device_memory();
	snprintf(path, sizeof(path), "%s/d", dir);
	fx_write(path, N, 65536, 3, 0);
	T_OK(sluice_dataset_open(path, &ds));
	check_content(ds, 0);
	if (!quick) {
		check_content(ds, FB_PAGEABLE);
		check_content(ds, FB_PLAIN_READS);
		check_stream_safety(ds);
	}
	sluice_dataset_close(ds);
	/* raw blocks: the batches, variable field and all, are gathered */
	snprintf(path, sizeof(path), "%s/raw", dir);
	fx_write(path, N, 65536, 0, 0);
	T_OK(sluice_dataset_open(path, &ds));
	if (!quick)
		T_LT(0, check_content(ds, 0));
	pad_length = 7;         /* shorter than some values: cut */
	T_LT(0, check_content(ds, 0));
	pad_length = 0;
	sluice_dataset_close(ds);
	snprintf(path, sizeof(path), "%s/fixed", dir);
	write_fixed(path);
	check_staged(path, 2, SLUICE_SHUFFLE_BLOCK);   /* as test_stream's */
	if (!quick)
		check_staged(path, 1, SLUICE_SHUFFLE_BLOCK);
	check_staged(path, 2, SLUICE_SHUFFLE_FULL);
	fx_rmrf(dir);
	free(dir);
	return 0;
}
#endif
