/*
 * cmd_stream.c - `sluice stream`: run the loader and print either one
 * summary line or, with --hash, `EPOCH INDEX FIELD XXH64` for every
 * delivered record and field in delivery order.  The hash covers the
 * field's bytes exactly as the user stored them, so the lines equal
 * `dlpack-shard cat --hash` (which reads records one by one through
 * another path) once the epoch column is stripped.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "sluice_cli.h"

struct hash_field {
	const struct sluice_field *f;
	int variable;
	uint64_t unit;           /* bytes of one item of shape[1:] (variable)
				    or of the whole record (fixed) */
	char side[SLUICE_NAME_MAX + 16];  /* F.offsets or F.lengths */
};

struct hash_ctx {
	int nfields;
	uint32_t pad;
	struct hash_field fields[SLUICE_MAX_FIELDS];
	FILE *out;
};

static uint64_t dtype_bytes(DLDataType t)
{
	return ((uint64_t)t.bits * t.lanes + 7) / 8;
}

static int hash_setup(sluice_dataset *ds, uint32_t pad, struct hash_ctx *h)
{
	h->nfields = sluice_dataset_field_count(ds);
	h->pad = pad;
	h->out = stdout;
	if (h->nfields < 0 || h->nfields > SLUICE_MAX_FIELDS)
		return cli_error("dataset has %d fields", h->nfields);
	for (int i = 0; i < h->nfields; i++) {
		struct hash_field *hf = &h->fields[i];
		const struct sluice_field *f = sluice_dataset_field(ds, i);
		uint64_t unit;

		if (!f)
			return cli_error("field %d has no schema", i);
		hf->f = f;
		hf->variable = f->ndim > 0 && f->shape[0] < 0;
		unit = dtype_bytes(f->dtype);
		for (int k = hf->variable ? 1 : 0; k < f->ndim; k++)
			unit *= (uint64_t)f->shape[k];
		hf->unit = unit;
		snprintf(hf->side, sizeof(hf->side), "%s%s", f->name,
			 pad ? ".lengths" : ".offsets");
	}
	return 0;
}

static int get_tensor(sluice_batch *b, const char *name, DLManagedTensor **t)
{
	int r = sluice_batch_tensor(b, name, -1, t);

	if (r)
		return cli_error("batch tensor '%s': %s", name,
				 sluice_strerror(r));
	if ((*t)->dl_tensor.device.device_type != kDLCPU) {
		(*t)->deleter(*t);
		return cli_error("--hash needs host batches; tensor '%s' is on device type %d",
				 name, (int)(*t)->dl_tensor.device.device_type);
	}
	return 0;
}

static const uint8_t *tensor_bytes(const DLManagedTensor *t)
{
	return (const uint8_t *)t->dl_tensor.data + t->dl_tensor.byte_offset;
}

#define HASH_CHUNK 4096u

/* Digest field @hf of batch records [first, first + n). */
static int hash_field(const struct hash_ctx *h, const struct hash_field *hf,
		      sluice_batch *b, uint32_t first, uint32_t n,
		      uint64_t *digests)
{
	DLManagedTensor *data, *side = NULL;
	const int64_t *aux = NULL;
	int rc = get_tensor(b, hf->f->name, &data);

	if (rc)
		return rc;
	if (hf->variable) {
		rc = get_tensor(b, hf->side, &side);
		if (rc) {
			data->deleter(data);
			return rc;
		}
		aux = (const int64_t *)tensor_bytes(side);
	}
	for (uint32_t k = 0; k < n && !rc; k++) {
		uint64_t i = first + k, len = hf->unit;
		const uint8_t *p = tensor_bytes(data);

		if (!hf->variable) {
			p += i * hf->unit;
		} else if (h->pad) {
			/* Padded rows: the first lengths[i] items of row i
			 * (a value longer than L arrives cut to L). */
			if (aux[i] < 0 || (uint64_t)aux[i] > h->pad)
				rc = cli_error("%s[%llu] = %lld is outside 0..%u",
					       hf->side, (unsigned long long)i,
					       (long long)aux[i], h->pad);
			p += i * h->pad * hf->unit;
			len = (uint64_t)aux[i] * hf->unit;
		} else {
			if (aux[i] < 0 || aux[i + 1] < aux[i])
				rc = cli_error("%s[%llu..%llu] are not non-decreasing",
					       hf->side, (unsigned long long)i,
					       (unsigned long long)i + 1);
			p += (uint64_t)aux[i] * hf->unit;
			len = (uint64_t)(aux[i + 1] - aux[i]) * hf->unit;
		}
		if (!rc)
			digests[k] = XXH64(p, len, 0);
	}
	if (side)
		side->deleter(side);
	data->deleter(data);
	return rc;
}

