/*
 * nofile.c - RLIMIT_NOFILE for a ring that holds every shard open while
 * streaming.  Distributions set a soft limit of 1024 and a far higher hard
 * one: a process may raise its own soft limit up to the hard limit, so a
 * dataset of many shards raises it rather than failing with EMFILE part
 * way through.  When even the hard limit is too low, the error says so
 * with both numbers, before any file is opened.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "ring_private.h"

/* Descriptors besides the shards: the ring, its eventfd, the device
 * layer's, and what the caller opens while the loader runs. */
#define NOFILE_HEADROOM 64u

/* Descriptors this process has open now; a guess without /proc. */
static uint64_t fds_in_use(void)
{
	DIR *d = opendir("/proc/self/fd");
	uint64_t n = 0;

	if (!d)
		return NOFILE_HEADROOM;
	while (readdir(d))
		n++;
	closedir(d);
	return n > 3 ? n - 3 : 0;  /* ".", ".." and the DIR's own */
}

static unsigned long long lim(rlim_t v)
{
	return v == RLIM_INFINITY ? ~0ull : (unsigned long long)v;
}

int ring_reserve_fds(struct io_ring *r, uint32_t nfiles, char *err,
		     size_t errlen)
{
	struct rlimit rl, raised;
	uint64_t in_use, need;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;  /* cannot know: let open() say */
	in_use = fds_in_use();
	need = in_use + nfiles + NOFILE_HEADROOM;
	if (rl.rlim_cur == RLIM_INFINITY || need <= rl.rlim_cur)
		return 0;
	if (rl.rlim_max != RLIM_INFINITY && need > rl.rlim_max) {
		if (err && errlen)
			snprintf(err, errlen,
				 "%u shards are held open while streaming and "
				 "%llu descriptors are in use: %llu needed, "
				 "above RLIMIT_NOFILE's hard limit %llu (soft "
				 "%llu); raise it (ulimit -Hn, systemd "
				 "LimitNOFILE=) or merge the shards into "
				 "fewer files",
				 nfiles, (unsigned long long)in_use,
				 (unsigned long long)need, lim(rl.rlim_max),
				 lim(rl.rlim_cur));
		return -EMFILE;
	}
	raised = rl;
	raised.rlim_cur = (rlim_t)need;
	if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
		int e = errno;

		if (err && errlen)
			snprintf(err, errlen,
				 "%u shards are held open while streaming: "
				 "raising RLIMIT_NOFILE's soft limit from %llu "
				 "to %llu failed: %s",
				 nfiles, lim(rl.rlim_cur),
				 (unsigned long long)need, strerror(e));
		return -e;
	}
	ring_note(r, "RLIMIT_NOFILE soft limit raised from %llu to %llu for "
		  "%u shards", lim(rl.rlim_cur), (unsigned long long)need,
		  nfiles);
	return 0;
}

const char *ring_nofile_hint(char *buf, size_t len)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return "";
	snprintf(buf, len, " (RLIMIT_NOFILE soft %llu, hard %llu)",
		 lim(rl.rlim_cur), lim(rl.rlim_max));
	return buf;
}
