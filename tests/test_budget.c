/*
 * test_budget.c - the loader's memory budget (memory_bytes): a dataset
 * with one outlier record streams exactly once in memory sized by what
 * its records need, not batch size x largest record; a budget too small
 * for a batch or a block fails with a message that names the record or
 * block and the option; a consumer that hoards batches past the budget
 * still gets them all; a header that claims a larger max_value_bytes
 * costs nothing; each shard's own max_value_bytes bounds its values;
 * batches released after close give their memory to no one; a release
 * racing next() is waited for, not taken for hoarding; holding the
 * previous batch never pushes the next over the budget, across epochs
 * too; a batch's memory is sized for the records it can hold; the first-fit
 * pool agrees with a map of its units; the default budget's share is of
 * the control group's memory limit when it is below RAM.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <xxhash.h>

#include "dlpack_shard.h"

#define FX_OUTLIER 700u
#define FX_OUTLIER_BYTES (6ull << 20)
#define FX_VLEN(i) ((uint64_t)((i) == FX_OUTLIER ? FX_OUTLIER_BYTES : (i) % 37))
#include "loader_fixture.h"
#include "loader.h"     /* -Ipipeline: to wait for a batch's state */
#include "budget_test.h"
#include "memory_limit.h"
#include "shard_patch.h"

#define N 2000
#define MIB (1ull << 20)

/* open_loader's range_reads: auto, or off where a test is about blocks
 * that auto would read by range, in place (ranges.c) */
static enum sluice_range_reads range_reads = SLUICE_RANGE_READS_AUTO;

static int open_loader(sluice_dataset *ds, int shuffle, uint32_t batch,
		       uint64_t memory, sluice_loader **ld, char *msg,
		       size_t len)
{
	struct sluice_loader_config cfg;
	int r;

	sluice_loader_config_init(&cfg);
	cfg.shuffle = shuffle;
	cfg.batch_size = batch;
	cfg.seed = 3;
	cfg.window_blocks = 3;
	cfg.prefetch_depth = 4;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.memory_bytes = memory;
	cfg.range_reads = range_reads;
	r = sluice_loader_open(ds, &cfg, ld);
	msg[0] = '\0';
	if (r)
		sluice_loader_error(*ld, msg, len);
	return r;
}

static sluice_loader *must_open(sluice_dataset *ds, int shuffle,
				uint32_t batch, uint64_t memory)
{
	sluice_loader *ld = NULL;
	char msg[512];
	int r = open_loader(ds, shuffle, batch, memory, &ld, msg, sizeof(msg));

	if (r)
		T_FAIL_AT("sluice_loader_open: %s: %s", sluice_strerror(r), msg);
	return ld;
}

/* One epoch, every record checked; every index delivered exactly once. */
static void run_epoch_once(sluice_loader *ld, uint64_t n)
{
	uint32_t *seen = calloc(n, sizeof(*seen));
	uint64_t got = 0;
	sluice_batch *b;
	int r;

	T_ASSERT(seen != NULL);
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		got += fx_check_batch(b, seen);
		sluice_batch_release(b);
	}
	if (r != SLUICE_EOF) {
		char msg[512];

		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("next: %s: %s", sluice_strerror(r), msg);
	}
	T_EQ(got, n);
	for (uint64_t i = 0; i < n; i++)
		T_EQ(seen[i], 1);
	free(seen);
}

/* The outlier streams in every shuffle mode; the default budget is what
 * the records need (before: 64 x 6 MiB per slot, 1.5 GiB in all). */
static void check_outlier(const char *dir)
{
	sluice_dataset *ds = NULL;
	struct sluice_stats st = { .size = sizeof(st) };

	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_FULL;
	     mode++) {
		sluice_loader *ld = must_open(ds, mode, 64, 0);

		run_epoch_once(ld, N);
		run_epoch_once(ld, N);
		T_OK(sluice_loader_stats(ld, &st));
		T_ASSERT(st.memory_bytes >= 2 * FX_OUTLIER_BYTES);
		T_ASSERT(st.memory_bytes <= 48 * MIB);
		T_ASSERT(st.io_memory_bytes < st.memory_bytes);
		T_EQ(st.batches_over_budget, 0);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* A budget just above the outlier's block and batch: the planner waits
 * for room (backpressure) and every record still comes exactly once. */
static void check_tight_budget(const char *dir)
{
	sluice_dataset *ds = NULL;
	struct sluice_stats st = { .size = sizeof(st) };

	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_FULL;
	     mode++) {
		sluice_loader *ld = must_open(ds, mode, 64, 16 * MIB);

		run_epoch_once(ld, N);
		T_OK(sluice_loader_stats(ld, &st));
		T_EQ(st.memory_bytes, 16 * MIB);
		T_EQ(st.batches_over_budget, 0);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/*
 * The usual consumer keeps the batch it has while it asks for the next
 * one.  Batches of varied sizes (the outlier's is 6 MiB, the others a
 * few KiB) must not leave the one it keeps where no hole fits the next:
 * every batch comes within the budget (none over it), in every mode,
 * with prefetch 1 and 4, the default budget and a tight one.
 */
static void check_hold_previous(const char *dir)
{
	sluice_dataset *ds = NULL;
	struct sluice_stats st = { .size = sizeof(st) };

	T_OK(sluice_dataset_open(dir, &ds));
	for (int setup = 0; setup < 4; setup++) {
		for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_FULL;
		     mode++) {
			int tight = setup & 1;
			struct sluice_loader_config cfg;
			sluice_loader *ld = NULL;
			uint32_t *seen = calloc(N, sizeof(*seen));
			sluice_batch *prev = NULL, *b;
			uint64_t got = 0;
			int r;

			T_ASSERT(seen != NULL);
			sluice_loader_config_init(&cfg);
			cfg.shuffle = mode;
			cfg.batch_size = 128;
			cfg.seed = 3;
			cfg.window_blocks = 3;
			cfg.prefetch_depth = setup < 2 ? 1 : 4;
			cfg.decode_threads = 2;
			cfg.device = SLUICE_DEVICE_HOST;
			cfg.memory_bytes = tight ? 16 * MIB : 0;
			T_OK(sluice_loader_open(ds, &cfg, &ld));
			for (int epoch = 0; epoch < 2; epoch++) {
				memset(seen, 0, N * sizeof(*seen));
				while ((r = sluice_loader_next(ld, &b)) == 0) {
					got += fx_check_batch(b, seen);
					if (prev)
						sluice_batch_release(prev);
					prev = b;
				}
				T_EQ(r, SLUICE_EOF);
				for (uint32_t i = 0; i < N; i++)
					T_EQ(seen[i], 1);
			}
			sluice_batch_release(prev);
			T_EQ(got, 2 * N);
			T_OK(sluice_loader_stats(ld, &st));
			if (tight)
				T_EQ(st.memory_bytes, 16 * MIB);
			if (st.batches_over_budget)
				T_FAIL_AT("shuffle %d, prefetch %u, %s budget: %llu batches over a budget of %llu bytes (%llu for batches) while the consumer held one",
					  mode, cfg.prefetch_depth,
					  tight ? "tight" : "default",
					  (unsigned long long)st.batches_over_budget,
					  (unsigned long long)st.memory_bytes,
					  (unsigned long long)(st.memory_bytes -
							       st.io_memory_bytes));
			sluice_loader_close(ld);
			free(seen);
		}
	}
	sluice_dataset_close(ds);
}

/* Too small for the outlier's batch: the open fails with -ENOSPC naming
 * the field, the value's size and the option, before the arena is mapped
 * and made resident (issue 24: the default budget faulted in 1 GB before
 * refusing a 512 MiB value at its batch); too small for its block: the
 * open fails the same way, naming the block. */
static void check_over_budget(const char *dir)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	char msg[512];

	T_OK(sluice_dataset_open(dir, &ds));
	T_EQ(open_loader(ds, SLUICE_SHUFFLE_NONE, 64, 12 * MIB, &ld, msg,
			 sizeof(msg)), -ENOSPC);
	T_CONTAINS(msg, "memory_bytes 12582912 leaves ");
	T_CONTAINS(msg, "largest value of field v (6291456 bytes");
	T_CONTAINS(msg, "raise memory_bytes");
	sluice_loader_close(ld);

	ld = NULL;
	T_EQ(open_loader(ds, SLUICE_SHUFFLE_NONE, 64, 4 * MIB, &ld, msg,
			 sizeof(msg)), -ENOSPC);
	T_CONTAINS(msg, ".dls: block ");
	T_CONTAINS(msg, "(records 700..700)");
	T_CONTAINS(msg, "raise memory_bytes");
	sluice_loader_close(ld);

	/* A budget that is not whole pages is reported as given, with
	 * what its pages leave (it said memory_bytes 0). */
	ld = NULL;
	T_EQ(open_loader(ds, SLUICE_SHUFFLE_NONE, 64, 4095, &ld, msg,
			 sizeof(msg)), -ENOSPC);
	T_CONTAINS(msg, "memory_bytes 4095 (0 in whole 4096-byte pages)");
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* A consumer that keeps every batch of an epoch, far past the budget,
 * gets them all intact (host: memory outside the budget, counted), and
 * the loader goes on within the budget once they are released. */
static void check_hoarding(const char *dir)
{
	enum { n = 600, batch = 20 };
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	sluice_batch *held[n / batch + 1];
	uint32_t seen[n] = { 0 };
	struct sluice_stats st = { .size = sizeof(st) };
	uint64_t got = 0, k = 0, over;
	int r;

	T_OK(sluice_dataset_open(dir, &ds));
	ld = must_open(ds, SLUICE_SHUFFLE_NONE, batch, 64 * 1024);
	while ((r = sluice_loader_next(ld, &held[k])) == 0)
		k++;
	T_EQ(r, SLUICE_EOF);
	T_EQ(k, n / batch);
	for (uint64_t i = 0; i < k; i++) {
		got += fx_check_batch(held[i], seen);
		sluice_batch_release(held[i]);
	}
	T_EQ(got, n);
	for (uint64_t i = 0; i < n; i++)
		T_EQ(seen[i], 1);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.memory_bytes, 64 * 1024);
	T_ASSERT(st.batches_over_budget > 0);
	T_ASSERT(st.batches_over_budget < n / batch);
	over = st.batches_over_budget;
	run_epoch_once(ld, n);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.batches_over_budget, over);

	/* An epoch restart while the consumer holds all the memory: the
	 * batches waiting for it are dropped, not waited for. */
	for (k = 0; k < 26; k++)
		T_OK(sluice_loader_next(ld, &held[k]));
	T_OK(sluice_loader_set_epoch(ld, 5));
	for (uint64_t i = 0; i < k; i++)
		sluice_batch_release(held[i]);
	run_epoch_once(ld, n);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* Batches released after the loader and its dataset were closed, while
 * later batches waited for the memory they hold: the release frees the
 * memory and nothing else (no assembly of a waiting batch, which read
 * the closed dataset's schema and blocks: a crash, or ASan's
 * use-after-free). */
/* Whether a prefetched batch waits for batch memory, once the loader
 * settled: one waits, or none is in flight (no clock: the loader signals
 * ready_cv when a batch starts waiting or gets ready). */
