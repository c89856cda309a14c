/*
 * test_zstd_frames.c - crafted zstd blocks, their checksums right: the
 * staged decode (pipeline/fetch.c's fetch_decode: a block read part by
 * part through a staging buffer and streamed through the decompressor,
 * for host batches and gathered ones) takes and refuses exactly what the
 * one-shot decoder does (datasets/block_read.c's block_decode: the
 * ring's reads with SLUICE_HOST_STAGED_DECODE=0 and, gathered,
 * SLUICE_STAGED_DECODE=0), and delivers the same bytes.
 *
 * Block 0 (8 MiB raw) is rewritten as frames of other content whose
 * first frame crosses a 4 MiB part: one frame; then an empty frame; then
 * a skippable frame; a frame one byte short; one frame too many; no
 * content size in the header; cut short; a frame checksum that fails;
 * and a byte flipped that zstd fails on, the seal left as it was: a
 * damaged block is corrupt data in each, whatever zstd made of it.
 * A refused block fails the loader with the shard's path and the block's
 * offset.  Each refused craft is made of block 2 too: the batches
 * delivered before it are the writer's records, none after it.
 */
#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_c_contentSizeFlag is stable */
#include <zstd.h>

#include "loader_fixture.h"    /* fx_tmpdir, fx_rmrf */
#include "shard_patch.h"
#include "sim_util.h"
#include "sluice_tools.h"      /* SLUICE_DEVICE_GATHER_ON */
#include "t_field.h"

#define NREC 700u
#define VALUE (64u << 10)
#define B 32u

/* 6 bits of entropy a byte: the writer's zstd stores about 3/4, which
 * leaves room for the crafted frames (craft_block0) */
static uint8_t ref_byte(uint64_t i, uint64_t k)
{
	uint64_t x = (i * VALUE + k + 1) * 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;    /* splitmix64 */
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return (uint8_t)(x >> 58);
}

static void write_data(const char *dir)
{
	struct sluice_field f = t_field("d", (DLDataType){ kDLUInt, 8, 1 },
					VALUE);
	struct sluice_writer_config wc;
	sluice_writer *w = NULL;
	uint8_t *buf = malloc(VALUE);

	T_ASSERT(buf != NULL);
	sluice_writer_config_init(&wc);
	wc.block_size = 8u << 20;       /* 128 records: 6 blocks */
	wc.compression_level = 1;
	wc.threads = 2;
	T_OK(sluice_writer_open(dir, &f, 1, &wc, &w));
	for (uint64_t i = 0; i < NREC; i++) {
		const void *vals[1] = { buf };
		uint64_t len[1] = { VALUE };

		for (uint64_t k = 0; k < VALUE; k++)
			buf[k] = ref_byte(i, k);
		T_OK(sluice_writer_add(w, vals, len));
	}
	T_OK(sluice_writer_close(w, NULL));
	free(buf);
}

/* A frame of @src, with or without its content size and checksum. */
static size_t frame(const void *src, size_t len, uint8_t *dst, size_t cap,
		    int content_size, int checksum)
{
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	size_t n;

	T_ASSERT(cc != NULL);
	T_ASSERT(!ZSTD_isError(ZSTD_CCtx_setParameter(cc,
		ZSTD_c_compressionLevel, 1)));
	T_ASSERT(!ZSTD_isError(ZSTD_CCtx_setParameter(cc,
		ZSTD_c_contentSizeFlag, content_size)));
	T_ASSERT(!ZSTD_isError(ZSTD_CCtx_setParameter(cc,
		ZSTD_c_checksumFlag, checksum)));
	n = ZSTD_compress2(cc, dst, cap, src, len);
	T_ASSERT(!ZSTD_isError(n));
	ZSTD_freeCCtx(cc);
	return n;
}

enum craft { ONE, EMPTY_AFTER, SKIPPABLE_AFTER, SHORT, EXTRA, NO_SIZE,
	     CUT, BAD_CHECKSUM, BIT_ROT, NCRAFTS };
static const char *const craft_name[NCRAFTS] = {
	"one frame", "then an empty frame", "then a skippable frame",
	"a frame one byte short", "one frame too many",
	"no content size", "cut short", "a frame checksum that fails",
	"a byte of a block header flipped, not resealed" };
static const int refused[NCRAFTS] = { 0, 0, 0, 1, 1, 1, 1, 1, 1 };

/* Block @at of @dir becomes @c's frames of new content: 5/8 random
 * (stored as it is: over a 4 MiB part), the rest zeros. */
