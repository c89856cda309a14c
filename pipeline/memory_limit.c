/*
 * memory_limit.c - physical RAM capped by the process's control group
 * limits (memory_limit.h).  Every byte read here comes from files the
 * kernel writes, yet is parsed as untrusted text: bounded reads, a limit
 * only from a line that is a whole decimal number.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory_limit.h"

#define PATH_MAX_LEN 4096

/* The decimal number alone on the first line of @path, in *@out.
 * "max" (v2: no limit) and anything else: 0 returned, nothing set. */
static int read_limit(const char *path, uint64_t *out)
{
	char line[64], *end;
	unsigned long long v;
	FILE *f = fopen(path, "re");
	int ok = 0;

	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f) && line[0] >= '0' && line[0] <= '9') {
		v = strtoull(line, &end, 10);
		if (*end == '\n' || *end == '\0') {
			*out = v;
			ok = 1;
		}
	}
	fclose(f);
	return ok;
}

/* The smallest limit in @file of the group at @dir and of every group
 * above it up to @top (dir starts with top), into *@limit. */
static void walk_up(char *dir, size_t top, const char *file, uint64_t *limit)
{
	char path[PATH_MAX_LEN + 64];
	uint64_t v;

	for (;;) {
		char *slash;

		snprintf(path, sizeof(path), "%s/%s", dir, file);
		if (read_limit(path, &v) && v > 0 && v < *limit)
			*limit = v;
		if (strlen(dir) <= top)
			return;
		slash = strrchr(dir + top, '/');
		if (!slash)
			return;
		*slash = '\0';
	}
}

/* Into @out, the group path of @self_cgroup's line for v2 ("0::PATH")
 * or for v1's memory controller ("N:...memory...:PATH"), "" for the
 * root.  @return: 1 when found. */
static int group_path(const char *self_cgroup, int v2, char *out, size_t len)
{
	char line[PATH_MAX_LEN + 128];
	FILE *f = fopen(self_cgroup, "re");
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2, *nl;

		if (!c1 || !(c2 = strchr(c1 + 1, ':')))
			continue;
		nl = strchr(c2, '\n');
		if (nl)
			*nl = '\0';
		*c1 = '\0';
		*c2 = '\0';
		/* hierarchy id, controllers, path */
		if (v2 ? strcmp(line, "0") == 0 && c1[1] == '\0'
		       : strstr(c1 + 1, "memory") != NULL) {
			/* a path the kernel wrote: absolute; "/" is the root */
			if (c2[1] != '/' || strlen(c2 + 1) >= len)
				continue;
			snprintf(out, len, "%s", strcmp(c2 + 1, "/") ? c2 + 1
								: "");
			found = 1;
		}
	}
	fclose(f);
	return found;
}

uint64_t memory_limit_bytes(uint64_t ram, const char *self_cgroup,
			    const char *cgroup_root)
{
	static const char *const v2_trees[] = { "", "/unified" };
	char group[PATH_MAX_LEN], dir[2 * PATH_MAX_LEN + 16];
	uint64_t limit = ram;

	if (group_path(self_cgroup, 1, group, sizeof(group))) {
		for (int t = 0; t < 2; t++) {
			int top = snprintf(dir, sizeof(dir), "%s%s", cgroup_root,
					   v2_trees[t]);

			snprintf(dir + top, sizeof(dir) - (size_t)top, "%s",
				 group);
			walk_up(dir, (size_t)top, "memory.max", &limit);
		}
	}
	if (group_path(self_cgroup, 0, group, sizeof(group))) {
		int top = snprintf(dir, sizeof(dir), "%s/memory", cgroup_root);

		snprintf(dir + top, sizeof(dir) - (size_t)top, "%s", group);
		walk_up(dir, (size_t)top, "memory.limit_in_bytes", &limit);
	}
	return limit;
}