static int batch_waits_for_memory(sluice_loader *ld)
{
	struct loader_core *c = ld->core;
	int found = 0, idle_waited = 0;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		for (uint32_t k = 0; k < c->fifo_len && !found; k++) {
			struct slot *s = c->slots[c->fifo[(c->fifo_head + k) %
							  c->slots_cap]];

			found = s->state == SLOT_MEMORY && !s->has_mem;
		}
		if (found || c->failed || (c->inflight == 0 && idle_waited))
			break;
		if (c->inflight == 0) {
			/* Nothing in flight yet: the I/O thread may not have
			 * planned into the slot just released (it failed 2-10
			 * runs in 30 on a loaded machine).  Give it one
			 * bounded wait; a batch that starts waiting signals. */
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += 1;
			pthread_cond_timedwait(&c->ready_cv, &c->mu, &until);
			idle_waited = 1;
			continue;
		}
		pthread_cond_wait(&c->ready_cv, &c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return found;
}

/* Batches released after the loader and its dataset were closed, while
 * a later batch waited for the memory they hold: the release frees the
 * memory and nothing else (no assembly of the waiting batch, which read
 * the closed dataset's schema and blocks: a crash, or ASan's
 * use-after-free; the Python loader met it after a Ctrl-C). */
static void check_release_after_close(const char *dir)
{
	enum { batch = 20, most = 64 };
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	sluice_batch *held[most];
	uint32_t k = 0, rounds = 0;

	T_OK(sluice_dataset_open(dir, &ds));
	ld = must_open(ds, SLUICE_SHUFFLE_NONE, batch, 64 * 1024);
	/* Keep the batches with budget memory, release those that had to
	 * get memory outside it (their slots are prefetched into again),
	 * until a prefetched batch waits for the memory the kept ones hold. */
	for (;;) {
		uint32_t kept = 0, released = 0;
		int r;

		T_ASSERT(++rounds < 1000 && k < most);
		r = sluice_loader_next(ld, &held[k]);
		if (r == SLUICE_EOF)
			continue;
		T_OK(r);
		k++;
		for (uint32_t i = 0; i < k; i++) {
			if (ld->core->slots[held[i]->slot]->own_host) {
				sluice_batch_release(held[i]);
				released++;
			} else {
				held[kept++] = held[i];
			}
		}
		k = kept;
		if (released && batch_waits_for_memory(ld))
			break;
	}
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	for (uint32_t i = 0; i < k; i++)
		sluice_batch_release(held[i]);
}

/*
 * A release racing next(): another thread drops the last reference of
 * the batches holding the memory the head batch waits for, and is held
 * where a CUDA release waits for its copy, while the consumer asks for
 * the head.  The memory is on its way: next() must wait for it, not take
 * the wait for hoarding (over budget on the host, -EDEADLK on CUDA).
 */
static sluice_loader *race_loader;
static atomic_int race_consumer_done;
static sem_t race_began;

/* Hold the first release until next() decided: it waits for the
 * release, or it returned. */
static void race_hook(struct loader_core *c)
{
	if (!race_loader || c != race_loader->core)
		return;
	race_loader = NULL;
	T_EQ(sem_post(&race_began), 0);
	pthread_mutex_lock(&c->mu);
	while (!atomic_load(&race_consumer_done) && c->waits_for_release == 0) {
		pthread_mutex_unlock(&c->mu);
		sched_yield();
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
}

struct race_release {
	sluice_batch **held;
	uint32_t n;
};

static void *release_all(void *arg)
{
	struct race_release *rr = arg;

	for (uint32_t i = 0; i < rr->n; i++)
		sluice_batch_release(rr->held[i]);
	return NULL;
}

/* Release @rr's batches on another thread, hold that release where CUDA
 * waits for its copy, and ask @ld for the next batch meanwhile. */
static void next_during_release(sluice_loader *ld, struct race_release *rr,
				sluice_batch **out)
{
	pthread_t t;

	T_EQ(sem_init(&race_began, 0, 0), 0);
	atomic_store(&race_consumer_done, 0);
	race_loader = ld;
	budget_test_release_hook = race_hook;
	T_EQ(pthread_create(&t, NULL, release_all, rr), 0);
	T_EQ(sem_wait(&race_began), 0);
	T_OK(sluice_loader_next(ld, out));
	atomic_store(&race_consumer_done, 1);
	T_EQ(pthread_join(t, NULL), 0);
	budget_test_release_hook = NULL;
}

/* Whether the head batch waits for batch memory, once it settled (it
 * waits, or it is ready). */
static int head_waits_for_memory(sluice_loader *ld)
{
	struct loader_core *c = ld->core;
	int r = -1;

	pthread_mutex_lock(&c->mu);
	while (r < 0 && !c->failed) {
		if (c->fifo_len > 0) {
			struct slot *s = c->slots[c->fifo[c->fifo_head]];

			if (s->state == SLOT_MEMORY && !s->has_mem)
				r = 1;
			else if (s->state == SLOT_READY)
				r = 0;
		}
		if (r < 0)
			pthread_cond_wait(&c->ready_cv, &c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return r;
}

static void check_release_races_next(const char *dir)
{
	enum { batch = 20, most = 32 };
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *held[most], *b;
	struct race_release rr = { held, 0 };
	struct sluice_stats st = { .size = sizeof(st) };

	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.batch_size = batch;
	cfg.prefetch_depth = most;   /* memory runs out before slots do */
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.memory_bytes = 64 * 1024;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	/* Keep every batch until the head waits for the memory they hold. */
	while (head_waits_for_memory(ld) == 0) {
		T_ASSERT(rr.n < most);
		T_OK(sluice_loader_next(ld, &held[rr.n]));
		T_ASSERT(!ld->core->slots[held[rr.n]->slot]->own_host);
		rr.n++;
	}
	T_ASSERT(rr.n > 0);
	next_during_release(ld, &rr, &b);
	fx_check_batch(b, NULL);
	sluice_batch_release(b);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.batches_over_budget, 0);
	T_ASSERT(ld->core->waits_for_release > 0);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	sem_destroy(&race_began);
}

/*
 * pool.c against a map of its units: random allocations, takes at given
 * offsets and frees keep the free extents, the bytes used and the longest
 * free range (after a take, too) what the map says.
 */
static uint64_t map_longest(const uint8_t *used, uint32_t units,
			    uint32_t skip_lo, uint32_t skip_hi)
{
	uint64_t best = 0, run = 0;

	for (uint32_t u = 0; u < units; u++) {
		run = used[u] || (u >= skip_lo && u < skip_hi) ? 0 : run + 1;
		if (run > best)
			best = run;
	}
	return best;
}

static void check_pool(void)
{
	enum { units = 64, unit = 4096, most = units };
	struct pool p;
	uint8_t used[units] = { 0 };
	uint64_t off[most], len[most], rng = 12345;
	uint32_t n = 0;

	T_OK(pool_init(&p, units * unit, unit, most));
	for (int step = 0; step < 20000; step++) {
		uint32_t op, u, k;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		op = (uint32_t)(rng >> 60) % 3;
		u = (uint32_t)(rng >> 40) % units;
		k = 1 + (uint32_t)(rng >> 20) % 6;
		if (op == 0 && n < most) {
			uint64_t o;
			int free_run = 0;

			for (uint32_t v = 0, run = 0; v < units; v++) {
				run = used[v] ? 0 : run + 1;
				if (run == k) {
					free_run = 1;
					break;
				}
			}
			if (pool_alloc(&p, (uint64_t)k * unit - 100, &o)) {
				T_EQ(free_run, 0);
				continue;
			}
			T_EQ(free_run, 1);
			T_EQ(o % unit, 0);
			for (uint32_t v = 0; v < k; v++)
				T_EQ(used[o / unit + v]++, 0);
			off[n] = o;
			len[n++] = (uint64_t)k * unit - 100;
		} else if (op == 1 && n < most) {
			int fits = u + k <= units;

			for (uint32_t v = u; fits && v < u + k; v++)
				fits = !used[v];
			if (u + k <= units)
				T_EQ(pool_longest_free_after(&p, (uint64_t)u * unit,
							     (uint64_t)k * unit),
				     fits ? map_longest(used, units, u, u + k) *
						    unit
					  : map_longest(used, units, 0, 0) * unit);
			if (pool_take(&p, (uint64_t)u * unit,
				      (uint64_t)k * unit)) {
				T_EQ(fits, 0);
				continue;
			}
			T_EQ(fits, 1);
			for (uint32_t v = u; v < u + k; v++)
				used[v] = 1;
			off[n] = (uint64_t)u * unit;
			len[n++] = (uint64_t)k * unit;
		} else if (n > 0) {
			uint32_t i = u % n;

			pool_free(&p, off[i], len[i]);
			for (uint64_t v = 0; v < (len[i] + unit - 1) / unit; v++)
				used[off[i] / unit + v] = 0;
			off[i] = off[--n];
			len[i] = len[n];
		}
		{
			uint64_t busy = 0;

			for (uint32_t v = 0; v < units; v++)
				busy += used[v];
			T_EQ(p.used, busy * unit);
			T_EQ(pool_longest_free_after(&p, 0, 0),
			     map_longest(used, units, 0, 0) * unit);
			T_ASSERT(p.nfree <= p.cap);
		}
	}
	pool_destroy(&p);
}

/* Write @text into @root/@rel, making its folders. */
static void put_file(const char *root, const char *rel, const char *text)
{
	char path[900], cmd[1000];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	T_EQ(system(cmd), 0);
	f = fopen(path, "w");
	T_ASSERT(f != NULL);
	fputs(text, f);
	fclose(f);
}

/*
 * The default budget's memory: RAM capped by the process's control
 * groups, read from a tree of our own: v2 limits on the group and its
 * ancestors, "max", v1's memory controller, hybrid systems' unified
 * tree, and malformed, zero or missing files that limit nothing.
 */
static void check_memory_limit(const char *dir)
{
	const uint64_t ram = 24ull << 30;
	char root[700], self[700];

	snprintf(root, sizeof(root), "%s/cg", dir);
	snprintf(self, sizeof(self), "%s/self", dir);
	T_EQ(memory_limit_bytes(ram, self, root), ram);    /* no file */

	put_file(dir, "self", "0::/a/b\n");
	T_EQ(memory_limit_bytes(ram, self, root), ram);    /* no limits */
	put_file(root, "a/b/memory.max", "max\n");
	put_file(root, "a/memory.max", "1073741824\n");
	T_EQ(memory_limit_bytes(ram, self, root), 1ull << 30);
	put_file(root, "a/b/memory.max", "536870912\n");
	T_EQ(memory_limit_bytes(ram, self, root), 512ull << 20);
	put_file(root, "memory.max", "1048576\n");          /* the root too */
	T_EQ(memory_limit_bytes(ram, self, root), 1ull << 20);
	T_EQ(memory_limit_bytes(1000, self, root), 1000);   /* RAM smaller */

	/* malformed or zero: ignored */
	put_file(root, "memory.max", "12abc\n");
	put_file(root, "a/memory.max", "-5\n");
	put_file(root, "a/b/memory.max", "0\n");
	T_EQ(memory_limit_bytes(ram, self, root), ram);
	put_file(root, "a/b/memory.max", "");
	put_file(root, "a/memory.max", "99999999999999999999999999\n");
	T_EQ(memory_limit_bytes(ram, self, root), ram);

	/* the root group ("/"), as in a container with its own namespace */
	put_file(dir, "self", "0::/\n");
	put_file(root, "memory.max", "2147483648\n");
	T_EQ(memory_limit_bytes(ram, self, root), 2ull << 30);

	/* hybrid: v1 memory controller, v2 tree under unified/ */
	put_file(dir, "self", "9:name=systemd:/\n4:memory:/x/y\n0::/u\n");
	put_file(root, "memory.max", "max\n");
	put_file(root, "memory/x/y/memory.limit_in_bytes",
		 "9223372036854771712\n");
	T_EQ(memory_limit_bytes(ram, self, root), ram);
	put_file(root, "memory/x/memory.limit_in_bytes", "3221225472\n");
	T_EQ(memory_limit_bytes(ram, self, root), 3ull << 30);
	put_file(root, "unified/u/memory.max", "268435456\n");
	T_EQ(memory_limit_bytes(ram, self, root), 256ull << 20);

	/* a line with no path, or a relative one: ignored */
	put_file(dir, "self", "0::\n4:memory:x\n");
	T_EQ(memory_limit_bytes(ram, self, root), ram);

	/* this machine: at most its RAM, never 0 */
	T_ASSERT(memory_limit_bytes(ram, "/proc/self/cgroup",
				    "/sys/fs/cgroup") <= ram);
	T_ASSERT(memory_limit_bytes(ram, "/proc/self/cgroup",
				    "/sys/fs/cgroup") > 0);
}

/*
 * The same race when the consumer holds every slot: a slot on its way
 * back is waited for, not answered with one more slot (on CUDA, which
 * cannot add slots: -EDEADLK).
 */
static void check_release_races_grow(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *held[2], *b;
	struct race_release rr = { held, 1 };

	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.batch_size = 20;
	cfg.prefetch_depth = 2;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_OK(sluice_loader_next(ld, &held[0]));
	T_OK(sluice_loader_next(ld, &held[1]));
	T_EQ(ld->core->nslots, 2);
	next_during_release(ld, &rr, &b);
	fx_check_batch(b, NULL);
	T_EQ(ld->core->nslots, 2);      /* no slot added */
	T_ASSERT(ld->core->waits_for_release > 0);
	sluice_batch_release(b);
	sluice_batch_release(held[1]);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	sem_destroy(&race_began);
}

/* The one shard file under @dir, into @path. */
static void shard_path(const char *dir, char *path, size_t len, int k)
{
	snprintf(path, len, "%s/data-%05d.dls", dir, k);
	T_EQ(access(path, R_OK), 0);
}

/* Rewrite @len bytes at @off of @path. */
static void patch(const char *path, uint64_t off, const void *p, size_t len)
{
	int fd = open(path, O_RDWR);

	T_ASSERT(fd >= 0);
	T_EQ(pwrite(fd, p, len, (off_t)off), (ssize_t)len);
	close(fd);
}

/* A header claiming max_value_bytes of 8 GiB (checksum redone, so it
 * verifies): the loader sizes by what the blocks hold. */
static void check_lying_header(const char *dir)
{
	struct dls_header_disk h;
	uint8_t page[DLS_HEADER_SIZE];
	uint64_t claim = 8ull << 30, sum;
	sluice_dataset *ds = NULL;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld;
	char path[600];
	int fd;

	shard_path(dir, path, sizeof(path), 0);
	fd = open(path, O_RDONLY);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, page, sizeof(page), 0), (ssize_t)sizeof(page));
	close(fd);
	memcpy(&h, page, sizeof(h));
	T_EQ(h.fields[1].max_value_bytes, 36);
	h.fields[1].max_value_bytes = claim;
	memcpy(page, &h, sizeof(h));
	sum = XXH3_64bits(page, DLS_HEADER_CHECKSUM_OFFSET);
	memcpy(page + DLS_HEADER_CHECKSUM_OFFSET, &sum, sizeof(sum));
	patch(path, 0, page, sizeof(page));

	T_OK(sluice_dataset_open(path, &ds));
	ld = must_open(ds, SLUICE_SHUFFLE_WINDOW, 256, 0);
	run_epoch_once(ld, 600);
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(st.memory_bytes < 4 * MIB);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* @n records of one uint8[16384] field in blocks of @block_size bytes. */
static void write_fixed(const char *dir, uint32_t n, uint64_t block_size,
			int level)
{
	struct sluice_field f = t_field("x", (DLDataType){ kDLUInt, 8, 1 },
					16384);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	static uint8_t rec[16384];

	sluice_writer_config_init(&wc);
	wc.block_size = block_size;
	wc.compression_level = level;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint32_t i = 0; i < n; i++) {
		const void *v[1] = { rec };
		uint64_t len[1] = { sizeof(rec) };

		memset(rec, (int)(i * 7), sizeof(rec));
		T_OK(sluice_writer_add(w, v, len));
	}
	T_OK(sluice_writer_close(w, NULL));
}

/* Every batch to the end of the epoch, released at once; the records
 * delivered.  A loader error fails the test with its message. */
static uint64_t stream_to_end(sluice_loader *ld, const char *what)
{
	uint64_t got = 0;
	sluice_batch *b;
	char msg[512];
	int r;

	while ((r = sluice_loader_next(ld, &b)) == 0) {
		got += sluice_batch_size(b);
		sluice_batch_release(b);
	}
	if (r != SLUICE_EOF) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("%s: %s: %s", what, sluice_strerror(r), msg);
	}
	return got;
}

