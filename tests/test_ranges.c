/*
 * test_ranges.c - record-range reads (full shuffle reads records' byte
 * ranges, not their blocks) and the format v3 record checksums behind
 * them: every record delivered equals its reference, in the same order as
 * block reads give, for one and several fixed fields, batches straddling
 * blocks and shards, ranks, resume and a mixture; a flipped record byte
 * is caught (file and offset named) or skipped; short reads and -EAGAIN are
 * invisible, -EIO fails, a file cut short fails or skips its records; v2
 * shards still stream; a bad checksum section is refused by the parser,
 * verify and the loader.  zstd blocks (format v4) are read by range
 * through the frames that hold each record: a damaged frame is caught or
 * skipped, a bad seek table makes its block read whole; v3's one-frame
 * zstd blocks are read whole, and the stats say so.  Records of one
 * field read straight into their batch (ranges.in_place, forced for
 * these short records) give the same bytes in the same order, and the
 * same errors for a flipped byte, a short read and a cut file.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include <zstd.h>

#include "format_util.h"
#include "shard_patch.h"
#include "ring.h"
#include "shard.h"
#include "assemble_test.h"
#include "loader.h"     /* -Ipipeline: the io pool's extents */

#define NREC 997u
#define A_BYTES 301u    /* odd: records straddle 4 KiB pages unevenly */

static char root[1024];

/* Byte @k of field @f of record @i. */
static uint8_t ref_byte(uint64_t i, uint32_t f, uint64_t k)
{
	return (uint8_t)(i * 31 + k * 7 + f * 13 + 1);
}

static const uint64_t field_bytes[3] = { A_BYTES, 8, 80 };
static uint64_t g_block_size = 8192;   /* ~25 records per block */

static void write_ds_from(const char *dir, uint32_t nfields, int level,
			  uint64_t first);

/* @nfields 1: "a" uint8[301]; 3: plus "b" int64 (small: kept in memory
 * from open), "c" float32[20] (read by range, like "a"). */
static void write_ds(const char *dir, uint32_t nfields, int level)
{
	write_ds_from(dir, nfields, level, 0);
}

/* Records @first .. @first + NREC - 1 of the reference. */
static void write_ds_from(const char *dir, uint32_t nfields, int level,
			  uint64_t first)
{
	struct sluice_field f[3];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t buf[3][A_BYTES];

	tu_field(&f[0], "a", "uint8", 1, A_BYTES, 0);
	tu_field(&f[1], "b", "int64", 0, 0, 0);
	tu_field(&f[2], "c", "float32", 1, 20, 0);
	sluice_writer_config_init(&wc);
	wc.block_size = g_block_size;
	wc.records_per_shard = 200;    /* 5 shards */
	wc.compression_level = level;
	wc.threads = 2;
	T_OK(sluice_writer_open(dir, f, (int)nfields, &wc, &w));
	for (uint64_t i = first; i < first + NREC; i++) {
		const void *vals[3] = { buf[0], buf[1], buf[2] };

		for (uint32_t fi = 0; fi < nfields; fi++)
			for (uint64_t k = 0; k < field_bytes[fi]; k++)
				buf[fi][k] = ref_byte(i, fi, k);
		T_OK(sluice_writer_add(w, vals, field_bytes));
	}
	T_OK(sluice_writer_close(w, NULL));
}

struct run {
	uint64_t order[4 * NREC];   /* indices in delivery order */
	uint32_t n;
	uint32_t seen[NREC];
	struct sluice_stats st;
	char err[1024];
	int rc;                     /* next()'s last return */
};

static void check_batch(sluice_batch *b, uint32_t nfields, struct run *out)
{
	static const char *names[3] = { "a", "b", "c" };
	const uint64_t *idx = sluice_batch_indices(b);
	uint32_t n = sluice_batch_size(b);

	for (uint32_t fi = 0; fi < nfields; fi++) {
		DLManagedTensor *t = NULL;
		const uint8_t *d;

		T_OK(sluice_batch_tensor(b, names[fi], -1, &t));
		T_EQ(t->dl_tensor.shape[0], n);
		d = t->dl_tensor.data;
		for (uint32_t r = 0; r < n; r++)
			for (uint64_t k = 0; k < field_bytes[fi]; k++)
				if (d[r * field_bytes[fi] + k] !=
				    ref_byte(idx[r], fi, k))
					T_FAIL_AT("record %llu field %s byte %llu differs",
						  (unsigned long long)idx[r],
						  names[fi],
						  (unsigned long long)k);
		t->deleter(t);
	}
	for (uint32_t r = 0; r < n; r++) {
		T_ASSERT(idx[r] < NREC);
		T_ASSERT(out->n < 4 * NREC);
		out->order[out->n++] = idx[r];
		out->seen[idx[r]]++;
	}
}

/* Open @path with @cfg, optionally resume at @state, stream one epoch
 * (at most @max_batches), checking every record. */
