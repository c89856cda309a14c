/*
 * test_loader_elastic.c - elastic exact resume through the real loader:
 * jobs of W ranks take k batches each, rank 0's state line (equal on every
 * rank) starts the next job with another world and batch size; across a
 * chain of three jobs every record is delivered exactly once (without
 * drop_last, plus only the wrapped padding a job's last parts take; with
 * it, no repeats and at most the last job's tail and short batches
 * missing), with the right bytes, for every shuffle mode and W in
 * {1, 2, 3, 4, 8}.  The epoch after is a fresh job of the last shape.
 */
#include "loader_fixture.h"

#define N 700

static sluice_loader *open_rank(sluice_dataset *ds, int shuffle,
				uint32_t batch, int drop_last, int rank,
				int world, const char *state)
{
	struct sluice_loader_config cfg;
	sluice_loader *ld = NULL;
	char msg[512];
	int r;

	sluice_loader_config_init(&cfg);
	cfg.shuffle = shuffle;
	cfg.batch_size = batch;
	cfg.seed = 21;
	cfg.drop_last = drop_last;
	cfg.rank = rank;
	cfg.world_size = world;
	cfg.window_blocks = 3;
	cfg.prefetch_depth = 2;
	cfg.decode_threads = 1;
	cfg.device = SLUICE_DEVICE_HOST;
	r = sluice_loader_open(ds, &cfg, &ld);
	if (r) {
		sluice_loader_error(ld, msg, sizeof(msg));
		T_FAIL_AT("open: %s: %s", sluice_strerror(r), msg);
	}
	if (state) {
		struct sluice_state st;

		T_OK(sluice_state_parse(state, &st));
		r = sluice_loader_state_set(ld, &st);
		if (r) {
			sluice_loader_error(ld, msg, sizeof(msg));
			T_FAIL_AT("state_set: %s: %s", sluice_strerror(r), msg);
		}
	}
	return ld;
}

struct job {
	int world;
	uint32_t batch;
	uint64_t stop;  /* batches per rank; UINT64_MAX: to the epoch's end */
};

/*
 * One job: every rank from @state_in (NULL: fresh), @stop batches each;
 * deliveries counted in @seen.  Writes rank 0's state line to
 * @state_out; returns the batches each rank's epoch had.
 */
static uint64_t run_job(sluice_dataset *ds, int shuffle, int drop,
			const struct job *job, const char *state_in,
			uint32_t *seen, char *state_out)
{
	uint64_t nb = 0;

	for (int r = 0; r < job->world; r++) {
		sluice_loader *ld = open_rank(ds, shuffle, job->batch, drop, r,
					      job->world, state_in);
		struct sluice_state st;
		char line[SLUICE_STATE_TEXT_MAX];
		uint64_t k = 0;
		sluice_batch *b;
		int rc = 0;

		if (r == 0)
			nb = sluice_loader_batches(ld);
		T_EQ(sluice_loader_batches(ld), nb); /* equal parts */
		while (k < job->stop && (rc = sluice_loader_next(ld, &b)) == 0) {
			fx_check_batch(b, seen);
			sluice_batch_release(b);
			k++;
		}
		T_ASSERT(rc == 0 || rc == SLUICE_EOF);
		T_EQ(k, job->stop < nb ? job->stop : nb);
		T_OK(sluice_loader_state_get(ld, &st));
		T_LT(0, sluice_state_format(&st, line, sizeof(line)));
		if (r == 0)
			strcpy(state_out, line);
		else if (strcmp(line, state_out) != 0)
			T_FAIL_AT("rank %d state differs:\n  %s\n  %s", r, line,
				  state_out);
		sluice_loader_close(ld);
	}
	return nb;
}

/* The padding a job delivers: wrapped positions are the last
 * world * per_rank - len positions of the split, at the ends of the
 * last parts; only drop_last = 0 has them. */
