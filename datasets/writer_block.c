/*
 * writer_block.c - the writer's open block (writer_block.h).  Single
 * records are staged; a run of records that fills the rest of the block
 * goes straight from its columns into the laid-out block, so a column is
 * copied once however it arrives.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "writer_block.h"

/* Grow *@buf (doubling) to hold @need bytes. */
static int reserve(uint8_t **buf, uint64_t *cap, uint64_t need)
{
	uint64_t ncap = *cap ? *cap : 4096;
	uint8_t *nb;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap = ncap > UINT64_MAX / 2 ? need : ncap * 2;
	nb = realloc(*buf, ncap);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = ncap;
	return 0;
}

int open_block_init(struct open_block *b, const struct shard_schema *schema)
{
	memset(b, 0, sizeof(*b));
	b->schema = schema;
	for (uint32_t f = 0; f < schema->nfields; f++) {
		if (!schema->fields[f].variable)
			continue;
		b->st[f].offs = calloc(64, sizeof(uint64_t));
		if (!b->st[f].offs)
			return -ENOMEM;
		b->st[f].offs_cap = 64;
	}
	return 0;
}

void open_block_free(struct open_block *b)
{
	for (uint32_t f = 0; f < DLS_MAX_FIELDS; f++) {
		free(b->st[f].buf);
		free(b->st[f].offs);
	}
	memset(b->st, 0, sizeof(b->st));
}

uint64_t record_run_start(const struct record_run *run, uint32_t f,
			  uint64_t i)
{
	const struct sluice_column *c;

	if (!run)
		return 0;
	c = &run->cols[f];
	return c->offsets ? c->offsets[i] : i * run->each[f];
}

uint64_t open_block_size_with(const struct open_block *b,
			      const struct record_run *run, uint64_t i,
			      uint64_t k)
{
	uint64_t var[DLS_MAX_FIELDS];

	for (uint32_t f = 0; f < b->schema->nfields; f++) {
		var[f] = 0;
		if (b->schema->fields[f].variable &&
		    __builtin_add_overflow(b->var_bytes[f],
					   record_run_start(run, f, i + k) -
						   record_run_start(run, f, i),
					   &var[f]))
			return UINT64_MAX;
	}
	return block_layout_size(b->schema, b->n + (uint32_t)k, var);
}

/* Make room for @need offsets in @st. */
static int reserve_offsets(struct staging *st, uint64_t need)
{
	uint64_t cap = st->offs_cap;
	void *nv;

	if (need <= cap)
		return 0;
	while (cap < need)
		cap *= 2;
	nv = realloc(st->offs, cap * 8u);
	if (!nv)
		return -ENOMEM;
	st->offs = nv;
	st->offs_cap = cap;
	return 0;
}

int open_block_stage(struct open_block *b, const struct record_run *run,
		     uint64_t i, uint64_t k)
{
	/* Room first, so that a failure leaves the block as it was. */
	for (uint32_t f = 0; f < b->schema->nfields; f++) {
		struct staging *st = &b->st[f];
		uint64_t bytes = record_run_start(run, f, i + k) -
				 record_run_start(run, f, i);

		if (reserve(&st->buf, &st->cap, st->len + bytes) < 0 ||
		    (b->schema->fields[f].variable &&
		     reserve_offsets(st, b->n + k + 1) < 0))
			return -ENOMEM;
	}
	for (uint32_t f = 0; f < b->schema->nfields; f++) {
		struct staging *st = &b->st[f];
		uint64_t first = record_run_start(run, f, i);
		uint64_t bytes = record_run_start(run, f, i + k) - first;

		if (bytes)
			memcpy(st->buf + st->len,
			       (const uint8_t *)run->cols[f].values + first,
			       bytes);
		if (b->schema->fields[f].variable) {
			for (uint64_t j = 1; j <= k; j++)
				st->offs[b->n + j] =
					st->len +
					(record_run_start(run, f, i + j) -
					 first);
			b->var_bytes[f] += bytes;
		}
		st->len += bytes;
	}
	b->n += (uint32_t)k;
	return 0;
}

/* The longest of the @n values an offsets table (@n + 1 entries) bounds. */
static uint64_t table_longest(const uint64_t *offs, uint64_t n)
{
	uint64_t longest = 0;

	for (uint64_t j = 0; j < n; j++)
		if (offs[j + 1] - offs[j] > longest)
			longest = offs[j + 1] - offs[j];
	return longest;
}

int open_block_lay(struct open_block *b, const struct record_run *run,
		   uint64_t i, uint64_t k, uint8_t **buf, uint64_t *cap,
		   uint64_t *size, uint64_t *longest)
{
	uint64_t off = 0;
	uint8_t *raw;

	*size = open_block_size_with(b, run, i, k);
	if (*size == UINT64_MAX || reserve(buf, cap, *size) < 0)
		return -ENOMEM;
	raw = *buf;
	for (uint32_t f = 0; f < b->schema->nfields; f++) {
		struct staging *st = &b->st[f];
		uint64_t start = align_up_u64(off, 8), first, bytes;

		memset(raw + off, 0, start - off);
		off = start;
		first = record_run_start(run, f, i);
		bytes = record_run_start(run, f, i + k) - first;
		longest[f] = 0;
		if (b->schema->fields[f].variable) {
			/* 8-aligned: the buffer is malloc'd, off rounded up. */
			uint64_t *table = (uint64_t *)(void *)(raw + off);

			memcpy(table, st->offs, (b->n + 1ull) * 8u);
			for (uint64_t j = 1; j <= k; j++)
				table[b->n + j] =
					st->len +
					(record_run_start(run, f, i + j) -
					 first);
			off += (b->n + 1ull + k) * 8u;
			longest[f] = table_longest(table, b->n + k);
		}
		if (st->len)
			memcpy(raw + off, st->buf, st->len);
		off += st->len;
		if (bytes)
			memcpy(raw + off,
			       (const uint8_t *)run->cols[f].values + first,
			       bytes);
		off += bytes;
		st->len = 0;
		b->var_bytes[f] = 0;
	}
	b->n = 0;
	return 0;
}
