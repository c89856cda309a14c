/*
 * cuda_device.c - the device on a GPU: the arena pinned with
 * cudaHostRegister, one device buffer mirroring the arena's batch part,
 * copies on a non-blocking copy stream, and per-slot events that order
 * the copy stream against the consumer's streams without blocking either
 * host thread.
 *
 * Ordering, per slot (DESIGN.md "GPU stream semantics"):
 *   copy:    memcpy H2D into the mirror, record ready
 *   export:  consumer stream waits ready
 *   release: record release[k] on each consumer stream it was exported
 *            to; the copy stream waits on them at once, since the
 *            memory goes back to the budget and any later copy (of any
 *            slot) may land on it
 *   gather:  (device gather) the slot's runs copied from the io mirror
 *            by a kernel on the copy stream, then ready as for a copy;
 *            cuda_gather.c orders uploads against gathers
 *   checksum: (device gather) a block's XXH3 taken on an upload lane
 *            after its uploads returned (checksum.cu), once open found
 *            the kernel's sums equal to libxxhash's
 */
#ifdef SLUICE_HAVE_CUDA

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "sluice.h"
#include "sluice_xxh3.h"
#include "cuda_compute.h"
#include "cuda_gather.h"
#include "device_impl.h"

/* Distinct consumer streams a slot can be exported to between two
 * releases; more than this is rare and handled by a device-wide wait. */
#define SLOT_STREAMS 4

struct cuda_slot {
	pthread_mutex_t lock;         /* copy thread vs consumer vs releaser */
	cudaEvent_t ready;            /* the slot's last copy finished */
	cudaEvent_t release[SLOT_STREAMS];
	cudaStream_t consumer[SLOT_STREAMS];  /* exported since last release */
	int nconsumers;
	int overflow;                 /* exported to more than SLOT_STREAMS */
	int npending;                 /* release[0..n) recorded (close waits) */
};

struct cuda_device {
	struct device base;           /* first: device.c sees only this */
	int id;
	int registered;               /* cudaHostRegister held on the arena */
	char *mirror;                 /* mirror_bytes on the device */
	cudaStream_t copy_stream;
	struct cuda_gather *gather;   /* NULL: no io mirror (no gathers) */
	struct cuda_slot *slot;
	uint32_t slots_ready;         /* slots whose lock and events exist */
};

static struct cuda_device *to_cuda(struct device *d)
{
	return (struct cuda_device *)d;
}

typedef int (*cu_ctx_get_current_fn)(void **ctx);

static cu_ctx_get_current_fn ctx_get_current;
static pthread_once_t ctx_get_current_once = PTHREAD_ONCE_INIT;

static void find_ctx_get_current(void)
{
	/* the driver the runtime loaded; never closed */
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

	if (h)
		*(void **)&ctx_get_current = dlsym(h, "cuCtxGetCurrent");
}

/*
 * Whether the calling thread has a CUDA context current: a device of its
 * own to go back to.  cudaGetDevice() says 0 on a thread that never used
 * CUDA, and since CUDA 12 cudaSetDevice(0) creates device 0's primary
 * context (hundreds of MiB on GPU 0) - in every rank of a multi-GPU job,
 * from the loader's own threads, were that "0" restored.  Unknown (no
 * cuCtxGetCurrent): yes, as before.
 */
static int thread_has_context(void)
{
	void *ctx = NULL;

	pthread_once(&ctx_get_current_once, find_ctx_get_current);
	if (!ctx_get_current)
		return 1;
	return ctx_get_current(&ctx) != 0 || ctx != NULL;
}

/* The device to give back to the caller: @prev, or -1 where the thread
 * had none (the loader's device then stays current). */
static int device_to_restore(int prev)
{
	return thread_has_context() ? prev : -1;
}

/* Make the loader's GPU current without changing the caller's: release
 * may run on a user thread that works on another device. */
static int enter(struct cuda_device *cd, int *prev)
{
	cudaError_t e = cudaGetDevice(prev);

	if (e == cudaSuccess && *prev != cd->id) {
		*prev = device_to_restore(*prev);
		e = cudaSetDevice(cd->id);
	}
	if (e != cudaSuccess) {
		device_record_error(&cd->base, "cudaSetDevice(%d): %s", cd->id,
				    cudaGetErrorString(e));
		return -SLUICE_ECUDA;
	}
	return 0;
}

