/*
 * shard_parse.c - validate a shard's header page and index.  Every field
 * is untrusted: checked against the file size and for overflow before it
 * is used, so that later stages can trust struct shard_file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#include "fuzzing.h"
#include "shard_internal.h"
#include "sluice_xxh3.h"

#define HDR_OFF(member) ((uint64_t)offsetof(struct dls_header_disk, member))
#define IDX_OFF(member) \
	((uint64_t)offsetof(struct dls_index_entry_disk, member))

#define FAIL(code, off, ...)                                               \
	do {                                                               \
		char what_[256];                                           \
		errf(what_, sizeof(what_), __VA_ARGS__);                   \
		errf(err, errlen, "%s: offset %llu: %s", path,             \
		     (unsigned long long)(off), what_);                    \
		r = (code);                                                \
		goto fail;                                                 \
	} while (0)

static int is_pow2(uint64_t v)
{
	return v && (v & (v - 1)) == 0;
}

/* Checks one index entry against the header and the previous entry. */
static int parse_block(const char *path, const struct dls_index_entry_disk *e,
		       uint64_t entry_off, const struct shard_file *sf,
		       const struct shard_schema *schema,
		       uint64_t index_offset, uint64_t prev_end,
		       uint64_t next_record, char *err, size_t errlen)
{
	uint64_t end, min_raw;
	int r = 0;

	if (e->offset % sf->alignment)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(offset),
		     "block offset %llu not a multiple of alignment %u",
		     (unsigned long long)e->offset, sf->alignment);
	if (e->offset < DLS_HEADER_SIZE || e->offset < prev_end)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(offset),
		     "block offset %llu overlaps the header or the previous "
		     "block (ends at %llu)",
		     (unsigned long long)e->offset,
		     (unsigned long long)prev_end);
	if (e->stored_size == 0 || e->stored_size > DLS_MAX_BLOCK_BYTES)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(stored_size),
		     "stored size %llu out of range",
		     (unsigned long long)e->stored_size);
	if (e->raw_size == 0 || e->raw_size > DLS_MAX_BLOCK_BYTES)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(raw_size),
		     "raw size %llu out of range",
		     (unsigned long long)e->raw_size);
	if (__builtin_add_overflow(e->offset, e->stored_size, &end) ||
	    end > index_offset)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(stored_size),
		     "block [%llu, +%llu) runs past the index at %llu",
		     (unsigned long long)e->offset,
		     (unsigned long long)e->stored_size,
		     (unsigned long long)index_offset);
	if (e->first_record != next_record)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(first_record),
		     "first record %llu, expected %llu",
		     (unsigned long long)e->first_record,
		     (unsigned long long)next_record);
	if (e->record_count == 0)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(record_count),
		     "block has no records");
	if (e->codec != DLS_CODEC_RAW && e->codec != DLS_CODEC_ZSTD)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(codec),
		     "unknown codec %u", e->codec);
	if (e->codec == DLS_CODEC_RAW && e->stored_size != e->raw_size)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(raw_size),
		     "raw block: stored size %llu != raw size %llu",
		     (unsigned long long)e->stored_size,
		     (unsigned long long)e->raw_size);
	/* Offset tables and fixed sections need at least this much. */
	min_raw = block_layout_size(schema, e->record_count, NULL);
	if (min_raw > e->raw_size)
		FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(raw_size),
		     "raw size %llu too small for %u records (needs %llu)",
		     (unsigned long long)e->raw_size, e->record_count,
		     (unsigned long long)min_raw);
fail:
	return r;
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* The dataset identity of a v2 header; v1 headers have none (their
 * identity bytes were reserved, zero). */
static int parse_identity(const char *path, const struct dls_header_disk *h,
			  uint64_t header_sum, struct shard_identity *id,
			  char *err, size_t errlen)
{
	int r = 0;

	memset(id, 0, sizeof(*id));
	if (h->version == DLS_VERSION_UNBOUND) {
		if (!all_zero(h->dataset_id, sizeof(h->dataset_id)))
			FAIL(-SLUICE_ECORRUPT, HDR_OFF(dataset_id),
			     "reserved bytes set");
		return 0;
	}
	if (all_zero(h->dataset_id, sizeof(h->dataset_id)))
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(dataset_id), "no dataset id");
	if (h->shard_count == 0)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(shard_count),
		     "uncommitted shard: left by a write that did not finish, "
		     "not part of any dataset (delete it)");
	if (h->shard_index >= h->shard_count)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(shard_index),
		     "shard index %u, not below the shard count %u",
		     h->shard_index, h->shard_count);
	id->bound = 1;
	memcpy(id->dataset_id, h->dataset_id, sizeof(id->dataset_id));
	id->index = h->shard_index;
	id->count = h->shard_count;
	id->checksum = header_sum;
