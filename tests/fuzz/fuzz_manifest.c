/*
 * fuzz_manifest.c - the input is a dataset.json text: the strict parser
 * must reject or accept it without crashing, and whatever it accepts
 * must hold plain shard names and a valid schema.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct manifest m;
	char err[512];

	if (size > MANIFEST_MAX_BYTES)
		return 0;
	if (manifest_parse((const char *)data, size, &m, err, sizeof(err)) ==
	    0) {
		if (m.schema.nfields < 1 || m.schema.nfields > DLS_MAX_FIELDS)
			abort();
		for (uint32_t i = 0; i < m.nshards; i++)
			if (strchr(m.shards[i].file, '/') ||
			    strstr(m.shards[i].file, ".."))
				abort();
		manifest_free(&m);
	}
	return 0;
}
