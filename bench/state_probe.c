/*
 * state_probe.c - loader runs for bench/state_sweep.py: opens one dataset
 * or a mixture, runs every rank of one job (one after another, each its
 * own loader), optionally restored from a saved state line, and prints
 * what each rank delivered, so that the driver can compare jobs: the
 * uninterrupted one, one stopped and resumed exactly, elastic chains.
 * Each delivered record's bytes are checked here against the record read
 * independently (block_read, sluice_tools.h), field by field.
 *
 *   state_probe ds=PATH [ds=PATH ...] [mix=W:S,W:S,...] [KEY=VALUE ...]
 *
 * Keys: shuffle=none|block|window|full window=W seed=S batch=B drop=0|1
 * world=N rank=R|all epochs=E (cfg.epochs) prefetch=N threads=N
 * onerr=fail|skip ranges=auto|off cache=BYTES memory=BYTES pad=L
 * direct=auto|off verify=0|1 hold=0|1 device=host|sim (sim: device
 * AUTO, for SLUICE_DEVICE_SIM=SEED in the environment) state=LINE (restored after open)
 * setepoch=E (after state=, if any) stop=K (stop after K batches; -1: at
 * the eofs-th EOF) eofs=N (EOFs to pass before stopping; 1).
 * mix=W:S,...: one weight:samples per ds= (open_streams, also for one).
 *
 * Output, one line each:
 *   O rank batches          opened (sluice_loader_batches)
 *   B rank epoch n i0 i1 .. a batch: its epoch and dataset indices
 *   E rank epoch batches    EOF of epoch; batches of the next one
 *   S rank STATE            the state after the last batch (stop=K)
 *   C rank {json}           the paths its batches took (stats)
 *   X rank what             a check failed here (bytes, state format)
 *   F rank at rc what       the loader refused (open, state, next)
 * Exit 0 (even with X lines: the driver judges), 2 on usage, 1 on setup.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice.h"
#include "probe_util.h"
#include "sluice_tools.h"

#define MAX_DS 8

struct opts {
	const char *ds[MAX_DS];
	int nds;
	const char *mix;
	struct sluice_loader_config cfg;
	int all_ranks;
	int rank;
	int hold;
	const char *state;
	int64_t setepoch;
	int64_t stop;
	uint64_t eofs;
};

/* The reference: one hash per record over all fields' values (each cut
 * to pad_length units when padded), and each variable field's length. */
struct ref {
	uint64_t n;
	uint32_t nfields;
	const struct shard_schema *schema;
	uint64_t *hash;     /* n */
	uint64_t *lens;     /* n * nfields: units of variable fields */
};