static int hash_batch(void *ctx, sluice_batch *b)
{
	static uint64_t digests[SLUICE_MAX_FIELDS][HASH_CHUNK];
	const struct hash_ctx *h = ctx;
	const uint64_t *idx = sluice_batch_indices(b);
	uint64_t epoch = sluice_batch_epoch(b);
	uint32_t n = sluice_batch_size(b);

	/* Records outer, fields inner (the order of `cat --hash`), in
	 * chunks so the per-field digests fit a fixed table. */
	for (uint32_t first = 0; first < n; first += HASH_CHUNK) {
		uint32_t chunk = n - first < HASH_CHUNK ? n - first
							: HASH_CHUNK;

		for (int f = 0; f < h->nfields; f++) {
			int rc = hash_field(h, &h->fields[f], b, first, chunk,
					    digests[f]);

			if (rc)
				return rc;
		}
		for (uint32_t k = 0; k < chunk; k++)
			for (int f = 0; f < h->nfields; f++)
				fprintf(h->out,
					"%" PRIu64 " %" PRIu64 " %s %016" PRIx64
					"\n",
					epoch, idx[first + k],
					h->fields[f].f->name, digests[f][k]);
	}
	return ferror(h->out) ? cli_error("write error on stdout") : 0;
}

/* The average record's bytes over the dataset, or over the mixture's
 * datasets together. */
static double record_bytes(sluice_dataset *ds, const struct cli_opts *o)
{
	struct shard_set s;
	double bytes = 0, records = 0;

	for (int i = 0; i < (o->nstreams ? o->nstreams : 1); i++) {
		shards_summarize(o->nstreams ? o->streams[i].dataset : ds, &s);
		bytes += (double)s.raw_bytes;
		records += (double)s.records;
	}
	return records > 0 ? bytes / records : 0;
}

int cmd_stream(int argc, char **argv)
{
	struct cli_opts o;
	struct run_result res;
	struct hash_ctx h;
	sluice_dataset *ds = NULL;
	int r, rc;

	rc = opts_parse(argc, argv, CMD_STREAM, &o);
	if (rc) {
		opts_free(&o);
		return rc < 0 ? 0 : rc;
	}
	/* a mixture: every dataset open, the first one's schema hashed */
	for (int i = 0; i < o.nstreams; i++) {
		r = sluice_dataset_open(o.stream_paths[i],
					&o.streams[i].dataset);
		if (r) {
			rc = dataset_error_exit(o.streams[i].dataset, r);
			opts_free(&o);
			return rc;
		}
	}
	r = o.nstreams ? 0 : sluice_dataset_open(o.path, &ds);
	if (r) {
		rc = dataset_error_exit(ds, r);
		sluice_dataset_close(ds);
		return rc;
	}
	memset(&h, 0, sizeof(h));
	rc = o.hash ? hash_setup(o.nstreams ? o.streams[0].dataset : ds,
				 o.cfg.pad_length, &h) : 0;
	if (!rc)
		rc = run_loader(ds, &o, NULL, o.hash ? hash_batch : NULL, &h,
				&res);
	if (!rc && !o.hash)
		report_stream_line(stdout, &res, record_bytes(ds, &o));
	/* What --on-error skip left out goes to stderr: with --hash, stdout
	 * is data. */
	if (!rc && (res.stats.records_skipped || res.skipped_blocks > 0))
		fprintf(stderr,
			CLI_NAME ": --on-error skip: %llu records left out "
			"(%lld corrupt block reads); first: %s\n",
			(unsigned long long)res.stats.records_skipped,
			(long long)res.skipped_blocks, res.skip_first);
	if (fflush(stdout) && !rc)
		rc = cli_error("write error on stdout");
	sluice_dataset_close(ds);
	opts_free(&o);
	return rc;
}