static void craft_block(const char *dir, uint32_t at, enum craft c)
{
	struct dls_index_entry_disk e;
	uint8_t *old = sp_block(dir, at, &e), *raw, *out;
	uint64_t raw_size = e.raw_size, room = e.stored_size, x = 7;
	size_t cap = ZSTD_compressBound(raw_size) + 64, n = 0;

	raw = calloc(1, raw_size);
	out = malloc(cap);
	T_ASSERT(raw && out);
	for (uint64_t k = 0; k < raw_size / 8 * 5; k++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		raw[k] = (uint8_t)(x >> 56);
	}
	n = frame(raw, raw_size - (c == SHORT), out, cap, c != NO_SIZE,
		  c == BAD_CHECKSUM);
	/* the first frame crosses a part of the staging buffers */
	T_LT(4u << 20, n);
	if (c == EMPTY_AFTER)
		n += frame(raw, 0, out + n, cap - n, 1, 0);
	if (c == SKIPPABLE_AFTER) {
		static const uint8_t skippable[12] = { 0x50, 0x2a, 0x4d, 0x18,
						       4, 0, 0, 0, 1, 2, 3, 4 };

		memcpy(out + n, skippable, sizeof(skippable));
		n += sizeof(skippable);
	}
	if (c == EXTRA)
		n += frame(raw, 16, out + n, cap - n, 1, 0);
	if (c == CUT)
		n -= 100;
	if (c == BAD_CHECKSUM)
		out[n - 1] ^= 1;        /* the frame's XXH64 bits */
	sp_rewrite_block(dir, at, out, n, room);
	if (c == BIT_ROT) {
		/* after the seal: the first zstd block's size, high bits;
		 * zstd fails on it, and so does the block's checksum */
		size_t flip = ZSTD_frameHeaderSize(out, n) + 2;
		char shard[1024];
		uint8_t b = out[flip] ^ 0x80;
		int fd;

		sp_shard0(dir, shard, sizeof(shard));
		fd = open(shard, O_WRONLY);
		T_ASSERT(fd >= 0);
		T_EQ(pwrite(fd, &b, 1, (off_t)(e.offset + flip)), 1);
		close(fd);
	}
	free(old);
	free(raw);
	free(out);
}

/* How a loader is run: host batches, their zstd blocks fetched and
 * decoded through staging buffers, or read by the ring and decoded
 * whole (block_decode, SLUICE_HOST_STAGED_DECODE=0); or the sim device
 * with batches gathered, the same two ways. */
enum path { HOST, HOST_RING, STAGED, RING, NPATHS };
static const char *const path_name[NPATHS] = {
	"host, staged decode", "host, ring reads",
	"sim device, staged decode", "sim device, ring reads" };

struct outcome {
	int r;                  /* next()'s last return */
	char msg[512];
	uint64_t batches, staged;
	uint8_t *bytes;         /* every batch's d, in order */
	uint64_t len;
};

static void run(sluice_dataset *ds, enum path p, struct outcome *o)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld = NULL;
	sluice_batch *b;

	memset(o, 0, sizeof(*o));
	o->bytes = malloc((size_t)NREC * VALUE);
	T_ASSERT(o->bytes != NULL);
	if (p == RING)
		T_OK(setenv("SLUICE_STAGED_DECODE", "0", 1) ? -1 : 0);
	if (p == HOST_RING)
		T_OK(setenv("SLUICE_HOST_STAGED_DECODE", "0", 1) ? -1 : 0);
	sluice_loader_config_init(&cfg);
	cfg.batch_size = B;
	cfg.shuffle = SLUICE_SHUFFLE_NONE;
	cfg.epochs = 1;
	cfg.decode_threads = 2;
	cfg.device = p <= HOST_RING ? SLUICE_DEVICE_HOST : SLUICE_DEVICE_AUTO;
	cfg.device_gather = p <= HOST_RING ? SLUICE_DEVICE_GATHER_OFF
					   : SLUICE_DEVICE_GATHER_ON;
	/* less than the dataset's blocks: read, not cached whole */
	cfg.memory_bytes = 64u << 20;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	while ((o->r = sluice_loader_next(ld, &b)) == 0) {
		DLManagedTensor *t;
		uint64_t n = (uint64_t)sluice_batch_size(b) * VALUE;

		/* stream 0: this thread waits for the batch's copy */
		T_OK(sluice_batch_tensor(b, "d", 0, &t));
		T_ASSERT(o->len + n <= (uint64_t)NREC * VALUE);
		memcpy(o->bytes + o->len, t->dl_tensor.data, n);
		o->len += n;
		o->batches++;
		t->deleter(t);
		sluice_batch_release(b);
	}
	sluice_loader_error(ld, o->msg, sizeof(o->msg));
	T_OK(sluice_loader_stats(ld, &st));
	o->staged = st.bytes_staged;
	sluice_loader_close(ld);
	T_OK(unsetenv("SLUICE_STAGED_DECODE") ? -1 : 0);
	T_OK(unsetenv("SLUICE_HOST_STAGED_DECODE") ? -1 : 0);
}

