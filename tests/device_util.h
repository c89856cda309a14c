/*
 * device_util.h - what the device-layer tests share: a device config, a
 * byte pattern, an arena check, and why this process has no GPU.
 */
#ifndef SLUICE_TESTS_DEVICE_UTIL_H
#define SLUICE_TESTS_DEVICE_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "device.h"
#include "device_impl.h"
#include "t.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MIB ((size_t)1 << 20)

static inline double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The arena's last @mirror bytes are mirrored on the device. */
static inline struct device_config config(int kind, size_t arena,
					  uint32_t slots, size_t mirror)
{
	struct device_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = kind;
	cfg.device_id = -1;
	cfg.arena_bytes = arena;
	cfg.slots = slots;
	cfg.mirror_offset = mirror < arena ? arena - mirror : 0;
	cfg.mirror_bytes = mirror;
	return cfg;
}

static inline void fill(uint8_t *p, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (uint8_t)(seed >> 24);
	}
}

/* The whole arena is ours to write, exactly the size asked for. */
static inline void check_arena(struct device *d, size_t want)
{
	uint8_t *arena, *copy;
	size_t len = 0;

	arena = device_arena(d, &len);
	T_ASSERT(arena != NULL);
	T_EQ(len, want);
	copy = malloc(len);
	T_ASSERT(copy != NULL);
	fill(copy, len, 7);
	memcpy(arena, copy, len);
	T_MEMEQ(arena, copy, len);
	free(copy);
}

/* Why this process has no usable GPU, or NULL when it has one. */
static inline const char *no_gpu_reason(char *buf, size_t len)
{
#ifdef SLUICE_HAVE_CUDA
	/* the library's own probe, so a skip says what the user is told */
	return cuda_device_probe(0, buf, len) == 0 ? NULL : buf;
#else
	snprintf(buf, len, "built without CUDA");
	return buf;
#endif
}

#endif /* SLUICE_TESTS_DEVICE_UTIL_H */
