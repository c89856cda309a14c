/*
 * workers.c - the CPU time of io_uring's worker threads.  A buffered read
 * cut into pieces with IOSQE_ASYNC (submit.c) is copied from the page
 * cache by the kernel's io-wq workers, not by the thread that submits:
 * on page-cache data that copy is most of what reading costs, and
 * without this it would show in no stage.  The kernel names a worker
 * "iou-wrk-<tid>" after the task it works for, so the workers of one
 * ring's submitting thread can be told from any other ring's.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"

/* The kernel's id for thread @tid's CPU clock (its MAKE_THREAD_CPUCLOCK:
 * the thread's scheduler clock, per thread), what pthread_getcpuclockid()
 * returns for a thread of ours. */
#define CPUCLOCK_SCHED 2u
#define CPUCLOCK_PERTHREAD 4u

static clockid_t thread_cpu_clock(long tid)
{
	return (clockid_t)(((unsigned)~(unsigned)tid << 3) |
			   CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED);
}

/* The CPU time of thread @tid of this process, in ns; 0 when gone.  A
 * thread's CPU clock is open to the other threads of its process: exact
 * to the ns, where /proc's stat counts clock ticks. */
static uint64_t task_cpu_ns(long tid)
{
	clockid_t clock = thread_cpu_clock(tid);
	struct timespec ts;

	if (clock_gettime(clock, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int io_workers_cpu(long submitter, struct io_worker_cpu *out, int max)
{
	char want[32], path[64], comm[32];
	struct dirent *d;
	DIR *dir;
	int n = 0;

	dir = opendir("/proc/self/task");
	if (!dir)
		return 0;
	snprintf(want, sizeof(want), "iou-wrk-%ld\n", submitter);
	while (n < max && (d = readdir(dir))) {
		long tid = strtol(d->d_name, NULL, 10);
		ssize_t len;
		int fd;

		if (tid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/comm", tid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, comm, sizeof(comm) - 1);
		close(fd);
		if (len <= 0)
			continue;
		comm[len] = '\0';
		if (strcmp(comm, want) != 0)
			continue;
		out[n].tid = tid;
		out[n].cpu_ns = task_cpu_ns(tid);
		n++;
	}
	closedir(dir);
	return n;
}

void io_workers_clock_start(struct io_workers_clock *k)
{
	k->submitter = (long)gettid();
	k->nseen = io_workers_cpu(k->submitter, k->seen, IO_WORKERS_MAX);
}

uint64_t io_workers_clock_sample(struct io_workers_clock *k)
{
	struct io_worker_cpu now[IO_WORKERS_MAX];
	int n = io_workers_cpu(k->submitter, now, IO_WORKERS_MAX);
	uint64_t gained = 0;

	for (int i = 0; i < n; i++) {
		uint64_t before = 0;

		/* a tid not seen before is a new worker: all of it counts */
		for (int j = 0; j < k->nseen; j++)
			if (k->seen[j].tid == now[i].tid) {
				before = k->seen[j].cpu_ns;
				break;
			}
		if (now[i].cpu_ns > before)
			gained += now[i].cpu_ns - before;
	}
	memcpy(k->seen, now, (size_t)n * sizeof(now[0]));
	k->nseen = n;
	return gained;
}
