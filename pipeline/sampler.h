/*
 * sampler.h - which records, in which order, in which batch: a pure
 * function of (dataset block layout, seed, epoch, shuffle, rank,
 * world_size, batch_size, drop_last, and the earlier jobs of the epoch
 * when it was resumed elastically).  No I/O.
 *
 * Memory is O(blocks), never O(records): record i of an epoch is computed
 * when asked for (a keyed permutation for full shuffle, a per-epoch block
 * order for block and window shuffle).
 */
#ifndef SLUICE_PIPELINE_SAMPLER_H
#define SLUICE_PIPELINE_SAMPLER_H

#include <stdint.h>

#include "permutation.h"
#include "rng.h"
#include "sluice.h"

struct sampler_config {
	int shuffle;            /* enum sluice_shuffle */
	uint32_t window_blocks; /* W, for SHUFFLE_WINDOW */
	uint64_t seed;
	uint32_t batch_size;
	int drop_last;
	uint32_t rank;
	uint32_t world_size;
};

/*
 * An earlier job of this epoch (elastic resume): @world ranks each
 * consumed the first @consumed positions of their part of the sequence
 * that job saw, split with @drop_last.  What they did not consume, in
 * sequence order, is the sequence the next job splits.
 */
struct sampler_level {
	uint32_t world;
	int drop_last;
	uint64_t consumed;
};

#define SAMPLER_MAX_LEVELS SLUICE_STATE_MAX_EARLIER

/* A level's shape, precomputed: position mapping is O(1) per level. */
struct sampler_level_shape {
	uint64_t len;           /* of the sequence it split */
	uint64_t part;          /* P: positions per rank */
	uint64_t consumed;      /* c <= P */
	uint64_t full_parts;    /* parts wholly inside the sequence */
	uint64_t rest_start;    /* the one contiguous run after them */
};

/*
 * A mixture's part: one dataset's blocks [first_block, first_block +
 * nblocks) of the global layout, and how many samples of it an epoch
 * takes (its records repeated or subsampled as needed).
 */
struct sampler_stream_spec {
	uint64_t first_block, nblocks;
	uint64_t samples;
};

struct sampler_stream {
	uint64_t first_block, nblocks;
	uint64_t first_record, records;
	uint64_t samples;       /* per epoch */
	uint64_t pos_base;      /* its nblocks + 1 entries of block_pos */
	/* the current epoch */
	uint64_t phase;         /* where its share starts in the interleave */
	uint64_t key;           /* permutation keys of its repeats */
	struct perm perm;       /* full shuffle, first pass */
};

/*
 * The dataset seen as blocks: block b holds global records
 * [block_first[b], block_first[b + 1]).  nblocks + 1 entries, borrowed
 * for the sampler's lifetime.
 */
struct sampler {
	struct sampler_config cfg;
	uint64_t nblocks;
	const uint64_t *block_first;
	uint64_t nrecords;
	uint32_t nstreams;      /* 1 for a plain dataset */
	struct sampler_stream *streams;
	uint64_t epoch_len;     /* samples per epoch: sum of the streams' */
	/* the current epoch */
	uint64_t epoch;
	uint64_t generation;    /* bumped by every set_epoch/resume */
	uint32_t nlevels;
	struct sampler_level levels[SAMPLER_MAX_LEVELS];
	struct sampler_level_shape shapes[SAMPLER_MAX_LEVELS];
	uint64_t seq_len;       /* records left for this job's ranks */
	uint64_t per_rank;      /* positions this rank's part spans */
	uint64_t nbatches;
	/* shuffle of the epoch */
	uint64_t window_key;    /* SHUFFLE_WINDOW: keys each window's perm */
	uint64_t *block_order;  /* BLOCK, WINDOW: nblocks, each stream's
				   range shuffled within itself */
	uint64_t *block_pos;    /* per stream nblocks + 1: its sequence
				   position of block_order[j]'s first record */
};

/*
 * Epoch sequence: a permutation of all records by the shuffle mode
 * (seeded by seed and epoch only, so every rank computes the same one),
 * then split across ranks into equal contiguous parts: rank r takes
 * positions [r * per_rank, (r + 1) * per_rank), so each rank reads only
 * about 1/world_size of the blocks.  With drop_last the tail that does not
 * fill every rank is dropped, otherwise the sequence wraps around to its
 * start to fill the last part.  Within a rank, batches are consecutive
 * runs of batch_size; a last short batch is dropped with drop_last.
 */
int sampler_init(struct sampler *s, const struct sampler_config *cfg,
		 const uint64_t *block_first, uint64_t nblocks);