fail:
	return r;
}

/* Format v3's record checksum section: record_count u64s ending the
 * file (the index must end right before it, checked by the caller).
 * Older headers have those bytes zero. */
static int parse_record_sums(const char *path, const struct dls_header_disk *h,
			     uint64_t file_size, struct shard_file *sf,
			     char *err, size_t errlen)
{
	uint64_t want, end;
	int r = 0;

	if (h->reserved0)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(reserved0), "reserved bytes set");
	if (h->version <= DLS_VERSION_NO_RECORD_SUMS) {
		if (h->record_sums_offset || h->record_sums_length ||
		    h->record_sums_checksum)
			FAIL(-SLUICE_ECORRUPT, HDR_OFF(record_sums_offset),
			     "reserved bytes set (format v%u)", h->version);
		return 0;
	}
	if (__builtin_mul_overflow(h->record_count, (uint64_t)8, &want) ||
	    h->record_sums_length != want)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(record_sums_length),
		     "record checksums length %llu != %llu records x 8",
		     (unsigned long long)h->record_sums_length,
		     (unsigned long long)h->record_count);
	if (h->record_sums_offset < DLS_HEADER_SIZE ||
	    h->record_sums_offset % 8 ||
	    __builtin_add_overflow(h->record_sums_offset,
				   h->record_sums_length, &end) ||
	    end != file_size)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(record_sums_offset),
		     "record checksums [%llu, +%llu) do not end the %llu-byte "
		     "file (truncated?)",
		     (unsigned long long)h->record_sums_offset,
		     (unsigned long long)h->record_sums_length,
		     (unsigned long long)file_size);
	sf->record_sums_offset = h->record_sums_offset;
	sf->record_sums_length = h->record_sums_length;
	sf->record_sums_checksum = h->record_sums_checksum;
fail:
	return r;
}

/* The shard's own bounds on its variable fields' values, kept apart
 * from the schema that its dataset holds once. */
static int keep_value_bounds(struct shard_file *sf,
			     const struct shard_schema *schema)
{
	uint32_t f;

	for (f = 0; f < schema->nfields; f++)
		if (schema->fields[f].variable)
			break;
	if (f == schema->nfields)
		return 0;
	sf->max_value_bytes = calloc(schema->nfields,
				     sizeof(*sf->max_value_bytes));
	if (!sf->max_value_bytes)
		return -ENOMEM;
	for (f = 0; f < schema->nfields; f++)
		sf->max_value_bytes[f] = schema->fields[f].max_value_bytes;
	return 0;
}

int shard_parse(const char *path, const void *header, const void *index,
		size_t index_len, uint64_t file_size, struct shard_file *out,
		struct shard_schema *schema, char *err, size_t errlen)
{
	struct dls_header_disk h;
	struct shard_file sf;
	uint64_t stored, want, idx_end, prev_end, next_record, raw_sum;
	uint32_t bad_field;
	char what[200];
	int r = 0;

