/*
 * dir_lock.c - the per-folder writer lock (flock, non-blocking) and the
 * folder checks that go with it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dir_lock.h"
#include "shard_internal.h"

#define LOCK_PATH_CAP 4200

int dir_lock(const char *dir, int *fd, char *err, size_t errlen)
{
	char path[LOCK_PATH_CAP];
	struct stat held, named;
	int r;

	*fd = -1;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
			     DIR_LOCK_NAME) >= sizeof(path)) {
		errf(err, errlen, "%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	for (;;) {
		int lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

		if (lfd < 0) {
			r = -errno;
			errf(err, errlen, "%s: %s", path, sluice_strerror(r));
			return r;
		}
		if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
			r = errno == EWOULDBLOCK ? -EBUSY : -errno;
			close(lfd);
			if (r == -EBUSY)
				errf(err, errlen,
				     "%s: another writer or merge is writing "
				     "into this folder (it holds %s); give each "
				     "writer a folder of its own",
				     dir, DIR_LOCK_NAME);
			else
				errf(err, errlen, "%s: flock: %s", path,
				     sluice_strerror(r));
			return r;
		}
		/* The holder we waited for may have removed the file: then
		 * we locked an orphan, and a third writer could lock a new
		 * file of the same name.  Lock only what the name is. */
		if (fstat(lfd, &held) == 0 && stat(path, &named) == 0 &&
		    held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
			*fd = lfd;
			return 0;
		}
		close(lfd);
	}
}

void dir_unlock(const char *dir, int fd)
{
	char path[LOCK_PATH_CAP];

	if (fd < 0)
		return;
	/* Unlink while still holding it: see dir_lock. */
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
			     DIR_LOCK_NAME) < sizeof(path))
		unlink(path);
	close(fd);
}

int dir_first_entry(const char *dir, int (*skip)(const char *name),
		    char *name, size_t namelen)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int found = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, DIR_LOCK_NAME) ||
		    (skip && skip(de->d_name)))
			continue;
		snprintf(name, namelen, "%s", de->d_name);
		found = 1;
		break;
	}
	closedir(d);
	return found;
}
