/*
 * test_gpu_gather.c - device gather on a CUDA device (`make test-gpu`).
 *
 * - The kernel: runs of every alignment and length (odd offsets, runs
 *   longer than the piece the host cuts them into) gathered on the GPU
 *   equal the host's memcpy of the same runs.
 * - Checksums on the GPU (checksum.cu): open's self-check passed, and the
 *   XXH3 of uploaded bytes equals libxxhash's at lengths around the
 *   kernel's steps and tiles, off 8-byte alignment, up to 8 MiB; the
 *   rate of whole 8 MiB checksums one at a time, and of 1 MiB ones from
 *   8 threads at once, is printed (not a limit: the bench measures).
 * - The loader: every tensor a gathering CUDA loader delivers, copied
 *   back, equals the host loader's CPU assembly, byte for byte, under
 *   each shuffle mode, raw and zstd (device_gather ON).
 * - Ordering: a tiny io pool (blocks evicted and re-read all the time)
 *   while the consumer keeps batches and runs slow kernels on its stream
 *   before releasing them, so gathers queue up behind the releases on the
 *   copy stream while uploads of new blocks land in the io memory those
 *   gathers read: any upload that overtook a gather would show as wrong
 *   bytes.
 *
 * Skips (77) without CUDA or without a GPU, unless SLUICE_REQUIRE_GPU=1,
 * where that is a failure.
 */
#include "gather_fixture.h"
#include "sluice_tools.h"

#include <stdlib.h>

#ifndef SLUICE_HAVE_CUDA
int main(void)
{
	if (getenv("SLUICE_REQUIRE_GPU"))
		T_FAIL_AT("SLUICE_REQUIRE_GPU=1 but built without CUDA");
	T_SKIP_BECAUSE("built without CUDA (CUDA=0)");
}
#else
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <xxhash.h>

#include "cuda_compute.h"
#include "device_util.h"

#define B 40u

static void no_gpu(const char *why)
{
	if (getenv("SLUICE_REQUIRE_GPU"))
		T_FAIL_AT("SLUICE_REQUIRE_GPU=1 but no GPU: %s", why);
	T_SKIP_BECAUSE("no usable GPU: %s", why);
}

/* A GPU whose arena is two halves of @half: io memory (mirrored for
 * gathers), then one batch mirror. */
static struct device_config two_halves(size_t half)
{
	return (struct device_config){
		.kind = SLUICE_DEVICE_CUDA, .device_id = 0,
		.arena_bytes = 2 * half, .slots = 2,
		.mirror_offset = half, .mirror_bytes = half,
		.io_mirror_bytes = half, .gather_runs_max = 64,
		.upload_lanes = 2,
	};
}

#define SUM_THREADS 8

struct sum_worker {
	struct device *d;
	const uint8_t *from;    /* its own MiB of the io part */
	int failed;
};

static void *sum_worker_main(void *arg)
{
	struct sum_worker *w = arg;
	uint64_t sum;

	for (int k = 0; k < 20; k++)
		w->failed |= device_checksum(w->d, w->from, 1u << 20, &sum) != 0;
	return NULL;
}

/* SUM_THREADS threads checksumming at once, as decode workers do: their
 * rate together (printed; the bench measures the loader). */
static double concurrent_rate(struct device *d, const uint8_t *arena)
{
	struct sum_worker w[SUM_THREADS];
	pthread_t t[SUM_THREADS];
	double t0 = now_ms();

	for (int k = 0; k < SUM_THREADS; k++) {
		w[k] = (struct sum_worker){ d, arena + ((size_t)k << 20), 0 };
		T_EQ(pthread_create(&t[k], NULL, sum_worker_main, &w[k]), 0);
	}
	for (int k = 0; k < SUM_THREADS; k++) {
		T_EQ(pthread_join(t[k], NULL), 0);
		T_EQ(w[k].failed, 0);
	}
	return SUM_THREADS * 20.0 * (1u << 20) / ((now_ms() - t0) * 1e6);
}

