/*
 * mixture.c - a loader over several datasets with the same schema
 * ("streams"), mixed in fixed proportions: the datasets are laid end to
 * end as one (their shard lists joined, borrowed, not reopened) and the
 * sampler interleaves their samples (sampler_init_streams).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

/*
 * Samples per epoch of each stream.  Streams with an exact count keep it;
 * the others share, by weight, as many samples as they hold records
 * together, rounded by largest remainder so the shares add up exactly.
 */
static int stream_samples(const struct sluice_stream *streams, int n,
			  uint64_t *out, char *err, size_t errlen)
{
	long double total_w = 0, pool = 0;
	uint64_t given = 0, want;

	for (int i = 0; i < n; i++) {
		double w = streams[i].weight;

		if (!isfinite(w) || w < 0) {
			snprintf(err, errlen, "stream %d: weight %g is not a finite number >= 0",
				 i, w);
			return -EINVAL;
		}
		if (streams[i].samples)
			continue;
		total_w += w;
		pool += (long double)sluice_dataset_records(streams[i].dataset);
	}
	want = (uint64_t)pool;
	for (int i = 0; i < n; i++) {
		long double share;

		if (streams[i].samples) {
			out[i] = streams[i].samples;
			continue;
		}
		share = total_w > 0 ? pool * streams[i].weight / total_w : 0;
		out[i] = (uint64_t)floorl(share);
		given += out[i];
	}
	/* hand out what rounding down left, largest remainder first */
	while (total_w > 0 && given < want) {
		int best = -1;
		long double best_rem = -1;

		for (int i = 0; i < n; i++) {
			long double share, rem;

			if (streams[i].samples || streams[i].weight <= 0)
				continue;
			share = pool * streams[i].weight / total_w;
			rem = share - (long double)out[i];
			if (rem > best_rem) {
				best_rem = rem;
				best = i;
			}
		}
		out[best]++;
		given++;
	}
	for (int i = 0; i < n; i++)
		if (out[i] && !sluice_dataset_records(streams[i].dataset)) {
			snprintf(err, errlen, "stream %d: %s has no records to take %llu samples from",
				 i, streams[i].dataset->d.source,
				 (unsigned long long)out[i]);
			return -EINVAL;
		}
	return 0;
}

void mixture_free(struct dataset *d)
{
	if (!d)
		return;
	/* the shard files are the streams' datasets': borrowed */
	free(d->shards);
	free(d->shard_first);
	free(d);
}

/* One dataset made of the streams' shards in order (borrowed). */
static int join_streams(const struct sluice_stream *streams, int n,
			struct dataset **out, char *err, size_t errlen)
{
	struct dataset *d = calloc(1, sizeof(*d));
	uint32_t s = 0;

	*out = d;
	if (!d)
		return -ENOMEM;
	d->source = streams[0].dataset->d.source;
	d->schema = streams[0].dataset->d.schema;
	for (int i = 0; i < n; i++) {
		const struct dataset *x = &streams[i].dataset->d;

		if (!schema_equal(&x->schema, &d->schema)) {
			snprintf(err, errlen, "stream %d (%s): its fields differ from stream 0's (%s)",
				 i, x->source, d->source);
			return -SLUICE_ESCHEMA;
		}
		if (x->nshards > UINT32_MAX - d->nshards)
			return -EINVAL;
		d->nshards += x->nshards;
		d->record_count += x->record_count;
		d->block_count += x->block_count;
		if (x->max_stored > d->max_stored)
			d->max_stored = x->max_stored;
		if (x->max_raw > d->max_raw)
			d->max_raw = x->max_raw;
		if (x->max_alignment > d->max_alignment)
			d->max_alignment = x->max_alignment;
		for (uint32_t f = 0; f < d->schema.nfields; f++) {
			uint64_t m = x->schema.fields[f].max_value_bytes;

			if (m > d->schema.fields[f].max_value_bytes)
				d->schema.fields[f].max_value_bytes = m;
		}
	}
	d->shards = calloc(d->nshards ? d->nshards : 1, sizeof(*d->shards));
	d->shard_first = calloc((size_t)d->nshards + 1, sizeof(uint64_t));
	if (!d->shards || !d->shard_first)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		const struct dataset *x = &streams[i].dataset->d;
		uint64_t base = d->shard_first[s];

		for (uint32_t k = 0; k < x->nshards; k++, s++) {
			d->shards[s] = x->shards[k];
			d->shard_first[s + 1] = base + x->shard_first[k + 1];
		}
	}
	return 0;
}

/* Fingerprint of the mixture, so a saved state names what it mixed. */
static uint64_t mixture_id(const struct sluice_stream *streams, int n,
			   const uint64_t *samples)
{
	uint64_t h = 0x6d6978ull + (uint64_t)n;

	for (int i = 0; i < n; i++) {
		h = perm_mix64(h ^ sluice_dataset_records(streams[i].dataset));
		h = perm_mix64(h ^ samples[i]);
	}
	return h ? h : 1; /* 0 means one plain dataset */
}

SLUICE_API int sluice_loader_open_streams(const struct sluice_stream *streams,
					  int nstreams,
					  const struct sluice_loader_config *cfg,
					  sluice_loader **out)
{
	struct sampler_stream_spec *specs = NULL;
	uint64_t *samples = NULL, block = 0;
	struct dataset *d = NULL;
	char err[512] = "";
	int r = 0;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!streams || nstreams < 1 || nstreams > SLUICE_MAX_STREAMS) {
		snprintf(err, sizeof(err), "a mixture needs 1 to %d streams",
			 SLUICE_MAX_STREAMS);
		r = -EINVAL;
	}
	for (int i = 0; !r && i < nstreams; i++)
		if (!streams[i].dataset || !streams[i].dataset->loaded) {
			snprintf(err, sizeof(err), "stream %d: no dataset", i);
			r = -EINVAL;
		}
	if (!r) {
		specs = calloc((size_t)nstreams, sizeof(*specs));
		samples = calloc((size_t)nstreams, sizeof(*samples));
		if (!specs || !samples)
			r = -ENOMEM;
	}
	if (!r)
		r = stream_samples(streams, nstreams, samples, err, sizeof(err));
	if (!r)
		r = join_streams(streams, nstreams, &d, err, sizeof(err));
	for (int i = 0; !r && i < nstreams; i++) {
		specs[i].first_block = block;
		specs[i].nblocks = streams[i].dataset->d.block_count;
		specs[i].samples = samples[i];
		block += specs[i].nblocks;
	}
	if (!r) {
		r = loader_open_common(d, 1, specs, (uint32_t)nstreams,
				       mixture_id(streams, nstreams, samples),
				       cfg, out);
		d = NULL; /* the loader owns it now, also on failure */
	} else {
		*out = loader_failed(r, err);
	}
	mixture_free(d);
	free(specs);
	free(samples);
	return r;
}
