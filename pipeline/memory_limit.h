/*
 * memory_limit.h - how much memory this process may use: physical RAM,
 * or less when its control group (v2 memory.max, v1
 * memory.limit_in_bytes, on its own group and every ancestor) says so,
 * as in a container.  The default memory budget is a share of it.
 */
#ifndef SLUICE_PIPELINE_MEMORY_LIMIT_H
#define SLUICE_PIPELINE_MEMORY_LIMIT_H

#include <stdint.h>

/*
 * memory_limit_bytes - the smallest of @ram and the limits of the groups
 * /proc/self/cgroup-style @self_cgroup names, read under @cgroup_root
 * (v2: the unified tree there, or under its "unified" folder on hybrid
 * systems; v1: its "memory" folder).  Files that are missing, unreadable
 * or malformed limit nothing.  The real paths are "/proc/self/cgroup"
 * and "/sys/fs/cgroup"; tests give a tree of their own.
 */
uint64_t memory_limit_bytes(uint64_t ram, const char *self_cgroup,
			    const char *cgroup_root);

#endif /* SLUICE_PIPELINE_MEMORY_LIMIT_H */