static void stream(const char *path, const struct sluice_loader_config *cfg,
		   uint32_t nfields, const struct sluice_state *state,
		   uint64_t max_batches, struct run *out,
		   struct sluice_state *state_out)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	uint64_t batches = 0;

	memset(out, 0, sizeof(*out));
	T_OK(sluice_dataset_open(path, &ds));
	out->rc = sluice_loader_open(ds, cfg, &ld);
	if (out->rc == 0 && state)
		T_OK(sluice_loader_state_set(ld, state));
	while (out->rc == 0 && batches < max_batches &&
	       (out->rc = sluice_loader_next(ld, &b)) == 0) {
		check_batch(b, nfields, out);
		sluice_batch_release(b);
		batches++;
	}
	if (ld) {
		sluice_loader_error(ld, out->err, sizeof(out->err));
		if (state_out)
			T_OK(sluice_loader_state_get(ld, state_out));
		out->st.size = sizeof(out->st);
		sluice_loader_stats(ld, &out->st);
	}
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

static void full_cfg(struct sluice_loader_config *cfg, uint32_t batch)
{
	sluice_loader_config_init(cfg);
	cfg->shuffle = SLUICE_SHUFFLE_FULL;
	cfg->batch_size = batch;
	cfg->seed = 7;
	cfg->rank = 0;
	cfg->world_size = 1;
	cfg->device = SLUICE_DEVICE_HOST;
	cfg->decode_threads = 2;
}

static struct run ra, rb;

/* Whether the records of one-field datasets are read in place: the
 * stats must say so (ranges_test_in_place_min set), or say none. */
static int in_place;

static void check_in_place_count(const struct run *r, uint32_t nfields)
{
	if (in_place && nfields == 1)
		T_ASSERT(r->st.range_records_in_place > 0);
	else
		T_EQ(r->st.range_records_in_place, 0);
	T_ASSERT(r->st.range_records_in_place <= r->st.range_records);
}

/* Every record once, equal to its reference, in the order block reads
 * give, and read by range (no block read). */
static void check_equal(const char *dir, uint32_t nfields)
{
	static const uint32_t batches[] = { 1, 7, 64, 300, 1000 };

	for (size_t k = 0; k < sizeof(batches) / sizeof(batches[0]); k++) {
		struct sluice_loader_config cfg;

		full_cfg(&cfg, batches[k]);
		stream(dir, &cfg, nfields, NULL, UINT64_MAX, &ra, NULL);
		T_EQ(ra.rc, SLUICE_EOF);
		T_EQ(ra.n, NREC);
		for (uint32_t i = 0; i < NREC; i++)
			T_EQ(ra.seen[i], 1);
		/* the next epoch's first batches are prefetched too */
		T_ASSERT(ra.st.range_records >= NREC);
		T_EQ(ra.st.blocks_read, 0);
		T_ASSERT(ra.st.range_reads > 0);
		check_in_place_count(&ra, nfields);
		cfg.range_reads = SLUICE_RANGE_READS_OFF;
		stream(dir, &cfg, nfields, NULL, UINT64_MAX, &rb, NULL);
		T_EQ(rb.rc, SLUICE_EOF);
		T_EQ(rb.st.range_records, 0);
		T_EQ(rb.n, ra.n);
		T_MEMEQ(rb.order, ra.order, ra.n * sizeof(ra.order[0]));
	}
}

