/*
 * cli_info.c - `dlpack-shard info PATH [--json]`: the schema and the
 * totals read from the shards' headers and indexes (no block is read).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sluice_tools.h"

struct totals {
	uint64_t raw, stored;
};

static void print_shape(FILE *f, const struct sluice_field *fl)
{
	fputc('[', f);
	for (int d = 0; d < fl->ndim; d++)
		fprintf(f, "%s%lld", d ? ", " : "", (long long)fl->shape[d]);
	fputc(']', f);
}

static void print_json(const char *path, const sluice_dataset *h,
		       const struct dataset *ds, const struct totals *t)
{
	const char *label = NULL;
	int64_t nclasses = sluice_dataset_class_count(h, &label);

	char buf[48];

	fputs("{\"path\": ", stdout);
	cli_json_string(stdout, path);
	fputs(", \"fields\": [", stdout);
	for (uint32_t i = 0; i < ds->schema.nfields; i++) {
		const struct sluice_field *fl = &ds->schema.fields[i].f;

		fputs(i ? ", {\"name\": " : "{\"name\": ", stdout);
		cli_json_string(stdout, fl->name);
		fputs(", \"dtype\": ", stdout);
		cli_json_string(stdout, cli_dtype_name(fl->dtype, buf,
							sizeof(buf)));
		fputs(", \"shape\": ", stdout);
		print_shape(stdout, fl);
		fputc('}', stdout);
	}
	fputc(']', stdout);
	if (nclasses > 0) {
		fputs(", \"classes\": {", stdout);
		cli_json_string(stdout, label);
		fputs(": [", stdout);
		for (int64_t c = 0; c < nclasses; c++) {
			fputs(c ? ", " : "", stdout);
			cli_json_string(stdout, sluice_dataset_class_name(
							h, (uint32_t)c));
		}
		fputs("]}", stdout);
	}
	printf(", \"shards\": %u, \"records\": %llu, \"blocks\": %llu, "
	       "\"raw_bytes\": %llu, \"stored_bytes\": %llu, "
	       "\"ratio\": %.4f}\n",
	       ds->nshards, (unsigned long long)ds->record_count,
	       (unsigned long long)ds->block_count,
	       (unsigned long long)t->raw, (unsigned long long)t->stored,
	       t->stored ? (double)t->raw / (double)t->stored : 0.0);
}

static void print_text(const char *path, const sluice_dataset *h,
		       const struct dataset *ds, const struct totals *t)
{
	const char *label = NULL;
	int64_t nclasses = sluice_dataset_class_count(h, &label);
	char buf[48];

	printf("%s\n  fields:\n", path);
	for (uint32_t i = 0; i < ds->schema.nfields; i++) {
		const struct sluice_field *fl = &ds->schema.fields[i].f;

		printf("    %-20s %-9s ", fl->name,
		       cli_dtype_name(fl->dtype, buf, sizeof(buf)));
		print_shape(stdout, fl);
		fputc('\n', stdout);
	}
	if (nclasses > 0) {
		printf("  classes (%s = index):", label);
		for (int64_t c = 0; c < nclasses; c++)
			printf(" %lld=%s", (long long)c,
			       sluice_dataset_class_name(h, (uint32_t)c));
		fputc('\n', stdout);
	}
	printf("  shards: %u\n  records: %llu\n  blocks: %llu\n"
	       "  raw bytes: %llu\n  stored bytes: %llu\n  ratio: %.3f\n",
	       ds->nshards, (unsigned long long)ds->record_count,
	       (unsigned long long)ds->block_count,
	       (unsigned long long)t->raw, (unsigned long long)t->stored,
	       t->stored ? (double)t->raw / (double)t->stored : 0.0);
}

int cli_info(int argc, char **argv)
{
	const char *path = NULL;
	const struct dataset *ds;
	sluice_dataset *h = NULL;
	struct totals t = { 0, 0 };
	char err[1024] = "";
	int json = 0, r;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "--help") == 0 ||
			   strcmp(argv[i], "-h") == 0) {
			cli_usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return cli_usage_error("info: bad option '%s'",
					       argv[i]);
		} else if (path) {
			return cli_usage_error("info takes one PATH");
		} else {
			path = argv[i];
		}
	}
	if (!path)
		return cli_usage_error("info needs a PATH");
	r = sluice_dataset_open(path, &h);
	if (r < 0) {
		sluice_dataset_error(h, err, sizeof(err));
		sluice_dataset_close(h);
		return cli_error_code(err, r);
	}
	ds = dataset_table(h);
	for (uint32_t s = 0; s < ds->nshards; s++) {
		t.raw += ds->shards[s].raw_bytes;
		t.stored += ds->shards[s].stored_bytes;
	}
	if (json)
		print_json(path, h, ds, &t);
	else
		print_text(path, h, ds, &t);
	sluice_dataset_close(h);
	return 0;
}
