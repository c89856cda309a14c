/*
 * dlpack_shard.h - the dlpack-shard on-disk format, version 4.
 *
 * A dataset is a directory of shard files (NAME-00000.dls ...) plus a
 * dataset.json manifest written last.  Everything on disk is little-endian.
 * Every field below is untrusted input: readers bounds-check each one
 * against the file size and for overflow before use.
 *
 * Shard file layout:
 *
 *   [0, 4096)            header (struct dls_header_disk, zero padded)
 *   [4096, ...)          blocks, each starting at a multiple of `alignment`
 *   [index_offset, +len) index: block_count x struct dls_index_entry_disk
 *   [record_sums_offset, +len) v3: record checksums, record_count x u64;
 *                        right after the index, ending the file (v1 and
 *                        v2: the index ends the file)
 *
 * A block holds a run of whole records, stored raw or as zstd frames.
 * Decoded, a block of n records is field-major; each section starts at a
 * multiple of 8 bytes from the block start (zero padding between):
 *   fixed field:    n * field_bytes, record after record
 *   variable field: uint64 offsets[n + 1] (offsets[0] == 0, non-decreasing,
 *                   relative to the start of the data that follows), then
 *                   the concatenated bytes of the n values
 * A variable field has shape[0] == -1 and fixed trailing dims; the byte
 * length of each value is a multiple of elem_bytes * prod(shape[1:]).
 *
 * Checksums are XXH3-64 with seed 0: the header's over bytes
 * [0, DLS_HEADER_CHECKSUM_OFFSET), the index's over the whole index, each
 * block's over its stored bytes.  The header checksum covers the index
 * checksum, which covers every block checksum: it is the shard's content
 * checksum, recorded for each shard in dataset.json.
 *
 * Version 2 binds each shard to its dataset: a random 128-bit dataset id,
 * the shard's index in the dataset and the dataset's shard count.  A
 * writer writes shards under temporary names with shard_count 0
 * ("uncommitted") and sets the count, then renames, only once the whole
 * dataset is written: a shard left by a failed or killed write is refused
 * by every reader, and a committed shard without the others of its
 * dataset is too.  Version 1 shards (no identity, reserved bytes zero)
 * are still read, unbound.
 *
 * Version 3 adds a checksum per record, so that a reader may read and
 * verify one record's bytes without its whole block (record-range reads
 * for full shuffle).  Record i's checksum chains its fields in field
 * order over their decoded bytes:
 *   h = 0; for each field f: h = XXH3_64bits_withSeed(bytes of f, len, h)
 * where a fixed field's bytes are its record_bytes in its section and a
 * variable field's are its value (offsets[i] .. offsets[i + 1]).  Every
 * record has one, whatever its block's codec (a zstd block's records
 * are read by range from v4 on, through its frames).  The section's
 * own XXH3-64 is in the header, which the header checksum covers.  v1
 * and v2 shards (no section, those header bytes zero) are still read:
 * their blocks are read whole.
 *
 * Version 4 cuts a zstd block into frames that a reader can decode
 * alone: its stored bytes are one zstd frame (as in v3: read whole), or
 * several, each decoding to consecutive bytes of the decoded block, then
 * a seek table, zstd's
 * seekable format (contrib/seekable_format in zstd's sources): a
 * skippable frame (magic 0x184D2A5E, u32 length) of one entry per frame
 * {u32 stored bytes, u32 decoded bytes} and a 9-byte footer {u32 frame
 * count, u8 descriptor (bits 2-6 zero; bit 7: entries of 12 bytes, with
 * a checksum a reader may ignore), u32 0x8F92EAB1}.  The frames and the
 * table fill the block's stored size and the frames its raw size.  The
 * writer ends a frame at each section's start and at the first record
 * boundary past 16 KiB of a section, so a record of 16 KiB or more is
 * one frame's bytes (block_frames.c).  Decoded whole, the frames
 * concatenate (the skippable frame decodes to nothing), as a one-shot
 * zstd decoder reads them.  v3 zstd blocks are one frame and no table.
 */
#ifndef DLPACK_SHARD_H
#define DLPACK_SHARD_H

#include <stdint.h>

#define DLS_MAGIC "DLSHARD\x01"  /* 8 bytes, no terminator on disk */
#define DLS_MAGIC_LEN 8
#define DLS_VERSION 4u
#define DLS_VERSION_SINGLE_FRAME 3u /* still read: a zstd block one frame */
#define DLS_VERSION_NO_RECORD_SUMS 2u /* still read: no record checksums */
#define DLS_VERSION_UNBOUND 1u  /* still read: no dataset identity */
/* dataset.json's own format version for a bound dataset (shards of v2 to
 * v4: the manifest did not change with v3 or v4); unbound: 1. */