/* The device's XXH3 against libxxhash's, through the device interface. */
static void check_checksum(void)
{
	const size_t half = (size_t)8 << 20;
	static const size_t lens[] = { 241, 255, 1023, 1024, 1025, 1088,
				       4096, 65535, 65536, 65537,
				       (64u << 10) * 3 + 1000, 1u << 20,
				       (5u << 20) + 77, (8u << 20) - 16 };
	struct device_config dc = two_halves(half);
	struct device_info info;
	struct device *d = NULL;
	uint64_t sum, rng = 777;
	uint8_t *arena;
	double t0;
	char err[256];

	dc.upload_lanes = SUM_THREADS;
	T_OK(device_open(&dc, &d, err, sizeof(err)));
	device_get_info(d, &info);
	if (!(info.caps & DEVICE_CAP_CHECKSUM))
		T_FAIL_AT("no checksums on the GPU: %s", info.fallbacks);
	arena = device_arena(d, NULL);
	for (size_t k = 0; k < half; k++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		arena[k] = (uint8_t)(rng >> 56);
	}
	T_OK(device_upload(d, arena, half));
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
		for (size_t at = 0; at < 16; at += 5) {
			size_t len = lens[k] + at > half ? half - at : lens[k];

			T_OK(device_checksum(d, arena + at, len, &sum));
			if (sum != XXH3_64bits(arena + at, len))
				T_FAIL_AT("checksum of %zu bytes at %zu: %016llx, libxxhash %016llx",
					  len, at, (unsigned long long)sum,
					  (unsigned long long)XXH3_64bits(
						  arena + at, len));
		}
	/* the device's copy, not the host's */
	arena[12345] ^= 1;
	T_OK(device_checksum(d, arena, half, &sum));
	T_NE(sum, XXH3_64bits(arena, half));
	t0 = now_ms();
	for (int k = 0; k < 20; k++)
		T_OK(device_checksum(d, arena, half, &sum));
	printf("ok: checksums on the GPU == libxxhash; one 8 MiB checksum at a time: %.1f GB/s\n",
	       20.0 * (double)half / ((now_ms() - t0) * 1e6));
	printf("    %d threads, 1 MiB checksums at once: %.1f GB/s\n",
	       SUM_THREADS, concurrent_rate(d, arena));
	device_close(d);
}

