/*
 * files.c - opening the shards for reading: O_DIRECT where the filesystem
 * allows it (alignment from statx STATX_DIOALIGN), buffered otherwise or
 * (direct=-1) when the page cache already holds most of the file, and
 * registering the descriptors with the ring.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "ring_private.h"
#include "sluice.h"
#include "sluice_tools.h"

/* Alignment when the kernel does not say (no STATX_DIOALIGN). */
#define DIO_ALIGN_DEFAULT 4096u
/* register_files in one go up to here; beyond, a sparse table. */
#define FILES_DENSE_MAX 1024u
#define FILES_UPDATE_CHUNK 256u

/* A name for the filesystem under @fd, for fallback messages. */
static const char *fs_name(int fd, char *buf, size_t len)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} known[] = {
		{ 0x01021994, "tmpfs" },  { 0xEF53, "ext4" },
		{ 0x58465342, "xfs" },    { 0x9123683E, "btrfs" },
		{ 0x794c7630, "overlayfs" }, { 0x6969, "nfs" },
		{ 0x65735546, "fuse" },   { 0x01021997, "9p" },
		{ 0x2fc12fc1, "zfs" },    { 0x73717368, "squashfs" },
		{ 0x9fa0, "proc" },       { 0x62656572, "sysfs" },
		{ 0x858458f6, "ramfs" },  { 0xFF534D42, "cifs" },
		{ 0xF2F52010, "f2fs" },   { 0x4d44, "vfat" },
	};
	struct statfs sf;

	if (fstatfs(fd, &sf) != 0)
		return "unknown fs";
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if ((unsigned long)sf.f_type == known[i].magic)
			return known[i].name;
	snprintf(buf, len, "fs 0x%lx", (unsigned long)sf.f_type);
	return buf;
}

/*
 * The direct-I/O alignment of @fd: 0 when the kernel says the file does
 * not support direct I/O, DIO_ALIGN_DEFAULT when it does not say.
 */
static uint32_t dio_alignment(int fd)
{
	struct statx stx;

	memset(&stx, 0, sizeof(stx));
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0 ||
	    !(stx.stx_mask & STATX_DIOALIGN))
		return DIO_ALIGN_DEFAULT;
	if (stx.stx_dio_offset_align == 0)
		return 0;
	return stx.stx_dio_offset_align > stx.stx_dio_mem_align
		       ? stx.stx_dio_offset_align
		       : stx.stx_dio_mem_align;
}

/* open() of a FIFO blocks until a writer comes: open without blocking,
 * refuse what is not a regular file, then make the descriptor blocking. */
int ring_open_regular(const char *path, int flags)
{
	struct stat st;
	int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC), fl, e;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		e = -errno;
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		e = S_ISDIR(st.st_mode) ? -EISDIR : -SLUICE_EFORMAT;
		goto fail;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		e = -errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return e;
}

/* A buffered descriptor of @path when the page cache holds most of it,
 * else -1 (also when the kernel cannot say: O_DIRECT is then tried). */
static int open_if_cached(const char *path)
{
	int fd = ring_open_regular(path, O_RDONLY);

	if (fd < 0)
		return -1;
	if (file_mostly_cached(fd))
		return fd;
	close(fd);
	return -1;
}

static int open_error(const char *path, int e, char *err, size_t errlen)
{
	char eb[128], hint[96] = "";

	if (err && errlen)
		snprintf(err, errlen, "cannot open %s: %s%s", path,
			 e == SLUICE_EFORMAT ? "not a regular file" :
			 strerror_r(e, eb, sizeof(eb)),
			 e == EMFILE ? ring_nofile_hint(hint, sizeof(hint)) :
				       "");
	return -e;
}

