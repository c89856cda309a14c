/*
 * import_npy_header.h - strict parsing of a .npy preamble and header
 * dict.  Pure (no I/O), private to import_npy.c.
 */
#ifndef SLUICE_DATASETS_IMPORT_NPY_HEADER_H
#define SLUICE_DATASETS_IMPORT_NPY_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#define NPY_MAX_DIMS 32
/* numpy itself refuses headers over 10000 bytes by default. */
#define NPY_MAX_HEADER (64u << 10)
#define NPY_PREAMBLE_MAX 12u

struct npy_header {
	DLDataType dtype;
	uint32_t item_bytes;
	int ndim;
	uint64_t shape[NPY_MAX_DIMS];
	uint64_t data_offset;    /* where the array's bytes start */
};

/*
 * npy_preamble - read magic, version and header length from the first
 * @len bytes (@len >= NPY_PREAMBLE_MAX, or the file's size if smaller).
 * @hdr_start, @hdr_len: where the dict text lies in the file.
 * @return: 0, or -SLUICE_EINPUT with a message (no file name) in @err.
 */
int npy_preamble(const uint8_t *p, size_t len, uint64_t *hdr_start,
		 uint32_t *hdr_len, char *err, size_t errlen);

/*
 * npy_parse_dict - parse the header dict text (exactly @len bytes):
 * {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } plus the
 * space/newline padding.  Fortran order, object, structured, big-endian
 * and other unsupported dtypes are refused with a clear message.
 */
int npy_parse_dict(const char *text, size_t len, struct npy_header *out,
		   char *err, size_t errlen);

#endif /* SLUICE_DATASETS_IMPORT_NPY_HEADER_H */
