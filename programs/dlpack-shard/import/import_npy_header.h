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

/* An empty array's rows may claim no more than this many bytes. */
#define NPY_MAX_EMPTY_ROW (1u << 30)

/*
 * npy_check_shape - rows and row size of the parsed header @h, checked
 * against @data_bytes (what the file holds after the header): the shape
 * must need exactly that many bytes, without overflow; a 0-d array, a
 * zero trailing dimension and an empty array whose rows claim more than
 * NPY_MAX_EMPTY_ROW bytes are refused.
 * @return: 0 with *@rows and *@row_bytes set, or -SLUICE_EINPUT with a
 *	message (no file name) in @err.
 */
int npy_check_shape(const struct npy_header *h, uint64_t data_bytes,
		    uint64_t *rows, uint64_t *row_bytes, char *err,
		    size_t errlen);

#endif /* SLUICE_DATASETS_IMPORT_NPY_HEADER_H */