/* A few hundred records of 0 to 300 KB, as a small WebDataset makes: the
 * default budget streams them at every batch size and shuffle mode (it
 * was sized from the median image, and a batch of 8 large ones was
 * refused: 605696 bytes, more than the 380928 of batch memory). */
static void check_variable_images(const char *dir)
{
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	const uint64_t n = 300, max = 300 << 10;
	uint8_t *img = malloc(max);
	uint64_t rng = 7;
	int64_t label;

	T_ASSERT(img != NULL);
	memset(img, 0xab, max);
	f[0] = t_field("jpg", (DLDataType){ kDLUInt, 8, 1 }, -1);
	f[1] = t_field("cls", (DLDataType){ kDLInt, 64, 1 }, 1);
	sluice_writer_config_init(&wc);
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (uint64_t i = 0; i < n; i++) {
		const void *vals[2] = { img, &label };
		uint64_t lens[2];

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		/* most small, a run of large ones together */
		lens[0] = i >= 200 && i < 220 ? max - i : (rng >> 33) % 8192;
		lens[1] = sizeof(label);
		label = (int64_t)i;
		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(img);

	T_OK(sluice_dataset_open(dir, &ds));
	for (uint32_t batch = 2; batch <= 32; batch *= 2)
		for (int mode = SLUICE_SHUFFLE_NONE;
		     mode <= SLUICE_SHUFFLE_FULL; mode++) {
			sluice_loader *ld = must_open(ds, mode, batch, 0);
			char what[64];

			snprintf(what, sizeof(what), "batch %u shuffle %d",
				 batch, mode);
			T_EQ(stream_to_end(ld, what), n);
			sluice_loader_close(ld);
		}
	/* A consumer that frees each batch when the next arrives (a for
	 * loop's variable) holds one large batch while it asks for the
	 * next large one: the budget has room for both, the default and an
	 * explicit one alike (with room for one, 20 went over it). */
	for (uint32_t batch = 4; batch <= 8; batch *= 2)
		for (int k = 0; k < 2; k++) {
			struct sluice_stats st = { .size = sizeof(st) };
			sluice_loader *ld = must_open(ds, SLUICE_SHUFFLE_NONE,
						      batch, k ? 24 * MIB : 0);
			sluice_batch *prev = NULL, *b;
			uint64_t got = 0;

			while (sluice_loader_next(ld, &b) == 0) {
				got += sluice_batch_size(b);
				sluice_batch_release(prev);
				prev = b;
			}
			sluice_batch_release(prev);
			T_EQ(got, n);
			T_OK(sluice_loader_stats(ld, &st));
			if (st.batches_over_budget)
				T_FAIL_AT("batch %u, %s budget: %llu batches over it while the consumer held the one before",
					  batch, k ? "explicit" : "default",
					  (unsigned long long)
						  st.batches_over_budget);
			sluice_loader_close(ld);
		}
	sluice_dataset_close(ds);
}

/*
 * Three records, one of 10 MiB, batch 256: every batch is the whole
 * dataset, so the batch a consumer holds at an epoch's end and the next
 * epoch's first both hold the 10 MiB value.  The default budget has room
 * for both (bounded by the blocks once, it went over the budget), and a
 * full shuffle sizes its range reads for the 3 records a batch holds,
 * not 256 (it asked 5.4 GB, capped at 3.2, for 10 MB of data).
 */
static void check_tiny_dataset_epochs(const char *dir)
{
	static uint8_t big[10 << 20];
	const uint64_t sizes[3] = { 20, sizeof(big), 30 };
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	int64_t label = 0;

	f[0] = t_field("v", (DLDataType){ kDLUInt, 8, 1 }, -1);
	f[1] = t_field("cls", (DLDataType){ kDLInt, 64, 1 }, 1);
	sluice_writer_config_init(&wc);
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (int i = 0; i < 3; i++) {
		const void *vals[2] = { big, &label };
		uint64_t lens[2] = { sizes[i], sizeof(label) };

		T_OK(sluice_writer_add(w, vals, lens));
	}
	T_OK(sluice_writer_close(w, NULL));
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_FULL;
	     mode++) {
		struct sluice_stats st = { .size = sizeof(st) };
		sluice_loader *ld = must_open(ds, mode, 256, 0);
		sluice_batch *prev = NULL, *b;
		uint64_t got = 0;
		int epochs = 0, r;

		while (epochs < 3) {
			r = sluice_loader_next(ld, &b);
			if (r == SLUICE_EOF) {
				epochs++;
				continue;
			}
			T_OK(r);
			got += sluice_batch_size(b);
			sluice_batch_release(prev);     /* held until now */
			prev = b;
		}
		sluice_batch_release(prev);
		T_EQ(got, 9);
		T_OK(sluice_loader_stats(ld, &st));
		if (st.batches_over_budget)
			T_FAIL_AT("shuffle %d: %llu batches over the default budget across epochs",
				  mode,
				  (unsigned long long)st.batches_over_budget);
		T_ASSERT(st.memory_bytes < 256 * MIB);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/*
 * An explicit memory_bytes that is taken is taken at every larger size
 * too: batches of 31 records of 16 KiB touch up to 6 blocks of 256 KiB
 * (a window of 3), and a budget short of them gathers by chunks of a
 * block.  The split short of the want kept io memory for all of a
 * batch's blocks, so a budget larger than the least taken could leave
 * batches too little and be refused (1.9 MB here; in the sweep, 89.8 MB
 * where 60.7 was taken).
 */
static void check_explicit_monotone(const char *dir)
{
	sluice_dataset *ds = NULL;
	int taken = 0;

	write_fixed(dir, 200, 256 << 10, 0);
	T_OK(sluice_dataset_open(dir, &ds));
	for (uint64_t m = 512 << 10; m <= 4 * MIB; m += 64 << 10) {
		sluice_loader *ld = NULL;
		char msg[512];
		int r = open_loader(ds, SLUICE_SHUFFLE_WINDOW, 31, m, &ld,
				    msg, sizeof(msg));

		if (r == 0) {
			T_EQ(stream_to_end(ld, "explicit budget"), 200);
			taken = 1;
		} else if (taken) {
			T_FAIL_AT("memory_bytes %llu refused after a smaller one was taken: %s",
				  (unsigned long long)m, msg);
		}
		sluice_loader_close(ld);
	}
	T_ASSERT(taken);
	sluice_dataset_close(ds);
}

/* An explicit cache_bytes is honoured beside an explicit memory_bytes
 * (the io memory holds it, not half the budget), and refused at open
 * with a message when it cannot fit beside one batch. */
static void check_explicit_cache(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	struct sluice_stats st = { .size = sizeof(st) };
	char msg[512];

	write_fixed(dir, 256, 64 << 10, 3);     /* 4 MiB */
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.batch_size = 16;
	cfg.memory_bytes = 4 * MIB;
	cfg.cache_bytes = 3 * MIB;      /* more than half the budget */
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.memory_bytes, 4 * MIB);
	if (st.io_memory_bytes < 3 * MIB)
		T_FAIL_AT("cache_bytes %llu cut to %llu of io memory",
			  (unsigned long long)cfg.cache_bytes,
			  (unsigned long long)st.io_memory_bytes);
	T_EQ(stream_to_end(ld, "cache_bytes 3 MiB"), 256);
	sluice_loader_close(ld);

	/* More than every block takes: the cache holds the dataset, and
	 * the rest of the budget is batch memory (it was refused). */
	cfg.memory_bytes = 8 * MIB;
	cfg.cache_bytes = 100 * MIB;
	ld = NULL;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.memory_bytes, 8 * MIB);
	T_ASSERT(st.io_memory_bytes < 5 * MIB);
	sluice_loader_close(ld);

	cfg.memory_bytes = 4 * MIB;
	cfg.cache_bytes = 4 * MIB;      /* no room for a batch beside it */
	ld = NULL;
	T_EQ(sluice_loader_open(ds, &cfg, &ld), -ENOSPC);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, "cache_bytes 4194304 does not fit in memory_bytes");
	sluice_loader_close(ld);

	sluice_dataset_close(ds);
}

/* An explicit cache_bytes near the least memory_bytes that holds it
 * beside a batch of less than a page: honoured or refused, never cut (a
 * cache_bytes of 471632 in memory_bytes of 474146, beside 2 KiB of batch,
 * was taken and got 466944 bytes of io memory: budget sweep 251). */
static void check_explicit_cache_pages(const char *dir)
{
	struct sluice_field f = t_field("x", (DLDataType){ kDLUInt, 8, 1 },
					12);
	struct sluice_writer_config wc;
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	uint8_t val[12] = { 0 };
	int taken = 0, refused = 0;

	sluice_writer_config_init(&wc);
	wc.block_size = 64 << 10;
	wc.compression_level = 0;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint32_t i = 0; i < 20000; i++) {
		const void *v[1] = { val };
		uint64_t len = sizeof(val);

		T_OK(sluice_writer_add(w, v, &len));
	}
	T_OK(sluice_writer_close(w, NULL));
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.batch_size = 100;
	cfg.cache_bytes = 150000;
	for (uint64_t m = 150000; m <= 165000; m += 97) {
		sluice_loader *ld = NULL;
		char msg[512];

		cfg.memory_bytes = m;
		if (sluice_loader_open(ds, &cfg, &ld)) {
			sluice_loader_error(ld, msg, sizeof(msg));
			T_CONTAINS(msg, "does not fit in memory_bytes");
			refused++;
		} else {
			T_OK(sluice_loader_stats(ld, &st));
			if (st.io_memory_bytes < cfg.cache_bytes)
				T_FAIL_AT("memory_bytes %llu: cache_bytes %llu cut to %llu of io memory",
					  (unsigned long long)m,
					  (unsigned long long)cfg.cache_bytes,
					  (unsigned long long)st.io_memory_bytes);
			taken++;
		}
		sluice_loader_close(ld);
	}
	T_LT(0, taken);
	T_LT(0, refused);
	sluice_dataset_close(ds);
}

