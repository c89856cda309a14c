/*
 * shard_internal.h - helpers shared by the format files of datasets/
 * (parser, writer, verify, merge).  Not used outside datasets/.
 */
#ifndef SLUICE_DATASETS_SHARD_INTERNAL_H
#define SLUICE_DATASETS_SHARD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "shard.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dlpack-shard v1 is read and written by little-endian hosts only"
#endif

/* snprintf into @err when it is not NULL. */
void errf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The disk form of a schema (DLS_MAX_FIELDS entries, zero padded). */
void schema_to_disk(const struct shard_schema *s, struct dls_field_disk *out);

/*
 * schema_from_disk - validate @n disk fields (untrusted) into @out.
 * On failure writes "field I: what" into @err and returns -SLUICE_ECORRUPT
 * with *@bad_field set to I.
 */
int schema_from_disk(const struct dls_field_disk *fields, uint32_t n,
		     struct shard_schema *out, uint32_t *bad_field, char *err,
		     size_t errlen);

/* XXH3-64 of the header page's first DLS_HEADER_CHECKSUM_OFFSET bytes. */
uint64_t header_checksum(const void *header_page);

/* Round @v up to a multiple of the power of two @align; UINT64_MAX on
 * overflow. */
static inline uint64_t align_up_u64(uint64_t v, uint64_t align)
{
	uint64_t r;

	if (__builtin_add_overflow(v, align - 1, &r))
		return UINT64_MAX;
	return r & ~(align - 1);
}

/* Expand a comma-separated list of shard paths and globs (sorted).
 * Free with dataset_free_paths(). */
int dataset_expand_paths(const char *spec, char ***paths, size_t *n,
			 char *err, size_t errlen);
void dataset_free_paths(char **paths, size_t n);

/* Shard file names in manifests and merges: plain names only. */
int shard_name_is_plain(const char *name);

/* pread exactly @len bytes at @off: 0, -errno, or -SLUICE_ECORRUPT when
 * the file ends first (it is shorter than its header or index says). */
int pread_full(int fd, void *buf, size_t len, uint64_t off);

#endif /* SLUICE_DATASETS_SHARD_INTERNAL_H */
