/*
 * block_frames.c - a zstd block's frames (format v4).  The writer cuts a
 * block's decoded layout into frames at record boundaries, compresses
 * each on its own and ends the block with a seek table (zstd's seekable
 * format, in a skippable frame), so that a reader decodes one record's
 * bytes without the rest of its block: the loader's record-range reads
 * under full shuffle.  The one-shot decoder still reads such a block
 * whole: concatenated frames, the skippable one ignored.
 *
 * A frame ends at the first record boundary past FRAME_MIN_BYTES of its
 * section, and at every section's start: a record of 16 KiB or more is
 * a frame of its own, and an offsets table or a small field's section
 * is one too.  Frames that small cost zstd some ratio (about 10% on
 * text and code; none on data it cannot compress) and the whole-block
 * decoder a little speed, for reading a record with about its own bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "shard_internal.h"

#define SKIPPABLE_MAGIC 0x184D2A5Eu   /* the seek table's frame */
#define SEEKABLE_MAGIC 0x8F92EAB1u    /* its last four bytes */
#define SEEK_HEADER 8u                /* skippable magic, frame size */
#define SEEK_FOOTER 9u                /* frames, descriptor, magic */
#define SEEK_CHECKSUM_FLAG 0x80u      /* entries of 12 bytes */
#define SEEK_RESERVED_BITS 0x7cu      /* must be zero */
#define FRAME_MIN_BYTES (16u << 10)
#define FRAME_MAX_BYTES (1u << 30)    /* the seekable format's limit */

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* The frames' ends being cut (frame_ends). */
struct cuts {
	uint64_t *end;
	uint32_t n, cap;
	uint64_t start;         /* the open frame's first byte */
};

