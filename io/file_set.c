/*
 * file_set.c - the shards' descriptors when there are more shards than
 * RLIMIT_NOFILE lets a process hold open.  Then at most max_open files
 * are open at once, each in one slot of the registered file table; a read
 * of a closed file opens it on demand in a slot whose file has no read in
 * the kernel (CLOCK order: a recently used file gets a second chance),
 * closing that file and updating the one table entry.  When every shard
 * fits, file i simply stays open in slot i and none of this runs.
 *
 * Owned by the thread that drives the ring, like the ring itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ring_private.h"

int ring_file_set_init(struct io_ring *r, uint32_t max_open)
{
	uint32_t n = r->nfiles ? r->nfiles : 1;

	r->max_open = max_open < r->nfiles ? max_open : r->nfiles;
	r->slot_of = malloc(n * sizeof(*r->slot_of));
	r->busy = calloc(n, sizeof(*r->busy));
	r->file_of = malloc((r->max_open ? r->max_open : 1) *
			    sizeof(*r->file_of));
	r->referenced = calloc(r->max_open ? r->max_open : 1,
			       sizeof(*r->referenced));
	if (!r->slot_of || !r->busy || !r->file_of || !r->referenced)
		return -ENOMEM;
	/* ring_open_files leaves files [0, max_open) open: slot i, file i. */
	for (uint32_t i = 0; i < r->nfiles; i++)
		r->slot_of[i] = i < r->max_open ? (int32_t)i : -1;
	for (uint32_t s = 0; s < r->max_open; s++)
		r->file_of[s] = s;
	return 0;
}

void ring_file_set_free(struct io_ring *r)
{
	free(r->slot_of);
	free(r->busy);
	free(r->file_of);
	free(r->referenced);
	r->slot_of = NULL;
	r->busy = NULL;
	r->file_of = NULL;
	r->referenced = NULL;
}

/* A slot whose file has nothing in the kernel, or -1 when all do. */
static int32_t pick_victim(struct io_ring *r)
{
	/* Two sweeps: the first may only clear reference bits. */
	for (uint32_t k = 0; k < 2 * r->max_open; k++) {
		uint32_t s = r->hand;

		r->hand = (r->hand + 1) % r->max_open;
		if (r->busy[r->file_of[s]])
			continue;
		if (r->referenced[s]) {
			r->referenced[s] = 0;
			continue;
		}
		return (int32_t)s;
	}
	return -1;
}

int ring_file_handle(struct io_ring *r, uint32_t file)
{
	int32_t s = r->slot_of[file];
	uint32_t old;
	int fd, flags = O_RDONLY;

	if (s < 0) {
		s = pick_victim(r);
		if (s < 0)
			return -EBUSY;
		flags |= r->file_direct[file] ? O_DIRECT : 0;
		fd = ring_open_regular(r->paths[file], flags);
		if (fd < 0)
			return fd;
		old = r->file_of[s];
		/* Nothing of the old file is in the kernel (busy == 0), so
		 * neither its descriptor nor its table entry is in use. */
		if (r->info.fixed_files &&
		    io_uring_register_files_update(&r->uring, (unsigned)s, &fd,
						   1) != 1) {
			close(fd);
			return -EIO;
		}
		close(r->fds[old]);
		r->fds[old] = -1;
		r->slot_of[old] = -1;
		r->fds[file] = fd;
		r->slot_of[file] = s;
		r->file_of[s] = file;
		r->reopens++;
	}
	r->referenced[s] = 1;
	return r->info.fixed_files ? s : r->fds[file];
}
