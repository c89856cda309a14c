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

/* What an interrupted write leaves: hidden temporary files (".NAME.tmp",
 * shards marked uncommitted) and the writer's lock file. */
static int is_leftover(const char *name)
{
	size_t n = strlen(name);

	return name[0] == '.' &&
	       ((n > 5 && strcmp(name + n - 4, ".tmp") == 0) ||
		strcmp(name, ".sluice.lock") == 0);
}

int cli_check_out_dir(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int entries = 0, leftovers = 0;

	if (!d)
		return errno == ENOENT ? 0 : cli_error("%s: %s", dir,
						     strerror(errno));
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			entries++;
			leftovers += is_leftover(de->d_name);
		}
	closedir(d);
	if (entries && entries == leftovers)
		return cli_error("%s: holds the leftovers of an interrupted "
				 "conversion (hidden .tmp files, which no "
				 "reader loads); remove them with 'rm -r %s' "
				 "and convert again", dir, dir);
	if (entries)
		return cli_error("%s: not empty; stale shards would outlive "
				 "the new dataset, so remove it or choose "
				 "another --out", dir);
	return 0;
}
