/*
 * ranges.h - record-range reads (ranges.c; what is known from open:
 * ranges_open.c): the reads and pieces of a batch's record ranges, the
 * state each slot and the loader keep for them.
 */
#ifndef SLUICE_PIPELINE_RANGES_H
#define SLUICE_PIPELINE_RANGES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlpack_shard.h"
#include "../io/ring.h"
#include "jobs.h"

struct loader_core;
struct slot;

/* rec_entry of a record read by its byte ranges (ranges.c), which has
 * no cache entry. */
#define RANGE_ENTRY UINT32_MAX
/* Read the gap between two ranges rather than issue a second request:
 * on NVMe 16 KiB more of a read costs less than another command. */
#define RANGE_GAP (16u << 10)
/* Neighbouring ranges are read as one up to this long, to keep each read
 * a reasonable size (ranges.read_max unless staged). */
#define RANGE_READ_MAX ((uint64_t)4 << 20)

/* One io_uring read of a batch's record ranges (ranges.c): neighbouring
 * records' ranges coalesced.  Its io_read's user is NULL, which tells it
 * from a cache entry's read (user: the entry). */
struct range_read {
	struct io_read rd;      /* first: the ring hands back &rd */
	struct slot *slot;
	uint64_t buf_off;       /* where it lands in the slot's ranges.buf */
	uint32_t piece_lo, piece_hi; /* its pieces: ranges.order[lo, hi) */
	uint32_t span_lo, span_hi;   /* the spans it holds: ranges.spans */
	uint64_t submit_ns;
	int error;              /* negative when the read failed */
	int decoded;            /* its spans were decoded by the worker
				   that read it (ranges_decode_read) */
};

/* Main fields at least this long are read straight into their batch
 * where they can be (ranges_in_place_init): a read each, never joined
 * with a neighbour's, whose system call costs less than such a copy.
 * range_reads auto reads them so in shuffles other than full from
 * RANGE_AUTO_IN_PLACE_MIN up: there the alternative is whole blocks
 * read in order, and on the VM (GB/s, blocks -> in place, medians of 3)
 * 4 KiB records lost (none 9.89 -> 6.16, window 6.19 -> 5.05), 8 KiB
 * records lost under none (11.54 -> 10.29), and 16 KiB won every
 * shuffle (none 11.58 -> 13.19, window 7.23 -> 10.14; medians of 5). */
#define RANGE_IN_PLACE_MIN ((uint64_t)4 << 10)
#define RANGE_AUTO_IN_PLACE_MIN ((uint64_t)16 << 10)
#ifdef SLUICE_TESTING
/* Tests read shorter records in place: the least length, 0 for
 * RANGE_IN_PLACE_MIN. */
extern uint64_t ranges_test_in_place_min;
#endif

/* One field of one record, to be read (ranges.c; allocated for the
 * planner at open, ranges_open.c).  A framed block's piece reads the
 * frames that hold it. */
struct range_piece {
	uint32_t file;
	uint32_t slot_index;    /* r * nfields + f */
	uint64_t offset, len;   /* in the file: the bytes to read */
	uint64_t block;         /* framed: its block; else UINT64_MAX */
	uint64_t in_block;      /* framed: where it lies decoded */
	uint32_t k0, k1;        /* framed: its frames */
};

/* Frames of one block that a batch's pieces need, read as one range and
 * decoded after the reads' bytes in the slot's buffer (ranges.c). */
struct range_span {
	uint64_t block;
	uint32_t k0, k1;        /* frames k0..k1 */
	uint32_t read;          /* the read that holds them */
	uint32_t piece_lo, piece_hi; /* its pieces: ranges.order[lo, hi) */
	uint64_t stored_at;     /* in buf: their stored bytes */
	uint64_t decoded_at;    /* in buf: what they decode to (in host:
				   frames_in_place) */
};

/* A slot's record-range reads (ranges.c), arrays allocated only when
 * the loader uses them.  The records whose rec_entry is RANGE_ENTRY are
 * read by range into buf (io pool), verified, then gathered. */
/* Why a record read by range is bad (slot_ranges.rec_bad). */
enum range_bad {
	RANGE_BAD_SUM = 1,      /* its record checksum does not match */
	RANGE_BAD_READ,         /* a read of it failed: the file ends before
				   its index says */
	RANGE_BAD_FRAME,        /* a frame of it does not decode to its
				   seek table's size */
};