/* Ranks split the epoch as block reads do; resume continues exactly. */
static void check_ranks_and_resume(const char *dir)
{
	struct sluice_loader_config cfg;
	struct sluice_state st;
	uint32_t total[NREC] = { 0 };
	uint64_t whole[4 * NREC];
	uint32_t nwhole;

	for (int rank = 0; rank < 3; rank++) {
		full_cfg(&cfg, 16);
		cfg.rank = rank;
		cfg.world_size = 3;
		stream(dir, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
		T_EQ(ra.rc, SLUICE_EOF);
		T_ASSERT(ra.st.range_records >= ra.n);
		cfg.range_reads = SLUICE_RANGE_READS_OFF;
		stream(dir, &cfg, 3, NULL, UINT64_MAX, &rb, NULL);
		T_EQ(rb.n, ra.n);
		T_MEMEQ(rb.order, ra.order, ra.n * sizeof(ra.order[0]));
		for (uint32_t i = 0; i < NREC; i++)
			total[i] += ra.seen[i];
	}
	for (uint32_t i = 0; i < NREC; i++)
		T_ASSERT(total[i] >= 1);    /* wrap may repeat a few */

	full_cfg(&cfg, 24);
	stream(dir, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	nwhole = ra.n;
	memcpy(whole, ra.order, nwhole * sizeof(whole[0]));
	stream(dir, &cfg, 3, NULL, 10, &ra, &st);
	T_EQ(ra.n, 240);
	stream(dir, &cfg, 3, &st, UINT64_MAX, &rb, NULL);
	T_EQ(rb.rc, SLUICE_EOF);
	T_EQ(ra.n + rb.n, nwhole);
	T_MEMEQ(whole, ra.order, ra.n * sizeof(whole[0]));
	T_MEMEQ(whole + ra.n, rb.order, rb.n * sizeof(whole[0]));
	T_ASSERT(rb.st.range_records > 0);
}

/* The file offset of record @rec's field 0 (one field datasets: its only
 * bytes), and its shard's path. */
static uint64_t record_offset(const char *dir, uint64_t rec, char *path,
			      size_t cap, uint64_t *block)
{
	sluice_dataset *ds = NULL;
	const struct dataset *d;
	uint64_t off = 0;

	T_OK(sluice_dataset_open(dir, &ds));
	d = dataset_table(ds);
	for (uint32_t s = 0; s < d->nshards; s++) {
		const struct shard_file *sf = &d->shards[s];

		if (rec >= d->shard_first[s + 1])
			continue;
		rec -= d->shard_first[s];
		for (uint64_t b = 0; b < sf->block_count; b++) {
			const struct shard_block *blk = &sf->blocks[b];

			if (rec >= blk->first_record + blk->record_count)
				continue;
			off = blk->offset +
			      (rec - blk->first_record) * A_BYTES;
			snprintf(path, cap, "%s", sf->path);
			*block = b;
			break;
		}
		break;
	}
	sluice_dataset_close(ds);
	T_ASSERT(off > 0);
	return off;
}

static void flip(const char *path, uint64_t off)
{
	size_t n;
	uint8_t *img = tu_slurp(path, &n);

	T_ASSERT(off < n);
	img[off] ^= 0x40;
	tu_spit(path, img, n);
	free(img);
}

struct lines {
	char text[4096];
	int count;
};

static void collect(void *ctx, const char *line)
{
	struct lines *l = ctx;
	size_t used = strlen(l->text);

	l->count++;
	snprintf(l->text + used, sizeof(l->text) - used, "%s\n", line);
}

/* A flipped byte in one record: caught by its checksum, named by file
 * and offset; skipped with on_error=skip. */
static void check_corrupt_record(const char *name)
{
	struct sluice_loader_config cfg;
	char dir[1100], path[1200], want[1300];
	uint64_t off, block;
	struct lines l = { "", 0 };

	TU_FMT(dir, "%s/%s", root, name);
	write_ds(dir, 1, 0);
	off = record_offset(dir, 123, path, sizeof(path), &block);
	flip(path, off + 17);
	full_cfg(&cfg, 32);
	stream(dir, &cfg, 1, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, path);
	TU_FMT(want, "offset %llu: record", (unsigned long long)off);
	T_CONTAINS(ra.err, want);
	T_CONTAINS(ra.err, "record checksum mismatch");
	T_EQ(ra.seen[123], 0);
	check_in_place_count(&ra, 1);

	cfg.on_error = SLUICE_ON_ERROR_SKIP;
	stream(dir, &cfg, 1, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC - 1);
	T_EQ(ra.st.records_skipped, 1);
	for (uint32_t i = 0; i < NREC; i++)
		T_EQ(ra.seen[i], i != 123);

	/* verify finds the block's XXH3 broken (the record checksum alone
	 * is check_record_only_damage's) */
	T_EQ(dataset_verify(dir, collect, &l), 1);
	T_CONTAINS(l.text, path);
}

/* The same record's byte flipped, its block's XXH3 made to agree: only
 * the record checksum can tell, and both verify and the loader do. */
static void check_record_only_damage(void)
{
	struct sluice_loader_config cfg;
	char dir[1100], path[1200];
	uint64_t off, block, sum;
	struct dls_header_disk h;
	struct dls_index_entry_disk e;
	struct lines l = { "", 0 };
	uint8_t *img;
	size_t n;

	TU_FMT(dir, "%s/forged", root);
	write_ds(dir, 1, 0);
	off = record_offset(dir, 450, path, sizeof(path), &block);
	img = tu_slurp(path, &n);
	img[off] ^= 1;
	memcpy(&h, img, sizeof(h));
	memcpy(&e, img + h.index_offset + block * sizeof(e), sizeof(e));
	e.checksum = XXH3_64bits(img + e.offset, e.stored_size);
	memcpy(img + h.index_offset + block * sizeof(e), &e, sizeof(e));
	h.index_checksum = XXH3_64bits(img + h.index_offset, h.index_length);
	memcpy(img, &h, sizeof(h));
	sum = XXH3_64bits(img, DLS_HEADER_CHECKSUM_OFFSET);
	memcpy(img + DLS_HEADER_CHECKSUM_OFFSET, &sum, 8);
	tu_spit(path, img, n);
	free(img);

	/* the header checksum changed: open the shards by glob */
	TU_FMT(path, "%s/*.dls", dir);
	T_EQ(dataset_verify(path, collect, &l), 1);
	T_CONTAINS(l.text, "record 50: record checksum mismatch");
	full_cfg(&cfg, 50);
	stream(path, &cfg, 1, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, "record 50: record checksum mismatch");
}

/* Format v2 shards (no record checksums) still stream: by block with
 * verify on, by range with it off. */
static void check_v2(const char *v3dir)
{
	struct sluice_loader_config cfg;
	char dir[1100], p[1300], glob[1200];

	TU_FMT(dir, "%s/v2", root);
	T_EQ(mkdir(dir, 0755), 0);
	for (int s = 0; s < 5; s++) {
		size_t n;
		uint8_t *img;

		TU_FMT(p, "%s/data-%05d.dls", v3dir, s);
		img = tu_slurp(p, &n);
		tu_drop_record_sums(img, &n);
		TU_FMT(p, "%s/data-%05d.dls", dir, s);
		tu_spit(p, img, n);
		free(img);
	}
	TU_FMT(glob, "%s/*.dls", dir);
	T_EQ(dataset_verify(glob, NULL, NULL), 0);
	full_cfg(&cfg, 40);
	stream(glob, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	T_EQ(ra.st.range_records, 0);
	T_ASSERT(ra.st.blocks_read > 0);
	cfg.verify = 0;
	stream(glob, &cfg, 3, NULL, UINT64_MAX, &rb, NULL);
	T_EQ(rb.rc, SLUICE_EOF);
	T_ASSERT(rb.st.range_records >= NREC);
	T_MEMEQ(rb.order, ra.order, ra.n * sizeof(ra.order[0]));
}

/* Parse the shard image at @img (@n bytes) as a file of @n bytes. */
static int parse(const uint8_t *img, size_t n, char *err, size_t cap)
{
	struct dls_header_disk h;
	struct shard_schema schema;
	struct shard_file sf;
	int r;

	memcpy(&h, img, sizeof(h));
	r = shard_parse("x.dls", img, img + h.index_offset,
			(size_t)h.index_length, n, &sf, &schema, err, cap);
	shard_file_free(&sf);
	return r;
}

static void rehash_header(uint8_t *img, const struct dls_header_disk *h)
{
	uint64_t sum;

	memcpy(img, h, sizeof(*h));
	sum = XXH3_64bits(img, DLS_HEADER_CHECKSUM_OFFSET);
	memcpy(img + DLS_HEADER_CHECKSUM_OFFSET, &sum, 8);
}

/* A bad record checksum section: count, bounds, reserved bytes, its own
 * checksum. */
static void check_bad_section(const char *v3dir)
{
	char p[1200], err[512];
	struct dls_header_disk h, good;
	struct sluice_loader_config cfg;
	struct lines l = { "", 0 };
	size_t n;
	uint8_t *img;

	TU_FMT(p, "%s/data-00001.dls", v3dir);
	img = tu_slurp(p, &n);
	T_OK(parse(img, n, err, sizeof(err)));
	memcpy(&good, img, sizeof(good));

	h = good;       /* one record short */
	h.record_sums_length -= 8;
	rehash_header(img, &h);
	T_EQ(parse(img, n, err, sizeof(err)), -SLUICE_ECORRUPT);
	T_CONTAINS(err, "record checksums length");

	h = good;       /* past the end of the file */
	h.record_sums_offset += 8;
	rehash_header(img, &h);
	T_EQ(parse(img, n, err, sizeof(err)), -SLUICE_ECORRUPT);
	T_CONTAINS(err, "do not end the");

	h = good;       /* overflow */
	h.record_sums_offset = UINT64_MAX - 4;
	rehash_header(img, &h);
	T_EQ(parse(img, n, err, sizeof(err)), -SLUICE_ECORRUPT);

	h = good;       /* a truncated file */
	rehash_header(img, &h);
	T_EQ(parse(img, n - 8, err, sizeof(err)), -SLUICE_ECORRUPT);

	h = good;       /* the section where the index should end */
	h.record_sums_offset -= 8;
	h.record_sums_length += 8;
	rehash_header(img, &h);
	T_EQ(parse(img, n, err, sizeof(err)), -SLUICE_ECORRUPT);

	h = good;       /* reserved */
	h.reserved0 = 1;
	rehash_header(img, &h);
	T_EQ(parse(img, n, err, sizeof(err)), -SLUICE_ECORRUPT);
	T_CONTAINS(err, "reserved");

	h = good;       /* a v2 header with the v3 fields set */
	h.version = DLS_VERSION_NO_RECORD_SUMS;
	rehash_header(img, &h);
	T_EQ(parse(img, n, err, sizeof(err)), -SLUICE_ECORRUPT);
	T_CONTAINS(err, "reserved");

	/* the section's own checksum: the parser does not read it, the
	 * loader (at open) and verify do */
	rehash_header(img, &good);
	img[good.record_sums_offset + 8 * 3] ^= 1;
	tu_spit(p, img, n);
	free(img);
	T_ASSERT(dataset_verify(v3dir, collect, &l) >= 1);
	T_CONTAINS(l.text, "record checksum section checksum mismatch");
	full_cfg(&cfg, 10);
	stream(v3dir, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, p);
	T_CONTAINS(ra.err, "record checksum section checksum mismatch");
	/* no range reads: no need for them */
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	stream(v3dir, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
}

enum { F_NONE, F_SHORT, F_EAGAIN, F_EIO, F_EOF };
static _Atomic int fault_mode, faults_done, fault_calls;

static void inject(void *ctx, uint32_t file, uint64_t offset, uint64_t length,
		   int *res)
{
	(void)ctx, (void)offset, (void)length;
	switch (atomic_load(&fault_mode)) {
	case F_SHORT:   /* every other completion stops half way (at a
			 * sector where it is that long) */
		if (*res >= 2 && atomic_fetch_add(&fault_calls, 1) % 2 == 0) {
			*res = *res >= 1024 ? (*res / 2) & ~511 : *res / 2;
			atomic_fetch_add(&faults_done, 1);
		}
		break;
	case F_EAGAIN:
		if (atomic_fetch_add(&fault_calls, 1) % 3 == 0) {
			*res = -EAGAIN;
			atomic_fetch_add(&faults_done, 1);
		}
		break;
	case F_EIO:
	case F_EOF:     /* shard 2 ends early: 0 bytes, a cut file */
		if (file == 2 && *res > 0) {
			*res = atomic_load(&fault_mode) == F_EIO ? -EIO : 0;
			atomic_fetch_add(&faults_done, 1);
		}
		break;
	default:
		break;
	}
}

/* What the ring does wrong under range reads. */
static void check_faults(const char *dir, uint32_t nfields)
{
	struct sluice_loader_config cfg;

	io_ring_set_fault(inject, NULL);
	for (int mode = F_SHORT; mode <= F_EAGAIN; mode++) {
		atomic_store(&fault_mode, mode);
		atomic_store(&faults_done, 0);
		full_cfg(&cfg, 64);
		stream(dir, &cfg, nfields, NULL, UINT64_MAX, &ra, NULL);
		T_EQ(ra.rc, SLUICE_EOF);
		T_EQ(ra.n, NREC);
		for (uint32_t i = 0; i < NREC; i++)
			T_EQ(ra.seen[i], 1);
		T_ASSERT(atomic_load(&faults_done) > 0);
		T_ASSERT(ra.st.range_records >= NREC);
		check_in_place_count(&ra, nfields);
	}
	atomic_store(&fault_mode, F_EIO);
	full_cfg(&cfg, 64);
	cfg.on_error = SLUICE_ON_ERROR_SKIP;    /* a failing device: fatal */
	stream(dir, &cfg, nfields, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, -EIO);
	T_CONTAINS(ra.err, "data-00002.dls: offset");
	T_CONTAINS(ra.err, "read failed");

	atomic_store(&fault_mode, F_EOF);
	full_cfg(&cfg, 64);
	stream(dir, &cfg, nfields, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, "data-00002.dls: block");
	/* the cut, not a checksum */
	T_CONTAINS(ra.err, "read failed: file truncated");
	check_in_place_count(&ra, nfields);
	cfg.on_error = SLUICE_ON_ERROR_SKIP;
	stream(dir, &cfg, nfields, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC - 200);         /* shard 2's records */
	T_EQ(ra.st.records_skipped, 200);
	for (uint32_t i = 0; i < NREC; i++)
		T_EQ(ra.seen[i], i < 400 || i >= 600);
	atomic_store(&fault_mode, F_NONE);
	io_ring_set_fault(NULL, NULL);
}

/* A tensor kept past the loader's and the dataset's close: the last
 * release frees the loader, which must not look at the dataset then
 * (under ASan: a use after free). */
static void check_tensor_outlives_dataset(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b = NULL;
	DLManagedTensor *t = NULL;

	full_cfg(&cfg, 16);
	T_OK(sluice_dataset_open(dir, &ds));
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_OK(sluice_loader_next(ld, &b));
	T_OK(sluice_batch_tensor(b, "a", -1, &t));
	sluice_batch_release(b);
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
	t->deleter(t);
}

/* A mixture of two datasets (records numbered end to end) reads both
 * by range: every record of each stream once, with its bytes. */
static void check_mixture(const char *three)
{
	static uint32_t seen[2 * NREC];
	struct sluice_loader_config cfg;
	struct sluice_stream st[2];
	struct sluice_stats stats = { .size = sizeof(stats) };
	sluice_dataset *ds[2] = { NULL, NULL };
	sluice_loader *ld = NULL;
	sluice_batch *b;
	char second[1100];
	uint64_t total = 0;
	int r;

	TU_FMT(second, "%s/second", root);
	write_ds_from(second, 3, 0, NREC);
	T_OK(sluice_dataset_open(three, &ds[0]));
	T_OK(sluice_dataset_open(second, &ds[1]));
	st[0] = (struct sluice_stream){ ds[0], 1, 0 };
	st[1] = (struct sluice_stream){ ds[1], 1, 0 };
	full_cfg(&cfg, 50);
	T_OK(sluice_loader_open_streams(st, 2, &cfg, &ld));
	memset(&ra, 0, sizeof(ra));
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		const uint64_t *idx = sluice_batch_indices(b);
		DLManagedTensor *t[3];

		for (uint32_t fi = 0; fi < 3; fi++)
			T_OK(sluice_batch_tensor(b, (const char *[]){ "a", "b",
					"c" }[fi], -1, &t[fi]));
		for (uint32_t k = 0; k < sluice_batch_size(b); k++) {
			T_ASSERT(idx[k] < 2 * NREC);
			seen[idx[k]]++;
			for (uint32_t fi = 0; fi < 3; fi++) {
				const uint8_t *d = t[fi]->dl_tensor.data;

				for (uint64_t j = 0; j < field_bytes[fi]; j++)
					T_EQ(d[k * field_bytes[fi] + j],
					     ref_byte(idx[k], fi, j));
			}
			total++;
		}
		for (uint32_t fi = 0; fi < 3; fi++)
			t[fi]->deleter(t[fi]);
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(total, 2 * NREC);
	for (uint32_t i = 0; i < 2 * NREC; i++)
		T_EQ(seen[i], 1);
	T_OK(sluice_loader_stats(ld, &stats));
	T_ASSERT(stats.range_records >= 2 * NREC);
	T_EQ(stats.blocks_read, 0);
	sluice_loader_close(ld);
	sluice_dataset_close(ds[0]);
	sluice_dataset_close(ds[1]);
}

/*
 * One block, many batches in flight: the io pool holds no cached block
 * but a range buffer per batch, freed as each batch's assembly ends, in
 * whatever order the workers finish.  Its extent array was sized for the
 * cache entries alone (1 here), so out-of-order frees split the free space
 * into more extents than it held and pool_free() wrote past its end
 * ("double free or corruption" in `sluice stream --shuffle full` over a
 * one-block dataset).  The hook holds every other finishing batch back so
 * that later ones free first, and checks the extents under the lock.
 */
static _Atomic uint32_t pool_finishes;
static _Atomic uint32_t pool_over;      /* most extents past the cap */

static void pool_check_locked(struct loader_core *c)
{
	uint32_t over = c->io_pool.nfree > c->io_pool.cap
		? c->io_pool.nfree - c->io_pool.cap : 0;

	if (over > atomic_load(&pool_over))
		atomic_store(&pool_over, over);
}

static void finish_staggered(struct loader_core *c)
{
	pthread_mutex_lock(&c->mu);
	pool_check_locked(c);
	pthread_mutex_unlock(&c->mu);
	if (atomic_fetch_add(&pool_finishes, 1) % 2 == 0)
		usleep(3000);
}

static void check_one_block_pool(void)
{
	char dir[1100];
	struct sluice_field f;
	struct sluice_writer_config wc;
	struct sluice_loader_config cfg;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	struct sluice_stats st = { .size = sizeof(st) };
	uint32_t seen[500];
	int32_t rec[16];
	int r;

	TU_FMT(dir, "%s/oneblock", root);
	tu_field(&f, "x", "int32", 1, 16, 0);
	sluice_writer_config_init(&wc);
	wc.block_size = 1u << 20;       /* all 500 records in one block */
	wc.compression_level = 0;       /* raw: read by range */
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (int32_t i = 0; i < 500; i++) {
		const void *vals[1] = { rec };
		uint64_t len[1] = { sizeof(rec) };

		for (int k = 0; k < 16; k++)
			rec[k] = i * 16 + k;
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));

	full_cfg(&cfg, 7);
	cfg.decode_threads = 4;
	cfg.prefetch_depth = 8;
	T_OK(sluice_dataset_open(dir, &ds));
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	atomic_store(&pool_finishes, 0);
	atomic_store(&pool_over, 0);
	assemble_test_finish_hook = finish_staggered; /* no thread runs yet */
	for (int epoch = 0; epoch < 3; epoch++) {
		memset(seen, 0, sizeof(seen));
		while ((r = sluice_loader_next(ld, &b)) == 0) {
			const uint64_t *idx = sluice_batch_indices(b);
			DLManagedTensor *t = NULL;
			const int32_t *d;

			T_OK(sluice_batch_tensor(b, "x", -1, &t));
			d = t->dl_tensor.data;
			for (uint32_t k = 0; k < sluice_batch_size(b); k++) {
				T_ASSERT(idx[k] < 500);
				seen[idx[k]]++;
				for (int j = 0; j < 16; j++)
					T_EQ(d[k * 16 + j],
					     (int32_t)idx[k] * 16 + j);
			}
			t->deleter(t);
			sluice_batch_release(b);
			pthread_mutex_lock(&ld->core->mu);
			pool_check_locked(ld->core);
			pthread_mutex_unlock(&ld->core->mu);
		}
		T_EQ(r, SLUICE_EOF);
		for (uint32_t i = 0; i < 500; i++)
			T_EQ(seen[i], 1);
	}
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.blocks_read, 0);
	T_ASSERT(st.range_records >= 3 * 500);
	sluice_loader_close(ld);
	assemble_test_finish_hook = NULL;
	sluice_dataset_close(ds);
	T_ASSERT(atomic_load(&pool_finishes) >= 3 * 72);
	T_EQ(atomic_load(&pool_over), 0);
}

/* @dir's stream by full shuffle into @r, every block read by range
 * that can be (the cache would hold them all). */
static void stream_frames(const char *dir, enum sluice_on_error on_error,
			  struct run *r)
{
	struct sluice_loader_config cfg;

	full_cfg(&cfg, 50);
	cfg.range_reads = SLUICE_RANGE_READS_ON;
	cfg.on_error = on_error;
	stream(dir, &cfg, 3, NULL, UINT64_MAX, r, NULL);
}

/* Block 0 of @dir's first shard, its frames in @fr (its stored bytes
 * returned, with its index entry in @e). */
static uint8_t *block0_frames(const char *dir, struct dls_index_entry_disk *e,
			      struct block_frames *fr)
{
	uint8_t *stored = sp_block(dir, 0, e);
	struct shard_block blk = {
		.offset = e->offset, .stored_size = e->stored_size,
		.raw_size = e->raw_size, .codec = e->codec,
	};
	uint64_t need;

	T_EQ(e->codec, DLS_CODEC_ZSTD);
	T_OK(block_frames_parse(&blk, stored, e->stored_size, fr, &need));
	T_OK(block_frames_check(stored, fr));
	return stored;
}

/* A new zstd dataset in @dir (root/@name), its block 0's stored bytes
 * returned and its frames in @fr. */
static uint8_t *fresh_block0(char *dir, size_t cap, const char *name,
			     struct dls_index_entry_disk *e,
			     struct block_frames *fr)
{
	T_ASSERT((size_t)snprintf(dir, cap, "%s/%s", root, name) < cap);
	write_ds(dir, 3, 3);
	return block0_frames(dir, e, fr);
}

/* One entry of block 0's seek table: its @which (0 stored, 1 decoded)
 * size of frame @k moves by @delta. */
static void table_add(uint8_t *stored, uint64_t len, const struct block_frames *fr,
		      uint32_t k, int which, int32_t delta)
{
	uint8_t *entry = stored + len - 9 - (uint64_t)fr->n * 8 + k * 8 +
			 which * 4;
	uint32_t v;

	memcpy(&v, entry, 4);
	v += (uint32_t)delta;
	memcpy(entry, &v, 4);
}

/* Every zstd block of @dir's shards rewritten as v3 wrote them, one frame
 * and no seek table, and the shards made format v3 (the manifest left
 * behind: open them by glob). */
static void make_v3(const char *dir)
{
	sluice_dataset *ds = NULL;
	const struct dataset *d;

	T_OK(sluice_dataset_open(dir, &ds));
	d = dataset_table(ds);
	for (uint32_t s = 0; s < d->nshards; s++) {
		const struct shard_file *sf = &d->shards[s];
		size_t n;
		uint8_t *img = tu_slurp(sf->path, &n);
		struct dls_header_disk h;

		memcpy(&h, img, sizeof(h));
		for (uint64_t b = 0; b < sf->block_count; b++) {
			struct dls_index_entry_disk e;
			uint8_t *at = img + h.index_offset + b * sizeof(e);
			uint8_t *raw, *one;
			size_t got, cap;

			memcpy(&e, at, sizeof(e));
			if (e.codec != DLS_CODEC_ZSTD)
				continue;
			raw = malloc(e.raw_size);
			cap = ZSTD_compressBound(e.raw_size);
			one = malloc(cap);
			T_ASSERT(raw && one);
			T_EQ(ZSTD_decompress(raw, e.raw_size, img + e.offset,
					     e.stored_size), e.raw_size);
			got = ZSTD_compress(one, cap, raw, e.raw_size, 3);
			T_ASSERT(!ZSTD_isError(got) && got <= e.stored_size);
			memset(img + e.offset, 0, e.stored_size);
			memcpy(img + e.offset, one, got);
			e.stored_size = got;
			e.checksum = XXH3_64bits(one, got);
			memcpy(at, &e, sizeof(e));
			free(raw);
			free(one);
		}
		h.version = DLS_VERSION_SINGLE_FRAME;
		h.index_checksum = XXH3_64bits(img + h.index_offset,
					       h.index_length);
		rehash_header(img, &h);
		tu_spit(sf->path, img, n);
		free(img);
	}
	sluice_dataset_close(ds);
}

static void check_zstd(void)
{
	struct sluice_loader_config cfg;
	struct dls_index_entry_disk e;
	struct block_frames fr;
	char dir[1100], glob[1200], shard[1200];
	struct lines l = { "", 0 };
	uint8_t *stored;

	/* a block a shard (200 records): "a" in frames of 16 KiB, "c" in
	 * one; read by range, equal to block reads */
	g_block_size = 256 << 10;
	TU_FMT(dir, "%s/zstd", root);
	write_ds(dir, 3, 3);
	stream_frames(dir, SLUICE_ON_ERROR_FAIL, &ra);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	for (uint32_t i = 0; i < NREC; i++)
		T_EQ(ra.seen[i], 1);
	T_ASSERT(ra.st.range_records >= NREC);
	T_EQ(ra.st.blocks_read, 0);
	full_cfg(&cfg, 50);
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	stream(dir, &cfg, 3, NULL, UINT64_MAX, &rb, NULL);
	T_EQ(rb.rc, SLUICE_EOF);
	T_EQ(rb.n, ra.n);
	T_MEMEQ(rb.order, ra.order, ra.n * sizeof(ra.order[0]));
	cfg.range_reads = SLUICE_RANGE_READS_ON;
	cfg.verify = 0;
	stream(dir, &cfg, 3, NULL, UINT64_MAX, &rb, NULL);
	T_EQ(rb.rc, SLUICE_EOF);
	T_EQ(rb.n, NREC);
	T_EQ(rb.st.blocks_read, 0);

	/* a byte of block 0's first frame ("a" of its first records)
	 * flipped, the block resealed: its records are caught, then
	 * skipped */
	stored = block0_frames(dir, &e, &fr);
	T_ASSERT(fr.n > 2);
	stored[fr.at[0] + (fr.at[1] - fr.at[0]) / 2] ^= 0x21;
	sp_rewrite_block(dir, 0, stored, e.stored_size, e.stored_size);
	sp_shard0(dir, shard, sizeof(shard));
	stream_frames(dir, SLUICE_ON_ERROR_FAIL, &ra);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, shard);
	T_CONTAINS(ra.err, ": record ");
	T_ASSERT(strstr(ra.err, "record checksum mismatch") ||
		 strstr(ra.err, "does not decode to its seek table's size"));
	stream_frames(dir, SLUICE_ON_ERROR_SKIP, &ra);
	T_EQ(ra.rc, SLUICE_EOF);
	/* the frame's records: its bytes over A_BYTES, rounded up */
	T_EQ(ra.st.records_skipped,
	     (fr.raw[1] - fr.raw[0] + A_BYTES - 1) / A_BYTES);
	for (uint32_t i = 0; i < NREC; i++)
		T_EQ(ra.seen[i], i >= ra.st.records_skipped);
	free(stored);
	block_frames_free(&fr);

	/* the seek table moves a byte from frame 0 to frame 1: they no
	 * longer decode to its sizes (verify says so too) */
	stored = fresh_block0(dir, sizeof(dir), "zstd-table", &e, &fr);
	table_add(stored, e.stored_size, &fr, 0, 1, 1);
	table_add(stored, e.stored_size, &fr, 1, 1, -1);
	sp_rewrite_block(dir, 0, stored, e.stored_size, e.stored_size);
	stream_frames(dir, SLUICE_ON_ERROR_FAIL, &ra);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, "does not decode to its seek table's size");
	T_EQ(dataset_verify(dir, collect, &l), 1);
	T_CONTAINS(l.text, "block 0: offset 4096: bad seek table");
	free(stored);
	block_frames_free(&fr);

	/* a table whose frames do not fill the block: read whole, right */
	stored = fresh_block0(dir, sizeof(dir), "zstd-fill", &e, &fr);
	table_add(stored, e.stored_size, &fr, 0, 0, 1);
	sp_rewrite_block(dir, 0, stored, e.stored_size, e.stored_size);
	stream_frames(dir, SLUICE_ON_ERROR_FAIL, &ra);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	T_EQ(ra.st.blocks_read, 1);
	free(stored);
	block_frames_free(&fr);

	/* small records in small blocks: frames that do not pay, and v3's
	 * zstd blocks, one frame each: read whole, and said */
	g_block_size = 8192;
	TU_FMT(dir, "%s/zstd-small", root);
	write_ds(dir, 3, 3);
	full_cfg(&cfg, 50);
	cfg.memory_bytes = 256 << 10;
	stream(dir, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	T_EQ(ra.st.range_records, 0);
	T_CONTAINS(ra.st.fallbacks, "(zstd blocks whose frames are most of their block");
	make_v3(dir);
	TU_FMT(glob, "%s/*.dls", dir);
	stream(glob, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	T_EQ(ra.st.range_records, 0);
	T_CONTAINS(ra.st.fallbacks, "full shuffle reads a whole block for each record of 50 of 50 blocks (zstd blocks of format v3");
	T_CONTAINS(ra.st.fallbacks, "about 19 records a block");
}

int main(void)
{
	char one[1100], three[1100];
	struct sluice_loader_config cfg;

	snprintf(root, sizeof(root), "%s", tu_scratch("ranges"));
	TU_FMT(one, "%s/one", root);
	TU_FMT(three, "%s/three", root);
	write_ds(one, 1, 0);
	write_ds(three, 3, 0);
	check_one_block_pool();
	check_equal(one, 1);
	check_equal(three, 3);
	check_ranks_and_resume(three);
	check_faults(three, 3);
	/* the same, the one field's records read in place */
	ranges_test_in_place_min = 1;
	in_place = 1;
	check_equal(one, 1);
	check_equal(three, 3);
	check_faults(one, 1);
	check_corrupt_record("corrupt-in-place");
	ranges_test_in_place_min = 0;
	in_place = 0;
	check_tensor_outlives_dataset(three);
	check_mixture(three);

	/* range_reads=on in window mode; the reasons a full shuffle reads
	 * whole blocks */
	full_cfg(&cfg, 50);
	cfg.memory_bytes = 256 << 10;
	cfg.range_reads = SLUICE_RANGE_READS_OFF;
	stream(three, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_CONTAINS(ra.st.fallbacks, "blocks (range_reads off)");
	/* records read by range: nothing to say */
	cfg.range_reads = SLUICE_RANGE_READS_AUTO;
	cfg.memory_bytes = 0;
	stream(three, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_ASSERT(ra.st.range_records >= NREC);
	T_ASSERT(strstr(ra.st.fallbacks, "whole block") == NULL);
	cfg.shuffle = SLUICE_SHUFFLE_WINDOW;
	cfg.range_reads = SLUICE_RANGE_READS_ON;
	stream(three, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	T_ASSERT(ra.st.range_records >= NREC);

	/* A memory_bytes that holds no batch of ranges joined over gaps:
	 * range_reads auto reads whole blocks, a chunk at a time, every
	 * record once; asked for, the ranges are read unjoined, which fit
	 * (they were refused at the first batch: -ENOSPC; every smaller
	 * memory_bytes is refused at open) */
	full_cfg(&cfg, 64);
	cfg.memory_bytes = 64 << 10;
	stream(three, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	for (uint32_t i = 0; i < NREC; i++)
		T_EQ(ra.seen[i], 1);
	T_EQ(ra.st.range_records, 0);
	T_CONTAINS(ra.st.fallbacks, "(the budget holds too few batches of record ranges)");
	cfg.range_reads = SLUICE_RANGE_READS_ON;
	stream(three, &cfg, 3, NULL, UINT64_MAX, &ra, NULL);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	for (uint32_t i = 0; i < NREC; i++)
		T_EQ(ra.seen[i], 1);
	T_ASSERT(ra.st.range_records >= NREC);

	check_corrupt_record("corrupt");
	check_record_only_damage();
	check_v2(three);
	check_bad_section(three);
	check_zstd();
	return 0;
}
