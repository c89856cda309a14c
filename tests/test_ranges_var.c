/*
 * test_ranges_var.c - record-range reads of variable-size fields (full
 * shuffle reads each record's values through its block's offsets table,
 * not the block): every record delivered equals its reference, in the
 * order block reads give, flat and padded, with empty values, a fixed
 * field after a variable one (its section moves with the values) and
 * one kept in memory; about the records' bytes are read, not their
 * blocks'; a flipped value byte is caught (file and offset named) or
 * skipped; a block whose offsets table is bad is read whole, which
 * reports it.  zstd blocks (format v4: frames a record is decoded from
 * alone) are read by range the same way.  A dataset of one variable
 * field and a label reads its flat values straight into their place in
 * the batch (ranges.in_place), and padded ones through io memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "format_util.h"
#include "shard.h"
#include "runs.h"

#define NREC 601u
#define TAIL 100u       /* > 64 bytes: read by range, not kept */

static char root[1024];

/* Units (int16 x 3) of "v" and bytes of "w" of record @i: some empty. */
static uint64_t v_units(uint64_t i)
{
	return (i * 7) % 23;
}

static uint64_t w_bytes(uint64_t i, uint64_t big)
{
	return (i * 13) % 5 ? big + i % 97 : 0;
}

static uint8_t ref_byte(uint64_t i, uint32_t f, uint64_t k)
{
	return (uint8_t)(i * 31 + k * 7 + f * 13 + 1);
}

static uint64_t g_big;  /* w's base length: small, or ~16 KiB records */
static int g_level;     /* the writer's: 0 raw, else zstd */
static int g_one;       /* only "w" and "label" (write_var) */

static void write_var(const char *dir, uint64_t big, uint64_t block_size)
{
	struct sluice_field f[4];
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t *buf[4];

	g_big = big;
	tu_field(&f[0], "v", "int16", 2, -1, 3);
	tu_field(&f[1], "label", "int64", 0, 0, 0);
	tu_field(&f[2], "w", "uint8", 1, -1, 0);
	tu_field(&f[3], "tail", "uint8", 1, TAIL, 0);
	sluice_writer_config_init(&wc);
	wc.block_size = block_size;
	wc.records_per_shard = 250;     /* 3 shards */
	wc.compression_level = g_level;
	wc.threads = 2;
	for (int k = 0; k < 4; k++)
		T_ASSERT((buf[k] = malloc(big + 4096)) != NULL);
	if (g_one)      /* "w", then "label": their bytes as below */
		f[0] = f[2];
	T_OK(sluice_writer_open(dir, f, g_one ? 2 : 4, &wc, &w));
	for (uint64_t i = 0; i < NREC; i++) {
		const void *vals[4] = { buf[0], buf[1], buf[2], buf[3] };
		uint64_t len[4] = { v_units(i) * 6, 8, w_bytes(i, big), TAIL };

		for (uint32_t fi = 0; fi < 4; fi++)
			for (uint64_t k = 0; k < len[fi]; k++)
				buf[fi][k] = ref_byte(i, fi, k);
		if (g_one) {
			vals[0] = buf[2];
			len[0] = len[2];
		}
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));
	for (int k = 0; k < 4; k++)
		free(buf[k]);
}

struct run {
	uint64_t order[2 * NREC];
	uint32_t n;
	uint32_t seen[NREC];
	struct sluice_stats st;
	char err[1024];
	int rc;
};

static struct run ra, rb;

