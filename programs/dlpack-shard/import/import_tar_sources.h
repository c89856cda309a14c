/*
 * import_tar_sources.h - the tars a WebDataset conversion reads: SRC as
 * one path, a comma-separated list, a glob, or WebDataset's brace
 * pattern ("shard-{000..099}.tar", "{train,val}-{0..3}.tar"), in order.
 * Private to import_tar.c (and its tests).
 */
#ifndef SLUICE_DATASETS_IMPORT_TAR_SOURCES_H
#define SLUICE_DATASETS_IMPORT_TAR_SOURCES_H

#include <stddef.h>

struct tar_sources {
	char **paths;
	size_t n, cap;
};

/*
 * tar_sources_expand - @spec split at top-level commas; each item's
 * braces expanded (lists "{a,b}", zero-padded ranges "{000..099}",
 * several braces as nested loops, left to right); each result with glob
 * characters globbed (sorted; no match is an error), else taken as is.
 * @return: 0; -SLUICE_EINPUT (bad pattern, nothing matched, more than
 *	TAR_SOURCES_MAX paths) or -ENOMEM, with a message in @err.
 */
#define TAR_SOURCES_MAX 1000000
int tar_sources_expand(const char *spec, struct tar_sources *out, char *err,
		       size_t errlen);
void tar_sources_free(struct tar_sources *s);

#endif /* SLUICE_DATASETS_IMPORT_TAR_SOURCES_H */
