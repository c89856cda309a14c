/*
 * dir_lock.h - one writer per folder: the writer and merge hold an
 * exclusive flock on DIR/.sluice.lock while they write there, so that a
 * second writer (a speculative task, a lost executor still running)
 * fails at once instead of interleaving shards.  datasets/-internal.
 */
#ifndef SLUICE_DATASETS_DIR_LOCK_H
#define SLUICE_DATASETS_DIR_LOCK_H

#include <stddef.h>

#define DIR_LOCK_NAME ".sluice.lock"

/* Take the lock of @dir (which exists).  *@fd receives the lock's file
 * descriptor.  @return: 0; -EBUSY when another process holds it (the
 * message says so); -errno. */
int dir_lock(const char *dir, int *fd, char *err, size_t errlen);

/* Remove the lock file and release it (@fd < 0: nothing to do). */
void dir_unlock(const char *dir, int fd);

/*
 * dir_first_entry - the first name in @dir, other than "." "..", the
 * lock file and names @skip rejects (may be NULL), into @name.
 * @return: 1 found, 0 none, -errno.
 */
int dir_first_entry(const char *dir, int (*skip)(const char *name),
		    char *name, size_t namelen);

#endif /* SLUICE_DATASETS_DIR_LOCK_H */