	memset(out, 0, sizeof(*out));
	memset(schema, 0, sizeof(*schema));
	memset(&sf, 0, sizeof(sf));
	if (!path)
		path = "(shard)";
	if (file_size < DLS_HEADER_SIZE)
		FAIL(-SLUICE_ECORRUPT, file_size,
		     "file is %llu bytes, shorter than the %u-byte header "
		     "(truncated)",
		     (unsigned long long)file_size, DLS_HEADER_SIZE);
	memcpy(&h, header, sizeof(h));
	if (memcmp(h.magic, DLS_MAGIC, DLS_MAGIC_LEN) != 0)
		FAIL(-SLUICE_EFORMAT, 0, "bad magic: not a dlpack-shard file");
	if (h.version < DLS_VERSION_UNBOUND || h.version > DLS_VERSION)
		FAIL(-SLUICE_EFORMAT, HDR_OFF(version),
		     "format version %u, this reader knows %u to %u",
		     h.version, DLS_VERSION_UNBOUND, DLS_VERSION);
	memcpy(&stored, (const uint8_t *)header + DLS_HEADER_CHECKSUM_OFFSET,
	       8);
	if (!FUZZING_SKIPS_CHECKSUMS && stored != header_checksum(header))
		FAIL(-SLUICE_ECORRUPT, DLS_HEADER_CHECKSUM_OFFSET,
		     "header checksum mismatch");
	if (h.header_size != DLS_HEADER_SIZE)
		FAIL(-SLUICE_EFORMAT, HDR_OFF(header_size),
		     "header size %u, expected %u", h.header_size,
		     DLS_HEADER_SIZE);
	if (!is_pow2(h.alignment) || h.alignment < 512 ||
	    h.alignment > (1u << 20))
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(alignment),
		     "alignment %u not a power of two in 512..1048576",
		     h.alignment);
	r = parse_identity(path, &h, stored, &sf.id, err, errlen);
	if (r < 0)
		goto fail;
	sf.version = h.version;
	r = schema_from_disk(h.fields, h.field_count, schema, &bad_field,
			     what, sizeof(what));
	if (r < 0) {
		uint64_t off = h.field_count < 1 || h.field_count > DLS_MAX_FIELDS
				       ? HDR_OFF(field_count)
				       : HDR_OFF(fields) +
						 bad_field *
							 (uint64_t)sizeof(
								 struct dls_field_disk);
		FAIL(-SLUICE_ECORRUPT, off, "%s", what);
	}
	sf.alignment = h.alignment;
	sf.file_size = file_size;
	sf.record_count = h.record_count;
	sf.block_count = h.block_count;
	sf.raw_bytes = h.raw_bytes;
	if ((h.block_count == 0) != (h.record_count == 0))
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(record_count),
		     "%llu records in %llu blocks",
		     (unsigned long long)h.record_count,
		     (unsigned long long)h.block_count);
	if (h.record_count > h.block_count * (uint64_t)UINT32_MAX &&
	    h.block_count < UINT32_MAX)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(record_count),
		     "record count %llu too large for %llu blocks",
		     (unsigned long long)h.record_count,
		     (unsigned long long)h.block_count);
	if (__builtin_mul_overflow(h.block_count,
				   (uint64_t)sizeof(struct dls_index_entry_disk),
				   &want) ||
	    h.index_length != want)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(index_length),
		     "index length %llu != %llu blocks x %zu",
		     (unsigned long long)h.index_length,
		     (unsigned long long)h.block_count,
		     sizeof(struct dls_index_entry_disk));
	if (h.index_offset < DLS_HEADER_SIZE || h.index_offset % h.alignment)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(index_offset),
		     "index offset %llu not aligned after the header",
		     (unsigned long long)h.index_offset);
	r = parse_record_sums(path, &h, file_size, &sf, err, errlen);
	if (r < 0)
		goto fail;
	if (__builtin_add_overflow(h.index_offset, h.index_length, &idx_end) ||
	    idx_end != (sf.record_sums_length ? sf.record_sums_offset
					      : file_size))
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(index_offset),
		     "index [%llu, +%llu) does not end the %llu-byte file "
		     "or meet the record checksums (truncated?)",
		     (unsigned long long)h.index_offset,
		     (unsigned long long)h.index_length,
		     (unsigned long long)file_size);
	sf.index_offset = h.index_offset;
	if (!index)
		goto done;
	if (index_len != h.index_length)
		FAIL(-SLUICE_ECORRUPT, h.index_offset,
		     "index is %zu bytes, header says %llu", index_len,
		     (unsigned long long)h.index_length);
	if (!FUZZING_SKIPS_CHECKSUMS &&
	    XXH3_64bits(index, index_len) != h.index_checksum)
		FAIL(-SLUICE_ECORRUPT, h.index_offset, "index checksum mismatch");
	if (h.block_count) {
		sf.blocks = calloc(h.block_count, sizeof(*sf.blocks));
		if (!sf.blocks)
			FAIL(-ENOMEM, h.index_offset, "out of memory for %llu "
			     "index entries", (unsigned long long)h.block_count);
	}
	prev_end = DLS_HEADER_SIZE;
	next_record = 0;
	raw_sum = 0;
	for (uint64_t b = 0; b < h.block_count; b++) {
		struct dls_index_entry_disk e;
		uint64_t entry_off = h.index_offset + b * sizeof(e);

		memcpy(&e, (const uint8_t *)index + b * sizeof(e), sizeof(e));
		r = parse_block(path, &e, entry_off, &sf, schema,
				h.index_offset, prev_end, next_record, err,
				errlen);
		if (r < 0)
			goto fail;
		sf.blocks[b] = (struct shard_block){
			.offset = e.offset,
			.stored_size = e.stored_size,
			.raw_size = e.raw_size,
			.first_record = e.first_record,
			.record_count = e.record_count,
			.codec = e.codec,
			.checksum = e.checksum,
		};
		prev_end = e.offset + e.stored_size;
		next_record += e.record_count;
		/* Both bounded by the file size or 2^34 per block: no wrap. */
		raw_sum += e.raw_size;
		sf.stored_bytes += e.stored_size;
		if (e.stored_size > sf.max_stored)
			sf.max_stored = e.stored_size;
		if (e.raw_size > sf.max_raw)
			sf.max_raw = e.raw_size;
		if (next_record > h.record_count)
			FAIL(-SLUICE_ECORRUPT, entry_off + IDX_OFF(record_count),
			     "blocks hold more than the header's %llu records",
			     (unsigned long long)h.record_count);
	}
	if (next_record != h.record_count)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(record_count),
		     "header says %llu records, blocks hold %llu",
		     (unsigned long long)h.record_count,
		     (unsigned long long)next_record);
	if (raw_sum != h.raw_bytes)
		FAIL(-SLUICE_ECORRUPT, HDR_OFF(raw_bytes),
		     "header says %llu raw bytes, blocks hold %llu",
		     (unsigned long long)h.raw_bytes,
		     (unsigned long long)raw_sum);
