/*
 * cli_merge.c - `dlpack-shard merge DIR... --out DIR [--verify] [--copy]`:
 * join the parts written by `convert --part I/N`, in the order given,
 * without rewriting block data (hard links, or copies with --copy).  The checks (destination new or empty and not a
 * part, parts against their manifests) are the library's.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_merge(int argc, char **argv)
{
	struct sluice_writer_summary sum;
	const char **parts;
	const char *out = NULL;
	char err[1024] = "";
	unsigned flags = 0;
	int nparts = 0, quiet = 0, json = 0, r;

	parts = calloc((size_t)argc, sizeof(*parts));
	if (!parts)
		return cli_error("out of memory");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--out") == 0 || strcmp(a, "-o") == 0) {
			if (i + 1 == argc) {
				free(parts);
				return cli_usage_error("%s needs a DIR", a);
			}
			out = argv[++i];
		} else if (strncmp(a, "--out=", 6) == 0) {
			out = a + 6;
		} else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
			quiet = 1;
		} else if (strcmp(a, "--json") == 0) {
			json = 1;
		} else if (strcmp(a, "--verify") == 0) {
			flags |= SLUICE_MERGE_VERIFY;
		} else if (strcmp(a, "--copy") == 0) {
			flags |= SLUICE_MERGE_COPY;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			free(parts);
			cli_usage(stdout);
			return 0;
		} else if (a[0] == '-' && a[1]) {
			free(parts);
			return cli_usage_error("merge: bad option '%s'", a);
		} else {
			parts[nparts++] = a;
		}
	}
	if (!out || nparts == 0) {
		free(parts);
		return cli_usage_error("merge needs DIR... and --out DIR");
	}
	memset(&sum, 0, sizeof(sum));
	sum.size = sizeof(sum);
	r = sluice_merge(parts, nparts, out, flags, &sum, err, sizeof(err));
	free(parts);
	if (r < 0)
		return cli_error_code(err, r);
	if (json)
		printf("{\"records\": %llu, \"shards\": %u, \"blocks\": %llu, "
		       "\"raw_bytes\": %llu, \"stored_bytes\": %llu}\n",
		       (unsigned long long)sum.records, sum.shards,
		       (unsigned long long)sum.blocks,
		       (unsigned long long)sum.raw_bytes,
		       (unsigned long long)sum.stored_bytes);
	if (!quiet)
		fprintf(stderr, "%s: %llu records, %u shards from %d parts\n",
			out, (unsigned long long)sum.records, sum.shards,
			nparts);
	return 0;
}