/* The kernel against memcpy, through the device interface. */
static void check_kernel(void)
{
	const size_t half = (size_t)8 << 20;
	struct device_config dc = two_halves(half);
	struct gather_run runs[64];
	struct device *d = NULL;
	uint8_t *arena, *want, *got;
	uint64_t dst = half, rng = 12345;
	unsigned n = 0;
	char err[256];
	int r;

	r = device_open(&dc, &d, err, sizeof(err));
	if (r == -SLUICE_ENODEVICE)
		no_gpu(err);
	T_OK(r);
	arena = device_arena(d, NULL);
	for (size_t k = 0; k < half; k++)
		arena[k] = (uint8_t)(k * 7 + (k >> 11));
	T_OK(device_upload(d, arena, half / 2));
	T_OK(device_upload(d, arena + half / 2, half / 2));
	want = calloc(half, 1);
	got = malloc(half);
	T_ASSERT(want && got);
	/* Odd and aligned sources, destinations and lengths (every 3rd
	 * both aligned, the next both off by the same bytes: a head,
	 * vectors and a tail); one run of 3 MiB (cut into pieces), one of
	 * 0 bytes; every 4th one zeros (GATHER_ZEROS), one of them of
	 * 1 MiB (cut too), one of 9 bytes across a 16-byte boundary. */
	while (n < 64 && dst < 2 * half - (4u << 20)) {
		uint64_t len, src;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		len = n == 5 ? (3u << 20) : n == 9 ? 0 : n == 12 ? (1u << 20)
			: n == 8 ? 9 : (rng >> 40) % 70000;
		src = (rng >> 20) % (half - len);
		if (n % 3 == 0) {
			src &= ~(uint64_t)15;
			dst = (dst + 15) & ~(uint64_t)15;
		} else if (n % 3 == 1) {
			src = (src & ~(uint64_t)15) | (dst & 15);
			if (src + len > half)
				src -= 16;
		}
		if (n % 4 == 0)
			src = GATHER_ZEROS;     /* want is zeros already */
		else
			memcpy(want + (dst - half), arena + src, len);
		runs[n++] = (struct gather_run){ src, dst, len };
		dst += len + (rng >> 60);
	}
	/* the batch mirror poisoned first: a zero run not written shows
	 * (fresh device memory is often zeros already) */
	T_EQ(cudaMemset(device_mirror_ptr(d, arena + half), 0xa5, half),
	     cudaSuccess);
	T_EQ(cudaDeviceSynchronize(), cudaSuccess);  /* before the gather */
	T_OK(device_gather_slot(d, 1, runs, n));
	T_OK(device_slot_wait_copied(d, 1));
	T_EQ(cudaMemcpy(got, device_mirror_ptr(d, arena + half), half,
			cudaMemcpyDeviceToHost), cudaSuccess);
	for (unsigned k = 0; k < n; k++)
		T_MEMEQ(got + (runs[k].dst - half), want + (runs[k].dst - half),
			runs[k].len);
	/* and the bytes no run covers (runs lie in order, apart) are the
	 * poison still: nothing written past a run's end */
	for (uint64_t at = 0, k = 0; k <= n; k++) {
		uint64_t end = k < n ? runs[k].dst - half : half;

		for (; at < end; at++)
			if (got[at] != 0xa5)
				T_FAIL_AT("batch mirror byte %llu, outside every run, is %#x",
					  (unsigned long long)at, got[at]);
		if (k < n)
			at = end + runs[k].len;
	}
	free(want);
	free(got);
	device_close(d);
}

static sluice_loader *open_on(sluice_dataset *ds, int device, int shuffle,
			      uint64_t memory_bytes, int gather)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	char msg[512];
	int r;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.shuffle = shuffle;
	cfg.window_blocks = 4;
	cfg.seed = 9;
	cfg.prefetch_depth = 4;
	cfg.decode_threads = 2;
	cfg.device = device;
	cfg.device_id = 0;
	cfg.memory_bytes = memory_bytes;
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	cfg.device_gather = gather;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r == -SLUICE_ENODEVICE) {
		sluice_loader_error(ld, msg, sizeof(msg));
		sluice_loader_close(ld);
		no_gpu(msg);
	}
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
	}
	return ld;
}

/* Field @f of a CUDA batch, copied to the host after @stream. */
static uint8_t *to_host(sluice_batch *b, uint32_t f, cudaStream_t stream)
{
	DLManagedTensor *t;
	size_t n = sluice_batch_size(b) * field_bytes[f];
	uint8_t *h = malloc(n ? n : 1);

	T_ASSERT(h);
	T_OK(sluice_batch_tensor(b, field_name[f], (int64_t)(intptr_t)stream,
				 &t));
	T_EQ(t->dl_tensor.device.device_type, kDLCUDA);
	T_EQ(cudaMemcpyAsync(h, t->dl_tensor.data, n, cudaMemcpyDeviceToHost,
			     stream), cudaSuccess);
	T_EQ(cudaStreamSynchronize(stream), cudaSuccess);
	t->deleter(t);
	return h;
}

static void check_bytes(sluice_batch *b, const uint8_t *const got[3])
{
	const uint64_t *idx = sluice_batch_indices(b);

	for (uint32_t f = 0; f < 3; f++)
		for (uint32_t r = 0; r < sluice_batch_size(b); r++)
			for (uint64_t k = 0; k < field_bytes[f]; k++)
				if (got[f][r * field_bytes[f] + k] !=
				    want_byte(idx[r], f, k))
					T_FAIL_AT("record %llu field %s byte %llu differs",
						  (unsigned long long)idx[r],
						  field_name[f],
						  (unsigned long long)k);
}