/* An explicit memory_bytes past what batches want caches blocks: a
 * dataset that fits is read once over several epochs (the surplus went
 * to batch memory, and every epoch read every block again), a full
 * shuffle's too, by block rather than by range; one that does not fit
 * still streams, each epoch reading it. */
static void check_memory_caches(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	struct sluice_stats st = { .size = sizeof(st) };
	const uint64_t mem[2] = { 16 * MIB, 3 * MIB };
	uint64_t nblocks;

	write_fixed(dir, 512, 64 << 10, 0);     /* 8 MiB in 128 raw blocks */
	T_OK(sluice_dataset_open(dir, &ds));
	nblocks = dataset_table(ds)->block_count;
	for (int k = 0; k < 4; k++) {
		int fits = k % 2 == 0, full = k >= 2;
		sluice_loader *ld = NULL;

		sluice_loader_config_init(&cfg);
		cfg.device = SLUICE_DEVICE_HOST;
		cfg.batch_size = 16;
		cfg.shuffle = full ? SLUICE_SHUFFLE_FULL : SLUICE_SHUFFLE_NONE;
		cfg.memory_bytes = mem[k % 2];
		cfg.epochs = 3;         /* nothing read of a fourth */
		T_OK(sluice_loader_open(ds, &cfg, &ld));
		for (int e = 0; e < 3; e++)
			T_EQ(stream_to_end(ld, "memory caches"), 512);
		T_OK(sluice_loader_stats(ld, &st));
		T_EQ(st.memory_bytes, cfg.memory_bytes);
		if (fits) {
			T_ASSERT(st.io_memory_bytes >= 8 * MIB);
			T_EQ(st.blocks_read, nblocks);
			T_EQ(st.range_reads, 0);
		} else if (full) {
			T_EQ(st.range_records, 3 * 512);
		} else {
			/* read again each epoch: from the page cache, by
			 * range, straight into the batches (ranges.c) */
			T_EQ(st.range_records_in_place, 3 * 512);
			T_EQ(st.blocks_read, 0);
		}
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* Open @ds with the default budget (capped at @cap, 0: the machine's)
 * for a job of @epochs epochs. */
static sluice_loader *open_default_epochs(sluice_dataset *ds, int shuffle,
					  uint64_t epochs, uint64_t cap)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	char msg[512];
	int r;

	sluice_loader_config_init(&cfg);
	/* the simulated device where SLUICE_DEVICE_SIM is set */
	cfg.device = getenv("SLUICE_DEVICE_SIM") ? SLUICE_DEVICE_AUTO
						 : SLUICE_DEVICE_HOST;
	cfg.shuffle = shuffle;
	cfg.batch_size = 16;
	cfg.window_blocks = 3;
	cfg.seed = 5;
	cfg.epochs = epochs;
	budget_test_default_cap = cap;
	r = sluice_loader_open(ds, &cfg, &ld);
	budget_test_default_cap = 0;
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("shuffle %d, epochs %llu: %s: %s", shuffle,
			  (unsigned long long)epochs, sluice_strerror(r), msg);
	}
	return ld;
}

/* @epochs epochs of write_fixed()'s 512 records, then the stats. */
static void stream_epochs(sluice_loader *ld, int epochs, const char *what,
			  struct sluice_stats *st)
{
	for (int e = 0; e < epochs; e++)
		T_EQ(stream_to_end(ld, what), 512);
	T_OK(sluice_loader_stats(ld, st));
}

/* zstd blocks that the default budget's cap holds are taken whole in
 * every shuffle mode when the job runs more than one epoch: each block
 * is read and decoded once (they were read and decoded again every
 * epoch but under a full shuffle); a one-epoch job, a cap that does not
 * hold them, a device that mirrors the io memory and one rank of several
 * (but under a full shuffle) keep the small budget and read every epoch.  @fx is the
 * fixture's zstd dataset, whose records are checked every epoch. */
static void check_default_caches_zstd(const char *dir, const char *fx)
{
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;
	uint64_t nblocks;

	write_fixed(dir, 512, 64 << 10, 3);     /* 8 MiB decoded, 128 blocks */
	T_OK(sluice_dataset_open(dir, &ds));
	nblocks = dataset_table(ds)->block_count;
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_WINDOW;
	     mode++) {
		sluice_loader *ld = open_default_epochs(ds, mode, 3, 0);

		stream_epochs(ld, 3, "default caches zstd", &st);
		T_ASSERT(st.io_memory_bytes >= 8 * MIB);
		T_EQ(st.blocks_read, nblocks);
		sluice_loader_close(ld);

		ld = open_default_epochs(ds, mode, 1, 0);
		stream_epochs(ld, 1, "one epoch", &st);
		T_ASSERT(st.io_memory_bytes < 4 * MIB);
		sluice_loader_close(ld);

		ld = open_default_epochs(ds, mode, 3, 4 * MIB);
		stream_epochs(ld, 3, "capped", &st);
		T_ASSERT(st.memory_bytes <= 4 * MIB);
		T_ASSERT(st.blocks_read >= 2 * nblocks);
		sluice_loader_close(ld);

		T_OK(setenv("SLUICE_DEVICE_SIM", "1", 1));
		ld = open_default_epochs(ds, mode, 3, 0);
		stream_epochs(ld, 3, "simulated device", &st);
		T_CONTAINS(st.fallbacks, "simulated device");
		T_ASSERT(st.io_memory_bytes < 4 * MIB);
		sluice_loader_close(ld);
		T_OK(unsetenv("SLUICE_DEVICE_SIM"));

		/* one of two ranks reads half the blocks each epoch */
		T_OK(setenv("WORLD_SIZE", "2", 1));
		T_OK(setenv("RANK", "1", 1));
		ld = open_default_epochs(ds, mode, 3, 0);
		T_OK(sluice_loader_stats(ld, &st));
		T_ASSERT(st.io_memory_bytes < 4 * MIB);
		sluice_loader_close(ld);
		T_OK(unsetenv("WORLD_SIZE"));
		T_OK(unsetenv("RANK"));
	}
	sluice_dataset_close(ds);

	T_OK(sluice_dataset_open(fx, &ds));
	nblocks = dataset_table(ds)->block_count;
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_WINDOW;
	     mode++) {
		sluice_loader *ld = open_default_epochs(ds, mode, 0, 0);

		for (int e = 0; e < 3; e++)
			run_epoch_once(ld, N);
		T_OK(sluice_loader_stats(ld, &st));
		T_EQ(st.blocks_read, nblocks);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* Byte @k of record @i of write_noise()'s dataset: zstd halves it. */
static uint8_t noise_byte(uint64_t i, uint64_t k)
{
	uint64_t z;

	if (k & 8)
		return 0;
	z = (i << 20 | k >> 3) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint8_t)((z ^ (z >> 31)) >> (8 * (k & 7)));
}

/* @n records of @bytes (at most 64 KiB) that zstd halves, in zstd
 * blocks of @block_size at @level. */
static void write_noise(const char *dir, uint32_t n, uint32_t bytes,
			uint64_t block_size, int level)
{
	struct sluice_field f = t_field("x", (DLDataType){ kDLUInt, 8, 1 },
					bytes);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	static uint8_t rec[65536];

	T_ASSERT(bytes <= sizeof(rec));
	sluice_writer_config_init(&wc);
	wc.block_size = block_size;
	wc.compression_level = level;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint32_t i = 0; i < n; i++) {
		const void *v[1] = { rec };
		uint64_t len[1] = { bytes };

		for (uint64_t k = 0; k < bytes; k++)
			rec[k] = noise_byte(i, k);
		T_OK(sluice_writer_add(w, v, len));
	}
	T_OK(sluice_writer_close(w, NULL));
}

/* An epoch of @n records of 64 KiB from write_noise(), each checked byte
 * for byte. */
static void check_noise_epoch(sluice_loader *ld, uint32_t n)
{
	uint64_t got = 0;
	sluice_batch *b;
	int r;

	while ((r = sluice_loader_next(ld, &b)) == 0) {
		DLManagedTensor *t;
		int64_t rows;
		const uint8_t *x = fx_tensor(b, "x", &t, &rows);
		const uint64_t *idx = sluice_batch_indices(b);

		for (int64_t row = 0; row < rows; row++)
			for (uint64_t k = 0; k < 65536; k++)
				if (x[row * 65536 + (int64_t)k] !=
				    noise_byte(idx[row], k))
					T_FAIL_AT("record %llu byte %llu "
						  "differs",
						  (unsigned long long)idx[row],
						  (unsigned long long)k);
		got += (uint64_t)rows;
		t->deleter(t);
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(got, n);
}

/*
 * A budget past one that streams streams too, and one opened streams.
 * 42 records of 12072 bytes in one zstd block, full shuffle, batch 7:
 * short of caching the block, the records' ranges want more io memory
 * than the budget, and the split gave them all they want but 4 KiB,
 * refused as too little for a batch (1,258,048 to 1,262,143 bytes of a
 * like dataset), where 1.25 MB, which gives them less, ran; and the
 * workers' staging buffers, beside the block in the io memory, were
 * left out of its floors: budgets of 0.60 to 0.70 MB opened and failed
 * at the first batch.  Through staging buffers and through the ring.
 */
static void check_ranges_split_monotone(const char *dir)
{
	sluice_dataset *ds = NULL;

	write_noise(dir, 42, 12072, 1338014, 3);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int ring = 0; ring < 2; ring++) {
		if (ring)
			T_OK(setenv("SLUICE_HOST_STAGED_DECODE", "0", 1));
		uint64_t ran = 0;

		for (uint64_t m = 700000; m <= 1400000; m += 4096) {
			sluice_loader *ld = NULL;
			char msg[512];
			int r = open_loader(ds, SLUICE_SHUFFLE_FULL, 7, m,
					    &ld, msg, sizeof(msg));

			if (r && ran)
				T_FAIL_AT("memory_bytes %llu%s: %s (%llu ran)",
					  (unsigned long long)m,
					  ring ? ", the ring's reads" : "",
					  msg, (unsigned long long)ran);
			if (!r && !ran)
				ran = m;
			if (!r)
				T_EQ(stream_to_end(ld, "past the least"), 42);
			sluice_loader_close(ld);
		}
		T_ASSERT(ran != 0);
	}
	T_OK(unsetenv("SLUICE_HOST_STAGED_DECODE"));
	sluice_dataset_close(ds);
}

/* write_noise()'s @n records gathered on the simulated device, zstd
 * blocks fetched and decoded by the workers through a buffer each. */
static void check_sim_decode_buffers(const char *dir, uint32_t n)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	struct loader_core *c;

	T_OK(setenv("SLUICE_DEVICE_SIM", "1", 1));
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.batch_size = 16;
	cfg.epochs = 1;
	cfg.decode_threads = 4;
	cfg.device = SLUICE_DEVICE_AUTO;
	cfg.device_gather = SLUICE_DEVICE_GATHER_ON;
	budget_test_default_cap = 24 * MIB;     /* not cached, as above */
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	budget_test_default_cap = 0;
	c = ld->core;
	T_ASSERT(c->gather.on && c->stage.on && !c->stage.host_decode);
	T_EQ(c->stage.pool_bytes / c->stage.buffer_bytes, 4);
	T_ASSERT(c->stage.buffer_bytes <= MIB);
	T_EQ(stream_to_end(ld, "sim device, zstd gathered"), n);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	T_OK(unsetenv("SLUICE_DEVICE_SIM"));
}

/* A zstd block its workers read through a staging buffer takes only its
 * decoded bytes of io memory, not room for its stored bytes too: 40 MiB
 * hold @dir's 24 MiB decoded beside its batches, not with its 12 MiB
 * stored too, and each block is read once in three epochs (13 reads of
 * 6 before). */
