/*
 * file_open.c - open a file the library reads, refusing anything but a
 * regular file before a read could block on it.
 *
 * open() of a FIFO without O_NONBLOCK waits for a writer, forever when
 * none comes, so an fstat after it is too late: every reader of datasets/
 * opens through here, with O_NONBLOCK, and clears the flag once the file
 * is known to be regular.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard_internal.h"
#include "sluice.h"

const char *file_kind(mode_t mode)
{
	if (S_ISREG(mode))
		return "a regular file";
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISLNK(mode))
		return "a symbolic link";
	return "of an unknown type";
}

int file_open_regular(const char *path, int flags, struct stat *st,
		      char *err, size_t errlen)
{
	struct stat own;
	int fd, fl, r;

	if (!st)
		st = &own;
	fd = open(path, flags | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		errf(err, errlen, "%s: %s", path, sluice_strerror(r));
		return r;
	}
	if (fstat(fd, st) < 0) {
		r = -errno;
		errf(err, errlen, "%s: %s", path, sluice_strerror(r));
		goto fail;
	}
	if (!S_ISREG(st->st_mode)) {
		r = -SLUICE_EFORMAT;
		errf(err, errlen, "%s: not a regular file (it is %s)", path,
		     file_kind(st->st_mode));
		goto fail;
	}
	/* Regular files ignore O_NONBLOCK today; clear it so that no
	 * filesystem that honours it hands back -EAGAIN. */
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		r = -errno;
		errf(err, errlen, "%s: %s", path, sluice_strerror(r));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return r;
}
