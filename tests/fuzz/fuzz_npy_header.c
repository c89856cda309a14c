/*
 * fuzz_npy_header.c - the input is a whole .npy file.  Preamble, header
 * dict and shape are checked as import_npy.c checks them; what is
 * accepted must describe exactly the bytes after the header, and an empty
 * array may not claim huge rows.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "import_npy_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct npy_header h;
	uint64_t hdr_start, rows, row_bytes;
	uint32_t hdr_len;
	char err[256], *text;

	if (npy_preamble(data, size < NPY_PREAMBLE_MAX ? size :
			 NPY_PREAMBLE_MAX, &hdr_start, &hdr_len, err,
			 sizeof(err)) != 0)
		return 0;
	if (hdr_start > size || hdr_len > size - hdr_start)
		return 0;
	/* An exact-size copy: ASan sees any read past the dict. */
	text = malloc(hdr_len ? hdr_len : 1);
	if (!text)
		return 0;
	memcpy(text, data + hdr_start, hdr_len);
	if (npy_parse_dict(text, hdr_len, &h, err, sizeof(err)) == 0) {
		h.data_offset = hdr_start + hdr_len;
		if (npy_check_shape(&h, size - h.data_offset, &rows,
				    &row_bytes, err, sizeof(err)) == 0) {
			if (rows * row_bytes != size - h.data_offset)
				abort();
			if (rows == 0 && row_bytes > NPY_MAX_EMPTY_ROW)
				abort();
			if (row_bytes == 0 || h.item_bytes == 0)
				abort();
		}
	}
	free(text);
	return 0;
}
