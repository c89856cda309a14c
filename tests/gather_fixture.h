/*
 * gather_fixture.h - a dataset of fixed-shape fields only (device gather
 * needs them), every byte a function of record, field and position:
 * "x" int32[4], "y" uint16[3] (6 bytes: runs at odd offsets), "img"
 * uint8[700]; 2500 records in blocks of ~22, 3 shards.
 */
#ifndef SLUICE_TESTS_GATHER_FIXTURE_H
#define SLUICE_TESTS_GATHER_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "t.h"
#include "t_field.h"

#define N 2500u
#define IMG 700u

static inline uint8_t want_byte(uint64_t i, uint32_t field, uint64_t k)
{
	return (uint8_t)(i * 131u + k * 7u + field * 29u + (i >> 8));
}

static const char *const field_name[3] = { "x", "y", "img" };
static const uint64_t field_bytes[3] = { 16, 6, IMG };

static inline void write_dataset(const char *dir, int level)
{
	struct sluice_field f[3];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t buf[3][IMG];

	f[0] = t_field("x", (DLDataType){ kDLInt, 32, 1 }, 4);
	f[1] = t_field("y", (DLDataType){ kDLUInt, 16, 1 }, 3);
	f[2] = t_field("img", (DLDataType){ kDLUInt, 8, 1 }, IMG);
	sluice_writer_config_init(&wc);
	wc.block_size = 16384;          /* ~22 records a block */
	wc.compression_level = level;
	wc.records_per_shard = 900;     /* 3 shards */
	wc.threads = 2;
	T_OK(sluice_writer_open(dir, f, 3, &wc, &w));
	for (uint64_t i = 0; i < N; i++) {
		const void *vals[3] = { buf[0], buf[1], buf[2] };
		uint64_t lens[3] = { 16, 6, IMG };

		for (uint32_t fi = 0; fi < 3; fi++)
			for (uint64_t k = 0; k < field_bytes[fi]; k++)
				buf[fi][k] = want_byte(i, fi, k);
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
}

#endif /* SLUICE_TESTS_GATHER_FIXTURE_H */
