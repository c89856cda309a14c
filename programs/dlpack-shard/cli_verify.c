/*
 * cli_verify.c - `dlpack-shard verify PATH`: every header, index, block
 * checksum and block layout (dataset_verify).  Exit 0 with
 * "PATH: OK (N shards, N blocks)" when clean, else exit 1 with one line
 * per problem on stdout.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sluice_tools.h"

static void report_line(void *ctx, const char *line)
{
	long *lines = ctx;

	printf("%s\n", line);
	(*lines)++;
}

int cli_verify(int argc, char **argv)
{
	const char *path = NULL;
	struct dataset ds;
	char err[1024] = "";
	long problems, lines = 0;
	int r;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			cli_usage(stdout);
			return 0;
		}
		if (argv[i][0] == '-' && argv[i][1])
			return cli_usage_error("verify: bad option '%s'",
					       argv[i]);
		if (path)
			return cli_usage_error("verify takes one PATH");
		path = argv[i];
	}
	if (!path)
		return cli_usage_error("verify needs a PATH");
	problems = dataset_verify(path, report_line, &lines);
	fflush(stdout);
	if (problems < 0) {
		if (!lines)
			printf("%s: %s\n", path, sluice_strerror((int)problems));
		return cli_error("%s: cannot verify: %s", path,
				 sluice_strerror((int)problems));
	}
	if (problems > 0)
		return CLI_EXIT_ERROR;
	/* Clean: the counts come from the same headers verify checked. */
	memset(&ds, 0, sizeof(ds));
	r = dataset_load(path, &ds, err, sizeof(err));
	if (r < 0) {
		printf("%s\n", err[0] ? err : sluice_strerror(r));
		dataset_free(&ds);
		return CLI_EXIT_ERROR;
	}
	printf("%s: OK (%u shards, %llu blocks)\n", path, ds.nshards,
	       (unsigned long long)ds.block_count);
	dataset_free(&ds);
	return 0;
}
