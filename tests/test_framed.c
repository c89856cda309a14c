/*
 * test_framed.c - zstd records decoded from their own frames straight
 * into their batch (pipeline/framed.c): under a window shuffle, a full
 * one (blocks read whole) and a block shuffle of batches larger than a
 * block, the same batches, byte for byte, as blocks decoded whole
 * (SLUICE_FRAMED=0), and batches smaller than a block still view it;
 * a block another writer cut otherwise is decoded whole; and a frame
 * that zstd refuses, its block's checksum right, fails the loader with
 * the shard's path and the block's offset, as the whole decode does.
 * Each for blocks a worker reads (the page cache holds them), and blocks
 * the ring reads, buffered and O_DIRECT (where the filesystem allows).
 * A full shuffle's record ranges decode each frame straight into its row
 * (the same batches as through io memory), and there a bad frame, or a
 * frame that decodes to other bytes, names the record.
 *
 * Fields: d, 16 KiB a record (a frame each), z of 12 bytes (its section
 * ends off 8 bytes: padding before the next) and y, an int64.
 */
#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_frameHeaderSize */
#include <zstd.h>

#include "loader_fixture.h"    /* fx_tmpdir, fx_rmrf */
#include "ring_test.h"
#include "shard_patch.h"
#include "t_field.h"

#define NREC 1500u
#define D (16u << 10)
#define Z 12u

/* How a run shuffles: its mode, batch size and range reads. */
struct shape {
	enum sluice_shuffle shuffle;
	uint32_t batch;
	enum sluice_range_reads ranges;
};
static const struct shape window = { SLUICE_SHUFFLE_WINDOW, 48,
				     SLUICE_RANGE_READS_AUTO };

/* Who reads the blocks: a decode worker (stage.c's fetches), or the
 * ring (SLUICE_HOST_STAGED_DECODE=0), buffered or O_DIRECT. */
enum reader { BY_WORKER, BY_RING, BY_RING_DIRECT, READERS };
static const char *const reader_names[READERS] = {
	"worker", "ring", "ring O_DIRECT"
};

/* about 6 bits of entropy a byte: zstd keeps about 3/4 */
static uint8_t ref_byte(uint64_t i, uint64_t k)
{
	uint64_t x = (i * D + k + 1) * 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;    /* splitmix64 */
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return (uint8_t)(x >> 58);
}

static void write_data(const char *dir)
{
	struct sluice_field f[3] = {
		t_field("d", (DLDataType){ kDLUInt, 8, 1 }, D),
		t_field("z", (DLDataType){ kDLUInt, 8, 1 }, Z),
		t_field("y", (DLDataType){ kDLInt, 64, 1 }, 1),
	};
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t d[D], z[Z];

	sluice_writer_config_init(&wc);
	wc.block_size = 1u << 20;       /* 63 records a block */
	/* blocks on 512-byte boundaries: read O_DIRECT at 4 KiB
	 * (BY_RING_DIRECT), most start past their read's first byte */
	wc.alignment = 512;
	wc.compression_level = 1;
	T_OK(sluice_writer_open(dir, f, 3, &wc, &w));
	for (uint64_t i = 0; i < NREC; i++) {
		int64_t y = (int64_t)i * 3 - 7;
		const void *vals[3] = { d, z, &y };
		uint64_t len[3] = { D, Z, sizeof(y) };

		for (uint64_t k = 0; k < D; k++)
			d[k] = ref_byte(i, k);
		memset(z, (int)(i % 251), Z);
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));
}

struct outcome {
	int r;                  /* next()'s last return */
	char msg[512];
	uint64_t records, decoded_in_batch, viewed, memory, in_place;
	uint8_t *bytes;         /* every batch's d, z, y, in order */
	uint64_t len;
};

/* Batch @b's fields appended to @o's bytes (at most @cap), its records
 * checked against the writer's, and released. */
