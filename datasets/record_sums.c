/*
 * record_sums.c - format v3's record checksums: one XXH3-64 per record,
 * chained over its fields, so that a record read by its byte ranges
 * alone (full shuffle) is verified without reading its whole block.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>


#include "fuzzing.h"
#include "shard_internal.h"
#include "sluice_xxh3.h"

uint64_t record_checksum(uint32_t nfields, const uint8_t *const *ptr,
			 const uint64_t *len)
{
	uint64_t h = 0;

	for (uint32_t f = 0; f < nfields; f++)
		h = XXH3_64bits_withSeed(ptr[f], len[f], h);
	return h;
}

uint64_t record_checksum_view(const struct shard_schema *s,
			      const struct block_view *v, uint32_t i)
{
	const uint8_t *ptr[DLS_MAX_FIELDS];
	uint64_t len[DLS_MAX_FIELDS];

	for (uint32_t f = 0; f < s->nfields; f++)
		block_view_get(s, v, f, i, &ptr[f], &len[f]);
	return record_checksum(s->nfields, ptr, len);
}

int shard_read_record_sums(const struct shard_file *sf, uint64_t *out,
			   char *err, size_t errlen)
{
	uint64_t off = sf->record_sums_offset, len = sf->record_sums_length;
	int fd, r;

	if (len == 0) {
		errf(err, errlen, "%s: format v%u has no record checksums",
		     sf->path, sf->version);
		return -ENOENT;
	}
	fd = file_open_regular(sf->path, O_RDONLY, NULL, err, errlen);
	if (fd < 0)
		return fd;
	/* len == record_count * 8, within the file (shard_parse). */
	r = pread_full(fd, out, (size_t)len, off);
	close(fd);
	if (r < 0) {
		errf(err, errlen, "%s: offset %llu: reading the record "
		     "checksums: %s", sf->path, (unsigned long long)off,
		     r == -SLUICE_ECORRUPT ? "file truncated"
					   : sluice_strerror(r));
		return r;
	}
	if (!FUZZING_SKIPS_CHECKSUMS &&
	    XXH3_64bits(out, (size_t)len) != sf->record_sums_checksum) {
		errf(err, errlen, "%s: offset %llu: record checksum section "
		     "checksum mismatch", sf->path, (unsigned long long)off);
		return -SLUICE_ECORRUPT;
	}
	return 0;
}
