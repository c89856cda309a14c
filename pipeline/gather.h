/*
 * gather.h - batches gathered on the device (gather.c): the state each
 * slot and the loader keep for it.
 */
#ifndef SLUICE_PIPELINE_GATHER_H
#define SLUICE_PIPELINE_GATHER_H

#include <stdatomic.h>
#include <stdint.h>

struct device_upload;
struct gather_run;
struct loader_core;
struct slot;

/* A slot's: device gather (gather.c): the batch's copy runs, allocated
 * only when the loader gathers. */
struct slot_gather {
	struct gather_run *runs;
	uint32_t nruns;
};

/* The loader's: device gather (gather.c) */
struct loader_gather {
	int on;                     /* on: eligible batches are gathered */
	int lost_to_chunks;         /* would be on, but the loader is
				       chunked */
	int checks;                 /* raw blocks checksummed on the device
				       from their upload (gather_check) */
	_Atomic uint64_t batches_gathered, runs, device_upload_bytes;
	_Atomic uint64_t upload_ns;  /* threads' wall time in uploads */
	_Atomic uint64_t bytes_checked; /* by gather_check */
	_Atomic uint64_t check_ns;  /* threads' wall time in gather_check */
};

int gather_wanted(const struct loader_core *c);
uint32_t gather_runs_max(const struct loader_core *c);
void gather_init(struct loader_core *c);
int slot_gather_init(const struct loader_core *c, struct slot *s);
int slot_gathers(const struct loader_core *c, const struct slot *s);
void gather_run_append(struct gather_run *runs, uint32_t *n, uint64_t src,
		       uint64_t dst, uint64_t len);
uint64_t gather_plan(struct loader_core *c, struct slot *s);
int gather_submit(struct loader_core *c, struct slot *s, const char **step);
/* @len bytes to @io's device mirror, from @src: @io itself, or the
 * staging buffer a fetched part landed in (fetch.c). */
int gather_upload(struct loader_core *c, const uint8_t *io, const uint8_t *src,
		  uint64_t len);
/* gather_upload() in two halves (device_upload_start): a fetching
 * worker reads its next part while this one's copy runs (fetch.c). */
int gather_upload_start(struct loader_core *c, const uint8_t *io,
			const uint8_t *src, uint64_t len,
			struct device_upload *u);
int gather_upload_finish(struct loader_core *c, struct device_upload *u);
struct shard_block;
int gather_checks(const struct loader_core *c, const struct shard_block *blk);
int gather_device_only(const struct loader_core *c,
		       const struct shard_block *blk);
int gather_check(struct loader_core *c, const struct shard_block *blk,
		 const uint8_t *stored);

#endif /* SLUICE_PIPELINE_GATHER_H */