/* Values of field @name: flat (F, F.offsets) or padded (F, F.lengths). */
static void check_var(sluice_batch *b, const char *name, uint32_t fi,
		      uint64_t unit, uint64_t pad)
{
	const uint64_t *idx = sluice_batch_indices(b);
	uint32_t n = sluice_batch_size(b);
	DLManagedTensor *t = NULL, *aux = NULL;
	char auxname[64];
	const uint8_t *d;
	const int64_t *a;

	snprintf(auxname, sizeof(auxname), "%s.%s", name,
		 pad ? "lengths" : "offsets");
	T_OK(sluice_batch_tensor(b, name, -1, &t));
	T_OK(sluice_batch_tensor(b, auxname, -1, &aux));
	d = t->dl_tensor.data;
	a = aux->dl_tensor.data;
	for (uint32_t r = 0; r < n; r++) {
		uint64_t want = fi == 0 ? v_units(idx[r]) * 6
					: w_bytes(idx[r], g_big);
		uint64_t have, at;

		if (pad) {
			T_EQ(a[r] * (int64_t)unit, want);
			have = want < pad * unit ? want : pad * unit;
			at = r * pad * unit;
			for (uint64_t k = have; k < pad * unit; k++)
				T_EQ(d[at + k], 0);
		} else {
			T_EQ((a[r + 1] - a[r]) * (int64_t)unit, want);
			have = want;
			at = (uint64_t)a[r] * unit;
		}
		for (uint64_t k = 0; k < have; k++)
			if (d[at + k] != ref_byte(idx[r], fi, k))
				T_FAIL_AT("record %llu field %s byte %llu differs",
					  (unsigned long long)idx[r], name,
					  (unsigned long long)k);
	}
	t->deleter(t);
	aux->deleter(aux);
}

static void check_fixed(sluice_batch *b, const char *name, uint32_t fi,
			uint64_t bytes)
{
	const uint64_t *idx = sluice_batch_indices(b);
	DLManagedTensor *t = NULL;
	const uint8_t *d;

	T_OK(sluice_batch_tensor(b, name, -1, &t));
	d = t->dl_tensor.data;
	for (uint32_t r = 0; r < sluice_batch_size(b); r++)
		for (uint64_t k = 0; k < bytes; k++)
			if (d[r * bytes + k] != ref_byte(idx[r], fi, k))
				T_FAIL_AT("record %llu field %s byte %llu differs",
					  (unsigned long long)idx[r], name,
					  (unsigned long long)k);
	t->deleter(t);
}

static void stream(const char *path, const struct sluice_loader_config *cfg,
		   struct run *out)
{
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;