/*
 * A mixture of @nspecs streams that tile the blocks in order.  An epoch
 * interleaves the streams' samples evenly (every run of positions holds
 * each stream's share, to within one per stream), each stream's samples
 * in its own shuffled order: a stream with fewer records than samples
 * repeats, full shuffle with a fresh permutation per repeat, block and
 * window with their block order started elsewhere and windows
 * reshuffled; one with more records than samples takes the first of its
 * epoch order, which changes every epoch.
 * @return: 0; -EINVAL (streams do not tile the blocks, or samples from an
 *	empty stream, or the sum overflows); -ENOMEM.
 */
int sampler_init_streams(struct sampler *s, const struct sampler_config *cfg,
			 const uint64_t *block_first, uint64_t nblocks,
			 const struct sampler_stream_spec *specs,
			 uint32_t nspecs);
void sampler_destroy(struct sampler *s);

/* Start @epoch afresh: O(blocks) for block and window shuffle (one pass
 * over the block order), O(1) otherwise; allocation-free. */
void sampler_set_epoch(struct sampler *s, uint64_t epoch);

/*
 * Start @epoch as the job that follows @nlevels earlier jobs of it: the
 * sequence is what they left, split across this job's ranks.
 * @return: 0; -EINVAL when a level does not fit (too many, a world of 0,
 *	more consumed than its part holds); the sampler is then unchanged.
 */
int sampler_resume(struct sampler *s, uint64_t epoch,
		   const struct sampler_level *levels, uint32_t nlevels);

/* Length of the sequence @nlevels earlier jobs leave of an epoch of
 * @epoch_len; -EINVAL when a level does not fit (as sampler_resume). */
int sampler_chain_length(uint64_t epoch_len, const struct sampler_level *levels,
			 uint32_t nlevels, uint64_t *len);

/* Records in batch @k of the current epoch (0 past the end). */
uint32_t sampler_batch_count(const struct sampler *s, uint64_t k);

/* Fill @out with the records of batch @k; returns their count. */
uint32_t sampler_batch(const struct sampler *s, uint64_t k, uint64_t *out);

/* Record at position @i (< per_rank) of this rank's part. */
uint64_t sampler_rank_record(const struct sampler *s, uint64_t i);

/* Does an epoch take some record more than once (a mixture's stream
 * with more samples than records)?  Then a batch may too. */
int sampler_repeats(const struct sampler *s);

/*
 * The permutation a position last went through (a window's, or a
 * stream's repeat's) and that window's place, so neighbouring positions
 * reuse them.  Zero-initialise; valid across epochs (it notices).
 */
struct sampler_memo_slot {
	int valid;
	uint64_t generation;
	uint32_t stream;
	uint64_t round, window;
	struct perm perm;
	uint64_t first, end, lo, hi; /* window: blocks, stream positions */
};

/* One slot per stream (modulo): a mixture alternates streams. */
#define SAMPLER_MEMO_SLOTS 8
struct sampler_memo {
	struct sampler_memo_slot slot[SAMPLER_MEMO_SLOTS];
};

/*
 * What this rank's positions from @i on need, for reading ahead: a run of
 * @positions (>= 1) positions that stay within one window (window
 * shuffle), one block (block, none) or one record (full), and
 * the blocks that run may touch: @blocks[0, nblocks) (global ids), or,
 * when nblocks is 0, the block of @record.  O(levels + log blocks).
 * In a mixture the run is one position, with its stream's block or
 * window.  @memo: reused across calls by one caller (NULL: none).
 */
struct sampler_span {
	uint64_t positions;
	const uint64_t *blocks;
	uint64_t nblocks;
	uint64_t record;
	uint64_t one;           /* storage for a single block */
};
void sampler_span(const struct sampler *s, uint64_t i,
		  struct sampler_memo *memo, struct sampler_span *out);

/* Record at position @p (< epoch_len) of the epoch's full sequence. */
uint64_t sampler_sequence_record(const struct sampler *s, uint64_t p);

/*
 * How @world ranks split a sequence of @len: positions per rank, batches
 * per rank, and records each rank delivers in its batches.
 */
void sampler_split(uint64_t len, uint32_t world, uint32_t batch,
		   int drop_last, uint64_t *per_rank, uint64_t *nbatches,
		   uint64_t *delivered);

/* sampler_split.c: a level's shapes over @epoch_len and the length left
 * (-EINVAL when one does not fit); position of a level's output -> of
 * the sequence it split. */
int sampler_chain_shapes(uint64_t epoch_len, const struct sampler_level *levels,
			 uint32_t nlevels, struct sampler_level_shape *shapes,
			 uint64_t *len);
uint64_t sampler_level_map(const struct sampler_level_shape *sh, uint64_t q);

#endif /* SLUICE_PIPELINE_SAMPLER_H */