static void check_fetched_take_decoded(const char *dir, uint32_t n)
{
	struct sluice_stats st = { .size = sizeof(st) };
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;

	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.window_blocks = 2;
	cfg.batch_size = 16;
	cfg.epochs = 3;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.direct_io = SLUICE_DIRECT_IO_OFF;
	cfg.memory_bytes = 40 * MIB;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_ASSERT(ld->core->zstd_fetched);
	for (int e = 0; e < 3; e++)
		check_noise_epoch(ld, n);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.blocks_read, dataset_table(ds)->block_count);
	T_ASSERT(st.memory_bytes <= 40 * MIB);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* zstd blocks of host batches are read and decompressed by the workers
 * through staging buffers, one each, under the default budget too: it
 * left one 4 MiB buffer, or none, for the two workers, which then read
 * every block in turn (16 KiB records in 1 MiB blocks, shuffle none:
 * 7.2 GB/s on the VM, 12.1 with a buffer each).  Each buffer holds the
 * longest block's stored bytes, at most 1 MiB: blocks longer than that
 * (@noise's) stream through the decoder a buffer at a time. */
static void check_host_decode_buffers(const char *fx, const char *noise)
{
	const char *dirs[2] = { fx, noise };

	/* 64 KiB records in 4 MiB blocks: two staging buffers long each */
	write_noise(noise, 384, 65536, 4 * MIB, 1);
	for (int d = 0; d < 2; d++) {
		sluice_dataset *ds = NULL;

		T_OK(sluice_dataset_open(dirs[d], &ds));
		for (uint32_t threads = 1; threads <= 4; threads += 3) {
			struct sluice_loader_config cfg;
			sluice_loader *ld = NULL;
			struct loader_core *c;

			sluice_loader_config_init(&cfg);
			cfg.shuffle = SLUICE_SHUFFLE_NONE;
			cfg.batch_size = 16;
			cfg.epochs = 1;
			cfg.decode_threads = threads;
			cfg.device = SLUICE_DEVICE_HOST;
			/* the workers read the shards, cached or not */
			cfg.direct_io = SLUICE_DIRECT_IO_OFF;
			/* below the noise's 36 MiB of io memory: not cached */
			budget_test_default_cap = 24 * MIB;
			T_OK(sluice_loader_open(ds, &cfg, &ld));
			budget_test_default_cap = 0;
			c = ld->core;
			T_ASSERT(c->stage.host_decode);
			T_EQ(c->stage.pool_bytes / c->stage.buffer_bytes,
			     threads);
			T_ASSERT(c->stage.buffer_bytes <= MIB);
			if (d)
				check_noise_epoch(ld, 384);
			else
				run_epoch_once(ld, N);
			T_ASSERT(d ? c->zstd_stored_max > MIB + MIB / 2
				   : c->stage.buffer_bytes >=
				     c->zstd_stored_max);
			sluice_loader_close(ld);
		}
		sluice_dataset_close(ds);
	}
	/* gathered on a device, a zstd block is decoded whole by one worker
	 * too: a buffer each, not two (the second overlaps raw parts'
	 * uploads) */
	check_sim_decode_buffers(noise, 384);
	check_fetched_take_decoded(noise, 384);
}

/* On a GPU the default budget's cap is at most an eighth of its memory
 * too, since the device mirrors the arena (the simulated device's 32 MiB:
 * a 4 MiB cap, which binds and says so; its 1 GiB: the RAM's share). */
static void check_default_gpu_cap(const char *dir)
{
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;
	sluice_loader *ld;

	write_fixed(dir, 512, 1 << 20, 0);      /* 8 raw blocks of 1 MiB */
	T_OK(sluice_dataset_open(dir, &ds));
	T_OK(setenv("SLUICE_DEVICE_SIM", "1", 1));
	T_OK(setenv("SLUICE_SIM_DEVICE_MEMORY", "33554432", 1));
	ld = open_default_epochs(ds, SLUICE_SHUFFLE_NONE, 2, 0);
	stream_epochs(ld, 2, "GPU's cap", &st);
	T_CONTAINS(st.fallbacks, "simulated device");
	T_ASSERT(st.memory_bytes <= 4 * MIB);
	T_CONTAINS(st.fallbacks, "and of the GPU's");
	sluice_loader_close(ld);

	T_OK(setenv("SLUICE_SIM_DEVICE_MEMORY", "1073741824", 1));
	ld = open_default_epochs(ds, SLUICE_SHUFFLE_NONE, 2, 0);
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(st.memory_bytes > 4 * MIB);
	T_ASSERT(strstr(st.fallbacks, "memory binds") == NULL);
	sluice_loader_close(ld);
	T_OK(unsetenv("SLUICE_SIM_DEVICE_MEMORY"));
	T_OK(unsetenv("SLUICE_DEVICE_SIM"));
	sluice_dataset_close(ds);
}

/* An explicit memory_bytes a little short of the default's gives the
 * batches what the default gives them and the io memory the rest (it
 * was split half and half: a window shuffle's io memory halved, its
 * batch memory doubled to no use). */
static void check_budget_short_of_default(const char *dir)
{
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;
	sluice_loader *ld;
	uint64_t def, def_batch, mem;

	write_fixed(dir, 512, 64 << 10, 0);
	T_OK(sluice_dataset_open(dir, &ds));
	range_reads = SLUICE_RANGE_READS_OFF;   /* the window's blocks */
	ld = must_open(ds, SLUICE_SHUFFLE_WINDOW, 16, 0);
	T_OK(sluice_loader_stats(ld, &st));
	def = st.memory_bytes;
	def_batch = def - st.io_memory_bytes;
	sluice_loader_close(ld);
	T_ASSERT(def_batch < def / 2);
	mem = def - MIB;
	ld = must_open(ds, SLUICE_SHUFFLE_WINDOW, 16, mem);
	T_OK(sluice_loader_stats(ld, &st));
	if (st.io_memory_bytes + def_batch < mem)
		T_FAIL_AT("memory_bytes %llu: io %llu, batches %llu (the default %llu gives batches %llu)",
			  (unsigned long long)mem,
			  (unsigned long long)st.io_memory_bytes,
			  (unsigned long long)(mem - st.io_memory_bytes),
			  (unsigned long long)def,
			  (unsigned long long)def_batch);
	T_EQ(stream_to_end(ld, "short of the default"), 512);
	sluice_loader_close(ld);
	range_reads = SLUICE_RANGE_READS_AUTO;
	sluice_dataset_close(ds);
}

/* Blocks of many sizes in an explicit budget that caches them: the io
 * pool has room for as many live blocks as the cache has entries, so
 * evictions that split its free space never overrun it (its extents
 * were sized for the entries before the surplus: pool_free wrote past
 * them, "double free or corruption"). */
static void check_memory_caches_uneven(const char *dir)
{
	struct sluice_field f = t_field("v", (DLDataType){ kDLUInt, 8, 1 },
					-1);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	static uint8_t val[8192];
	uint64_t rng = 11, n = 8000;

	sluice_writer_config_init(&wc);
	wc.block_size = 16 << 10;
	wc.compression_level = 0;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint64_t i = 0; i < n; i++) {
		const void *v[1] = { val };
		uint64_t len[1];

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		len[0] = (rng >> 33) % sizeof(val);
		T_OK(sluice_writer_add(w, v, len));
	}
	T_OK(sluice_writer_close(w, NULL));
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_WINDOW;
	     mode++) {
		sluice_loader *ld = must_open(ds, mode, 16, 12 * MIB);

		for (int e = 0; e < 3; e++)
			T_EQ(stream_to_end(ld, "uneven blocks"), n);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* Where the default budget's cap binds, a window batch whose blocks do
 * not fit the io memory gets a smaller window, said in stats.fallbacks
 * (it used to fail at batch 0: "does not fit beside the other blocks");
 * so is an explicit memory_bytes's. */
static void check_window_shrinks(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	struct sluice_stats st = { .size = sizeof(st) };
	char msg[512];

	write_fixed(dir, 1024, 256 << 10, 3);   /* 64 blocks, 16 MiB */
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.batch_size = 64;
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.window_blocks = 16;     /* a batch: 32 blocks, 8.3 MB */
	/* 16 MiB shared by the 4 ranks of this host: 4 MiB each */
	budget_test_default_cap = 16 * MIB;
	T_EQ(setenv("LOCAL_WORLD_SIZE", "4", 1), 0);
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_EQ(unsetenv("LOCAL_WORLD_SIZE"), 0);
	budget_test_default_cap = 0;
	T_EQ(stream_to_end(ld, "window halved"), 1024);
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(st.memory_bytes <= 4 * MIB);
	T_CONTAINS(st.fallbacks, "memory binds: shuffle window of");
	T_CONTAINS(st.fallbacks, "blocks, not 16");
	{
		/* A state saved with the whole window is refused by the
		 * halved one, not resumed in another order. */
		struct sluice_loader_config big = cfg;
		sluice_loader *full = NULL;
		struct sluice_state state;

		big.memory_bytes = 32 * MIB;
		T_OK(sluice_loader_open(ds, &big, &full));
		T_OK(sluice_loader_state_get(full, &state));
		sluice_loader_close(full);
		T_EQ(state.window_blocks, 16);
		T_EQ(sluice_loader_state_set(ld, &state), -SLUICE_ESTATE);
		sluice_loader_error(ld, msg, sizeof(msg));
		T_CONTAINS(msg, "halved to fit its memory budget");
	}
	sluice_loader_close(ld);

	/* An explicit memory_bytes too small for the window has it halved
	 * as well, and reads each block once an epoch: gathered a chunk of
	 * blocks at a time in the whole window, every batch read its blocks
	 * again (a window of 3 blocks of 5 MB under 12 MiB read 15 times
	 * the dataset). */
	cfg.memory_bytes = 4 * MIB;
	cfg.epochs = 2;             /* nothing read ahead past them */
	ld = NULL;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	for (int e = 0; e < 2; e++)
		T_EQ(stream_to_end(ld, "window halved, explicit"), 1024);
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(st.memory_bytes == 4 * MIB);
	T_EQ(st.batches_over_budget, 0);
	T_CONTAINS(st.fallbacks, "blocks, not 16 (two windows of its largest blocks within 3/4 of memory_bytes; raise memory_bytes");
	T_ASSERT(strstr(st.fallbacks, "a chunk of blocks at a time") == NULL);
	T_EQ(st.blocks_read, 2 * 64);
	{
		/* The window an explicit memory_bytes leaves does not depend
		 * on the batch's shape: a job resumed elastically keeps its
		 * order. */
		struct sluice_state a, b;
		struct sluice_loader_config other = cfg;
		sluice_loader *ld2 = NULL;

		T_OK(sluice_loader_state_get(ld, &a));
		other.batch_size = 256;
		other.rank = 3;
		other.world_size = 8;
		other.prefetch_depth = 1;
		T_OK(sluice_loader_open(ds, &other, &ld2));
		T_OK(sluice_loader_state_get(ld2, &b));
		T_ASSERT(a.window_blocks < 16);
		T_EQ(a.window_blocks, b.window_blocks);
		sluice_loader_close(ld2);
		/* nor a batch of one */
		other = cfg;
		other.batch_size = 1;
		other.prefetch_depth = 1;
		ld2 = NULL;
		T_OK(sluice_loader_open(ds, &other, &ld2));
		T_OK(sluice_loader_state_get(ld2, &b));
		T_EQ(a.window_blocks, b.window_blocks);
		sluice_loader_close(ld2);
	}
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* The most blocks any of 3 seeds' epochs read, each epoch streamed to
 * its end: all @records delivered, and "memory binds" in the fallbacks
 * as @binds says. */
static uint64_t most_block_reads(sluice_dataset *ds,
				 struct sluice_loader_config *cfg,
				 uint64_t records, int binds)
{
	uint64_t worst = 0;

	cfg->epochs = 1;
	for (int run = 0; run < 3; run++) {
		struct sluice_stats st = { .size = sizeof(st) };
		sluice_loader *ld = NULL;

		cfg->seed = (uint64_t)run;
		T_OK(sluice_loader_open(ds, cfg, &ld));
		T_EQ(stream_to_end(ld, "window, reads once"), records);
		T_OK(sluice_loader_stats(ld, &st));
		T_EQ(strstr(st.fallbacks, "memory binds") != NULL, binds);
		if (st.blocks_read > worst)
			worst = st.blocks_read;
		sluice_loader_close(ld);
	}
	return worst;
}

/* A window shuffle whose io memory holds a few windows but not the
 * dataset reads each block once an epoch: the read-ahead, reading the
 * next window, leaves the blocks of the window being planned (the least
 * recently used, as its batches just took them), where it took them and
 * their batches read them again (the worst of 3 runs: 30 to 34 of 25
 * blocks). */
static void check_window_reads_once(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;

	write_fixed(dir, 1500, 1 << 20, 0);    /* 25 blocks of 60 records */
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.batch_size = 16;
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.window_blocks = 3;
	cfg.memory_bytes = 10 * MIB;    /* the window of 3 kept */
	/* blocks: auto reads these records in place, from the page cache */
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	T_LT(most_block_reads(ds, &cfg, 1500, 0), 25 + 2);
	sluice_dataset_close(ds);
}

/*
 * Every explicit memory_bytes from two windows of blocks to well past
 * them streams a window shuffle reading each block once an epoch, never
 * by chunks: two windows within the whole memory_bytes left the batch
 * beside them no room, and from there to two windows, a batch and the
 * staging buffers, every batch read its blocks again (16 KiB zstd
 * records in 1 MiB blocks, window 16, --memory 32M to 36M: 2 to 3 block
 * reads each an epoch, at half the rate).
 */
static void check_window_memory_scan(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;

	write_fixed(dir, 1024, 256 << 10, 3);   /* 64 zstd blocks, 16 MiB */
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.batch_size = 64;                    /* 1 MiB */
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.window_blocks = 16;                 /* two: 8 MiB */
	cfg.decode_threads = 2;
	cfg.epochs = 1;
	for (uint64_t m = 6 * MIB; m <= 14 * MIB; m += 512 << 10) {
		struct sluice_stats st = { .size = sizeof(st) };
		sluice_loader *ld = NULL;

		cfg.memory_bytes = m;
		T_OK(sluice_loader_open(ds, &cfg, &ld));
		T_EQ(stream_to_end(ld, "window, explicit memory"), 1024);
		T_OK(sluice_loader_stats(ld, &st));
		if (strstr(st.fallbacks, "a chunk of blocks at a time") ||
		    st.blocks_read > 64 + 2)
			T_FAIL_AT("memory_bytes %llu: %llu block reads of 64: %s",
				  (unsigned long long)m,
				  (unsigned long long)st.blocks_read,
				  st.fallbacks);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* The default budget capped below a window shuffle's two windows of
 * blocks and the read-ahead: the planner's claims take blocks no batch
 * waits for before those read ahead for the next batches, so each block
 * is read once an epoch (a capped default of 236 blocks read 249). */
static void check_capped_window_reads_once(const char *dir, uint64_t cap)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	uint64_t worst;

	write_fixed(dir, 3840, 256 << 10, 0);   /* 240 blocks of 16 */
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.batch_size = 16;
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.decode_threads = 1;
	cfg.range_reads = SLUICE_RANGE_READS_OFF;   /* blocks, as below */
	budget_test_default_cap = cap;
	worst = most_block_reads(ds, &cfg, 3840, 1);
	printf("  capped window (cap %llu): at most %llu block reads of 240\n",
	       (unsigned long long)cap, (unsigned long long)worst);
	T_EQ(worst, 240);
	/* By default, from the page cache, these records are read in
	 * place, each once an epoch, under the same cap */
	cfg.range_reads = SLUICE_RANGE_READS_AUTO;
	for (int e = 1; e <= 2; e++) {
		struct sluice_stats st = { .size = sizeof(st) };
		sluice_loader *ld = NULL;

		cfg.epochs = (uint64_t)e;
		T_OK(sluice_loader_open(ds, &cfg, &ld));
		for (int k = 0; k < e; k++)
			T_EQ(stream_to_end(ld, "capped, in place"), 3840);
		T_OK(sluice_loader_stats(ld, &st));
		T_EQ(st.blocks_read, 0);
		T_EQ(st.range_records_in_place, (uint64_t)e * 3840);
		T_ASSERT(st.memory_bytes <= cap);
		sluice_loader_close(ld);
	}
	budget_test_default_cap = 0;
	sluice_dataset_close(ds);
}

/* A dataset of one uint8[-1] field with the values @lens[0..@n), in
 * blocks of @block_size bytes, zstd at @level (0: raw), whose first
 * halves are noise with @level (they compress to about half). */
static void write_values_at(const char *dir, const uint64_t *lens,
			    uint32_t n, uint64_t block_size, int level)
{
	struct sluice_field f = t_field("v", (DLDataType){ kDLUInt, 8, 1 },
					-1);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint64_t max = 0;
	uint8_t *val;

	for (uint32_t i = 0; i < n; i++)
		max = lens[i] > max ? lens[i] : max;
	val = malloc(max ? max : 1);
	T_ASSERT(val != NULL);
	memset(val, 0x5a, max);
	for (uint64_t k = 0, x = 88172645463325252ull; level && k < max / 2;
	     k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		val[k] = (uint8_t)x;
	}
	sluice_writer_config_init(&wc);
	wc.block_size = block_size;
	wc.compression_level = level;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint32_t i = 0; i < n; i++) {
		const void *v[1] = { val };

		T_OK(sluice_writer_add(w, v, &lens[i]));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(val);
}

static void write_values(const char *dir, const uint64_t *lens, uint32_t n,
			 uint64_t block_size)
{
	write_values_at(dir, lens, n, block_size, 0);
}

/* Open with the default budget, capped at @cap (0: the machine's), and
 * stream one epoch, records released at once; fail with the loader's
 * message. */
static void default_streams(sluice_dataset *ds, int shuffle, uint32_t batch,
			    uint64_t cap, const char *what)
{
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld = NULL;
	char msg[512];
	int r;

	budget_test_default_cap = cap;
	r = open_loader(ds, shuffle, batch, 0, &ld, msg, sizeof(msg));
	budget_test_default_cap = 0;
	if (r)
		T_FAIL_AT("%s, shuffle %d, batch %u: %s: %s", what, shuffle,
			  batch, sluice_strerror(r), msg);
	/* where the cap binds, the loader says so once (it said nothing
	 * unless the window halved) */
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(!cap || st.memory_bytes <= cap);
	if (cap && st.memory_bytes == cap)
		T_CONTAINS(st.fallbacks, "memory binds");
	T_EQ(stream_to_end(ld, what), sluice_dataset_records(ds));
	sluice_loader_close(ld);
}

/* Fewer records than batch_size: the largest batch is every record, and
 * the default budget (capped below batch_size of them) takes them (it
 * sized one batch as batch_size records: 3 records of 16 KiB, batch
 * 1024, were refused for the 16.8 MB of 1024). */
static void check_batch_above_records(const char *dir)
{
	sluice_dataset *ds = NULL;

	write_fixed(dir, 3, 64 << 10, 0);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_FULL;
	     mode++)
		default_streams(ds, mode, 1024, 4 * MIB, "3 records");
	sluice_dataset_close(ds);
}

/* Two values of MiBs among tiny ones, each large value a block of its
 * own: the default takes a batch's blocks at once, all 4 of them, far
 * below its cap (it sized its io memory as entries x the median block
 * and the largest: 2.1 MB, and refused the 3.5 MB the blocks take). */
static void check_skewed_blocks(const char *dir)
{
	uint64_t lens[12] = { 10, 20, 0, 5, 1, 2 * MIB,
			      3, 4, 5, 6, 7, 3 * MIB / 2 };
	sluice_dataset *ds = NULL;

	write_values(dir, lens, 12, 16 << 10);
	T_OK(sluice_dataset_open(dir, &ds));
	T_EQ(sluice_dataset_blocks(ds), 4);
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_WINDOW;
	     mode++)
		default_streams(ds, mode, 7, 0, "skewed blocks");
	sluice_dataset_close(ds);
}

/* The first batch holds nearly every byte: 40 values of 256 KiB, each a
 * block of its own, then 2000 of 10 bytes, batch 512, a cap of 16 MiB,
 * raw and zstd (@level).  A batch's blocks at once (10 MiB) left it 5.6
 * MiB of batch memory, and batch 0 of 10 MiB failed; gathered by chunks
 * with each value at its max_value_bytes, it would take 128 MiB.  The
 * layout read at open (the zstd blocks' through their frames) sizes it:
 * chunks, each value its own length. */
static void check_batch_holds_dataset(const char *dir, int level)
{
	uint32_t n = 2040;
	uint64_t *lens = malloc(n * sizeof(*lens));
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	char msg[512];

	T_ASSERT(lens != NULL);
	for (uint32_t i = 0; i < n; i++)
		lens[i] = i < 40 ? 256 << 10 : 10;
	write_values_at(dir, lens, n, 64 << 10, level);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_FULL;
	     mode++)
		default_streams(ds, mode, 512, 16 * MIB, "one batch of all");
	budget_test_default_cap = 16 * MIB;
	T_OK(open_loader(ds, SLUICE_SHUFFLE_NONE, 512, 0, &ld, msg,
			 sizeof(msg)));
	budget_test_default_cap = 0;
	T_OK(sluice_loader_stats(ld, &st));
	T_CONTAINS(st.fallbacks, "a chunk of blocks at a time");
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	free(lens);
}