static void take_batch(sluice_batch *b, struct outcome *o, uint64_t cap)
{
	static const char *const names[3] = { "d", "z", "y" };
	uint32_t n = sluice_batch_size(b);
	const uint64_t *idx = sluice_batch_indices(b);

	for (int f = 0; f < 3; f++) {
		DLManagedTensor *t;
		uint64_t len = (uint64_t)n * (f == 0 ? D : f == 1 ? Z : 8);

		T_OK(sluice_batch_tensor(b, names[f], 0, &t));
		T_ASSERT(o->len + len <= cap);
		memcpy(o->bytes + o->len, t->dl_tensor.data, len);
		o->len += len;
		t->deleter(t);
	}
	for (uint32_t r = 0; r < n; r++) {
		const uint8_t *d = o->bytes + o->len -
				   (uint64_t)n * (D + Z + 8) + (uint64_t)r * D;

		for (uint64_t k = 0; k < D; k += 997)
			if (d[k] != ref_byte(idx[r], k))
				T_FAIL_AT("record %llu byte %llu",
					  (unsigned long long)idx[r],
					  (unsigned long long)k);
	}
	o->records += n;
	sluice_batch_release(b);
}

/* Two epochs shuffled as @sh says, host batches, frames decoded into
 * their batch unless @whole. */
static void run(sluice_dataset *ds, const struct shape *sh,
		enum reader by, int whole, struct outcome *o)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld = NULL;
	sluice_batch *b;
	uint64_t cap = 2ull * NREC * (D + Z + 8);

	memset(o, 0, sizeof(*o));
	o->bytes = malloc(cap);
	T_ASSERT(o->bytes != NULL);
	if (whole)
		T_OK(setenv("SLUICE_FRAMED", "0", 1) ? -1 : 0);
	if (by == BY_RING)
		T_OK(setenv("SLUICE_HOST_STAGED_DECODE", "0", 1) ? -1 : 0);
	sluice_loader_config_init(&cfg);
	if (by == BY_RING_DIRECT) {
		cfg.direct_io = SLUICE_DIRECT_IO_ON;
		io_ring_test_set_dio_alignment(4096);
	}
	cfg.batch_size = sh->batch;
	cfg.shuffle = sh->shuffle;
	cfg.range_reads = sh->ranges;
	cfg.seed = 5;
	cfg.epochs = 2;
	cfg.decode_threads = 2;
	cfg.device = SLUICE_DEVICE_HOST;
	/* less than the dataset's 24.6 MB: its blocks read every epoch */
	cfg.memory_bytes = 12u << 20;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	io_ring_test_set_dio_alignment(0);
	/* an epoch's end is SLUICE_EOF; the last one's, or a failure,
	 * ends the run */
	for (;;) {
		uint64_t before = o->records;

		while ((o->r = sluice_loader_next(ld, &b)) == 0)
			take_batch(b, o, cap);
		if (o->r != SLUICE_EOF || o->records == before ||
		    o->records == 2ull * NREC)
			break;
	}
	sluice_loader_error(ld, o->msg, sizeof(o->msg));
	T_OK(sluice_loader_stats(ld, &st));
	o->decoded_in_batch = st.records_decoded_in_batch;
	o->viewed = st.batches_viewed;
	o->in_place = st.range_records_in_place;
	o->memory = st.memory_bytes;
	sluice_loader_close(ld);
	T_OK(unsetenv("SLUICE_FRAMED") ? -1 : 0);
	T_OK(unsetenv("SLUICE_HOST_STAGED_DECODE") ? -1 : 0);
}

/* Both ways give the same batches, whoever reads the blocks; @framed_records
 * of them decoded from their frames (all but those of a block decoded
 * whole). */
static void check_same_by(const char *dir, const struct shape *sh,
			  enum reader by, uint64_t framed_records)
{
	struct outcome o[2];
	sluice_dataset *ds = NULL;

	T_OK(sluice_dataset_open(dir, &ds));
	run(ds, sh, by, 0, &o[0]);
	run(ds, sh, by, 1, &o[1]);
	printf("%s, read by the %s, shuffle %d, batch %u: %llu records, %llu decoded from their frames, %llu batches viewed (%llu whole)\n",
	       dir, reader_names[by], (int)sh->shuffle, sh->batch,
	       (unsigned long long)o[0].records,
	       (unsigned long long)o[0].decoded_in_batch,
	       (unsigned long long)o[0].viewed,
	       (unsigned long long)o[1].viewed);
	for (int k = 0; k < 2; k++) {
		T_EQ(o[k].r, SLUICE_EOF);
		T_EQ(o[k].records, 2 * NREC);
		T_ASSERT(o[k].memory <= 12u << 20);
	}
	T_EQ(o[0].decoded_in_batch, framed_records);
	T_EQ(o[1].decoded_in_batch, 0);
	/* the views stay (the ring's entries, stored and decoded bytes,
	 * take more of the 12 MiB: none are viewed either way) */
	if (!framed_records && by == BY_WORKER)
		T_LT(0, o[0].viewed);
	T_EQ(o[0].len, o[1].len);
	T_MEMEQ(o[0].bytes, o[1].bytes, o[0].len);
	free(o[0].bytes);
	free(o[1].bytes);
	sluice_dataset_close(ds);
}

