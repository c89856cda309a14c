/*
 * cli_common.c - helpers shared by the dlpack-shard subcommands.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sluice_tools.h"

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

int cli_check_busy(const char *dir)
{
	long pid;
	int r = dir_lock_holder(dir, &pid);

	if (r <= 0)
		return 0;
	if (pid > 0)
		return cli_error("%s: busy: a writer (process %ld) is writing "
				 "into it now; wait for it to finish, or "
				 "choose another folder", dir, pid);
	return cli_error("%s: busy: a writer is writing into it now; wait "
			 "for it to finish, or choose another folder", dir);
}

int cli_check_out_dir(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int entries = 0, leftovers = 0;

	if (!d)
		return errno == ENOENT ? 0 : cli_error("%s: %s", dir,
						     strerror(errno));
	/* A live writer's hidden files are not leftovers: removing them
	 * (the advice below) would kill its conversion. */
	if (cli_check_busy(dir)) {
		closedir(d);
		return CLI_EXIT_ERROR;
	}
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			entries++;
			leftovers += is_leftover(de->d_name);
		}
	closedir(d);
	if (entries && entries == leftovers)
		return cli_error("%s: holds the leftovers of an interrupted "
				 "conversion (hidden .tmp files, which no "
				 "reader loads; no writer holds the folder); "
				 "remove them with '" CLI_NAME " clean %s' "
				 "and convert again", dir, dir);
	if (entries)
		return cli_error("%s: not empty; stale shards would outlive "
				 "the new dataset, so remove it or choose "
				 "another --out", dir);
	return 0;
}