static uint64_t fnv(uint64_t h, const uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static int ref_add(struct ref *rf, const sluice_dataset *ds, uint64_t base,
		   uint32_t pad)
{
	const struct dataset *d = dataset_table(ds);
	struct block_reader br;
	char err[512];

	memset(&br, 0, sizeof(br));
	if (!d)
		return -1;
	rf->schema = &d->schema;
	rf->nfields = d->schema.nfields;
	for (uint32_t s = 0; s < d->nshards; s++) {
		const struct shard_file *sf = &d->shards[s];
		int fd = open(sf->path, O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			return -1;
		for (uint64_t b = 0; b < sf->block_count; b++) {
			struct block_view v;
			uint64_t first = base + d->shard_first[s] +
					 sf->blocks[b].first_record;

			if (block_read(&br, fd, &d->schema, sf, b, &v, err,
				       sizeof(err))) {
				fprintf(stderr, "state_probe: %s\n", err);
				close(fd);
				return -1;
			}
			for (uint32_t i = 0; i < v.n; i++) {
				uint64_t h = 0xcbf29ce484222325ull;

				for (uint32_t f = 0; f < d->schema.nfields; f++) {
					const struct shard_field *fd_ =
						&d->schema.fields[f];
					const uint8_t *p;
					uint64_t len;

					block_view_get(&d->schema, &v, f, i, &p,
						       &len);
					if (fd_->variable) {
						uint64_t units = len / fd_->unit_bytes;

						rf->lens[(first + i) * rf->nfields + f] = units;
						if (pad && units > pad)
							len = (uint64_t)pad * fd_->unit_bytes;
					}
					h = mix64(fnv(h, p, len) + f);
				}
				rf->hash[first + i] = h;
			}
		}
		close(fd);
	}
	block_reader_free(&br);
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	sluice_loader_config_init(&o->cfg);
	o->cfg.device = SLUICE_DEVICE_HOST;
	o->cfg.rank = 0;
	o->cfg.world_size = 1;
	o->all_ranks = 1;
	o->setepoch = -1;
	o->stop = -1;
	o->eofs = 1;
	for (int i = 1; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		const char *v;

		if (!eq)
			return -1;
		*eq = '\0';
		v = eq + 1;
#define K(name) (!strcmp(argv[i], name))
		if (K("ds")) {
			if (o->nds == MAX_DS)
				return -1;
			o->ds[o->nds++] = v;
		} else if (K("mix")) {
			o->mix = v;
		} else if (K("shuffle")) {
			if (parse_shuffle(v, &o->cfg.shuffle))
				return -1;
		} else if (K("window")) {
			o->cfg.window_blocks = (uint32_t)strtoul(v, NULL, 10);
		} else if (K("seed")) {
			o->cfg.seed = strtoull(v, NULL, 10);
		} else if (K("batch")) {
			o->cfg.batch_size = (uint32_t)strtoul(v, NULL, 10);
		} else if (K("drop")) {
			o->cfg.drop_last = atoi(v);
		} else if (K("world")) {
			o->cfg.world_size = atoi(v);
		} else if (K("rank")) {
			o->all_ranks = !strcmp(v, "all");
			o->rank = atoi(v);
		} else if (K("epochs")) {
			o->cfg.epochs = strtoull(v, NULL, 10);
		} else if (K("prefetch")) {
			o->cfg.prefetch_depth = (uint32_t)strtoul(v, NULL, 10);
		} else if (K("threads")) {
			o->cfg.decode_threads = (uint32_t)strtoul(v, NULL, 10);
		} else if (K("onerr")) {
			o->cfg.on_error = !strcmp(v, "skip")
				? SLUICE_ON_ERROR_SKIP : SLUICE_ON_ERROR_FAIL;
		} else if (K("ranges")) {
			o->cfg.range_reads = !strcmp(v, "off")
				? SLUICE_RANGE_READS_OFF : SLUICE_RANGE_READS_AUTO;
		} else if (K("cache")) {
			o->cfg.cache_bytes = strtoull(v, NULL, 10);
		} else if (K("memory")) {
			o->cfg.memory_bytes = strtoull(v, NULL, 10);
		} else if (K("pad")) {
			o->cfg.pad_length = (uint32_t)strtoul(v, NULL, 10);
		} else if (K("direct")) {
			o->cfg.direct_io = !strcmp(v, "off")
				? SLUICE_DIRECT_IO_OFF : SLUICE_DIRECT_IO_AUTO;
		} else if (K("device")) {
			/* sim: the simulated device (SLUICE_DEVICE_SIM set by
			 * the caller): batches gathered on a "device" */
			o->cfg.device = !strcmp(v, "sim") ? SLUICE_DEVICE_AUTO
							  : SLUICE_DEVICE_HOST;
		} else if (K("verify")) {
			o->cfg.verify = atoi(v);
		} else if (K("hold")) {
			o->hold = atoi(v);
		} else if (K("state")) {
			o->state = v;
		} else if (K("setepoch")) {
			o->setepoch = strtoll(v, NULL, 10);
		} else if (K("stop")) {
			o->stop = strtoll(v, NULL, 10);
		} else if (K("eofs")) {
			o->eofs = strtoull(v, NULL, 10);
		} else {
			return -1;
		}
#undef K
	}
	return o->nds > 0 ? 0 : -1;
}

static void refused(const sluice_loader *ld, int rank, const char *at, int rc)
{
	char msg[1024] = "";

	if (ld)
		sluice_loader_error(ld, msg, sizeof(msg));
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	printf("F %d %s %d %s\n", rank, at, rc, msg);
}

/* Check batch @b's bytes against the reference; "X" lines for the
 * first few mismatches. */
static void check_batch(sluice_batch *b, const struct ref *rf, uint32_t pad,
			int rank, int *reported)
{
	const uint64_t *idx = sluice_batch_indices(b);
	uint32_t n = sluice_batch_size(b);
	uint64_t *h = calloc(n ? n : 1, sizeof(*h));

	if (!h)
		return;
	for (uint32_t i = 0; i < n; i++)
		h[i] = 0xcbf29ce484222325ull;
	for (uint32_t f = 0; f < rf->nfields; f++) {
		const struct shard_field *fd = &rf->schema->fields[f];
		DLManagedTensor *t = NULL, *a = NULL;
		char aux[SLUICE_NAME_MAX + 16];
		const uint8_t *data;
		const int64_t *off = NULL;

		/* stream 0: the export waits for the batch's copy (the sim
		 * device's; ignored on the host) */
		if (sluice_batch_tensor(b, fd->f.name, 0, &t)) {
			printf("X %d no tensor %s\n", rank, fd->f.name);
			break;
		}
		data = (const uint8_t *)t->dl_tensor.data +
		       t->dl_tensor.byte_offset;
		if (fd->variable) {
			snprintf(aux, sizeof(aux), "%s.%s", fd->f.name,
				 pad ? "lengths" : "offsets");
			if (sluice_batch_tensor(b, aux, 0, &a)) {
				printf("X %d no tensor %s\n", rank, aux);
				t->deleter(t);
				break;
			}
			off = (const int64_t *)a->dl_tensor.data;
		}
		for (uint32_t i = 0; i < n && idx[i] < rf->n; i++) {
			const uint8_t *p;
			uint64_t len;

			if (!fd->variable) {
				len = fd->record_bytes;
				p = data + (uint64_t)i * len;
			} else if (!pad) {
				p = data + (uint64_t)off[i] * fd->unit_bytes;
				len = (uint64_t)(off[i + 1] - off[i]) *
				      fd->unit_bytes;
				if ((uint64_t)(off[i + 1] - off[i]) !=
				    rf->lens[idx[i] * rf->nfields + f] &&
				    (*reported)++ < 5)
					printf("X %d record %" PRIu64 " field %s: %" PRId64 " units, read %" PRIu64 "\n",
					       rank, idx[i], fd->f.name,
					       off[i + 1] - off[i],
					       rf->lens[idx[i] * rf->nfields + f]);
			} else {
				uint64_t units = (uint64_t)off[i];
				uint64_t row = (uint64_t)pad * fd->unit_bytes;
				uint64_t keep = units < pad ? units : pad;

				p = data + (uint64_t)i * row;
				len = keep * fd->unit_bytes;
				if (units != rf->lens[idx[i] * rf->nfields + f] &&
				    (*reported)++ < 5)
					printf("X %d record %" PRIu64 " field %s: length %" PRIu64 ", read %" PRIu64 "\n",
					       rank, idx[i], fd->f.name, units,
					       rf->lens[idx[i] * rf->nfields + f]);
				for (uint64_t z = len; z < row; z++)
					if (p[z] && (*reported)++ < 5) {
						printf("X %d record %" PRIu64 " field %s: padding byte %" PRIu64 " not zero\n",
						       rank, idx[i], fd->f.name, z);
						break;
					}
			}
			h[i] = mix64(fnv(h[i], p, len) + f);
		}
		if (a)
			a->deleter(a);
		t->deleter(t);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (idx[i] >= rf->n) {
			if ((*reported)++ < 5)
				printf("X %d index %" PRIu64 " out of range\n",
				       rank, idx[i]);
			continue;
		}
		if (h[i] != rf->hash[idx[i]] && (*reported)++ < 5)
			printf("X %d record %" PRIu64 ": bytes differ from the shard's (batch position %u)\n",
			       rank, idx[i], i);
	}
	free(h);
}

static int open_loader(const struct opts *o, sluice_dataset **ds,
		       struct sluice_loader_config *cfg, sluice_loader **ld)
{
	struct sluice_stream st[MAX_DS];
	const char *m = o->mix;

	if (!o->mix)
		return sluice_loader_open(ds[0], cfg, ld);
	for (int i = 0; i < o->nds; i++) {
		char *end;

		st[i].dataset = ds[i];
		st[i].weight = strtod(m, &end);
		if (*end != ':')
			return -EINVAL;
		st[i].samples = strtoull(end + 1, &end, 10);
		m = *end == ',' ? end + 1 : end;
	}
	return sluice_loader_open_streams(st, o->nds, cfg, ld);
}

static void run_rank(const struct opts *o, sluice_dataset **ds,
		     const struct ref *rf, int rank)
{
	struct sluice_loader_config cfg = o->cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld = NULL;
	sluice_batch *held = NULL;
	uint64_t got = 0, eofs = 0;
	int r, reported = 0;

	cfg.rank = rank;
	r = open_loader(o, ds, &cfg, &ld);
	if (r) {
		refused(ld, rank, "open", r);
		sluice_loader_close(ld);
		return;
	}
	if (o->state) {
		struct sluice_state s;

		r = sluice_state_parse(o->state, &s);
		if (r) {
			printf("F %d parse %d bad state line\n", rank, r);
			goto out;
		}
		r = sluice_loader_state_set(ld, &s);
		if (r) {
			refused(ld, rank, "state", r);
			goto out;
		}
	}
	if (o->setepoch >= 0) {
		r = sluice_loader_set_epoch(ld, (uint64_t)o->setepoch);
		if (r) {
			refused(ld, rank, "setepoch", r);
			goto out;
		}
	}
	printf("O %d %" PRIu64 "\n", rank, sluice_loader_batches(ld));
	while (o->stop < 0 || got < (uint64_t)o->stop) {
		sluice_batch *b;
		const uint64_t *idx;
		uint32_t n;

		r = sluice_loader_next(ld, &b);
		if (r == SLUICE_EOF) {
			struct sluice_state s;

			sluice_loader_state_get(ld, &s);
			printf("E %d %" PRIu64 " %" PRIu64 "\n", rank,
			       s.epoch - 1, sluice_loader_batches(ld));
			if (++eofs >= o->eofs && o->stop < 0)
				break;
			/* with epochs=E, EOF again and again: stop */
			if (eofs > 1000)
				break;
			continue;
		}
		if (r < 0) {
			refused(ld, rank, "next", r);
			goto out;
		}
		idx = sluice_batch_indices(b);
		n = sluice_batch_size(b);
		printf("B %d %" PRIu64 " %u", rank, sluice_batch_epoch(b), n);
		for (uint32_t i = 0; i < n; i++)
			printf(" %" PRIu64, idx[i]);
		printf("\n");
		check_batch(b, rf, cfg.pad_length, rank, &reported);
		got++;
		sluice_batch_release(held);
		held = NULL;
		if (o->hold)
			held = b;
		else
			sluice_batch_release(b);
	}
	if (o->stop >= 0) {
		struct sluice_state s, back;
		char line[SLUICE_STATE_TEXT_MAX], again[SLUICE_STATE_TEXT_MAX];

		r = sluice_loader_state_get(ld, &s);
		if (!r)
			r = sluice_state_format(&s, line, sizeof(line));
		if (r < 0) {
			printf("X %d state_get/format failed: %d\n", rank, r);
		} else if (sluice_state_parse(line, &back) ||
			   sluice_state_format(&back, again, sizeof(again)) < 0 ||
			   strcmp(line, again)) {
			printf("X %d state does not survive format/parse: %s\n",
			       rank, line);
		} else {
			printf("S %d %s\n", rank, line);
		}
	}
	sluice_batch_release(held);
	held = NULL;
	sluice_loader_stats(ld, &st);
	printf("C %d {\"batches\":%" PRIu64 ",\"viewed\":%" PRIu64
	       ",\"direct\":%" PRIu64 ",\"range_reads\":%" PRIu64
	       ",\"range_records\":%" PRIu64 ",\"cache_hits\":%" PRIu64
	       ",\"blocks_read\":%" PRIu64 ",\"gathered\":%" PRIu64
	       ",\"skipped\":%" PRIu64 ",\"truncated\":%" PRIu64
	       ",\"over_budget\":%" PRIu64 ",\"staged\":%" PRIu64
	       ",\"fallbacks\":\"",
	       rank, st.batches, st.batches_viewed, st.blocks_direct,
	       st.range_reads, st.range_records, st.block_cache_hits,
	       st.blocks_read, st.batches_gathered, st.records_skipped,
	       st.values_truncated, st.batches_over_budget, st.bytes_staged);
	json_str(st.fallbacks);
	printf("\"}\n");
out:
	sluice_batch_release(held);
	sluice_loader_close(ld);
}

int main(int argc, char **argv)
{
	sluice_dataset *ds[MAX_DS] = { 0 };
	struct ref rf;
	struct opts o;
	uint64_t total = 0;
	int rc = 1;

	if (parse_args(argc, argv, &o)) {
		fprintf(stderr, "usage: state_probe ds=PATH [ds=PATH...] [mix=W:S,...] [KEY=VALUE...] (see the source)\n");
		return 2;
	}
	memset(&rf, 0, sizeof(rf));
	for (int i = 0; i < o.nds; i++) {
		int r = sluice_dataset_open(o.ds[i], &ds[i]);

		if (r) {
			fprintf(stderr, "state_probe: %s: %s\n", o.ds[i],
				sluice_strerror(r));
			goto out;
		}
		total += sluice_dataset_records(ds[i]);
	}
	rf.n = total;
	rf.nfields = (uint32_t)sluice_dataset_field_count(ds[0]);
	rf.hash = calloc(total ? total : 1, sizeof(uint64_t));
	rf.lens = calloc((total ? total : 1) * rf.nfields, sizeof(uint64_t));
	if (!rf.hash || !rf.lens)
		goto out;
	total = 0;
	for (int i = 0; i < o.nds; i++) {
		if (ref_add(&rf, ds[i], total, o.cfg.pad_length))
			goto out;
		total += sluice_dataset_records(ds[i]);
	}
	for (int r = 0; r < o.cfg.world_size; r++)
		if (o.all_ranks || r == o.rank)
			run_rank(&o, ds, &rf, r);
	fflush(stdout);
	rc = 0;
out:
	free(rf.hash);
	free(rf.lens);
	for (int i = 0; i < o.nds; i++)
		sluice_dataset_close(ds[i]);
	return rc;
}