int ring_open_files(struct io_ring *r, const char *const *paths,
		    uint32_t nfiles, int direct, char *err, size_t errlen)
{
	const int flags = O_RDONLY;
	uint32_t align = 0, refused = 0, cached = 0;
	char first[200] = "";
	int64_t max_open = ring_reserve_fds(r, nfiles, err, errlen);
	int ret;

	if (max_open < 0)
		return (int)max_open;
	r->fds = malloc((nfiles ? nfiles : 1) * sizeof(*r->fds));
	r->file_direct = calloc(nfiles ? nfiles : 1, sizeof(*r->file_direct));
	if (!r->fds || !r->file_direct)
		return -ENOMEM;
	for (uint32_t i = 0; i < nfiles; i++)
		r->fds[i] = -1;
	r->nfiles = nfiles;
	ret = ring_file_set_init(r, (uint32_t)max_open);
	if (ret < 0)
		return ret;
	if (r->max_open < nfiles) {
		/* Reopened later, perhaps after the caller's strings are
		 * gone. */
		r->paths = calloc(nfiles, sizeof(*r->paths));
		if (!r->paths)
			return -ENOMEM;
		for (uint32_t i = 0; i < nfiles; i++)
			if (paths[i] && !(r->paths[i] = strdup(paths[i])))
				return -ENOMEM;
	}

	for (uint32_t i = 0; i < nfiles; i++) {
		const char *path = paths[i];
		const char *why = "refused";
		struct stat st;
		int fd = -1;

		if (!path)
			return open_error("(null path)", EINVAL, err, errlen);
		if (direct == -1) {
			fd = open_if_cached(path);
			if (fd >= 0)
				cached++;
		}
		if (direct != 0 && fd < 0) {
			fd = ring_open_regular(path, flags | O_DIRECT);
			if (fd < 0 && fd != -EINVAL)
				return open_error(path, -fd, err, errlen);
			if (fd >= 0) {
				uint32_t a = dio_alignment(fd);

#ifdef SLUICE_TESTING
				if (a != 0 && a < ring_test_dio_alignment())
					a = ring_test_dio_alignment();
#endif
				if (a != 0) {
					r->file_direct[i] = true;
					if (a > align)
						align = a;
				} else {
					/* open took the flag but the
					 * file cannot do direct I/O */
					why = "unsupported";
					close(fd);
					fd = -1;
				}
			}
		}
		if (fd < 0) {
			fd = ring_open_regular(path, flags);
			if (fd < 0)
				return open_error(path, -fd, err, errlen);
			if (direct != 0) {
				char fb[32];

				if (direct == 1) {
					if (err && errlen)
						snprintf(err, errlen,
							 "O_DIRECT %s on %s (%s)",
							 why, path,
							 fs_name(fd, fb,
								 sizeof(fb)));
					close(fd);
					return -EINVAL;
				}
				if (refused++ == 0)
					snprintf(first, sizeof(first),
						 "O_DIRECT %s on %s (%s)", why,
						 path, fs_name(fd, fb, sizeof(fb)));
			}
		}
		r->fds[i] = fd;
		if (fstat(fd, &st) != 0)
			return open_error(path, errno, err, errlen);
		if (S_ISDIR(st.st_mode))
			return open_error(path, EISDIR, err, errlen);
		/* Checked like the others; opened again when read. */
		if (i >= r->max_open) {
			close(fd);
			r->fds[i] = -1;
		}
	}
	if (refused == 1)
		ring_note(r, "%s: buffered reads", first);
	else if (refused > 1)
		ring_note(r, "%s and %u more files: buffered reads", first,
			  refused - 1);
	r->info.direct = nfiles > 0 && refused == 0 && cached == 0 &&
			 direct != 0;
	r->info.cached_files = cached;
	/* Only O_DIRECT files need alignment; 1 says "none". */
	r->info.alignment = align ? align : 1;
	return 0;
}

/* A table of max_open empty slots filled in chunks: no limit on one
 * call. */
static int register_sparse(struct io_ring *r)
{
	int ret = io_uring_register_files_sparse(&r->uring, r->max_open);

	for (uint32_t i = 0; ret >= 0 && i < r->max_open;
	     i += FILES_UPDATE_CHUNK) {
		uint32_t n = r->max_open - i < FILES_UPDATE_CHUNK
				     ? r->max_open - i
				     : FILES_UPDATE_CHUNK;

		ret = io_uring_register_files_update(&r->uring, i, r->fds + i,
						     n);
		if (ret >= 0 && (uint32_t)ret != n)
			ret = -EIO;
	}
	if (ret < 0)
		io_uring_unregister_files(&r->uring);
	return ret < 0 ? ret : 0;
}

void ring_register_files(struct io_ring *r)
{
	char eb[64];
	int ret = -E2BIG;

	if (r->nfiles == 0)
		return;
	/* Slot s holds file s: the open files are [0, max_open). */
	if (r->max_open <= FILES_DENSE_MAX)
		ret = io_uring_register_files(&r->uring, r->fds, r->max_open);
	if (ret < 0)
		ret = register_sparse(r);
	if (ret < 0) {
		ring_note(r, "file registration refused (%s): plain fds",
			  ring_errname(ret, eb, sizeof(eb)));
		return;
	}
	r->info.fixed_files = 1;
}

void ring_close_files(struct io_ring *r)
{
	if (r->fds)
		for (uint32_t i = 0; i < r->nfiles; i++)
			if (r->fds[i] >= 0)
				close(r->fds[i]);
	free(r->fds);
	free(r->file_direct);
	r->fds = NULL;
	r->file_direct = NULL;
	if (r->paths)
		for (uint32_t i = 0; i < r->nfiles; i++)
			free(r->paths[i]);
	free(r->paths);
	r->paths = NULL;
	ring_file_set_free(r);
}