static void leave(struct cuda_device *cd, int prev)
{
	if (prev >= 0 && prev != cd->id)
		(void)cudaSetDevice(prev);
}

/* The one place CUDA errors become sluice errors. */
static int fail(struct cuda_device *cd, uint32_t i, const char *what,
		cudaError_t e)
{
	device_record_error(&cd->base, "%s (slot %u): %s", what, i,
			    cudaGetErrorString(e));
	return -SLUICE_ECUDA;
}

/*
 * cudaGetDeviceCount says "CUDA driver version is insufficient" both when
 * the driver is too old and when there is no driver at all (the static
 * runtime finds no libcuda), so the machine itself is asked which.
 */
void cuda_no_gpu_explain(const struct cuda_no_gpu *f, char *why,
			 size_t whylen)
{
	int need = f->runtime_version, have = f->driver_version;

	if (!f->driver_lib && !f->device_nodes) {
		device_set_err(why, whylen,
			       "no NVIDIA driver (no libcuda.so.1, no "
			       "/dev/nvidia*): install it to use a GPU");
	} else if (!f->driver_lib) {
		device_set_err(why, whylen,
			       "/dev/nvidia* exist but libcuda.so.1 does not "
			       "load (a container without the GPU runtime? "
			       "docker run --gpus all)");
	} else if (f->error == cudaErrorInsufficientDriver && have > 0) {
		device_set_err(why, whylen,
			       "the NVIDIA driver is too old: it supports CUDA "
			       "%d.%d, this build needs %d.%d; update the "
			       "driver", have / 1000, have % 1000 / 10,
			       need / 1000, need % 1000 / 10);
	} else if (f->error == cudaErrorInsufficientDriver) {
		device_set_err(why, whylen,
			       "the NVIDIA driver is too old for this build's "
			       "CUDA %d.%d runtime; update the driver",
			       need / 1000, need % 1000 / 10);
	} else if (f->error == cudaErrorNoDevice && f->visible) {
		device_set_err(why, whylen,
			       "the NVIDIA driver sees no GPU with "
			       "CUDA_VISIBLE_DEVICES='%s'", f->visible);
	} else if (f->error == cudaErrorNoDevice) {
		device_set_err(why, whylen,
			       "the NVIDIA driver is installed but sees no GPU%s",
			       f->device_nodes ? "" : " (no /dev/nvidia0)");
	} else {
		device_set_err(why, whylen, "the CUDA driver says: %s",
			       f->error_text ? f->error_text : "?");
	}
}

static int have_driver_lib(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

	if (!h)
		return 0;
	dlclose(h);
	return 1;
}

void cuda_no_gpu_facts(int error, struct cuda_no_gpu *f)
{
	int v = 0;

	memset(f, 0, sizeof(*f));
	f->error = error;
	f->error_text = cudaGetErrorString((cudaError_t)error);
	f->driver_lib = have_driver_lib();
	f->device_nodes = access("/dev/nvidiactl", F_OK) == 0 ||
			  access("/dev/nvidia0", F_OK) == 0;
	if (cudaDriverGetVersion(&v) == cudaSuccess)
		f->driver_version = v;
	f->runtime_version = CUDART_VERSION;
	f->visible = getenv("CUDA_VISIBLE_DEVICES");
}

int cuda_device_probe(int id, char *why, size_t whylen)
{
	cudaError_t e;
	int n = 0, prev;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		struct cuda_no_gpu f;

		(void)cudaGetLastError();
		cuda_no_gpu_facts((int)e, &f);
		cuda_no_gpu_explain(&f, why, whylen);
		return -SLUICE_ENODEVICE;
	}
	if (id >= n) {
		device_set_err(why, whylen, "device %d requested, %d present",
			       id, n);
		return -SLUICE_ENODEVICE;
	}
	/* A device that exists may still refuse a context (exclusive mode,
	 * out of memory): creating it here is what "usable" means. */
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = id;
	else if (prev != id)
		prev = device_to_restore(prev);
	e = cudaSetDevice(id);
	if (e == cudaSuccess)
		e = cudaFree(NULL);
	if (prev >= 0 && prev != id)
		(void)cudaSetDevice(prev);
	if (e != cudaSuccess) {
		device_set_err(why, whylen, "device %d: %s", id,
			       cudaGetErrorString(e));
		(void)cudaGetLastError();
		return -SLUICE_ENODEVICE;
	}
	return 0;
}