done:
	sf.path = strdup(path);
	if (!sf.path || keep_value_bounds(&sf, schema) < 0) {
		errf(err, errlen, "%s: out of memory", path);
		r = -ENOMEM;
		goto fail;
	}
	*out = sf;
	return 0;
fail:
	shard_file_free(&sf);
	memset(schema, 0, sizeof(*schema));
	return r;
}

/* pread exactly @len bytes; a short read means the file shrank. */
int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done,
				  (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -SLUICE_ECORRUPT;
		done += (size_t)n;
	}
	return 0;
}

int shard_open(const char *path, struct shard_file *out,
	       struct shard_schema *schema, char *err, size_t errlen)
{
	uint8_t *header = NULL, *index = NULL;
	struct shard_file hdr_only;
	struct stat st;
	int fd, r;

	memset(out, 0, sizeof(*out));
	memset(schema, 0, sizeof(*schema));
	fd = file_open_regular(path, O_RDONLY, &st, err, errlen);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size < DLS_HEADER_SIZE) {
		r = -SLUICE_ECORRUPT;
		errf(err, errlen,
		     "%s: offset %lld: file is %lld bytes, shorter than the "
		     "%u-byte header (truncated)",
		     path, (long long)st.st_size, (long long)st.st_size,
		     DLS_HEADER_SIZE);
		goto out;
	}
	header = malloc(DLS_HEADER_SIZE);
	if (!header) {
		r = -ENOMEM;
		goto out;
	}
	r = pread_full(fd, header, DLS_HEADER_SIZE, 0);
	if (r < 0) {
		errf(err, errlen, "%s: offset 0: reading the header: %s", path,
		     sluice_strerror(r));
		goto out;
	}
	/* The header alone says where the index is and how long. */
	r = shard_parse(path, header, NULL, 0, (uint64_t)st.st_size, &hdr_only,
			schema, err, errlen);
	if (r < 0)
		goto out;
	{
		uint64_t ioff = hdr_only.index_offset;
		size_t ilen = (size_t)(hdr_only.block_count *
				       sizeof(struct dls_index_entry_disk));

		shard_file_free(&hdr_only);
		index = malloc(ilen ? ilen : 1);
		if (!index) {
			r = -ENOMEM;
			errf(err, errlen, "%s: out of memory for the index",
			     path);
			goto out;
		}
		r = pread_full(fd, index, ilen, ioff);
		if (r < 0) {
			errf(err, errlen, "%s: offset %llu: reading the index: %s",
			     path, (unsigned long long)ioff, sluice_strerror(r));
			goto out;
		}
		r = shard_parse(path, header, index, ilen, (uint64_t)st.st_size,
				out, schema, err, errlen);
	}
out:
	if (r < 0)
		memset(schema, 0, sizeof(*schema));
	free(header);
	free(index);
	close(fd);
	return r;
}

void shard_file_free(struct shard_file *sf)
{
	if (!sf)
		return;
	free(sf->path);
	free(sf->blocks);
	free(sf->max_value_bytes);
	memset(sf, 0, sizeof(*sf));
}