	memset(out, 0, sizeof(*out));
	T_OK(sluice_dataset_open(path, &ds));
	out->rc = sluice_loader_open(ds, cfg, &ld);
	while (out->rc == 0 && (out->rc = sluice_loader_next(ld, &b)) == 0) {
		const uint64_t *idx = sluice_batch_indices(b);

		if (!g_one)
			check_var(b, "v", 0, 6, cfg->pad_length);
		check_var(b, "w", 2, 1, cfg->pad_length);
		check_fixed(b, "label", 1, 8);
		if (!g_one)
			check_fixed(b, "tail", 3, TAIL);
		for (uint32_t r = 0; r < sluice_batch_size(b); r++) {
			T_ASSERT(idx[r] < NREC && out->n < 2 * NREC);
			out->order[out->n++] = idx[r];
			out->seen[idx[r]]++;
		}
		sluice_batch_release(b);
	}
	if (ld) {
		sluice_loader_error(ld, out->err, sizeof(out->err));
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
	cfg->seed = 11;
	cfg->rank = 0;
	cfg->world_size = 1;
	cfg->device = SLUICE_DEVICE_HOST;
	cfg->decode_threads = 2;
	/* zstd datasets this small fit the default budget, which then
	 * caches their blocks instead (check_zstd_cached) */
	if (g_level)
		cfg->range_reads = SLUICE_RANGE_READS_ON;
}

/* Every record once, equal, in block reads' order, read by range. */
static void check_equal(const char *dir)
{
	static const uint32_t batches[] = { 1, 7, 64, 300 };
	static const uint64_t pads[] = { 0, 0, 5, 0 };

	for (size_t k = 0; k < sizeof(batches) / sizeof(batches[0]); k++) {
		struct sluice_loader_config cfg;

		full_cfg(&cfg, batches[k]);
		cfg.pad_length = pads[k];
		stream(dir, &cfg, &ra);
		if (ra.rc != SLUICE_EOF)
			T_FAIL_AT("batch %u: %s: %s", batches[k],
				  sluice_strerror(ra.rc), ra.err);
		T_EQ(ra.n, NREC);
		for (uint32_t i = 0; i < NREC; i++)
			T_EQ(ra.seen[i], 1);
		T_EQ(ra.st.blocks_read, 0);
		T_ASSERT(ra.st.range_records >= NREC);
		/* one variable field of ~16 KiB values, flat: in place */
		if (g_one && g_big > 4096 && !pads[k] && !g_level)
			T_ASSERT(ra.st.range_records_in_place > 0);
		else
			T_EQ(ra.st.range_records_in_place, 0);
		if (pads[k])
			T_ASSERT(ra.st.values_truncated > 0);
		cfg.range_reads = SLUICE_RANGE_READS_OFF;
		stream(dir, &cfg, &rb);
		T_EQ(rb.rc, SLUICE_EOF);
		T_EQ(rb.st.range_records, 0);
		T_ASSERT(rb.st.blocks_read > 0);
		T_EQ(rb.n, ra.n);
		T_MEMEQ(rb.order, ra.order, ra.n * sizeof(ra.order[0]));
		T_EQ(rb.st.values_truncated, ra.st.values_truncated);
	}
	/* verify off: still by range */
	{
		struct sluice_loader_config cfg;

		full_cfg(&cfg, 32);
		cfg.verify = 0;
		stream(dir, &cfg, &ra);
		T_EQ(ra.rc, SLUICE_EOF);
		T_EQ(ra.n, NREC);
		T_EQ(ra.st.blocks_read, 0);
	}
}

/* Records of ~16 KiB in 256 KiB blocks: an epoch reads about the
 * records' bytes, not a block per record. */
static void check_read_once(const char *dir)
{
	struct sluice_loader_config cfg;

	full_cfg(&cfg, 64);
	/* the job ends with the epoch: nothing of the next is read or
	 * assembled by the time the stats are taken (both were, as much as
	 * the threads got to, and the ratio moved with the load) */
	cfg.epochs = 1;
	stream(dir, &cfg, &ra);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	printf("  ~16 KiB records: read %llu bytes for %llu assembled\n",
	       (unsigned long long)ra.st.read.bytes,
	       (unsigned long long)ra.st.assemble.bytes);
	T_ASSERT(ra.st.read.bytes < ra.st.assemble.bytes * 13 / 10);
	T_EQ(ra.st.blocks_read, 0);
}

/* zstd blocks that the default budget's cap holds are cached, each read
 * once, not decoded again from their frames every epoch. */
static void check_zstd_cached(const char *dir)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds = NULL;
	uint64_t nblocks = 0;

	T_OK(sluice_dataset_open(dir, &ds));
	for (uint32_t s = 0; s < dataset_table(ds)->nshards; s++)
		nblocks += dataset_table(ds)->shards[s].block_count;
	sluice_dataset_close(ds);
	full_cfg(&cfg, 64);
	cfg.range_reads = SLUICE_RANGE_READS_AUTO;
	stream(dir, &cfg, &ra);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC);
	T_EQ(ra.st.range_records, 0);
	T_EQ(ra.st.blocks_read, nblocks);
}

static void flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t c;

	T_ASSERT(fd >= 0);
	T_EQ(pread(fd, &c, 1, (off_t)off), 1);
	c ^= 0x5a;
	T_EQ(pwrite(fd, &c, 1, (off_t)off), 1);
	close(fd);
}

/* Record @rec's shard path, block and the file offset of its "w" value
 * (field 2: after v's table and values and label's section), and where
 * v's offsets table entry @rec + 1 lies. */