static void check_same(const char *dir, const struct shape *sh,
		       uint64_t framed_records)
{
	for (int by = 0; by < READERS; by++)
		check_same_by(dir, sh, (enum reader)by, framed_records);
}

/* A full shuffle's record ranges: each record's frame decoded straight
 * into its row, the same batches as through io memory
 * (SLUICE_RANGES_IN_PLACE=0), read by a worker or by the ring (O_DIRECT,
 * its spans decoded by parts). */
static void check_ranges_in_place(const char *dir)
{
	const struct shape full = { SLUICE_SHUFFLE_FULL, 48,
				    SLUICE_RANGE_READS_AUTO };
	static const enum reader readers[2] = { BY_WORKER, BY_RING_DIRECT };
	struct outcome o[2];
	sluice_dataset *ds = NULL;

	T_OK(sluice_dataset_open(dir, &ds));
	for (int k = 0; k < 2; k++) {
		run(ds, &full, readers[k], 0, &o[0]);
		T_OK(setenv("SLUICE_RANGES_IN_PLACE", "0", 1) ? -1 : 0);
		run(ds, &full, readers[k], 0, &o[1]);
		T_OK(unsetenv("SLUICE_RANGES_IN_PLACE") ? -1 : 0);
		printf("%s, read by the %s, full shuffle by range: %llu records, %llu decoded in place (%llu through io memory)\n",
		       dir, reader_names[readers[k]],
		       (unsigned long long)o[0].records,
		       (unsigned long long)o[0].in_place,
		       (unsigned long long)o[1].records);
		for (int i = 0; i < 2; i++) {
			T_EQ(o[i].r, SLUICE_EOF);
			T_EQ(o[i].records, 2 * NREC);
		}
		T_EQ(o[0].in_place, 2 * NREC);
		T_EQ(o[0].decoded_in_batch, 2 * NREC);
		T_EQ(o[1].in_place, 0);
		T_EQ(o[1].decoded_in_batch, 0);
		T_EQ(o[0].len, o[1].len);
		T_MEMEQ(o[0].bytes, o[1].bytes, o[0].len);
		free(o[0].bytes);
		free(o[1].bytes);
	}
	sluice_dataset_close(ds);
}

/* Block @at's decoded bytes (@e: its index entry). */
static uint8_t *decoded_block(const char *dir, uint32_t at,
			      struct dls_index_entry_disk *e)
{
	uint8_t *stored = sp_block(dir, at, e);
	uint8_t *raw = malloc(e->raw_size);
	size_t got;

