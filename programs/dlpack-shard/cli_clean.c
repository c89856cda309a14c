/*
 * cli_clean.c - `dlpack-shard clean OUT`: remove what interrupted writes
 * into OUT left behind, and nothing a live writer still uses:
 *   - OUT's hidden temporary files (".NAME.tmp": uncommitted shards, a
 *     dataset.json or a merge copy not yet renamed) and a dead writer's
 *     lock file;
 *   - OUT.parts/, the staging folder of the Spark and Ray writers
 *     (python/sluice/parts.py), with every part of a driver or a task
 *     that died before its merge.
 * It holds OUT's writer lock while it works, so no writer starts there
 * meanwhile, and refuses while any writer holds OUT or a folder under
 * OUT.parts.  Committed shards and dataset.json are never removed.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "sluice_tools.h"

#define CLEAN_PATH_CAP 4096

/* nftw has no context argument: the walk's state, one walk at a time. */
static struct {
	char busy[CLEAN_PATH_CAP];
	long busy_pid;
	unsigned long files, dirs, failed;
	char first_failed[CLEAN_PATH_CAP];
} walk;

static int find_busy(const char *path, const struct stat *st, int type,
		     struct FTW *ftw)
{
	long pid;

	(void)st;
	(void)ftw;
	if (type != FTW_D || dir_lock_holder(path, &pid) <= 0)
		return 0;
	snprintf(walk.busy, sizeof(walk.busy), "%s", path);
	walk.busy_pid = pid;
	return 1;
}

static int remove_entry(const char *path, const struct stat *st, int type,
			struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (remove(path) != 0) {
		if (!walk.failed++)
			snprintf(walk.first_failed, sizeof(walk.first_failed),
				 "%s: %s", path, strerror(errno));
	} else if (type == FTW_DP) {
		walk.dirs++;
	} else {
		walk.files++;
	}
	return 0;
}

static int is_temporary(const char *name)
{
	size_t n = strlen(name);

	return name[0] == '.' && n > 5 && strcmp(name + n - 4, ".tmp") == 0;
}

static int is_committed_shard(const char *name)
{
	size_t n = strlen(name), sl = strlen(DLS_SHARD_SUFFIX);

	return name[0] != '.' && n > sl &&
	       strcmp(name + n - sl, DLS_SHARD_SUFFIX) == 0;
}

/* Remove OUT's temporary files; count its committed shards. */
static int clean_out(const char *out, unsigned long *removed,
		     unsigned long *shards, int *manifest)
{
	char path[CLEAN_PATH_CAP + 256];
	struct dirent *de;
	DIR *d = opendir(out);

	if (!d)
		return errno == ENOENT ? 0 : cli_error("%s: %s", out,
						     strerror(errno));
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, DLS_MANIFEST_NAME) == 0)
			*manifest = 1;
		*shards += is_committed_shard(de->d_name);
		if (!is_temporary(de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", out, de->d_name);
		if (unlink(path) != 0) {
			int e = errno;

			closedir(d);
			return cli_error("%s: %s", path, strerror(e));
		}
		++*removed;
	}
	closedir(d);
	return 0;
}

static int usage_clean(void)
{
	return cli_usage_error("clean needs one folder: clean OUT");
}

int cli_clean(int argc, char **argv)
{
	char out[CLEAN_PATH_CAP], staging[CLEAN_PATH_CAP + 8], err[1024];
	unsigned long removed = 0, shards = 0;
	int manifest = 0, lock_fd = -1, quiet = 0, have_staging, r;
	const char *arg = NULL;
	struct stat st;
	size_t n;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			cli_usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--quiet") == 0 ||
			   strcmp(argv[i], "-q") == 0) {
			quiet = 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return cli_usage_error("clean: bad option '%s'",
					       argv[i]);
		} else if (arg) {
			return usage_clean();
		} else {
			arg = argv[i];
		}
	}
	if (!arg || !*arg)
		return usage_clean();
	if (strlen(arg) >= sizeof(out))
		return cli_error("%s: path too long", arg);
	snprintf(out, sizeof(out), "%s", arg);
	for (n = strlen(out); n > 1 && out[n - 1] == '/'; n--)
		out[n - 1] = '\0';
	snprintf(staging, sizeof(staging), "%s.parts", out);
	have_staging = lstat(staging, &st) == 0 && S_ISDIR(st.st_mode);
	if (lstat(out, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			return cli_error("%s: not a folder", out);
		/* Held until the end: no writer starts here meanwhile. */
		r = dir_lock(out, &lock_fd, err, sizeof(err));
		if (r < 0)
			return cli_error("%s; clean refuses while it runs",
					 err);
	} else if (!have_staging) {
		return cli_error("%s: no such folder, and no %s", out,
				 staging);
	}
	if (have_staging) {
		memset(&walk, 0, sizeof(walk));
		r = nftw(staging, find_busy, 16, FTW_PHYS);
		if (r != 0) {
			dir_unlock(out, lock_fd);
			if (r < 0)
				return cli_error("%s: %s", staging,
						 strerror(errno));
			if (walk.busy_pid > 0)
				return cli_error("%s: busy: a writer (process "
						 "%ld) is writing a part there "
						 "now; clean refuses while it "
						 "runs", walk.busy, walk.busy_pid);
			return cli_error("%s: busy: a writer is writing a part "
					 "there now; clean refuses while it "
					 "runs", walk.busy);
		}
	}
	r = clean_out(out, &removed, &shards, &manifest);
	if (r) {
		dir_unlock(out, lock_fd);
		return r;
	}
	if (have_staging) {
		memset(&walk, 0, sizeof(walk));
		nftw(staging, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
		if (walk.failed) {
			dir_unlock(out, lock_fd);
			return cli_error("%s (and %lu more could not be "
					 "removed)", walk.first_failed,
					 walk.failed - 1);
		}
	}
	/* Removes a dead writer's lock file as well as ours. */
	dir_unlock(out, lock_fd);
	if (!quiet) {
		printf("%s: removed %lu temporary file%s", out, removed,
		       removed == 1 ? "" : "s");
		if (have_staging)
			printf(", and %s (%lu files, %lu folders)", staging,
			       walk.files, walk.dirs);
		printf("\n");
		if (shards && !manifest)
			printf("%s: %lu committed shard%s but no %s (a write "
			       "killed while renaming, or shards copied in): "
			       "left as they are; 'rm -r %s' removes them\n",
			       out, shards, shards == 1 ? "" : "s",
			       DLS_MANIFEST_NAME, out);
	}
	return 0;
}