struct slot_ranges {
	uint32_t nranged;       /* such records [mu] */
	uint64_t *rec_block;    /* their global block */
	uint64_t *rec_src;      /* [r * nfields + f]: field f of record r in
				   buf */
	uint32_t *order;        /* the pieces read, r * nfields + f, in the
				   reads' order (build_reads) */
	uint8_t *rec_bad;       /* 0, or why it is bad: RANGE_BAD_* */
	struct range_read *reads;
	uint32_t nreads;
	struct range_span *spans;   /* framed blocks' frames to decode */
	uint32_t nspans;
	uint32_t spans_parts_left;  /* decode parts running [mu] */
	uint32_t reads_pending; /* reads not back yet [mu] */
	uint32_t parts_left;    /* verify parts running [mu] */
	int failed;             /* a read failed: look records up [mu] */
	int error;              /* fatal (not corrupt data) read error [mu] */
	int verify_in_copy;     /* checksums checked by the assembly, a few
				   records before their copy (runs.c) */
	int in_place;           /* the records' main field is read straight
				   into the batch's memory, taken when it
				   was planned, and checked there by the
				   worker that read it: rec_src and the
				   reads' buf_off are offsets in host [mu] */
	int awaits_memory;      /* in place, planned before its memory: 1
				   waiting for it (SLOT_MEMORY), 2 granted,
				   its reads for the io thread to submit
				   (ranges.c's defer_locked) [mu] */
	int frames_in_place;    /* in place, from framed blocks: the reads
				   land in buf and each span decodes into
				   its record's row (decoded_at, in host),
				   checked there (span_decode) [mu] */
	uint64_t off, len;      /* in the io pool; 0 len: none [mu] */
	uint8_t *buf;
	/* ranges.device: the resident fields of the batch's range records,
	 * copied after the reads' bytes in buf (their rec_src point there)
	 * and uploaded with them, for the gather [mu] */
	uint64_t resident_off, resident_len;
};

/* The loader's: record-range reads (ranges.c) */
struct loader_ranges {
	int on;                     /* on: eligible records read by range */
	int all;                    /* every block is */
	int device;                 /* their reads go through the staging
				       buffers to the io mirror, checked
				       there, and the batches are gathered
				       on the device (ranges_device_init) */
	const char *device_lost;    /* why the ranges do not go to the
				       device after all (ranges_device_init),
				       or NULL */
	uint64_t read_max;          /* longest read: RANGE_READ_MAX, or a
				       staging buffer */
	int in_place;               /* batches may read their records
				       straight into their memory
				       (ranges_in_place_init) */
	int for_in_place;           /* on only for that: range_reads auto,
				       a shuffle other than full
				       (in_place_likely) */
	const char *in_place_off;   /* why not, where it might have, or
				       NULL */
	struct ranges_odds *odds;   /* a full shuffle's records' sizes
				       (ranges_batch_odds) */
	uint64_t io_want;           /* io memory their batches in flight
				       take at most, and stage_want
				       (budget.c adds it) */
	uint64_t io_least;          /* what one batch's ranges take at most,
				       each value at its field's largest,
				       and stage_want: the io memory a
				       budget short of io_want keeps
				       (budget.c) */
	uint64_t stage_want;        /* the staging buffers they may go
				       through (stage_ranges_want) */
	uint32_t main_field;        /* the largest: verified in its copy */
	uint8_t *resident[DLS_MAX_FIELDS]; /* small fields of every
				       record, read at open; NULL: by range */
	/* Datasets with variable fields: their raw blocks' layout, read at
	 * open (shard_read_layout), for record ranges (sec and offs) or for
	 * blocks fetched to the device (sec only: fetch_layout_open).  NULL
	 * when every field is fixed, or neither reads it. */
	uint64_t *sec;              /* [g * nfields + f]: section start in
				       block g; [g * nfields] UINT64_MAX: g
				       is read whole */
	uint64_t *offs[DLS_MAX_FIELDS]; /* variable field f: block g's
				       offsets at block_first[g] + g */
	int layout_read;            /* sec and offs are (load_layout) */
	int layout_all;             /* every block's is known: batches are
				       sized by their values' lengths
				       (ranges_layout_open) */
	/* zstd blocks of format v4: their frames (load_frames; n 0: none,
	 * read whole), NULL when no shard is v4 */
	struct block_frames *frames;
	uint64_t nframes;           /* its entries */
	uint64_t framed;            /* blocks with frames */
	uint64_t frames_unpaid;     /* with frames, read whole all the same
				       (frames_pay) */
	uint64_t **record_sums;     /* per shard, loaded at open; NULL: none
				       (its blocks are read whole when
				       verify is on) */
	uint32_t record_sums_shards; /* entries of record_sums */
	uint64_t record_sums_bytes; /* what they take (RANGE_SUMS_MAX) */
	const char *off_why;        /* why range_reads auto is off after
				       all (ranges_open), or NULL */
	char whole_note[400];       /* a full shuffle reads blocks whole,
				       which and why (ranges_whole_note) */
	uint32_t max_reads;         /* batch_size * fields */
	struct range_piece *pieces; /* the planner's scratch */
	int budget_in_place;        /* the budget keeps no io memory for the
				       ranges, read in place (ranges_open):
				       the ring opens the shards buffered,
				       as in place needs */
	uint32_t granted;           /* slots whose awaits_memory is 2 [mu] */
	_Atomic uint64_t reads, records;
	_Atomic uint64_t records_in_place; /* of records: read straight
					      into their batch */
};