static uint64_t w_offset(const char *dir, uint64_t rec, char *path,
			 size_t cap, uint64_t *vtab)
{
	sluice_dataset *ds = NULL;
	const struct dataset *d;
	uint64_t off = 0;

	T_OK(sluice_dataset_open(dir, &ds));
	d = dataset_table(ds);
	for (uint32_t s = 0; s < d->nshards && !off; s++) {
		const struct shard_file *sf = &d->shards[s];
		int fd;

		if (rec >= d->shard_first[s + 1])
			continue;
		rec -= d->shard_first[s];
		fd = open(sf->path, O_RDONLY);
		T_ASSERT(fd >= 0);
		for (uint64_t b = 0; b < sf->block_count; b++) {
			const struct shard_block *blk = &sf->blocks[b];
			uint64_t n = blk->record_count, i, o[2], vend, at;

			if (rec >= blk->first_record + n)
				continue;
			i = rec - blk->first_record;
			/* v: table then values; label: n * 8; w: table */
			T_EQ(pread(fd, &vend, 8, (off_t)(blk->offset + n * 8)), 8);
			at = blk->offset + (n + 1) * 8 + vend;
			at = (at + 7) & ~7ull;
			at += n * 8;
			T_EQ(pread(fd, o, 16, (off_t)(at + i * 8)), 16);
			T_ASSERT(o[1] > o[0]);
			off = at + (n + 1) * 8 + o[0];
			*vtab = blk->offset + (i + 1) * 8;
			snprintf(path, cap, "%s", sf->path);
			break;
		}
		close(fd);
	}
	sluice_dataset_close(ds);
	T_ASSERT(off > 0);
	return off;
}

static void check_corrupt(void)
{
	struct sluice_loader_config cfg;
	char dir[1100], path[1200];
	uint64_t off, vtab;

	TU_FMT(dir, "%s/corrupt", root);
	write_var(dir, 200, 8192);
	off = w_offset(dir, 123, path, sizeof(path), &vtab);
	flip(path, off + 3);
	full_cfg(&cfg, 32);
	stream(dir, &cfg, &ra);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, path);
	T_CONTAINS(ra.err, "record 123");
	T_CONTAINS(ra.err, "record checksum mismatch");
	T_EQ(ra.st.blocks_read, 0);
	cfg.on_error = SLUICE_ON_ERROR_SKIP;
	stream(dir, &cfg, &ra);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.n, NREC - 1);
	T_EQ(ra.st.records_skipped, 1);
	for (uint32_t i = 0; i < NREC; i++)
		T_EQ(ra.seen[i], i != 123);

	/* v's offsets table broken (not increasing): the block is read
	 * whole at its turn, and its checksum names it */
	TU_FMT(dir, "%s/badtable", root);
	write_var(dir, 200, 8192);
	(void)w_offset(dir, 301, path, sizeof(path), &vtab);
	flip(path, vtab + 7);
	cfg.on_error = SLUICE_ON_ERROR_FAIL;
	stream(dir, &cfg, &ra);
	T_EQ(ra.rc, -SLUICE_ECORRUPT);
	T_CONTAINS(ra.err, path);
	T_CONTAINS(ra.err, "corrupt block");
	T_ASSERT(ra.st.blocks_read >= 1);
	cfg.on_error = SLUICE_ON_ERROR_SKIP;
	stream(dir, &cfg, &ra);
	T_EQ(ra.rc, SLUICE_EOF);
	T_EQ(ra.seen[301], 0);
	T_ASSERT(ra.st.records_skipped >= 1);
	T_EQ(ra.n + ra.st.records_skipped, NREC);
	T_ASSERT(ra.st.range_records > 0);
}

/*
 * Only variable values read by range (the label is kept since open) and
 * some records' values all empty: a batch of such records has nothing to
 * read and no read to wait for.  It once waited for ever; now its records
 * are checked when planned: a damaged label is still caught.
 */
