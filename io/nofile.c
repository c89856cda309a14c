/*
 * nofile.c - RLIMIT_NOFILE for a ring that holds every shard open while
 * streaming.  Distributions set a soft limit of 1024 and a far higher hard
 * one: a process may raise its own soft limit up to the hard limit, so a
 * dataset of many shards raises it rather than failing with EMFILE part
 * way through.  When even the hard limit is too low for every shard, the
 * shards are opened on demand, as many at once as it allows
 * (file_set.c); only when not even a few fit is it an error, with both
 * numbers, before any file is opened.
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
/* Fewer open shards than this and reads would mostly wait on reopens. */
#define NOFILE_MIN_OPEN 16u

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

int io_files_stay_open(uint32_t nfiles)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 1;       /* as ring_reserve_fds: open() will say */
	/* ring_reserve_fds raises the soft limit up to the hard one */
	return rl.rlim_max == RLIM_INFINITY ||
	       fds_in_use() + nfiles + NOFILE_HEADROOM <= rl.rlim_max;
}

int64_t ring_reserve_fds(struct io_ring *r, uint32_t nfiles, char *err,
			 size_t errlen)
{
	struct rlimit rl, raised;
	uint64_t in_use, need, target, fit;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return nfiles;  /* cannot know: let open() say */
	in_use = fds_in_use();
	need = in_use + nfiles + NOFILE_HEADROOM;
	if (rl.rlim_cur == RLIM_INFINITY || need <= rl.rlim_cur)
		return nfiles;
	target = rl.rlim_max != RLIM_INFINITY && need > rl.rlim_max ?
			 rl.rlim_max : need;
	fit = target > in_use + NOFILE_HEADROOM ?
		      target - in_use - NOFILE_HEADROOM : 0;
	if (fit < NOFILE_MIN_OPEN && fit < nfiles) {
		if (err && errlen)
			snprintf(err, errlen,
				 "%u shards to read and %llu descriptors in "
				 "use: RLIMIT_NOFILE's hard limit %llu (soft "
				 "%llu) leaves room for %llu open shards, "
				 "fewer than %u; raise it (ulimit -Hn, "
				 "systemd LimitNOFILE=)",
				 nfiles, (unsigned long long)in_use,
				 lim(rl.rlim_max), lim(rl.rlim_cur),
				 (unsigned long long)fit, NOFILE_MIN_OPEN);
		return -EMFILE;
	}
	if (target > rl.rlim_cur) {
		raised = rl;
		raised.rlim_cur = (rlim_t)target;
		if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
			int e = errno;

			if (err && errlen)
				snprintf(err, errlen,
					 "%u shards to read: raising "
					 "RLIMIT_NOFILE's soft limit from %llu "
					 "to %llu failed: %s",
					 nfiles, lim(rl.rlim_cur),
					 (unsigned long long)target,
					 strerror(e));
			return -e;
		}
		ring_note(r, "RLIMIT_NOFILE soft limit raised from %llu to "
			  "%llu for %u shards", lim(rl.rlim_cur),
			  (unsigned long long)target, nfiles);
	}
	if (fit >= nfiles)
		return nfiles;
	ring_note(r, "RLIMIT_NOFILE hard limit %llu: at most %llu of %u shards "
		  "open at once, the others opened on demand",
		  lim(rl.rlim_max), (unsigned long long)fit, nfiles);
	return (int64_t)fit;
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