	T_ASSERT(raw != NULL);
	got = ZSTD_decompress(raw, e->raw_size, stored, e->stored_size);
	T_ASSERT(!ZSTD_isError(got));
	T_EQ(got, e->raw_size);
	free(stored);
	return raw;
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* The bytes block @at (not the last) may take: up to the next one. */
static uint64_t block_room(const char *dir, uint32_t at)
{
	struct dls_index_entry_disk e, next;

	free(sp_block(dir, at, &e));
	free(sp_block(dir, at + 1, &next));
	return next.offset - e.offset;
}

/* Block @at rewritten as frames of its own decoded bytes, each record of
 * d one, the rest one each section (z and its padding, y), with a seek
 * table; record @bad's frame (if below its records) damaged after the
 * frame header, so that zstd refuses it.  @return: that frame's file
 * offset. */
/* frame_block() changes a byte of this record's d before it compresses
 * it: the frames decode, to the wrong bytes. */
static uint32_t altered_record = UINT32_MAX;

static uint64_t frame_block(const char *dir, uint32_t at, uint32_t bad)
{
	struct dls_index_entry_disk e;
	uint8_t *raw = decoded_block(dir, at, &e);
	uint32_t n = e.record_count;
	uint64_t cuts[NREC + 4], bad_at = 0;
	uint32_t ncuts = 0;
	size_t cap = ZSTD_compressBound(e.raw_size) + 64 * (n + 4), len = 0;
	uint8_t *out = malloc(cap), *table;
	uint32_t *sizes = malloc(2 * (n + 3) * sizeof(*sizes));

	T_ASSERT(out && sizes);
	if (altered_record < n)
		raw[(uint64_t)altered_record * D + 100] ^= 0x5a;
	for (uint32_t i = 0; i <= n; i++)
		cuts[ncuts++] = (uint64_t)i * D;
	cuts[ncuts++] = ((uint64_t)n * (D + Z) + 7) / 8 * 8;    /* y */
	cuts[ncuts++] = e.raw_size;
	for (uint32_t k = 0; k + 1 < ncuts; k++) {
		size_t got = ZSTD_compress(out + len, cap - len,
					   raw + cuts[k],
					   cuts[k + 1] - cuts[k], 1);

		T_ASSERT(!ZSTD_isError(got));
		if (k == bad) {
			/* the first zstd block's size, high bits */
			out[len + ZSTD_frameHeaderSize(out + len, got) + 2] ^=
				0x80;
			bad_at = e.offset + len;
		}
		sizes[2 * k] = (uint32_t)got;
		sizes[2 * k + 1] = (uint32_t)(cuts[k + 1] - cuts[k]);
		len += got;
	}
	/* the seek table: a skippable frame, entries, footer */
	table = out + len;
	put32(table, 0x184D2A5Eu);
	put32(table + 4, (ncuts - 1) * 8 + 9);
	for (uint32_t k = 0; k + 1 < ncuts; k++) {
		put32(table + 8 + 8 * k, sizes[2 * k]);
		put32(table + 12 + 8 * k, sizes[2 * k + 1]);
	}
	len += 8 + (ncuts - 1) * 8;
	put32(out + len, ncuts - 1);
	out[len + 4] = 0;
	put32(out + len + 5, 0x8F92EAB1u);
	len += 9;
	sp_rewrite_block(dir, at, out, len, block_room(dir, at));
	free(sizes);
	free(out);
	free(raw);
	return bad_at;
}

/* Block @at rewritten as one frame of its decoded bytes: no seek table,
 * as format v3 wrote it (the one-shot decoder reads it all the same). */
static void one_frame_block(const char *dir, uint32_t at)
{
	struct dls_index_entry_disk e;
	uint8_t *raw = decoded_block(dir, at, &e);
	size_t cap = ZSTD_compressBound(e.raw_size);
	uint8_t *out = malloc(cap);
	size_t len;

	T_ASSERT(out != NULL);
	len = ZSTD_compress(out, cap, raw, e.raw_size, 1);
	T_ASSERT(!ZSTD_isError(len));
	sp_rewrite_block(dir, at, out, len, block_room(dir, at));
	free(out);
	free(raw);
}

/* The frame of record 5 of block @at refused by zstd, its block's
 * checksum right: both ways fail with zstd's error, the shard's path
 * and the block's offset; the frames' way names the frame's offset. */
static void check_bad_frame(const char *dir, uint32_t at)
{
	struct dls_index_entry_disk e;
	struct outcome o[2];
	sluice_dataset *ds = NULL;
	char shard[1024], where[64], frame[64];
	uint8_t *blk;
	uint64_t bad_at = frame_block(dir, at, 5);

	sp_shard0(dir, shard, sizeof(shard));
	blk = sp_block(dir, at, &e);
	free(blk);
	snprintf(where, sizeof(where), "block %u: offset %llu", at,
		 (unsigned long long)e.offset);
	snprintf(frame, sizeof(frame), "frame at offset %llu",
		 (unsigned long long)bad_at);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int by = 0; by < READERS; by++) {
		run(ds, &window, (enum reader)by, 0, &o[0]);
		run(ds, &window, (enum reader)by, 1, &o[1]);
		for (int k = 0; k < 2; k++) {
			printf("bad frame, read by the %s, %s: %s\n",
			       reader_names[by], k ? "whole" : "frames",
			       o[k].msg);
			T_EQ(o[k].r, -SLUICE_EZSTD);
			T_CONTAINS(o[k].msg, shard);
			T_CONTAINS(o[k].msg, where);
			T_ASSERT(o[k].records < 2 * NREC);
			free(o[k].bytes);
		}
		T_CONTAINS(o[0].msg, frame);
	}
	{
		/* read by range, decoded into the batch: the record's
		 * file and offset */
		const struct shape full = { SLUICE_SHUFFLE_FULL, 48,
					    SLUICE_RANGE_READS_AUTO };

		run(ds, &full, BY_WORKER, 0, &o[0]);
		printf("bad frame, by range in place: %s\n", o[0].msg);
		T_LT(0, o[0].in_place);    /* its batches went in place */
		T_EQ(o[0].r, -SLUICE_ECORRUPT);
		T_CONTAINS(o[0].msg, shard);
		T_ASSERT(o[0].records < 2 * NREC);
		free(o[0].bytes);
	}
	sluice_dataset_close(ds);
}