/* The first @len bytes delivered are the writer's records. */
static void check_written(const uint8_t *bytes, uint64_t len)
{
	for (uint64_t k = 0; k < len; k++)
		if (bytes[k] != ref_byte(k / VALUE, k % VALUE))
			T_FAIL_AT("record %llu byte %llu: %u, not %u",
				  (unsigned long long)(k / VALUE),
				  (unsigned long long)(k % VALUE), bytes[k],
				  ref_byte(k / VALUE, k % VALUE));
}

/* Craft @c made of block @at of a copy of @pristine, through each path. */
static void check_craft(const char *root, const char *pristine, enum craft c,
			uint32_t at)
{
	char dir[700], cmd[1500], shard[1024], where[64];
	struct dls_index_entry_disk e;
	struct outcome o[NPATHS];
	sluice_dataset *ds = NULL;
	uint8_t *blk;

	snprintf(dir, sizeof(dir), "%s/craft-%d-%u", root, (int)c, at);
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", pristine, dir);
	T_EQ(system(cmd), 0);
	craft_block(dir, at, c);
	sp_shard0(dir, shard, sizeof(shard));
	blk = sp_block(dir, at, &e);
	free(blk);
	snprintf(where, sizeof(where), "block %u: offset %llu", at,
		 (unsigned long long)e.offset);
	T_OK(sluice_dataset_open(dir, &ds));
	for (int p = 0; p < NPATHS; p++) {
		run(ds, (enum path)p, &o[p]);
		printf("%s, block %u, %s: %s after %llu batches%s%s\n",
		       craft_name[c], at, path_name[p],
		       o[p].r == SLUICE_EOF ? "whole" : sluice_strerror(o[p].r),
		       (unsigned long long)o[p].batches, o[p].r ? ": " : "",
		       o[p].r == SLUICE_EOF ? "" : o[p].msg);
		/* refused the same way: corrupt, or zstd's error */
		T_EQ(o[p].r, o[HOST].r);
		if (refused[c]) {
			T_ASSERT(o[p].r == -SLUICE_ECORRUPT ||
				 o[p].r == -SLUICE_EZSTD);
			T_CONTAINS(o[p].msg, shard);
			T_CONTAINS(o[p].msg, where);
			/* nothing of the refused block or after it */
			T_ASSERT(o[p].len <= (uint64_t)e.first_record * VALUE);
			check_written(o[p].bytes, o[p].len);
		} else {
			T_EQ(o[p].r, SLUICE_EOF);
			T_EQ(o[p].len, (uint64_t)NREC * VALUE);
		}
		/* the same bytes, as far as each went */
		T_MEMEQ(o[p].bytes, o[HOST].bytes,
			o[p].len < o[HOST].len ? o[p].len : o[HOST].len);
	}
	/* the paths under test took their blocks through the staging
	 * buffers (those after block 0, where it was refused) */
	T_LT(0, o[HOST].staged);
	T_LT(0, o[STAGED].staged);
	T_EQ(o[HOST_RING].staged, 0);
	T_EQ(o[RING].staged, 0);
	for (int p = 0; p < NPATHS; p++)
		free(o[p].bytes);
	sluice_dataset_close(ds);
}

int main(void)
{
	char *root = fx_tmpdir();
	char pristine[700];

	sim_use_seed(sim_first_seed());
	snprintf(pristine, sizeof(pristine), "%s/pristine", root);
	write_data(pristine);
	for (int c = 0; c < NCRAFTS; c++) {
		check_craft(root, pristine, (enum craft)c, 0);
		if (refused[c])
			check_craft(root, pristine, (enum craft)c, 2);
	}
	fx_rmrf(root);
	free(root);
	sim_done();
	return 0;
}
