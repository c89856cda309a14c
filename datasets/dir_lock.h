/*
 * dir_lock.h - one writer per folder: the writer and merge hold an
 * exclusive flock on DIR/.sluice.lock while they write there, so that a
 * second writer (a speculative task, a lost executor still running)
 * fails at once instead of interleaving shards.  dir_lock, dir_unlock
 * and dir_lock_holder are in sluice_tools.h (the CLI's clean and its
 * busy-folder check use them); the rest is datasets/-internal.
 */
#ifndef SLUICE_DATASETS_DIR_LOCK_H
#define SLUICE_DATASETS_DIR_LOCK_H

#include <stddef.h>

#include "sluice_tools.h"

/*
 * dir_first_entry - the first name in @dir, other than "." "..", the
 * lock file and names @skip rejects (may be NULL), into @name.
 * @return: 1 found, 0 none, -errno.
 */
int dir_first_entry(const char *dir, int (*skip)(const char *name),
		    char *name, size_t namelen);

#endif /* SLUICE_DATASETS_DIR_LOCK_H */