/* Every block read by range: no batch pins a whole block, so the budget
 * keeps none beside the ranges.  14 values of 9 to 124 KB in one zstd
 * block, full shuffle, batch 2: once a memory_bytes is taken, every
 * larger one streams (one of 1.6 MB left batches 135 KB beside the
 * ranges and the block, and a batch of 186 KB failed, where 0.94 MB,
 * whole blocks, streamed). */
static void check_ranges_pin_no_block(const char *dir)
{
	uint64_t lens[14];
	sluice_dataset *ds = NULL;
	int taken = 0;

	for (uint32_t i = 0; i < 14; i++)
		lens[i] = (i + 1) * 8832;
	write_values_at(dir, lens, 14, 12 << 20, 3);
	T_OK(sluice_dataset_open(dir, &ds));
	for (uint64_t mem = 1 << 20; mem <= 4 << 20; mem += 64 << 10) {
		sluice_loader *ld = NULL;
		char msg[512];
		int r = open_loader(ds, SLUICE_SHUFFLE_FULL, 2, mem, &ld, msg,
				    sizeof(msg));

		if (r && !taken) {
			T_EQ(r, -ENOSPC);
			sluice_loader_close(ld);
			continue;
		}
		if (r)
			T_FAIL_AT("memory_bytes %llu: %s",
				  (unsigned long long)mem, msg);
		taken = 1;
		T_EQ(stream_to_end(ld, "every block by range"), 14);
		sluice_loader_close(ld);
	}
	T_ASSERT(taken);
	sluice_dataset_close(ds);
}

/* A dataset of one block (20 MB to read and decode), whose batches each
 * take it whole (10 MB): under a cap that holds the block or the largest
 * batch but not both, the default
 * refuses at open in every shuffle mode (batch 0 failed at next()), and
 * a cap that holds both streams. */
static void check_one_block_refused_at_open(const char *dir)
{
	const int shuffles[4] = { SLUICE_SHUFFLE_NONE, SLUICE_SHUFFLE_BLOCK,
				  SLUICE_SHUFFLE_WINDOW, SLUICE_SHUFFLE_FULL };
	uint64_t lens[37];
	sluice_dataset *ds = NULL;

	for (uint32_t i = 0; i < 37; i++)
		lens[i] = 256 * 1024 + i * 4096;        /* 9.9 MB in all */
	write_values_at(dir, lens, 37, 64 << 20, 3);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int k = 0; k < 4; k++) {
		sluice_loader *ld = NULL;
		char msg[512];
		int r;

		budget_test_default_cap = 24 * MIB;
		r = open_loader(ds, shuffles[k], 100, 0, &ld, msg, sizeof(msg));
		T_EQ(r, -ENOSPC);
		if (!strstr(msg, "its largest batch takes up to"))
			T_FAIL_AT("shuffle %d: %s", k, msg);
		sluice_loader_close(ld);
		ld = NULL;
		budget_test_default_cap = 64 * MIB;
		T_OK(open_loader(ds, shuffles[k], 100, 0, &ld, msg,
				 sizeof(msg)));
		T_EQ(stream_to_end(ld, "one block"), 37);
		sluice_loader_close(ld);
	}
	budget_test_default_cap = 0;
	sluice_dataset_close(ds);
}

/* The default's cap binds: the io memory it keeps past a batch's blocks
 * leaves the batch memory room for the largest batch (a floor of need x
 * the median block and the largest left 8 KiB of batch memory and was
 * refused at open under a cap of 3 MiB; 352 KiB under 3.35 MiB, and
 * batch 0 of 596 KB failed). */
