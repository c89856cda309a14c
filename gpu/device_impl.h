/*
 * device_impl.h - private to gpu/: the shape every device implementation
 * shares, so device.c can dispatch without knowing which one it holds.
 */
#ifndef SLUICE_GPU_DEVICE_IMPL_H
#define SLUICE_GPU_DEVICE_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "xxh3_steps.h"

struct device_ops {
	void (*close)(struct device *d);
	void *(*mirror_ptr)(const struct device *d, size_t offset);
	int (*copy_slot)(struct device *d, uint32_t i, const void *host,
			 const struct slot_range *ranges, unsigned n);
	int (*wait_copied)(struct device *d, uint32_t i);
	/* u->offset and u->len are set; finish is called only after a
	 * start that returned 0 */
	int (*upload_start)(struct device *d, const void *host,
			    struct device_upload *u);
	int (*upload_finish)(struct device *d, struct device_upload *u);
	int (*checksum)(struct device *d, size_t offset, size_t len,
			uint64_t *sum);
	int (*gather)(struct device *d, uint32_t i,
		      const struct gather_run *runs, unsigned n);
	int (*slot_export)(struct device *d, uint32_t i, int64_t stream);
	int (*slot_release)(struct device *d, uint32_t i);
	int (*measure_h2d)(struct device *d, size_t bytes, int iters,
			   double *bps);
	int (*compute)(struct device *d, int64_t stream, double ms);
};

/* The arena mapping, shared by both implementations. */
struct arena {
	void *base;
	size_t bytes;      /* what was asked for: what device_arena() says */
	size_t map_len;    /* what was mapped: what munmap() needs */
	int huge_pages;    /* MAP_HUGETLB succeeded */
};

/* Implementations embed this first and extend it. */
struct device {
	const struct device_ops *ops;
	struct device_info info;
	struct arena arena;
	uint32_t slots;
	size_t mirror_offset, mirror_bytes;
	size_t io_mirror_bytes;
	uint32_t gather_runs_max;
	struct xxh3s_secret checksum_secret; /* XXH3's default */
	pthread_mutex_t error_lock;   /* copy, consumer and release threads */
	char last_error[256];
};

/* Fill the fields every implementation shares; then device_base_fini()
 * on close. */
void device_base_init(struct device *d, const struct device_ops *ops,
		      const struct device_config *cfg);
void device_base_fini(struct device *d);

/* Keep @fmt's message for device_last_error(). */
void device_record_error(struct device *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Map @bytes of anonymous memory, huge pages first when @bytes is at
 * least 2 MiB; falls back to small pages without a word. -errno. */
int arena_map(struct arena *a, size_t bytes);
void arena_unmap(struct arena *a);
/* Fault every page of the arena in (writable, not locked). */
void arena_populate(struct arena *a);

/* Append "; @reason" (or @reason when empty) to info->fallbacks,
 * truncating rather than overflowing. */
void device_note_fallback(struct device_info *info, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* snprintf into @err when it is not NULL. */
void device_set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Shared argument checks: slot index, and @host..@host+@len inside the
 * mirrored part of the arena.  0 or -EINVAL. */
int device_check_copy(const struct device *d, uint32_t i, const void *host,
		      size_t len);

/* The host implementation; @reason (may be NULL or "") goes first into
 * info.fallbacks. */
int host_device_open(const struct device_config *cfg, const char *reason,
		     struct device **out, char *err, size_t errlen);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t device_now_ns(void);

/* Spin the calling thread for @ms milliseconds of CLOCK_MONOTONIC. */
void host_busy_wait(double ms);

#ifdef SLUICE_HAVE_CUDA
/*
 * cuda_device_probe - is CUDA device @id usable?  0, or -SLUICE_ENODEVICE
 * with why in @why: no NVIDIA driver, a driver too old for the runtime, no
 * device, @id past the device count (cuda_no_gpu_explain).
 */
int cuda_device_probe(int id, char *why, size_t whylen);

/* CUDA device @id's total memory in bytes; 0 if the runtime will not say. */
uint64_t cuda_device_memory_total(int id);

/* What the machine has when cudaGetDeviceCount fails: the runtime gives
 * cudaErrorInsufficientDriver for "no driver" and "old driver" alike. */
struct cuda_no_gpu {
	int error;               /* cudaGetDeviceCount's cudaError_t */
	const char *error_text;  /* cudaGetErrorString(error) */
	int driver_lib;          /* libcuda.so.1 loads */
	int device_nodes;        /* /dev/nvidiactl or /dev/nvidia0 exists */
	int driver_version;      /* cudaDriverGetVersion: 12040 is 12.4; 0 */
	int runtime_version;     /* CUDART_VERSION of this build */
	const char *visible;     /* $CUDA_VISIBLE_DEVICES; NULL: unset */
};

/* Fill @f from this machine for cudaGetDeviceCount's @error. */
void cuda_no_gpu_facts(int error, struct cuda_no_gpu *f);
/* One sentence for the user: what is missing and what to do. */
void cuda_no_gpu_explain(const struct cuda_no_gpu *f, char *why,
			 size_t whylen);
int cuda_device_open(const struct device_config *cfg, int id,
		     struct device **out, char *err, size_t errlen);
#endif

#endif /* SLUICE_GPU_DEVICE_IMPL_H */
