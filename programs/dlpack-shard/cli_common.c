/*
 * cli_common.c - helpers shared by the dlpack-shard subcommands.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

const char *cli_dtype_name(DLDataType dt, char *buf, size_t len)
{
	const char *name = sluice_dtype_name(dt);

	if (name)
		return name;
	snprintf(buf, len, "dtype(%u:%u:%u)", dt.code, dt.bits, dt.lanes);
	return buf;
}

int cli_check_out_dir(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int empty = 1;

	if (!d)
		return errno == ENOENT ? 0 : cli_error("%s: %s", dir,
						     strerror(errno));
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			empty = 0;
			break;
		}
	closedir(d);
	if (!empty)
		return cli_error("%s: not empty; stale shards would outlive "
				 "the new dataset, so remove it or choose "
				 "another --out", dir);
	return 0;
}