static void check_capped_split(const char *dir)
{
	struct sluice_field f[2] = {
		t_field("a", (DLDataType){ kDLUInt, 8, 1 }, -1),
		t_field("b", (DLDataType){ kDLUInt, 8, 1 }, -1),
	};
	const uint64_t caps[2] = { 3 * MIB + 64 * 1024, 3 * MIB + 360 * 1024 };
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	static uint8_t val[8192];
	uint64_t rng = 5;

	sluice_writer_config_init(&wc);
	wc.block_size = 1 << 20;
	wc.compression_level = 0;
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (uint32_t i = 0; i < 4000; i++) {
		const void *v[2] = { val, val };
		uint64_t len[2];

		for (int k = 0; k < 2; k++) {
			rng = rng * 6364136223846793005ull +
			      1442695040888963407ull;
			len[k] = (rng >> 33) % sizeof(val);
		}
		T_OK(sluice_writer_add(w, v, len));
	}
	T_OK(sluice_writer_close(w, NULL));
	T_OK(sluice_dataset_open(dir, &ds));
	for (int k = 0; k < 2; k++)
		default_streams(ds, SLUICE_SHUFFLE_NONE, 64, caps[k],
				"capped split");
	sluice_dataset_close(ds);
}

/* Runs of 1.5 MB values among empty ones, in 4 MB blocks: under a cap
 * that holds a batch's blocks and batch 0's 9 MB beside them, but not
 * what the index says a batch could take at most (every record at the
 * largest value), the default gives batches all but those blocks (it
 * split at the median blocks and gave batches 6.3 MB). */
static void check_capped_runs(const char *dir)
{
	uint64_t lens[42];
	sluice_dataset *ds = NULL;

	for (uint32_t i = 0; i < 42; i++)
		lens[i] = i % 14 < 10 ? 0 : 1500000;
	write_values(dir, lens, 42, 4000000);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_BLOCK;
	     mode++)
		default_streams(ds, mode, 16, 24 * MIB, "capped runs");
	sluice_dataset_close(ds);
}

/* A full shuffle read by range whose batches would often not fit the
 * capped default's memory is refused at open, naming the odds; it used
 * to open and fail mid-epoch ("its 16 records read by range take ...").
 * Every fifth value is 1 MiB, the others 16 KiB: a batch of 16 holds
 * 3.5 MB on average and up to 16 MiB, under a 12 MiB cap. */
static void check_ranges_odds(const char *dir)
{
	uint64_t lens[400];
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	char msg[512];
	int r;

	for (uint32_t i = 0; i < 400; i++)
		lens[i] = i % 5 == 0 ? 1 << 20 : 16 << 10;
	write_values(dir, lens, 400, 4 << 20);
	T_OK(sluice_dataset_open(dir, &ds));
	budget_test_default_cap = 12 * MIB;
	r = open_loader(ds, SLUICE_SHUFFLE_FULL, 16, 0, &ld, msg, sizeof(msg));
	budget_test_default_cap = 0;
	T_EQ(r, -ENOSPC);
	T_CONTAINS(msg, "a full shuffle's batch of 16 records drawn at random does not fit them with odds up to");
	T_CONTAINS(msg, "lower batch_size");
	sluice_loader_close(ld);
	/* the same batches in 64 MiB: 16 MiB of values at most */
	default_streams(ds, SLUICE_SHUFFLE_FULL, 16, 64 * MIB, "ranges odds");
	sluice_dataset_close(ds);
}

/* A full shuffle reads records by range beside at most one block: under
 * a cap too small for the largest batch's bound, batches get all but a
 * block and what the range reads want (all but the block starved the
 * reads: batch 0's 271 KB of ranges found 270 KB of io memory). */
static void check_capped_ranges(const char *dir)
{
	uint64_t lens[2000];
	sluice_dataset *ds = NULL;

	for (uint32_t i = 0; i < 2000; i++)
		lens[i] = i % 100 < 4 ? 256 << 10 : i % 2 ? 0 : 40;
	write_values(dir, lens, 2000, 64 << 10);
	T_OK(sluice_dataset_open(dir, &ds));
	default_streams(ds, SLUICE_SHUFFLE_FULL, 64, 12 * MIB, "capped ranges");
	sluice_dataset_close(ds);
}

/* Window shuffle of values read in place under the default's cap: the
 * split keeps batch memory for the largest batch beside one batch's
 * ranges (values of 0, 1 or 2 x 128 KiB, batch 16: it kept the ranges
 * of prefetch_depth batches at the mean, left batches 2.26 MB, and
 * batch 6 of 2.75 failed at next()). */
static void check_window_in_place_batch(const char *dir)
{
	uint64_t lens[150], x = 7;
	sluice_dataset *ds = NULL;

	for (uint32_t i = 0; i < 150; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		lens[i] = (x >> 33) % 3 * (128 << 10);
	}
	write_values(dir, lens, 150, 4200000);
	T_OK(sluice_dataset_open(dir, &ds));
	default_streams(ds, SLUICE_SHUFFLE_WINDOW, 16, 10530816,
			"window in place");
	sluice_dataset_close(ds);
}

/* The same values under explicit memory_bytes from 4 to 12 MiB: each
 * budget the loader takes streams to the end, the others are refused at
 * open (5.3 to 7.3 MB were taken, and failed at batch 0's next(): its
 * batch memory beside the largest block did not hold it). */
static void check_window_in_place_scan(const char *dir)
{
	uint64_t lens[150], x = 7;
	sluice_dataset *ds = NULL;
	int taken = 0, refused = 0;

	for (uint32_t i = 0; i < 150; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		lens[i] = (x >> 33) % 3 * (128 << 10);
	}
	write_values(dir, lens, 150, 4200000);
	T_OK(sluice_dataset_open(dir, &ds));
	for (uint64_t m = 4 * MIB; m <= 12 * MIB; m += MIB / 2) {
		sluice_loader *ld = NULL;
		char msg[512];

		if (open_loader(ds, SLUICE_SHUFFLE_WINDOW, 16, m, &ld, msg,
				sizeof(msg))) {
			refused++;
			T_CONTAINS(msg, "raise memory_bytes");
			sluice_loader_close(ld);
			continue;
		}
		taken++;
		T_EQ(stream_to_end(ld, "window in place, explicit"), 150);
		sluice_loader_close(ld);
	}
	printf("window in place, memory_bytes 4..12 MiB: %d taken, %d refused at open\n",
	       taken, refused);
	T_LT(0, taken);
	T_LT(0, refused);
	sluice_dataset_close(ds);
}

/* Values read in place whose batches' ranges do not fit io memory: a
 * batch that cannot take its memory yet waits for it and reads in place
 * then, under every shuffle, with the consumer holding the previous
 * batch too (over the budget then, said in the stats).  Values of 0, 1 or
 * 2 x 640 KiB, batch 16, under a 24 MiB cap: the largest batch, 20 MB,
 * fits it, and a batch of 13 MB failed at next() (budget sweep 242:
 * values of 0, 5 or 10 MB, batch 16), or a full shuffle was refused at
 * open for the odds that its ranges do not fit io memory. */
static void check_in_place_waits_for_memory(const char *dir)
{
	uint64_t lens[150], x = 11;
	sluice_dataset *ds = NULL;

	for (uint32_t i = 0; i < 150; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		lens[i] = (x >> 33) % 3 * (640 << 10);
	}
	write_values(dir, lens, 150, 1 << 20);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_FULL;
	     mode++) {
		struct sluice_stats st = { .size = sizeof(st) };
		sluice_loader *ld = NULL;
		sluice_batch *prev = NULL, *b;
		uint64_t got = 0;
		char msg[512];
		int r;

		default_streams(ds, mode, 16, 24 * MIB, "in place, waits");
		budget_test_default_cap = 24 * MIB;
		r = open_loader(ds, mode, 16, 0, &ld, msg, sizeof(msg));
		budget_test_default_cap = 0;
		if (r)
			T_FAIL_AT("shuffle %d: %s", mode, msg);
		while ((r = sluice_loader_next(ld, &b)) == 0) {
			got += sluice_batch_size(b);
			if (prev)
				sluice_batch_release(prev);
			prev = b;
		}
		sluice_loader_error(ld, msg, sizeof(msg));
		if (r != SLUICE_EOF)
			T_FAIL_AT("shuffle %d, held: %s", mode, msg);
		sluice_batch_release(prev);
		T_EQ(got, 150);
		T_OK(sluice_loader_stats(ld, &st));
		T_LT(0, st.range_records_in_place);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* A full shuffle's ranges, not in place: every memory_bytes the loader
 * takes streams every batch.  One batch at the largest values, the least
 * io memory a short split keeps, counts the gap a read takes between
 * two pieces it joins (16 KiB): 64 records of 8 KiB in 32 KiB blocks,
 * batch 32, 928 KiB kept two batches' memory and left io 412 KiB, and
 * batches whose joined reads took 456 failed at next(). */
static void check_full_ranges_gap(const char *dir)
{
	struct sluice_field f = t_field("x", (DLDataType){ kDLUInt, 8, 1 },
					8192);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	uint8_t val[8192];
	int taken = 0;

	memset(val, 0x3c, sizeof(val));
	sluice_writer_config_init(&wc);
	wc.block_size = 32768;
	wc.compression_level = 0;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint32_t i = 0; i < 64; i++) {
		const void *v[1] = { val };
		uint64_t len = sizeof(val);

		T_OK(sluice_writer_add(w, v, &len));
	}
	T_OK(sluice_writer_close(w, NULL));
	T_OK(sluice_dataset_open(dir, &ds));
	T_OK(setenv("SLUICE_RANGES_IN_PLACE", "0", 1));
	for (uint64_t m = 512 << 10; m <= 1536 << 10; m += 32 << 10) {
		for (uint64_t seed = 1; seed <= 5; seed++) {
			struct sluice_loader_config cfg;
			sluice_loader *ld = NULL;
			sluice_batch *b;
			char msg[512];
			int r;

			sluice_loader_config_init(&cfg);
			cfg.shuffle = SLUICE_SHUFFLE_FULL;
			cfg.batch_size = 32;
			cfg.seed = seed;
			cfg.prefetch_depth = 4;
			cfg.decode_threads = 2;
			cfg.device = SLUICE_DEVICE_HOST;
			cfg.memory_bytes = m;
			cfg.range_reads = SLUICE_RANGE_READS_ON;
			if (sluice_loader_open(ds, &cfg, &ld)) {
				sluice_loader_close(ld);
				break;
			}
			taken++;
			for (int epoch = 0; epoch < 3; epoch++) {
				while ((r = sluice_loader_next(ld, &b)) == 0)
					sluice_batch_release(b);
				if (r != SLUICE_EOF) {
					sluice_loader_error(ld, msg,
							    sizeof(msg));
					T_FAIL_AT("memory_bytes %llu, seed %llu: %s",
						  (unsigned long long)m,
						  (unsigned long long)seed,
						  msg);
				}
			}
			sluice_loader_close(ld);
		}
	}
	T_OK(unsetenv("SLUICE_RANGES_IN_PLACE"));
	T_LT(0, taken);
	sluice_dataset_close(ds);
}

/* A memory_bytes that holds two batches beside a block, but not their
 * ranges in io memory as well: records read in place need none, so a
 * full or window shuffle still reads them by range, in place, each
 * record once (both read a whole block for each record instead: a full
 * shuffle of 16 KiB records, batch 256, under 12 MiB, 0.20 GB/s against
 * 8.84 now). */