/* ranges_open.c */
int ranges_open(struct loader_core *c, uint64_t batch_fixed, char *err,
		size_t errlen);
void ranges_close(struct loader_core *c);
int range_block(const struct loader_core *c, uint64_t g);
int ranges_device_suits(const struct loader_core *c);
int block_tables_known(const struct loader_core *c, uint64_t g);
int ranges_layout_open(struct loader_core *c, char *err, size_t errlen);
double ranges_batch_odds(const struct loader_core *c, uint64_t io,
			 uint64_t values);
struct block_view;
int block_tables_check(const struct loader_core *c, uint64_t g,
		       const uint8_t *raw, const struct block_view *v);
void ranges_device_init(struct loader_core *c);
void ranges_in_place_init(struct loader_core *c);
void ranges_whole_note(struct loader_core *c);
/* Where field @f of record @i of block @g lies in its file (a framed
 * block's: the frame holding its first byte); its length in @len. */
uint64_t record_field_at(const struct loader_core *c, uint64_t g,
			 uint32_t i, uint32_t f, uint64_t *len);
/* The same, in its decoded block. */
uint64_t record_field_in_block(const struct loader_core *c, uint64_t g,
			       uint32_t i, uint32_t f, uint64_t *len);
struct block_frames;
const struct block_frames *range_frames(const struct loader_core *c,
					 uint64_t g);

/* ranges.c */
int slot_ranges_init(struct loader_core *c, struct slot *s);
void slot_ranges_free(struct slot *s);
int ranges_plan_locked(struct loader_core *c, struct slot *s,
		       unsigned *nsubmit);
/* @return: 1 when it was its batch's last read out, else 0 */
int range_read_done_locked(struct loader_core *c, struct io_read *rd);
void ranges_verify_part(struct loader_core *c, struct job j);
typedef struct ZSTD_DCtx_s ZSTD_DCtx;
void ranges_decode_part(struct loader_core *c, struct job j,
			ZSTD_DCtx *dctx);
uint64_t ranges_decode_read(struct loader_core *c, struct range_read *rr,
			    ZSTD_DCtx *dctx);
void ranges_memory_granted_locked(struct loader_core *c, struct slot *s);
int ranges_read_granted_locked(struct loader_core *c, unsigned *nsubmit);
void slot_ranges_release_locked(struct loader_core *c, struct slot *s);
int range_record_check(struct loader_core *c, struct slot *s, uint32_t r);
uint32_t slot_ranges_keep(const struct loader_core *c, struct slot *s,
			  uint32_t from, uint32_t to);
void ranges_check_fetched(struct loader_core *c, struct range_read *rr,
			  const uint8_t *bytes, int read_ok);

#endif /* SLUICE_PIPELINE_RANGES_H */