/* Record @rec of block @at rewritten to other bytes: a full shuffle
 * decoding each frame into its row fails at it, naming the shard, the
 * block and the record. */
static void check_altered_record(const char *dir, uint32_t at, uint32_t rec)
{
	const struct shape full = { SLUICE_SHUFFLE_FULL, 48,
				    SLUICE_RANGE_READS_AUTO };
	struct dls_index_entry_disk e;
	sluice_dataset *ds = NULL;
	struct outcome o;
	char shard[1024], where[64], record[64];

	altered_record = rec;
	frame_block(dir, at, UINT32_MAX);
	altered_record = UINT32_MAX;
	sp_shard0(dir, shard, sizeof(shard));
	free(sp_block(dir, at, &e));
	snprintf(where, sizeof(where), "block %u: offset ", at);
	snprintf(record, sizeof(record), ": record %llu: record checksum",
		 (unsigned long long)(e.first_record + rec));
	T_OK(sluice_dataset_open(dir, &ds));
	run(ds, &full, BY_WORKER, 0, &o);
	printf("altered record, by range in place: %s\n", o.msg);
	T_LT(0, o.in_place);
	T_EQ(o.r, -SLUICE_ECORRUPT);
	T_CONTAINS(o.msg, shard);
	T_CONTAINS(o.msg, where);
	T_CONTAINS(o.msg, record);
	free(o.bytes);
	sluice_dataset_close(ds);
}

int main(void)
{
	char *root = fx_tmpdir();
	char dir[700], cmd[1500];
	struct dls_index_entry_disk e;

	snprintf(dir, sizeof(dir), "%s/framed", root);
	write_data(dir);
	check_same(dir, &window, 2 * NREC);
	{
		/* blocks read whole for every batch: a batch's 4 of them
		 * fit the budget, not gathered by chunks (8 read by the
		 * ring, stored and decoded bytes each, do not) */
		const struct shape full = { SLUICE_SHUFFLE_FULL, 4,
					    SLUICE_RANGE_READS_OFF };
		/* batches of more than a block's 63 records */
		const struct shape block = { SLUICE_SHUFFLE_BLOCK, 100,
					     SLUICE_RANGE_READS_AUTO };
		/* smaller: views of their blocks, decoded whole */
		const struct shape viewed = { SLUICE_SHUFFLE_NONE, 21,
					      SLUICE_RANGE_READS_AUTO };

		check_same(dir, &full, 2 * NREC);
		check_same(dir, &block, 2 * NREC);
		check_same(dir, &viewed, 0);
	}
	check_ranges_in_place(dir);

	/* the writer's frames rewritten by this test's own, the same
	 * cuts: still decoded from them */
	frame_block(dir, 1, UINT32_MAX);
	check_same(dir, &window, 2 * NREC);

	/* a block of one frame: decoded whole, the others from theirs */
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s/one'", dir, root);
	T_EQ(system(cmd), 0);
	snprintf(dir, sizeof(dir), "%s/one", root);
	free(sp_block(dir, 2, &e));
	one_frame_block(dir, 2);
	check_same(dir, &window, 2 * (NREC - e.record_count));

	/* a record's frame decodes to other bytes than it was written
	 * with, its block resealed: its record checksum, checked in its
	 * row, names it */
	snprintf(cmd, sizeof(cmd), "cp -r '%s/framed' '%s/altered'", root,
		 root);
	T_EQ(system(cmd), 0);
	snprintf(dir, sizeof(dir), "%s/altered", root);
	check_altered_record(dir, 2, 7);

	snprintf(dir, sizeof(dir), "%s/framed", root);
	check_bad_frame(dir, 3);
	fx_rmrf(root);
	free(root);
	return 0;
}
