/*
 * dir_lock.c - the per-folder writer lock (flock, non-blocking) and the
 * folder checks that go with it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dir_lock.h"
#include "shard_internal.h"

#define LOCK_PATH_CAP 4200

/* The holder writes its pid into the file once it holds the lock, so
 * that a writer refused, convert and clean can name the process. */
static void write_pid(int fd)
{
	char buf[24];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());

	if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, (size_t)n, 0) != n) {
		/* The pid is for messages only: the lock holds without it. */
	}
}

/* The pid in the lock file, 0 when there is none (a holder that has not
 * written it yet, or another program's file). */
static long read_pid(int fd)
{
	char buf[24], *end;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	long pid;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	pid = strtol(buf, &end, 10);
	return end != buf && (*end == '\n' || *end == '\0') && pid > 0 ? pid
									 : 0;
}

static void busy_message(const char *dir, long pid, char *err,
			 size_t errlen)
{
	char who[40] = "another process";

	if (pid > 0)
		snprintf(who, sizeof(who), "process %ld", pid);
	errf(err, errlen,
	     "%s: busy: a writer or merge (%s) is writing into this folder "
	     "(it holds %s); wait for it to finish, or give each writer a "
	     "folder of its own", dir, who, DIR_LOCK_NAME);
}

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
			if (r == -EBUSY)
				busy_message(dir, read_pid(lfd), err, errlen);
			else
				errf(err, errlen, "%s: flock: %s", path,
				     sluice_strerror(r));
			close(lfd);
			return r;
		}
		/* The holder we waited for may have removed the file: then
		 * we locked an orphan, and a third writer could lock a new
		 * file of the same name.  Lock only what the name is. */
		if (fstat(lfd, &held) == 0 && stat(path, &named) == 0 &&
		    held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
			write_pid(lfd);
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

int dir_lock_holder(const char *dir, long *pid)
{
	char path[LOCK_PATH_CAP];
	struct stat st;
	int fd, r;

	*pid = 0;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
			     DIR_LOCK_NAME) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	/* A shared lock taken for an instant: it fails only while a writer
	 * holds the exclusive one.  (A writer starting in that instant is
	 * refused as busy; it is not mistaken for a dead one.) */
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		r = 0;
		flock(fd, LOCK_UN);
	} else {
		r = errno == EWOULDBLOCK ? 1 : -errno;
	}
	*pid = read_pid(fd);
	close(fd);
	return r;
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