uint64_t cuda_device_memory_total(int id)
{
	struct cudaDeviceProp prop;

	if (cudaGetDeviceProperties(&prop, id) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return (uint64_t)prop.totalGlobalMem;
}

/* Undo whatever cuda_device_open got to; also the normal close. */
static void teardown(struct cuda_device *cd)
{
	struct cuda_slot *s;
	int k, prev = cd->id;
	uint32_t i;

	if (cudaGetDevice(&prev) == cudaSuccess && prev != cd->id)
		prev = device_to_restore(prev);
	(void)cudaSetDevice(cd->id);
	if (cd->copy_stream)
		(void)cudaStreamSynchronize(cd->copy_stream);
	cuda_gather_close(cd->gather);
	for (i = 0; i < cd->slots_ready; i++) {
		s = &cd->slot[i];
		/* The consumer's last use of the slot must end before the
		 * memory goes away. */
		for (k = 0; k < s->npending; k++)
			(void)cudaEventSynchronize(s->release[k]);
		for (k = 0; k < SLOT_STREAMS; k++)
			if (s->release[k])
				(void)cudaEventDestroy(s->release[k]);
		if (s->ready)
			(void)cudaEventDestroy(s->ready);
		pthread_mutex_destroy(&s->lock);
	}
	free(cd->slot);
	if (cd->copy_stream)
		(void)cudaStreamDestroy(cd->copy_stream);
	if (cd->mirror)
		(void)cudaFree(cd->mirror);
	if (cd->registered)
		(void)cudaHostUnregister(cd->base.arena.base);
	arena_unmap(&cd->base.arena);
	device_base_fini(&cd->base);
	if (prev >= 0 && prev != cd->id)
		(void)cudaSetDevice(prev);
	free(cd);
}

static void cuda_close(struct device *d)
{
	teardown(to_cuda(d));
}

static void *cuda_mirror_ptr(const struct device *d, size_t offset)
{
	const struct cuda_device *cd = (const struct cuda_device *)d;

	return cd->mirror + offset;
}

static int cuda_copy_slot(struct device *d, uint32_t i, const void *host,
			  const struct slot_range *ranges, unsigned n)
{
	struct cuda_device *cd = to_cuda(d);
	struct cuda_slot *s = &cd->slot[i];
	/* device_check_copy() put every range inside the mirrored part */
	size_t base = (size_t)((const uint8_t *)host -
			       (const uint8_t *)d->arena.base) - d->mirror_offset;
	cudaError_t e = cudaSuccess;
	int prev, r;

	r = enter(cd, &prev);
	if (r)
		return r;
	pthread_mutex_lock(&s->lock);
	for (unsigned g = 0; g < n; g++) {
		if (ranges[g].len == 0)
			continue;
		e = cudaMemcpyAsync(cd->mirror + base + ranges[g].offset,
				    (const uint8_t *)host + ranges[g].offset,
				    ranges[g].len, cudaMemcpyHostToDevice,
				    cd->copy_stream);
		if (e != cudaSuccess) {
			r = fail(cd, i, "cudaMemcpyAsync host to device", e);
			goto out;
		}
	}
	e = cudaEventRecord(s->ready, cd->copy_stream);
	if (e != cudaSuccess)
		r = fail(cd, i, "cudaEventRecord of the copy", e);
out:
	pthread_mutex_unlock(&s->lock);
	leave(cd, prev);
	return r;
}

/* An io-mirror call's end: 0, or its error kept with the bytes it was
 * about. */
static int io_mirror_result(struct device *d, cudaError_t e, const char *what,
			    size_t len, size_t offset)
{
	if (e == cudaSuccess)
		return 0;
	device_record_error(d, "%s (%zu bytes at io offset %zu): %s", what, len,
			    offset, cudaGetErrorString(e));
	return -SLUICE_ECUDA;
}

static int cuda_upload_start(struct device *d, const void *host,
			     struct device_upload *u)
{
	struct cuda_device *cd = to_cuda(d);
	const char *what = "";
	cudaError_t e;
	int prev, r;

	r = enter(cd, &prev);
	if (r)
		return r;
	e = cuda_gather_upload_start(cd->gather, u->offset, host, u->len,
				     &u->handle, &what);
	r = io_mirror_result(d, e, what, u->len, u->offset);
	leave(cd, prev);
	return r;
}

static int cuda_upload_finish(struct device *d, struct device_upload *u)
{
	struct cuda_device *cd = to_cuda(d);
	const char *what = "";
	cudaError_t e;
	int prev, r;

	/* the lane is given back and the copy waited for whatever happens
	 * (an event syncs whatever device is current); when the device
	 * could not be made current, that is the error returned */
	r = enter(cd, &prev);
	e = cuda_gather_upload_finish(cd->gather, u->handle, &what);
	if (r)
		return r;
	r = io_mirror_result(d, e, what, u->len, u->offset);
	leave(cd, prev);
	return r;
}

static int cuda_checksum(struct device *d, size_t offset, size_t len,
			 uint64_t *sum)
{
	struct cuda_device *cd = to_cuda(d);
	const char *what = "";
	cudaError_t e;
	int prev, r;

	r = enter(cd, &prev);
	if (r)
		return r;
	e = cuda_gather_checksum(cd->gather, offset, len, &d->checksum_secret,
				 sum, &what);
	r = io_mirror_result(d, e, what, len, offset);
	leave(cd, prev);
	return r;
}

/*
 * Before any block is checked on this GPU: the kernel's checksums of a
 * test pattern, at lengths around its steps and tiles and off 8-byte
 * alignment, against libxxhash's on the CPU.  A disagreement (or an
 * error) leaves the checks on the CPU, and fallbacks says why: a wrong
 * checksum would fail every block, a missing one would pass them all.
 */
static void checksum_self_check(struct cuda_device *cd, size_t io_bytes)
{
	/* whole tiles of 64 steps and a partial one after them, too */
	static const size_t lens[] = { 241, 1024, 1025, 4103,
				       (192u << 10) + 100, (200u << 10) + 5,
				       (1u << 20) + 13 };
	size_t room = io_bytes < (1u << 20) + 64 ? io_bytes : (1u << 20) + 64;
	/* the arena's io part: nothing of the loader's there yet */
	uint8_t *pattern = cd->base.arena.base;
	const char *what = "";
	cudaError_t e;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	if (room < 512)
		return;         /* no block it could check: none is tested */
	for (size_t k = 0; k < room; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		pattern[k] = (uint8_t)x;
	}
	/* on an upload lane, as the loader's blocks go: no wait on the
	 * rest of the device (a training job's work, say) */
	e = cuda_gather_upload(cd->gather, 0, pattern, room, &what);
	for (size_t k = 0; e == cudaSuccess && k < 2 * sizeof(lens) / sizeof(lens[0]); k++) {
		size_t at = k & 1 ? 3 : 0, len = lens[k / 2];
		uint64_t sum = 0, want;

		/* a small io mirror: as much of each length as it holds */
		if (at + len > room)
			len = room - at;
		e = cuda_gather_checksum(cd->gather, at, len,
					 &cd->base.checksum_secret, &sum, &what);
		want = XXH3_64bits(pattern + at, len);
		if (e == cudaSuccess && sum != want) {
			device_note_fallback(&cd->base.info,
				"the GPU's block checksums disagree with the CPU's (%zu bytes at offset %zu: %016llx, not %016llx): blocks checked on the CPU",
				len, at, (unsigned long long)sum,
				(unsigned long long)want);
			return;
		}
	}
	if (e == cudaSuccess) {
		cd->base.info.caps |= DEVICE_CAP_CHECKSUM;
		return;
	}
	device_note_fallback(&cd->base.info,
			     "block checksums on the GPU: %s: %s: checked on the CPU",
			     what, cudaGetErrorString(e));
	(void)cudaGetLastError();
}

static int cuda_gather_slot(struct device *d, uint32_t i,
			    const struct gather_run *runs, unsigned n)
{
	struct cuda_device *cd = to_cuda(d);
	struct cuda_slot *s = &cd->slot[i];
	const char *what = "cudaEventSynchronize on the slot's last gather";
	cudaError_t e;
	int prev, r;

	r = enter(cd, &prev);
	if (r)
		return r;
	pthread_mutex_lock(&s->lock);
	/* The slot's pinned run table is rewritten: its previous copy to
	 * the device must be done (it is: the slot was released, and the
	 * release waited for it; this costs nothing then). */
	e = cudaEventSynchronize(s->ready);
	if (e == cudaSuccess)
		e = cuda_gather_enqueue(cd->gather, i, runs, n, cd->copy_stream,
					cd->mirror, d->mirror_offset, &what);
	if (e == cudaSuccess) {
		what = "cudaEventRecord of the gather";
		e = cudaEventRecord(s->ready, cd->copy_stream);
	}
	if (e != cudaSuccess)
		r = fail(cd, i, what, e);
	pthread_mutex_unlock(&s->lock);
	leave(cd, prev);
	return r;
}

static int cuda_wait_copied(struct device *d, uint32_t i)
{
	struct cuda_device *cd = to_cuda(d);
	cudaError_t e;
	int prev, r;

	r = enter(cd, &prev);
	if (r)
		return r;
	/* No slot lock: the event is only re-recorded by the next copy,
	 * which the pipeline never starts while it waits on this one. */
	e = cudaEventSynchronize(cd->slot[i].ready);
	if (e != cudaSuccess)
		r = fail(cd, i, "cudaEventSynchronize on the copy", e);
	leave(cd, prev);
	return r;
}

static int cuda_slot_export(struct device *d, uint32_t i, int64_t stream)
{
	struct cuda_device *cd = to_cuda(d);
	struct cuda_slot *s = &cd->slot[i];
	cudaStream_t cs = (cudaStream_t)(intptr_t)stream;
	cudaError_t e;
	int prev, k, r;

	if (stream == -1)
		return 0;
	r = enter(cd, &prev);
	if (r)
		return r;
	pthread_mutex_lock(&s->lock);
	e = cudaStreamWaitEvent(cs, s->ready, 0);
	if (e != cudaSuccess) {
		r = fail(cd, i, "cudaStreamWaitEvent on the consumer stream", e);
		goto out;
	}
	for (k = 0; k < s->nconsumers && s->consumer[k] != cs; k++)
		;
	if (k == s->nconsumers) {
		if (k < SLOT_STREAMS)
			s->consumer[s->nconsumers++] = cs;
		else
			s->overflow = 1;
	}
out:
	pthread_mutex_unlock(&s->lock);
	leave(cd, prev);
	return r;
}

static int cuda_slot_release(struct device *d, uint32_t i)
{
	struct cuda_device *cd = to_cuda(d);
	struct cuda_slot *s = &cd->slot[i];
	cudaError_t e = cudaSuccess;
	int prev, k, r;

	r = enter(cd, &prev);
	if (r)
		return r;
	pthread_mutex_lock(&s->lock);
	for (k = 0; k < s->nconsumers && e == cudaSuccess; k++) {
		e = cudaEventRecord(s->release[k], s->consumer[k]);
		if (e == cudaSuccess)
			e = cudaStreamWaitEvent(cd->copy_stream, s->release[k],
						0);
	}
	if (e != cudaSuccess) {
		r = fail(cd, i, "cudaEventRecord on the consumer stream", e);
		/* The copy stream may not wait for every consumer, and the
		 * memory goes back to the budget all the same (the caller
		 * cannot keep it): wait for the whole device, as for streams
		 * past SLOT_STREAMS, so that no later copy overwrites a
		 * batch still being read. */
		(void)cudaDeviceSynchronize();
	} else if (s->overflow) {
		/* Streams we could not track: waiting for the whole device
		 * is slow but can never let a copy overwrite a slot in use. */
		e = cudaDeviceSynchronize();
		if (e != cudaSuccess)
			r = fail(cd, i, "cudaDeviceSynchronize", e);
	}
	s->npending = r ? 0 : s->nconsumers;
	s->nconsumers = 0;
	s->overflow = 0;
	pthread_mutex_unlock(&s->lock);
	leave(cd, prev);
	return r;
}

static int cuda_measure_h2d(struct device *d, size_t bytes, int iters,
			    double *bps)
{
	struct cuda_device *cd = to_cuda(d);
	cudaEvent_t start = NULL, stop = NULL;
	const uint8_t *src;
	void *dst = NULL;
	const char *what;
	cudaError_t e;
	float ms = 0;
	int prev, n, r;

	if (bytes > d->arena.bytes)
		bytes = d->arena.bytes;
	src = (const uint8_t *)d->arena.base + (d->arena.bytes - bytes);
	r = enter(cd, &prev);
	if (r)
		return r;
	what = "cudaMalloc of the scratch destination";
	e = cudaMalloc(&dst, bytes);
	if (e == cudaSuccess) {
		what = "cudaEventCreate";
		e = cudaEventCreate(&start);
	}
	if (e == cudaSuccess)
		e = cudaEventCreate(&stop);
	/* Queued behind any copy in flight, so it times only itself. */
	if (e == cudaSuccess) {
		what = "cudaMemcpyAsync";
		e = cudaEventRecord(start, cd->copy_stream);
	}
	for (n = 0; n < iters && e == cudaSuccess; n++)
		e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
				    cd->copy_stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(stop, cd->copy_stream);
	if (e == cudaSuccess) {
		what = "cudaEventSynchronize";
		e = cudaEventSynchronize(stop);
	}
	if (e == cudaSuccess)
		e = cudaEventElapsedTime(&ms, start, stop);
	if (e != cudaSuccess) {
		device_record_error(d, "measuring host-to-device bandwidth "
				       "(%zu bytes x %d): %s: %s", bytes, iters,
				    what, cudaGetErrorString(e));
		(void)cudaGetLastError();
		r = -SLUICE_ECUDA;
	} else if (ms <= 0) {
		device_record_error(d, "measuring host-to-device bandwidth: "
				       "%d copies of %zu bytes took no time",
				    iters, bytes);
		r = -SLUICE_ECUDA;
	} else {
		*bps = (double)bytes * iters / (ms / 1e3);
	}
	if (start)
		(void)cudaEventDestroy(start);
	if (stop)
		(void)cudaEventDestroy(stop);
	if (dst)
		(void)cudaFree(dst);
	leave(cd, prev);
	return r;
}

static int cuda_compute(struct device *d, int64_t stream, double ms)
{
	struct cuda_device *cd = to_cuda(d);
	cudaStream_t cs = (cudaStream_t)(intptr_t)stream;
	cudaEvent_t done = NULL;
	cudaError_t e;
	int prev, r;

	r = enter(cd, &prev);
	if (r)
		return r;
	e = cuda_spin_async(cs, ms);
	/* Wait asleep (a blocking event), not spinning in
	 * cudaStreamSynchronize: a training step's wait is not the
	 * loader's CPU, and sluice bench counts the process's. */
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&done, cudaEventBlockingSync |
						    cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventRecord(done, cs);
	if (e == cudaSuccess)
		e = cudaEventSynchronize(done);
	if (done)
		(void)cudaEventDestroy(done);
	if (e != cudaSuccess) {
		device_record_error(d, "compute step of %.3f ms: %s", ms,
				    cudaGetErrorString(e));
		r = -SLUICE_ECUDA;
	}
	leave(cd, prev);
	return r;
}

static const struct device_ops cuda_ops = {
	.close = cuda_close,
	.mirror_ptr = cuda_mirror_ptr,
	.copy_slot = cuda_copy_slot,
	.wait_copied = cuda_wait_copied,
	.upload_start = cuda_upload_start,
	.upload_finish = cuda_upload_finish,
	.checksum = cuda_checksum,
	.gather = cuda_gather_slot,
	.slot_export = cuda_slot_export,
	.slot_release = cuda_slot_release,
	.measure_h2d = cuda_measure_h2d,
	.compute = cuda_compute,
};

static int make_slot(struct cuda_slot *s)
{
	cudaError_t e;
	int k;

	pthread_mutex_init(&s->lock, NULL);
	/* Host threads that wait on them sleep rather than spin: a
	 * spinning wait takes a core from the page-cache copies and the
	 * checksums, which bound the rate on a GPU host. */
	e = cudaEventCreateWithFlags(&s->ready, cudaEventBlockingSync |
						 cudaEventDisableTiming);
	for (k = 0; k < SLOT_STREAMS && e == cudaSuccess; k++)
		e = cudaEventCreateWithFlags(&s->release[k],
					     cudaEventBlockingSync |
					     cudaEventDisableTiming);
	return e;
}

int cuda_device_open(const struct device_config *cfg, int id,
		     struct device **out, char *err, size_t errlen)
{
	struct cuda_device *cd;
	const char *what;
	cudaError_t e;
	char msg[96];
	int r, prev;
	uint64_t t0;
	uint32_t i;

	*out = NULL;
	cd = calloc(1, sizeof(*cd));
	if (!cd) {
		device_set_err(err, errlen, "out of memory for the CUDA device");
		return -ENOMEM;
	}
	device_base_init(&cd->base, &cuda_ops, cfg);
	cd->id = id;
	cd->base.info.dl.device_type = kDLCUDA;
	cd->base.info.dl.device_id = id;
	cd->base.info.caps = DEVICE_CAP_MIRROR | DEVICE_CAP_GATHER |
			     DEVICE_CAP_STREAMS;

	/* Set up on @id, then give the caller back its own current device. */
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = id;
	else if (prev != id)
		prev = device_to_restore(prev);
	what = "cudaSetDevice";
	e = cudaSetDevice(id);
	if (e != cudaSuccess)
		goto fail_cuda;
	r = arena_map(&cd->base.arena, cfg->arena_bytes);
	if (r) {
		device_set_err(err, errlen, "mmap of a %zu-byte arena: %s",
			       cfg->arena_bytes, strerror_r(-r, msg, sizeof(msg)));
		goto fail;
	}
	cd->base.info.huge_pages = cd->base.arena.huge_pages;
	/* Anonymous memory registered afterwards, not cudaHostAlloc: see
	 * DESIGN.md "The pinned arena".  Registering faults every page in;
	 * unregistered, the arena is faulted in all the same, so that no
	 * first touch is left to the steady state. */
	t0 = device_now_ns();
	if (cfg->pageable) {
		device_note_fallback(&cd->base.info,
				     "cudaHostRegister off (asked); pageable copies");
	} else {
		e = cudaHostRegister(cd->base.arena.base,
				     cd->base.arena.map_len,
				     cudaHostRegisterDefault);
		if (e == cudaSuccess) {
			cd->registered = 1;
			cd->base.info.arena_pinned = 1;
			cd->base.info.caps |= DEVICE_CAP_PINNED;
		} else {
			device_note_fallback(&cd->base.info,
					     "cudaHostRegister failed: %s; pageable copies",
					     cudaGetErrorString(e));
			(void)cudaGetLastError();
		}
	}
	if (!cd->registered)
		arena_populate(&cd->base.arena);
	cd->base.info.arena_resident_ns = device_now_ns() - t0;

	what = "cudaMalloc of the device batch memory";
	e = cudaMalloc((void **)&cd->mirror, cfg->mirror_bytes);
	if (e != cudaSuccess)
		goto fail_cuda;
	cd->base.info.device_bytes = cfg->mirror_bytes;
	what = "cudaStreamCreateWithFlags";
	e = cudaStreamCreateWithFlags(&cd->copy_stream, cudaStreamNonBlocking);
	if (e != cudaSuccess)
		goto fail_cuda;
	if (cfg->io_mirror_bytes) {
		struct cuda_gather_config gc = {
			.io_bytes = cfg->io_mirror_bytes,
			.batch_bytes = cfg->mirror_bytes,
			.slots = cfg->slots,
			.runs_max = cfg->gather_runs_max,
			.lanes = cfg->upload_lanes,
		};
		size_t gathered_bytes;

		e = cuda_gather_open(&gc, &cd->gather, &gathered_bytes, &what);
		if (e != cudaSuccess)
			goto fail_cuda;
		cd->base.info.device_bytes += gathered_bytes;
		checksum_self_check(cd, cfg->io_mirror_bytes);
	}
	cd->slot = calloc(cfg->slots, sizeof(*cd->slot));
	if (!cd->slot) {
		device_set_err(err, errlen, "out of memory for %u slots",
			       cfg->slots);
		r = -ENOMEM;
		goto fail;
	}
	what = "cudaEventCreateWithFlags";
	for (i = 0; i < cfg->slots; i++) {
		e = make_slot(&cd->slot[i]);
		cd->slots_ready = i + 1;
		if (e != cudaSuccess)
			goto fail_cuda;
	}
	if (prev >= 0 && prev != id)
		(void)cudaSetDevice(prev);
	*out = &cd->base;
	return 0;

fail_cuda:
	device_set_err(err, errlen, "CUDA device %d: %s: %s", id, what,
		       cudaGetErrorString(e));
	(void)cudaGetLastError();
	r = -SLUICE_ECUDA;
fail:
	teardown(cd);
	if (prev >= 0 && prev != id)
		(void)cudaSetDevice(prev);
	return r;
}

#endif /* SLUICE_HAVE_CUDA */