static void check_nothing_to_read(void)
{
	struct sluice_field f[2];
	struct sluice_writer_config wc;
	struct sluice_loader_config cfg;
	sluice_writer *w = NULL;
	sluice_dataset *ds = NULL;
	sluice_loader *ld = NULL;
	sluice_batch *b;
	char dir[1100];
	uint8_t val[64];
	uint32_t seen[200] = { 0 }, n = 0;
	int r;

	TU_FMT(dir, "%s/empty", root);
	tu_field(&f[0], "v", "uint8", 1, -1, 0);
	tu_field(&f[1], "label", "int64", 0, 0, 0);
	sluice_writer_config_init(&wc);
	wc.block_size = 4096;
	wc.compression_level = 0;
	T_OK(sluice_writer_open(dir, f, 2, &wc, &w));
	for (int64_t i = 0; i < 200; i++) {
		const void *vals[2] = { val, &i };
		uint64_t len[2] = { i % 3 ? 0 : (uint64_t)(i % 64), 8 };

		memset(val, (int)i, sizeof(val));
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));

	full_cfg(&cfg, 1);
	T_OK(sluice_dataset_open(dir, &ds));
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	while ((r = sluice_loader_next(ld, &b)) == 0) {
		uint64_t i = sluice_batch_indices(b)[0];
		DLManagedTensor *t = NULL;

		T_ASSERT(i < 200);
		seen[i]++;
		n++;
		T_OK(sluice_batch_tensor(b, "label", -1, &t));
		T_EQ(*(const int64_t *)t->dl_tensor.data, (int64_t)i);
		t->deleter(t);
		T_OK(sluice_batch_tensor(b, "v.offsets", -1, &t));
		T_EQ(((const int64_t *)t->dl_tensor.data)[1],
		     i % 3 ? 0 : (int64_t)(i % 64));
		t->deleter(t);
		sluice_batch_release(b);
	}
	T_EQ(r, SLUICE_EOF);
	T_EQ(n, 200);
	for (uint32_t i = 0; i < 200; i++)
		T_EQ(seen[i], 1);
	{
		struct sluice_stats st = { .size = sizeof(st) };

		T_OK(sluice_loader_stats(ld, &st));
		T_EQ(st.blocks_read, 0);
		T_ASSERT(st.range_records >= 200);
	}
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

int main(void)
{
	char small[1100], big[1100];

	snprintf(root, sizeof(root), "%s", tu_scratch("ranges_var"));
	TU_FMT(small, "%s/small", root);
	TU_FMT(big, "%s/big", root);
	write_var(small, 200, 8192);
	check_equal(small);
	/* one run a call, one record checked a call: the same records */
	runs_test_cap = 1;
	check_equal(small);
	runs_test_cap = 0;
	write_var(big, 16384, 256 << 10);
	check_equal(big);
	runs_test_cap = 1;
	check_equal(big);
	runs_test_cap = 0;
	check_read_once(big);
	check_corrupt();
	check_nothing_to_read();
	/* one variable field and a label: flat values read in place */
	g_one = 1;
	TU_FMT(big, "%s/one", root);
	write_var(big, 16384, 256 << 10);
	check_equal(big);
	runs_test_cap = 1;
	check_equal(big);
	runs_test_cap = 0;
	TU_FMT(small, "%s/one-small", root);
	write_var(small, 200, 8192);
	check_equal(small);
	g_one = 0;
	/* zstd: the values' frames are read and decoded */
	g_level = 3;
	TU_FMT(small, "%s/zsmall", root);
	TU_FMT(big, "%s/zbig", root);
	write_var(small, 200, 8192);
	check_equal(small);
	write_var(big, 16384, 256 << 10);
	check_equal(big);
	check_read_once(big);
	check_zstd_cached(big);
	return 0;
}