/* A gathering CUDA loader against the host's CPU assembly. */
static void check_equal(sluice_dataset *ds, int shuffle)
{
	sluice_loader *host = open_on(ds, SLUICE_DEVICE_HOST, shuffle, 0,
				      SLUICE_DEVICE_GATHER_OFF);
	sluice_loader *gpu = open_on(ds, SLUICE_DEVICE_CUDA, shuffle, 0,
				     SLUICE_DEVICE_GATHER_ON);
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_batch *hb, *gb;
	int rh;

	while ((rh = sluice_loader_next(host, &hb)) == 0) {
		T_OK(sluice_loader_next(gpu, &gb));
		T_EQ(sluice_batch_size(hb), sluice_batch_size(gb));
		T_MEMEQ(sluice_batch_indices(hb), sluice_batch_indices(gb),
			sluice_batch_size(hb) * sizeof(uint64_t));
		for (uint32_t f = 0; f < 3; f++) {
			DLManagedTensor *ht;
			uint8_t *g = to_host(gb, f, 0);

			T_OK(sluice_batch_tensor(hb, field_name[f], -1, &ht));
			T_MEMEQ(g, ht->dl_tensor.data,
				sluice_batch_size(hb) * field_bytes[f]);
			ht->deleter(ht);
			free(g);
		}
		sluice_batch_release(hb);
		sluice_batch_release(gb);
	}
	T_EQ(rh, SLUICE_EOF);
	T_EQ(sluice_loader_next(gpu, &gb), SLUICE_EOF);
	T_OK(sluice_loader_stats(gpu, &st));
	T_EQ(st.batches_gathered, st.batches);
	T_ASSERT(st.device_upload_bytes > 0);
	T_ASSERT(st.device_memory_bytes > st.memory_bytes);
	sluice_loader_close(host);
	sluice_loader_close(gpu);
}

/* A batch the consumer has queued work on: its tensors, pinned host
 * copies being made on the consumer's stream, and their event. */
struct pending {
	sluice_batch *b;
	DLManagedTensor *t[3];
	uint8_t *h[3];
	cudaEvent_t copied;
};

/* Queue on @stream: a 3 ms kernel, then copies of @b's tensors to @p's
 * pinned buffers (they read the batch after the kernel), then the event. */
static void queue_batch(struct pending *p, sluice_batch *b,
			cudaStream_t stream)
{
	p->b = b;
	for (uint32_t f = 0; f < 3; f++)
		T_OK(sluice_batch_tensor(b, field_name[f],
					 (int64_t)(intptr_t)stream, &p->t[f]));
	T_EQ(cuda_spin_async(stream, 3.0), cudaSuccess);
	for (uint32_t f = 0; f < 3; f++)
		T_EQ(cudaMemcpyAsync(p->h[f], p->t[f]->dl_tensor.data,
				     sluice_batch_size(b) * field_bytes[f],
				     cudaMemcpyDeviceToHost, stream),
		     cudaSuccess);
	T_EQ(cudaEventRecord(p->copied, stream), cudaSuccess);
}

/* Wait for @p's copies, check them, let the batch go: its release
 * captures every kernel queued on the stream since, so the copy stream's
 * next gathers wait behind them. */
static void finish_batch(struct pending *p)
{
	const uint8_t *got[3] = { p->h[0], p->h[1], p->h[2] };

	T_EQ(cudaEventSynchronize(p->copied), cudaSuccess);
	check_bytes(p->b, got);
	for (uint32_t f = 0; f < 3; f++)
		p->t[f]->deleter(p->t[f]);
	sluice_batch_release(p->b);
	p->b = NULL;
}

/*
 * Uploads against gathers: a small budget (io memory for a few blocks,
 * or for one batch's blocks with full shuffle), so blocks are evicted and
 * their io memory reused all the time, while the consumer keeps three
 * batches with kernels queued on its stream and lets each go before that
 * work is done: gathers then wait on the copy stream behind the releases
 * while decode workers upload new blocks into the io memory those
 * gathers read.  An upload that overtook a gather shows as wrong bytes.
 */
