/*
 * import_synth.c - synthetic records for tests and benchmarks.
 *
 * Every value is a pure function of (seed, record index, field index), so
 * --part slices agree byte for byte with a whole conversion.  Values are
 * built in chunks of SYNTH_CHUNK bytes: the first round(c * SYNTH_CHUNK)
 * bytes of each chunk are a per-field pattern (the same in every chunk,
 * so an LZ coder finds it), the rest random; c is the field's
 * compressibility.  A variable field (shape[0] == -1) gets a length drawn
 * uniformly from [0, 2 * mean] units, the mean being SYNTH_VAR_MEAN_BYTES
 * worth of units (at least one).  Bool values are 0 or 1.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "import_common.h"

#define SYNTH_CHUNK 256u
#define SYNTH_VAR_MEAN_BYTES 4096u

struct synth_state {
	const struct synth_field *sf;
	uint64_t unit_bytes;     /* bytes per element along dim 0 */
	uint64_t fixed_bytes;    /* fixed fields: bytes per record */
	uint64_t mean_units;     /* variable fields */
	uint32_t pattern_len;    /* pattern bytes per chunk */
	uint8_t pattern[SYNTH_CHUNK];
	struct import_buf buf;
};

/* splitmix64: a good 64-bit mixer and a fast enough byte source. */
static uint64_t mix64(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t next64(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return mix64(*s);
}

static void fill_random(uint8_t *p, size_t n, uint64_t *s)
{
	while (n >= 8) {
		uint64_t v = next64(s);

		memcpy(p, &v, 8);
		p += 8;
		n -= 8;
	}
	if (n) {
		uint64_t v = next64(s);

		memcpy(p, &v, n);
	}
}

static int state_init(struct synth_state *st, const struct synth_field *sf,
		      uint64_t seed, int k, char *err, size_t errlen)
{
	const struct sluice_field *f = &sf->f;
	uint64_t item = (uint64_t)f->dtype.bits / 8 * f->dtype.lanes;
	uint64_t trailing = 1, cap, s;
	int variable = f->ndim > 0 && f->shape[0] == -1;

	memset(st, 0, sizeof(*st));
	st->sf = sf;
	if (item == 0 || f->dtype.bits % 8 || f->ndim < 0 ||
	    f->ndim > SLUICE_MAX_NDIM)
		return import_fail(err, errlen, -SLUICE_ESCHEMA,
				   "field '%s': unsupported dtype or ndim",
				   f->name);
	if (!(sf->compressibility >= 0 && sf->compressibility <= 1))
		return import_fail(err, errlen, -SLUICE_ESCHEMA,
				   "field '%s': compressibility must be in "
				   "[0, 1]",
				   f->name);
	for (int d = variable ? 1 : 0; d < f->ndim; d++) {
		if (f->shape[d] <= 0 ||
		    trailing > (UINT64_MAX >> 8) / (uint64_t)f->shape[d])
			return import_fail(err, errlen, -SLUICE_ESCHEMA,
					   "field '%s': bad shape", f->name);
		trailing *= (uint64_t)f->shape[d];
	}
	if (trailing > (UINT64_MAX >> 8) / item)
		return import_fail(err, errlen, -SLUICE_ESCHEMA,
				   "field '%s': bad shape", f->name);
	if (variable) {
		st->unit_bytes = item * trailing;
		st->mean_units = SYNTH_VAR_MEAN_BYTES / st->unit_bytes;
		if (st->mean_units == 0)
			st->mean_units = 1;
		if (st->mean_units > (UINT64_MAX >> 8) / 2 / st->unit_bytes)
			return import_fail(err, errlen, -SLUICE_ESCHEMA,
					   "field '%s': bad shape", f->name);
		cap = 2 * st->mean_units * st->unit_bytes;
	} else {
		st->fixed_bytes = item * trailing;
		cap = st->fixed_bytes;
	}
	if (cap > SIZE_MAX / 2 || import_buf_reserve(&st->buf, cap ? cap : 1))
		return import_fail(err, errlen, -ENOMEM,
				   "field '%s': out of memory for %llu bytes",
				   f->name, (unsigned long long)cap);
	st->pattern_len = (uint32_t)lround(sf->compressibility * SYNTH_CHUNK);
	s = mix64(seed ^ 0x5eed5eed5eedull) ^ mix64((uint64_t)k + 1);
	fill_random(st->pattern, sizeof(st->pattern), &s);
	return 0;
}

/* Field @k of record @i into st->buf. */
static void synth_value(struct synth_state *st, uint64_t seed, uint64_t i,
			int k)
{
	uint64_t s = mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1)) ^
		     mix64(((uint64_t)k + 1) * 0xc2b2ae3d27d4eb4full);
	uint64_t len = st->fixed_bytes;
	uint8_t *p = st->buf.p;

	if (!len && st->unit_bytes)
		len = next64(&s) % (2 * st->mean_units + 1) * st->unit_bytes;
	for (uint64_t at = 0; at < len; at += SYNTH_CHUNK) {
		size_t n = len - at < SYNTH_CHUNK ? (size_t)(len - at) :
						    SYNTH_CHUNK;
		size_t pat = st->pattern_len < n ? st->pattern_len : n;

		memcpy(p + at, st->pattern, pat);
		fill_random(p + at + pat, n - pat, &s);
	}
	if (st->sf->f.dtype.code == kDLBool)
		for (uint64_t j = 0; j < len; j++)
			p[j] &= 1;
	st->buf.len = (size_t)len;
}

int import_synth(const struct import_options *o,
		 struct sluice_writer_summary *sum, char *err, size_t errlen)
{
	struct synth_state *st = NULL;
	struct sluice_field fields[SLUICE_MAX_FIELDS];
	struct import_sink sink = { 0 };
	int n = o->synth_nfields, r;
	uint64_t lo, hi;

	r = import_check_part(o, err, errlen);
	if (r < 0)
		return r;
	if (n <= 0 || n > SLUICE_MAX_FIELDS)
		return import_fail(err, errlen, -EINVAL,
				   "synth needs 1..%d fields", SLUICE_MAX_FIELDS);
	st = calloc((size_t)n, sizeof(*st));
	if (!st)
		return import_fail(err, errlen, -ENOMEM, "out of memory");
	for (int k = 0; k < n; k++) {
		r = state_init(&st[k], &o->synth_fields[k], o->synth_seed, k,
			       err, errlen);
		if (r < 0)
			goto out;
		fields[k] = o->synth_fields[k].f;
	}
	import_part_range(o, o->synth_records, &lo, &hi);
	r = import_sink_open(&sink, o, fields, n, hi - lo, err, errlen);
	if (r < 0)
		goto out;
	sink.first = lo;
	for (uint64_t i = lo; i < hi; i++) {
		const void *values[SLUICE_MAX_FIELDS];
		uint64_t lengths[SLUICE_MAX_FIELDS];

		for (int k = 0; k < n; k++) {
			synth_value(&st[k], o->synth_seed, i, k);
			values[k] = st[k].buf.p;
			lengths[k] = st[k].buf.len;
		}
		r = import_sink_add(&sink, values, lengths, NULL, err, errlen);
		if (r < 0)
			goto out;
	}
	r = import_sink_close(&sink, sum, err, errlen);
out:
	import_sink_abort(&sink);
	for (int k = 0; k < n; k++)
		import_buf_free(&st[k].buf);
	free(st);
	return r;
}