static void check_chain(sluice_dataset *ds, int shuffle, int drop,
			const struct job jobs[3])
{
	uint32_t *seen = calloc(N, sizeof(*seen));
	char state[3][SLUICE_STATE_TEXT_MAX];
	uint64_t total = 0, missing = 0, repeats = 0;
	const struct job *last = &jobs[2];

	T_ASSERT(seen);
	run_job(ds, shuffle, drop, &jobs[0], NULL, seen, state[0]);
	run_job(ds, shuffle, drop, &jobs[1], state[0], seen, state[1]);
	run_job(ds, shuffle, drop, &jobs[2], state[1], seen, state[2]);
	for (uint64_t i = 0; i < N; i++) {
		total += seen[i];
		missing += seen[i] == 0;
		repeats += seen[i] > 1 ? seen[i] - 1 : 0;
	}
	if (drop) {
		T_EQ(repeats, 0);
		T_ASSERT(missing <= (uint64_t)(last->world - 1) +
				    (uint64_t)last->world * (last->batch - 1));
	} else {
		uint64_t pad = 0;

		for (int j = 0; j < 3; j++)
			pad += (uint64_t)jobs[j].world - 1;
		T_EQ(missing, 0);
		T_ASSERT(repeats <= pad); /* each job pads under W records */
	}
	/* the chain ended the epoch: the state names the next one, fresh,
	 * and resuming from it is the fresh job of the last shape */
	{
		struct sluice_state st;
		sluice_loader *a, *b;
		sluice_batch *x, *y;
		int ra, rb;

		T_OK(sluice_state_parse(state[2], &st));
		T_EQ(st.epoch, 1);
		T_EQ(st.batches_consumed, 0);
		T_EQ(st.nearlier, 0);
		a = open_rank(ds, shuffle, last->batch, drop, last->world - 1,
			      last->world, state[2]);
		b = open_rank(ds, shuffle, last->batch, drop, last->world - 1,
			      last->world, NULL);
		T_OK(sluice_loader_set_epoch(b, 1));
		T_EQ(sluice_loader_batches(a), sluice_loader_batches(b));
		while ((ra = sluice_loader_next(a, &x)) == 0) {
			rb = sluice_loader_next(b, &y);
			T_EQ(rb, 0);
			T_EQ(sluice_batch_size(x), sluice_batch_size(y));
			T_MEMEQ(sluice_batch_indices(x), sluice_batch_indices(y),
				sluice_batch_size(x) * sizeof(uint64_t));
			sluice_batch_release(x);
			sluice_batch_release(y);
		}
		T_EQ(ra, SLUICE_EOF);
		T_EQ(sluice_loader_next(b, &y), SLUICE_EOF);
		sluice_loader_close(a);
		sluice_loader_close(b);
	}
	(void)total;
	free(seen);
}

/* A state that does not fit is refused and the loader goes on. */
static void check_refusals(sluice_dataset *ds)
{
	char line[SLUICE_STATE_TEXT_MAX];
	uint32_t *seen = calloc(N, sizeof(*seen));
	struct job j = {2, 10, 3};
	struct sluice_state st, good;
	sluice_loader *ld;
	char msg[512];

	T_ASSERT(seen);
	run_job(ds, SLUICE_SHUFFLE_WINDOW, 0, &j, NULL, seen, line);
	T_OK(sluice_state_parse(line, &good));
	ld = open_rank(ds, SLUICE_SHUFFLE_WINDOW, 10, 0, 0, 3, NULL);
	st = good;
	st.seed++;
	T_EQ(sluice_loader_state_set(ld, &st), -SLUICE_ESTATE);
	st = good;
	st.window_blocks++;
	T_EQ(sluice_loader_state_set(ld, &st), -SLUICE_ESTATE);
	st = good;
	st.dataset_records++;
	T_EQ(sluice_loader_state_set(ld, &st), -SLUICE_ESTATE);
	st = good;
	st.batches_consumed = 1000; /* past the epoch */
	T_EQ(sluice_loader_state_set(ld, &st), -SLUICE_ESTATE);
	st = good;
	st.nearlier = 1;
	st.earlier[0] = (struct sluice_state_job){4, 0, 1000};
	T_EQ(sluice_loader_state_set(ld, &st), -SLUICE_ESTATE);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_ASSERT(strstr(msg, "does not fit"));
	/* a full chain cannot grow by one more elastic job */
	st = good;
	st.nearlier = SLUICE_STATE_MAX_EARLIER;
	for (int i = 0; i < SLUICE_STATE_MAX_EARLIER; i++)
		st.earlier[i] = (struct sluice_state_job){1, 0, 1};
	T_EQ(sluice_loader_state_set(ld, &st), -SLUICE_ESTATE);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_ASSERT(strstr(msg, "too many"));
	/* ... but the same shape continues it */
	st.world_size = 3;
	st.batches_consumed = 0;
	T_OK(sluice_loader_state_set(ld, &st));
	/* the loader still works after the refusals */
	{
		sluice_batch *b;

		T_OK(sluice_loader_next(ld, &b));
		sluice_batch_release(b);
	}
	sluice_loader_close(ld);
	free(seen);
}

int main(void)
{
	static const struct job chains[][3] = {
		{ {4, 16, 3}, {3, 10, 4}, {2, 7, UINT64_MAX} },
		{ {1, 32, 5}, {8, 5, 2}, {3, 9, UINT64_MAX} },
		{ {8, 4, 6}, {1, 50, 3}, {4, 16, UINT64_MAX} },
		{ {2, 9, 1}, {4, 11, 0}, {1, 20, UINT64_MAX} },
		{ {3, 20, 2}, {2, 16, 7}, {8, 3, UINT64_MAX} },
	};
	char *dir = fx_tmpdir();
	char path[600];
	sluice_dataset *ds = NULL;

	snprintf(path, sizeof(path), "%s/d", dir);
	fx_write(path, N, 1500, 3, 170); /* zstd, many shards, uneven */
	T_OK(sluice_dataset_open(path, &ds));
	for (int mode = 0; mode <= SLUICE_SHUFFLE_FULL; mode++)
		for (int drop = 0; drop < 2; drop++)
			for (size_t c = 0; c < sizeof(chains) / sizeof(*chains);
			     c++)
				check_chain(ds, mode, drop, chains[c]);
	check_refusals(ds);
	sluice_dataset_close(ds);
	fx_rmrf(dir);
	free(dir);
	return 0;
}