static int cut(struct cuts *c, uint64_t at)
{
	if (at <= c->start)
		return 0;
	while (at - c->start > FRAME_MAX_BYTES)
		if (cut(c, c->start + FRAME_MAX_BYTES) < 0)
			return -ENOMEM;
	if (c->n == c->cap) {
		uint32_t cap = c->cap ? 2 * c->cap : 64;
		uint64_t *e = realloc(c->end, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		c->end = e;
		c->cap = cap;
	}
	c->end[c->n++] = at;
	c->start = at;
	return 0;
}

/* A record of a section ends at @at: the frame ends there once it is
 * long enough. */
static int record_end(struct cuts *c, uint64_t at)
{
	return at - c->start >= FRAME_MIN_BYTES ? cut(c, at) : 0;
}

/* The frames' ends of the block @raw laid out as @v (decoded offsets,
 * increasing, the last @raw_size). */
static int frame_ends(const struct shard_schema *s, const struct block_view *v,
		      const uint8_t *raw, uint64_t raw_size, struct cuts *c)
{
	int r = 0;

	for (uint32_t f = 0; f < s->nfields && r == 0; f++) {
		uint64_t sec = (uint64_t)(v->data[f] - raw);

		if (s->fields[f].variable) {
			const uint64_t *o = v->offsets[f];

			/* the table: a frame of its own */
			r = cut(c, (uint64_t)((const uint8_t *)o - raw));
			r = r ? r : cut(c, sec);
			for (uint32_t i = 0; i < v->n && r == 0; i++)
				r = record_end(c, sec + o[i + 1]);
			continue;
		}
		r = cut(c, sec);
		for (uint32_t i = 0; i < v->n && r == 0; i++)
			r = record_end(c, sec + (uint64_t)(i + 1) *
						 s->fields[f].record_bytes);
	}
	return r ? r : cut(c, raw_size);
}

int block_frames_compress(ZSTD_CCtx *cctx, int level,
			  const struct shard_schema *s,
			  const struct block_view *v, const uint8_t *raw,
			  uint64_t raw_size, uint8_t **out, uint64_t *cap,
			  uint64_t *stored_size)
{
	struct cuts c = { 0 };
	uint64_t bound, pos = 0, from = 0;
	uint8_t *table;
	int r = frame_ends(s, v, raw, raw_size, &c);

	if (r < 0)
		goto out;
	bound = SEEK_HEADER + (uint64_t)c.n * 8 + SEEK_FOOTER;
	for (uint32_t k = 0; k < c.n; k++) {
		bound += ZSTD_compressBound(c.end[k] - from);
		from = c.end[k];
	}
	if (bound > *cap) {
		free(*out);
		*out = malloc(bound);
		*cap = *out ? bound : 0;
		if (!*out) {
			r = -ENOMEM;
			goto out;
		}
	}
	/* the table's entries are written as the frames are */
	table = *out + bound - ((uint64_t)c.n * 8 + SEEK_FOOTER);
	from = 0;
	for (uint32_t k = 0; k < c.n; k++) {
		size_t got = ZSTD_compressCCtx(cctx, *out + pos, bound - pos,
					       raw + from, c.end[k] - from,
					       level);

		if (ZSTD_isError(got)) {
			r = -SLUICE_EZSTD;
			goto out;
		}
		put32(table + 8 * k, (uint32_t)got);
		put32(table + 8 * k + 4, (uint32_t)(c.end[k] - from));
		pos += got;
		from = c.end[k];
	}
	put32(*out + pos, SKIPPABLE_MAGIC);
	put32(*out + pos + 4, c.n * 8 + SEEK_FOOTER);
	memmove(*out + pos + SEEK_HEADER, table, (size_t)c.n * 8);
	pos += SEEK_HEADER + (uint64_t)c.n * 8;
	put32(*out + pos, c.n);
	(*out)[pos + 4] = 0;            /* descriptor: no checksums */
	put32(*out + pos + 5, SEEKABLE_MAGIC);
	*stored_size = pos + SEEK_FOOTER;
out:
	free(c.end);
	return r;
}

void block_frames_free(struct block_frames *fr)
{
	free(fr->at);
	*fr = (struct block_frames){ 0 };
}

int block_frames_parse(const struct shard_block *blk, const uint8_t *tail,
		       uint64_t len, struct block_frames *fr, uint64_t *need)
{
	const uint8_t *foot = tail + len - SEEK_FOOTER;
	uint64_t entry, table, stored = 0, raw = 0;
	uint32_t n;

	*fr = (struct block_frames){ 0 };
	*need = SEEK_HEADER + SEEK_FOOTER;
	if (blk->codec != DLS_CODEC_ZSTD || blk->stored_size < *need)
		return -SLUICE_ECORRUPT;
	if (len < *need)
		return -EAGAIN;
	n = get32(foot);
	if (get32(foot + 5) != SEEKABLE_MAGIC ||
	    (foot[4] & SEEK_RESERVED_BITS) || n == 0)
		return -SLUICE_ECORRUPT;
	entry = foot[4] & SEEK_CHECKSUM_FLAG ? 12 : 8;
	table = SEEK_HEADER + n * entry + SEEK_FOOTER;
	if (table > blk->stored_size)
		return -SLUICE_ECORRUPT;
	*need = table;
	if (len < table)
		return -EAGAIN;
	tail += len - table;
	if (get32(tail) != SKIPPABLE_MAGIC ||
	    get32(tail + 4) != table - SEEK_HEADER)
		return -SLUICE_ECORRUPT;
	fr->at = malloc(2 * ((uint64_t)n + 1) * sizeof(*fr->at));
	if (!fr->at)
		return -ENOMEM;
	fr->n = n;
	fr->raw = fr->at + n + 1;
	for (uint32_t k = 0; k < n; k++) {
		const uint8_t *e = tail + SEEK_HEADER + k * entry;

		fr->at[k] = stored;
		fr->raw[k] = raw;
		/* u32 each: no overflow in n < 2^32 of them */
		stored += get32(e);
		raw += get32(e + 4);
	}
	fr->at[n] = stored;
	fr->raw[n] = raw;
	/* the frames and the table fill the block; the frames its raw
	 * bytes, each frame some of them */
	if (stored + table != blk->stored_size || raw != blk->raw_size) {
		block_frames_free(fr);
		return -SLUICE_ECORRUPT;
	}
	for (uint32_t k = 0; k < n; k++)
		if (fr->at[k + 1] == fr->at[k] || fr->raw[k + 1] == fr->raw[k]) {
			block_frames_free(fr);
			return -SLUICE_ECORRUPT;
		}
	return 0;
}

int block_frames_check(const uint8_t *stored, const struct block_frames *fr)
{
	for (uint32_t k = 0; k < fr->n; k++) {
		uint64_t len = fr->at[k + 1] - fr->at[k];

		if (ZSTD_findFrameCompressedSize(stored + fr->at[k], len) !=
			    len ||
		    ZSTD_getFrameContentSize(stored + fr->at[k], len) !=
			    fr->raw[k + 1] - fr->raw[k])
			return -SLUICE_ECORRUPT;
	}
	return 0;
}

uint32_t block_frame_of(const struct block_frames *fr, uint64_t off)
{
	return (uint32_t)last_at_or_before(fr->raw, fr->n, off);
}

int block_frames_decode(ZSTD_DCtx *dctx, const struct block_frames *fr,
			uint32_t k0, uint32_t k1, const uint8_t *stored,
			uint8_t *out)
{
	for (uint32_t k = k0; k <= k1; k++) {
		uint64_t raw = fr->raw[k + 1] - fr->raw[k];
		size_t got = ZSTD_decompressDCtx(dctx, out, raw,
						 stored, fr->at[k + 1] - fr->at[k]);

		if (ZSTD_isError(got))
			return -SLUICE_EZSTD;
		if (got != raw)
			return -SLUICE_ECORRUPT;
		out += raw;
		stored += fr->at[k + 1] - fr->at[k];
	}
	return 0;
}

int block_frames_load(int fd, const struct shard_block *blk,
		      struct block_frames *fr)
{
	uint8_t tail[4096], *big;
	uint64_t len = blk->stored_size < sizeof(tail) ? blk->stored_size
						       : sizeof(tail), need;
	int r = pread_full(fd, tail, (size_t)len,
			   blk->offset + blk->stored_size - len);

	if (r < 0)
		return r;
	r = block_frames_parse(blk, tail, len, fr, &need);
	if (r != -EAGAIN)
		return r;
	/* a table longer than a page: need <= stored_size, which the
	 * parser checked against the file */
	big = malloc((size_t)need);
	if (!big)
		return -ENOMEM;
	r = pread_full(fd, big, (size_t)need,
		       blk->offset + blk->stored_size - need);
	if (r == 0)
		r = block_frames_parse(blk, big, need, fr, &need);
	free(big);
	return r == -EAGAIN ? -SLUICE_ECORRUPT : r;
}

int block_frames_read_range(int fd, ZSTD_DCtx *dctx,
			    const struct shard_block *blk,
			    const struct block_frames *fr, uint64_t off,
			    uint64_t len, uint8_t *out)
{
	uint32_t k0, k1;
	uint64_t stored, raw;
	uint8_t *sbuf, *rbuf;
	int r;

	if (len == 0)
		return 0;
	if (off > blk->raw_size || len > blk->raw_size - off)
		return -SLUICE_ECORRUPT;
	k0 = block_frame_of(fr, off);
	k1 = block_frame_of(fr, off + len - 1);
	stored = fr->at[k1 + 1] - fr->at[k0];
	raw = fr->raw[k1 + 1] - fr->raw[k0];
	sbuf = malloc((size_t)stored);
	rbuf = malloc((size_t)raw);
	r = sbuf && rbuf ? 0 : -ENOMEM;
	if (r == 0)
		r = pread_full(fd, sbuf, (size_t)stored,
			       blk->offset + fr->at[k0]);
	if (r == 0)
		r = block_frames_decode(dctx, fr, k0, k1, sbuf, rbuf);
	if (r == 0)
		memcpy(out, rbuf + (off - fr->raw[k0]), (size_t)len);
	free(sbuf);
	free(rbuf);
	return r;
}

int shard_read_frames(const struct shard_file *sf, struct block_frames *out,
		      uint64_t *bytes, char *err, size_t errlen)
{
	int fd, r = 0;

	if (sf->version <= DLS_VERSION_SINGLE_FRAME)
		return 0;
	fd = file_open_regular(sf->path, O_RDONLY, NULL, err, errlen);
	if (fd < 0)
		return fd;
	for (uint64_t b = 0; b < sf->block_count && r == 0; b++) {
		const struct shard_block *blk = &sf->blocks[b];

		if (blk->codec != DLS_CODEC_ZSTD)
			continue;
		r = block_frames_load(fd, blk, &out[b]);
		if (r == 0) {
			*bytes += 2 * ((uint64_t)out[b].n + 1) * 8;
		} else if (r == -SLUICE_ECORRUPT) {
			r = 0;          /* read whole, which reports it */
		} else {
			errf(err, errlen, "%s: block %llu: offset %llu: "
			     "reading its seek table: %s", sf->path,
			     (unsigned long long)b,
			     (unsigned long long)blk->offset,
			     sluice_strerror(r));
		}
	}
	close(fd);
	return r;
}