static void check_in_place_tight(const char *dir)
{
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;

	write_fixed(dir, 256, 256 << 10, 0);    /* 16 records a block */
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_WINDOW; mode <= SLUICE_SHUFFLE_FULL;
	     mode++) {
		sluice_loader *ld = must_open(ds, mode, 32, 1536 << 10);

		T_EQ(stream_to_end(ld, "in place, tight"), 256);
		T_OK(sluice_loader_stats(ld, &st));
		/* (the next epoch's first batches may be read too) */
		if (st.range_records_in_place < 256 || st.blocks_read)
			T_FAIL_AT("shuffle %d: %llu of 256 records read in place, %llu blocks read: %s",
				  mode,
				  (unsigned long long)st.range_records_in_place,
				  (unsigned long long)st.blocks_read,
				  st.fallbacks);
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* Values read in place whose largest batch does not fit the cap: refused
 * at open, as before they were read in place (budget sweep 277: values
 * of 0, 11.3 or 22.6 MB, batch 3, under a 49 MB cap, shuffle none: batch
 * 1 failed at next(); here an eighth of each). */
static void check_in_place_refused_at_open(const char *dir)
{
	uint64_t lens[43], x = 3;
	sluice_dataset *ds = NULL;

	for (uint32_t i = 0; i < 43; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		lens[i] = (x >> 33) % 3 * 1413960;
	}
	write_values(dir, lens, 43, 383227);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int mode = SLUICE_SHUFFLE_NONE; mode <= SLUICE_SHUFFLE_BLOCK;
	     mode++) {
		sluice_loader *ld = NULL;
		char msg[512];
		int r;

		budget_test_default_cap = 6170000;
		r = open_loader(ds, mode, 3, 0, &ld, msg, sizeof(msg));
		budget_test_default_cap = 0;
		if (!r) {
			uint64_t got = 0;
			sluice_batch *b;

			while ((r = sluice_loader_next(ld, &b)) == 0) {
				got += sluice_batch_size(b);
				sluice_batch_release(b);
			}
			sluice_loader_error(ld, msg, sizeof(msg));
			if (r != SLUICE_EOF)
				T_FAIL_AT("shuffle %d: taken at open, failed at next() after %llu records: %s",
					  mode, (unsigned long long)got, msg);
		} else {
			T_CONTAINS(msg, "raise memory_bytes");
		}
		sluice_loader_close(ld);
	}
	sluice_dataset_close(ds);
}

/* Window shuffle under the default's cap: a window whose blocks leave
 * too little beside them for one batch is halved, as one whose blocks
 * do not fit (it was refused: "leaves ... bytes for batches"). */
static void check_window_leaves_batch(const char *dir)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	char msg[512] = "";
	int r;

	write_fixed(dir, 1024, 256 << 10, 0);   /* 64 blocks of 16 rows */
	T_OK(sluice_dataset_open(dir, &ds));
	sluice_loader_config_init(&cfg);
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.batch_size = 64;                    /* 1 MiB */
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.window_blocks = 16;                 /* 32 blocks: 8.4 MB */
	/* blocks: auto reads these records in place, from the page cache */
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	budget_test_default_cap = 9 * MIB;
	r = sluice_loader_open(ds, &cfg, &ld);
	budget_test_default_cap = 0;
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
	}
	T_EQ(stream_to_end(ld, "window leaves a batch"), 1024);
	T_OK(sluice_loader_stats(ld, &st));
	T_ASSERT(st.memory_bytes <= 9 * MIB);
	T_CONTAINS(st.fallbacks, "blocks, not 16");
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* Stream @n datasets to their end (no shuffle, batches of 10, blocks
 * verified when @verify); the loader must fail as corrupt, naming
 * @file's block 0 at offset 4096. */
static void expect_corrupt_stream(sluice_dataset *const *ds, int n,
				  int verify, const char *file)
{
	struct sluice_stream streams[2];
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	char msg[512];
	int r;

	T_ASSERT(n >= 1 && n <= 2);
	for (int i = 0; i < n; i++)
		streams[i] = (struct sluice_stream){ .dataset = ds[i],
						     .weight = 1 };
	sluice_loader_config_init(&cfg);
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.batch_size = 10;
	cfg.verify = verify;
	cfg.device = SLUICE_DEVICE_HOST;
	T_OK(n == 1 ? sluice_loader_open(ds[0], &cfg, &ld)
		    : sluice_loader_open_streams(streams, n, &cfg, &ld));
	while ((r = sluice_loader_next(ld, &b)) == 0)
		sluice_batch_release(b);
	T_EQ(r, -SLUICE_ECORRUPT);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, file);
	T_CONTAINS(msg, ": block 0: offset 4096");
	sluice_loader_close(ld);
}

struct lines {
	char text[4096];
	size_t len;
};

static void collect(void *ctx, const char *line)
{
	struct lines *l = ctx;
	int n = snprintf(l->text + l->len, sizeof(l->text) - l->len, "%s\n",
			 line);

	if (n > 0 && (size_t)n < sizeof(l->text) - l->len)
		l->len += (size_t)n;
}

/*
 * Two parts written apart and merged (shards joined as they are): part
 * A's values are at most 9 bytes, B's at most 36, so the merged dataset's
 * schema says 36.  Move A's record 8's bytes into record 9 (17 bytes):
 * within the dataset's bound, not A's own.  Only A's own bound, which
 * its shard keeps apart from the one schema the dataset holds, can catch
 * it: first with blocks not verified; then with the block's checksums
 * redone, through every reader: the loader with blocks verified, over
 * the merged dataset and over a mixture of A and B (whose schema says
 * 36 too), sluice_dataset_read and verify.
 */
static void check_shard_bound(const char *dir)
{
	/* block 0 at 4096: x is 10 x 16 bytes, then v's offsets */
	const uint64_t offsets_at = 4096 + 10 * 16;
	sluice_dataset *ds[2] = { NULL, NULL };
	uint64_t offs[11];
	struct lines l = { { 0 }, 0 };
	char a[600], bdir[600], merged[600], path[600], msg[512];
	uint8_t buf[64];
	size_t len;
	const char *parts[2] = { a, bdir };
	int fd;

	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(bdir, sizeof(bdir), "%s/b", dir);
	fx_write(a, 10, 4096, 0, 0);
	fx_write(bdir, 40, 4096, 0, 0);
	shard_path(a, path, sizeof(path), 0);
	fd = open(path, O_RDONLY);
	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, offs, sizeof(offs), (off_t)offsets_at),
	     (ssize_t)sizeof(offs));
	close(fd);
	T_EQ(offs[0], 0);
	T_EQ(offs[10], 45);         /* 0 + 1 + ... + 9 */
	offs[9] = offs[8];
	patch(path, offsets_at + 9 * 8, &offs[9], sizeof(offs[9]));

	snprintf(merged, sizeof(merged), "%s/merged", dir);
	T_OK(sluice_merge(parts, 2, merged, 0, NULL, msg, sizeof(msg)));
	T_OK(sluice_dataset_open(merged, &ds[0]));
	shard_path(merged, path, sizeof(path), 0);
	expect_corrupt_stream(ds, 1, 0, path);
	sluice_dataset_close(ds[0]);

	sp_reseal_block(a, 0);
	snprintf(merged, sizeof(merged), "%s/merged-sealed", dir);
	T_OK(sluice_merge(parts, 2, merged, 0, NULL, msg, sizeof(msg)));
	T_OK(sluice_dataset_open(merged, &ds[0]));
	T_EQ(dataset_table(ds[0])->schema.fields[1].max_value_bytes, 36);
	T_EQ(dataset_table(ds[0])->shards[0].max_value_bytes[1], 9);
	shard_path(merged, path, sizeof(path), 0);
	expect_corrupt_stream(ds, 1, 1, path);
	T_EQ(sluice_dataset_read(ds[0], 9, "v", buf, sizeof(buf), &len),
	     -SLUICE_ECORRUPT);
	sluice_dataset_error(ds[0], msg, sizeof(msg));
	T_CONTAINS(msg, path);
	T_CONTAINS(msg, ": block 0: offset 4096");
	/* B's shards read as before: 36 bytes is within their own bound */
	T_OK(sluice_dataset_read(ds[0], 10 + 36, "v", buf, sizeof(buf), &len));
	T_EQ(len, 36);
	sluice_dataset_close(ds[0]);
	T_EQ(dataset_verify(merged, collect, &l), 1);
	T_CONTAINS(l.text, "data-00000.dls: block 0: offset 4096");
	T_CONTAINS(l.text, "layout");

	T_OK(sluice_dataset_open(a, &ds[0]));
	T_OK(sluice_dataset_open(bdir, &ds[1]));
	shard_path(a, path, sizeof(path), 0);
	expect_corrupt_stream(ds, 2, 1, path);
	sluice_dataset_close(ds[0]);
	sluice_dataset_close(ds[1]);
}

int main(void)
{
	char *dir = fx_tmpdir();
	char path[600], fx[600];

	check_pool();
	check_memory_limit(dir);
	snprintf(path, sizeof(path), "%s/outlier", dir);
	fx_write(path, N, 2048, 0, 0);
	check_outlier(path);
	check_tight_budget(path);
	check_hold_previous(path);
	check_over_budget(path);
	snprintf(path, sizeof(path), "%s/zstd", dir);
	fx_write(path, N, 4096, 3, 700);
	check_outlier(path);
	snprintf(path, sizeof(path), "%s/plain", dir);
	fx_write(path, 600, 2048, 0, 0);
	check_hoarding(path);
	check_release_after_close(path);
	check_release_races_next(path);
	check_release_races_grow(path);
	check_lying_header(path);
	check_shard_bound(dir);
	snprintf(path, sizeof(path), "%s/images", dir);
	check_variable_images(path);
	snprintf(path, sizeof(path), "%s/tiny", dir);
	check_tiny_dataset_epochs(path);
	snprintf(path, sizeof(path), "%s/monotone", dir);
	check_explicit_monotone(path);
	snprintf(path, sizeof(path), "%s/cached", dir);
	check_explicit_cache(path);
	snprintf(path, sizeof(path), "%s/cached_pages", dir);
	check_explicit_cache_pages(path);
	snprintf(path, sizeof(path), "%s/memory", dir);
	check_memory_caches(path);
	snprintf(path, sizeof(path), "%s/zstd_cached", dir);
	snprintf(fx, sizeof(fx), "%s/zstd", dir);
	check_default_caches_zstd(path, fx);
	snprintf(path, sizeof(path), "%s/noise", dir);
	check_host_decode_buffers(fx, path);
	snprintf(path, sizeof(path), "%s/split_monotone", dir);
	check_ranges_split_monotone(path);
	snprintf(path, sizeof(path), "%s/gpu_cap", dir);
	check_default_gpu_cap(path);
	snprintf(path, sizeof(path), "%s/short", dir);
	check_budget_short_of_default(path);
	snprintf(path, sizeof(path), "%s/uneven", dir);
	check_memory_caches_uneven(path);
	snprintf(path, sizeof(path), "%s/window", dir);
	check_window_shrinks(path);
	snprintf(path, sizeof(path), "%s/window3", dir);
	check_window_reads_once(path);
	snprintf(path, sizeof(path), "%s/window_scan", dir);
	check_window_memory_scan(path);
	snprintf(path, sizeof(path), "%s/capped_window", dir);
	/* caps around where the old claims read a block twice (12M) */
	for (uint64_t m = 9; m <= 15; m += 3) {
		char at[1200];

		snprintf(at, sizeof(at), "%s_%llu", path, (unsigned long long)m);
		check_capped_window_reads_once(at, m * MIB);
	}
	snprintf(path, sizeof(path), "%s/few", dir);
	check_batch_above_records(path);
	snprintf(path, sizeof(path), "%s/skewed", dir);
	check_skewed_blocks(path);
	snprintf(path, sizeof(path), "%s/all_in_one", dir);
	check_batch_holds_dataset(path, 0);
	snprintf(path, sizeof(path), "%s/all_in_one_zstd", dir);
	check_batch_holds_dataset(path, 3);
	snprintf(path, sizeof(path), "%s/ranged", dir);
	check_ranges_pin_no_block(path);
	snprintf(path, sizeof(path), "%s/one_block", dir);
	check_one_block_refused_at_open(path);
	snprintf(path, sizeof(path), "%s/capped", dir);
	check_capped_split(path);
	snprintf(path, sizeof(path), "%s/runs", dir);
	check_capped_runs(path);
	snprintf(path, sizeof(path), "%s/ranges", dir);
	check_capped_ranges(path);
	snprintf(path, sizeof(path), "%s/odds", dir);
	check_ranges_odds(path);
	snprintf(path, sizeof(path), "%s/window_batch", dir);
	check_window_leaves_batch(path);
	snprintf(path, sizeof(path), "%s/window_in_place", dir);
	check_window_in_place_batch(path);
	snprintf(path, sizeof(path), "%s/window_in_place_scan", dir);
	check_window_in_place_scan(path);
	snprintf(path, sizeof(path), "%s/in_place_waits", dir);
	check_in_place_waits_for_memory(path);
	snprintf(path, sizeof(path), "%s/in_place_tight", dir);
	check_in_place_tight(path);
	snprintf(path, sizeof(path), "%s/in_place_refused", dir);
	check_in_place_refused_at_open(path);
	snprintf(path, sizeof(path), "%s/full_ranges_gap", dir);
	check_full_ranges_gap(path);
	fx_rmrf(dir);
	free(dir);
	return 0;
}
