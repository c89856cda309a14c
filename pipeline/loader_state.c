/*
 * loader_state.c - the loader's resumable position: taken after the last
 * batch next() returned, restored exactly (the same job shape continues
 * the same sequence) or elastically (another world or batch size goes on
 * with what the earlier jobs of the epoch left; see sampler_split.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "loader.h"

SLUICE_API int sluice_loader_state_get(const sluice_loader *ld,
				       struct sluice_state *st)
{
	const struct loader_core *c = ld ? ld->core : NULL;

	if (!c || !st)
		return -EINVAL;
	*st = (struct sluice_state){
		.seed = c->cfg.seed,
		.shuffle = c->cfg.shuffle,
		.window_blocks = c->cfg.window_blocks,
		.dataset_records = c->ds->record_count,
		.mix = c->mix_id,
		.epoch = c->epoch,
		.world_size = c->cfg.world_size,
		.batch_size = c->cfg.batch_size,
		.drop_last = c->cfg.drop_last ? 1 : 0,
		.batches_consumed = c->consumed,
		.nearlier = c->nearlier,
	};
	for (uint32_t i = 0; i < c->nearlier; i++)
		st->earlier[i] = (struct sluice_state_job){
			.world_size = (int32_t)c->earlier[i].world,
			.drop_last = c->earlier[i].drop_last,
			.consumed = c->earlier[i].consumed,
		};
	return 0;
}

/* Refuse @st with a message; the loader goes on where it was. */
static int state_refused(struct loader_core *c, const struct sluice_state *st,
			 const char *why)
{
	char line[SLUICE_STATE_TEXT_MAX];

	if (sluice_state_format(st, line, sizeof(line)) < 0)
		snprintf(line, sizeof(line), "(invalid state)");
	core_lock(c);
	snprintf(c->err, sizeof(c->err),
		 "saved state does not fit this loader: %s (state: %.300s)",
		 why, line);
	pthread_mutex_unlock(&c->mu);
	return -SLUICE_ESTATE;
}

SLUICE_API int sluice_loader_state_set(sluice_loader *ld,
				       const struct sluice_state *st)
{
	struct loader_core *c = ld ? ld->core : NULL;
	struct sampler_level levels[SAMPLER_MAX_LEVELS + 1];
	uint64_t left, part, nbatches, delivered, batch = 0;
	uint32_t n;
	int drop;

	if (!c || !st)
		return -EINVAL;
	if (st->seed != c->cfg.seed || st->shuffle != c->cfg.shuffle)
		return state_refused(c, st, "another seed or shuffle");
	if (st->shuffle == SLUICE_SHUFFLE_WINDOW &&
	    st->window_blocks != c->cfg.window_blocks)
		return state_refused(c, st, c->window_asked
			? "another shuffle window: this loader's was halved to fit its memory budget (stats.fallbacks); give memory_bytes room for the state's window"
			: "another shuffle window");
	if (st->dataset_records != c->ds->record_count || st->mix != c->mix_id)
		return state_refused(c, st, "another dataset or mixture");
	if (st->world_size < 1 || st->batch_size < 1 ||
	    st->nearlier > SAMPLER_MAX_LEVELS)
		return state_refused(c, st, "invalid state");
	n = st->nearlier;
	for (uint32_t i = 0; i < n; i++) {
		if (st->earlier[i].world_size < 1)
			return state_refused(c, st, "invalid earlier job");
		levels[i] = (struct sampler_level){
			.world = (uint32_t)st->earlier[i].world_size,
			.drop_last = st->earlier[i].drop_last ? 1 : 0,
			.consumed = st->earlier[i].consumed,
		};
	}

	/* The saving job's split, over what its earlier jobs left. */
	if (sampler_chain_length(c->sampler.epoch_len, levels, n, &left))
		return state_refused(c, st, "an earlier job does not fit");
	drop = st->drop_last ? 1 : 0;
	sampler_split(left, (uint32_t)st->world_size, st->batch_size, drop,
		      &part, &nbatches, &delivered);
	if (st->batches_consumed > nbatches)
		return state_refused(c, st, "more batches than the epoch has");
	/* Records delivered count across epochs in 64 bits (stats, the
	 * position a job reports): an epoch whose start is past that is
	 * not one this dataset can reach. */
	if (c->sampler.epoch_len &&
	    st->epoch >= UINT64_MAX / c->sampler.epoch_len) {
		char why[160];

		snprintf(why, sizeof(why), "epoch %llu is past the last epoch "
			 "an epoch of %llu samples can reach (%llu)",
			 (unsigned long long)st->epoch,
			 (unsigned long long)c->sampler.epoch_len,
			 (unsigned long long)(UINT64_MAX /
					      c->sampler.epoch_len - 1));
		return state_refused(c, st, why);
	}

	if (st->world_size == c->cfg.world_size &&
	    st->batch_size == c->cfg.batch_size &&
	    drop == (c->cfg.drop_last ? 1 : 0)) {
		batch = st->batches_consumed; /* the same job, continued */
	} else {
		/* Elastic: the saving job becomes one more earlier job. */
		uint64_t used = st->batches_consumed * st->batch_size;

		if (used > delivered)
			used = delivered;
		if (used > 0) {
			if (n == SAMPLER_MAX_LEVELS)
				return state_refused(c, st,
						     "too many elastic resumes in one epoch");
			levels[n++] = (struct sampler_level){
				.world = (uint32_t)st->world_size,
				.drop_last = drop,
				.consumed = used,
			};
		}
	}
	return loader_restart_at(c, st->epoch, batch, levels, n);
}