#define DLS_MANIFEST_VERSION 2u
#define DLS_DATASET_ID_LEN 16u
#define DLS_HEADER_SIZE 4096u
#define DLS_HEADER_CHECKSUM_OFFSET (DLS_HEADER_SIZE - 8u)
#define DLS_DEFAULT_ALIGNMENT 4096u
#define DLS_MAX_FIELDS 32u
#define DLS_MAX_NDIM 6u
#define DLS_NAME_MAX 48u        /* including the NUL terminator */
#define DLS_VARIABLE_DIM (-1)
#define DLS_SHARD_SUFFIX ".dls"
#define DLS_MANIFEST_NAME "dataset.json"

/* Sanity limits a reader enforces before trusting counts from a file. */
#define DLS_MAX_BLOCK_BYTES (1ull << 34)  /* 16 GiB stored or raw */

/* DLPack type codes (DLDataTypeCode) as stored in dtype_code. */
enum dls_dtype_code {
	DLS_DTYPE_INT = 0,
	DLS_DTYPE_UINT = 1,
	DLS_DTYPE_FLOAT = 2,
	DLS_DTYPE_BFLOAT = 4,
	DLS_DTYPE_BOOL = 6,
};

enum dls_codec {
	DLS_CODEC_RAW = 0,
	DLS_CODEC_ZSTD = 1,
};

/* One field of the schema: 112 bytes on disk. */
struct dls_field_disk {
	char name[DLS_NAME_MAX];    /* NUL-terminated, unique, non-empty */
	uint8_t dtype_code;         /* enum dls_dtype_code */
	uint8_t dtype_bits;         /* 8, 16, 32, 64 (bool: 8) */
	uint16_t dtype_lanes;       /* 1 */
	uint32_t ndim;              /* 0 .. DLS_MAX_NDIM */
	int64_t shape[DLS_MAX_NDIM];/* dims > 0; shape[0] may be -1 */
	uint64_t max_value_bytes;   /* variable fields: the largest value in
				       this shard, in bytes (readers size
				       batch buffers by it and reject a
				       larger value as corrupt); fixed: 0 */
};

/* The header: first bytes of the 4 KiB header page. */
struct dls_header_disk {
	char magic[DLS_MAGIC_LEN];
	uint32_t version;           /* DLS_VERSION (or 1) */
	uint32_t header_size;       /* DLS_HEADER_SIZE */
	uint32_t alignment;         /* power of two, >= 512, <= 1 MiB */
	uint32_t field_count;       /* 1 .. DLS_MAX_FIELDS */
	uint64_t record_count;
	uint64_t block_count;
	uint64_t index_offset;      /* multiple of alignment, after the blocks */
	uint64_t index_length;      /* block_count * sizeof(dls_index_entry_disk) */
	uint64_t index_checksum;    /* XXH3-64 of the index bytes */
	uint64_t raw_bytes;         /* sum of the blocks' raw sizes */
	uint8_t dataset_id[DLS_DATASET_ID_LEN]; /* v2: random, not all zero;
						   v1: reserved, zero */
	struct dls_field_disk fields[DLS_MAX_FIELDS];
	uint32_t shard_index;       /* v2: position in the dataset, < count */
	uint32_t shard_count;       /* v2: shards in the dataset; 0 while the
				       write is not committed (refused) */
	uint32_t reserved0;         /* zero */
	uint64_t record_sums_offset;   /* v3: index_offset + index_length */
	uint64_t record_sums_length;   /* v3: record_count * 8; it ends the
					  file */
	uint64_t record_sums_checksum; /* v3: XXH3-64 of the section */
	/* ... zero padding; uint64 header checksum at
	 * DLS_HEADER_CHECKSUM_OFFSET */
};

/* One index entry per block: 48 bytes on disk. */
struct dls_index_entry_disk {
	uint64_t offset;            /* multiple of alignment, >= header size */
	uint64_t stored_size;       /* bytes on disk (the zstd frame or raw) */
	uint64_t raw_size;          /* decoded bytes */
	uint64_t first_record;      /* index of its first record in the shard */
	uint32_t record_count;      /* > 0 */
	uint32_t codec;             /* enum dls_codec */
	uint64_t checksum;          /* XXH3-64 of the stored bytes */
};

_Static_assert(sizeof(struct dls_field_disk) == 112, "field layout");
_Static_assert(sizeof(struct dls_index_entry_disk) == 48, "index layout");
_Static_assert(sizeof(struct dls_header_disk) <= DLS_HEADER_CHECKSUM_OFFSET,
	       "header fits its page");

#endif /* DLPACK_SHARD_H */