static void check_ordering(sluice_dataset *ds, int shuffle)
{
	uint64_t budget = shuffle == SLUICE_SHUFFLE_FULL ? 2u << 20 : 768u << 10;
	sluice_loader *ld = open_on(ds, SLUICE_DEVICE_CUDA, shuffle, budget,
				    SLUICE_DEVICE_GATHER_ON);
	struct pending p[3];
	struct sluice_stats st = { .size = sizeof(st) };
	cudaStream_t stream;
	uint64_t k = 0;
	sluice_batch *b;
	int r;

	memset(p, 0, sizeof(p));
	for (int j = 0; j < 3; j++) {
		for (uint32_t f = 0; f < 3; f++)
			T_EQ(cudaMallocHost((void **)&p[j].h[f],
					    B * field_bytes[f]), cudaSuccess);
		T_EQ(cudaEventCreateWithFlags(&p[j].copied,
					      cudaEventDisableTiming),
		     cudaSuccess);
	}
	T_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
	     cudaSuccess);
	for (int epoch = 0; epoch < 2; epoch++) {
		while ((r = sluice_loader_next(ld, &b)) == 0) {
			struct pending *slot = &p[k++ % 3];

			if (slot->b)
				finish_batch(slot);
			queue_batch(slot, b, stream);
		}
		T_EQ(r, SLUICE_EOF);
	}
	for (int j = 0; j < 3; j++)
		if (p[j].b)
			finish_batch(&p[j]);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.batches_gathered, st.batches);
	/* the pool is far smaller than the data: blocks were re-read */
	T_ASSERT(st.blocks_read > N / 22);
	T_EQ(cudaStreamSynchronize(stream), cudaSuccess);
	T_EQ(cudaStreamDestroy(stream), cudaSuccess);
	for (int j = 0; j < 3; j++) {
		for (uint32_t f = 0; f < 3; f++)
			T_EQ(cudaFreeHost(p[j].h[f]), cudaSuccess);
		T_EQ(cudaEventDestroy(p[j].copied), cudaSuccess);
	}
	sluice_loader_close(ld);
}

int main(void)
{
	static const char *names[] = { "none", "block", "window", "full" };
	char *dir = strdup("/tmp/sluice-test-XXXXXX"), sub[600];

	check_kernel();
	printf("ok: gather kernel == memcpy for runs of every alignment and length\n");
	check_checksum();
	/* SLUICE_GATHER_QUICK=1 (under compute-sanitizer): raw data, window
	 * shuffle only. */
	const int quick = getenv("SLUICE_GATHER_QUICK") != NULL;

	T_ASSERT(dir && mkdtemp(dir));
	for (int level = 0; level <= (quick ? 0 : 3); level += 3) {
		sluice_dataset *ds = NULL;

		snprintf(sub, sizeof(sub), "%s/%s", dir, level ? "zstd" : "raw");
		write_dataset(sub, level);
		T_OK(sluice_dataset_open(sub, &ds));
		for (int sh = SLUICE_SHUFFLE_NONE; sh <= SLUICE_SHUFFLE_FULL;
		     sh++) {
			if (quick && sh != SLUICE_SHUFFLE_WINDOW)
				continue;
			check_equal(ds, sh);
			printf("ok: %s, shuffle %s: gathered on the GPU == host assembly\n",
			       level ? "zstd" : "raw", names[sh]);
		}
		check_ordering(ds, SLUICE_SHUFFLE_WINDOW);
		if (!quick)
			check_ordering(ds, SLUICE_SHUFFLE_FULL);
		printf("ok: %s: tiny io pool, slow consumer: uploads never overtake gathers\n",
		       level ? "zstd" : "raw");
		sluice_dataset_close(ds);
	}
	snprintf(sub, sizeof(sub), "rm -rf '%s'", dir);
	T_EQ(system(sub), 0);
	free(dir);
	return 0;
}
#endif
