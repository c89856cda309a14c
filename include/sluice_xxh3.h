/*
 * sluice_xxh3.h - XXH3 at the widest vector unit the CPU has.  Internal:
 * not installed, like sluice_tools.h.
 *
 * Debian's libxxhash is compiled for baseline x86-64 (SSE2); its
 * XXH3_*_dispatch entry points choose AVX2 or AVX-512 at run time and
 * return the same hashes.  Checking checksums is the one pass sluice makes
 * over every byte it reads, so wherever bulk data is hashed this header
 * is included instead of <xxhash.h>: it maps XXH3_64bits and
 * XXH3_64bits_withSeed onto the dispatching functions.
 */
#ifndef SLUICE_XXH3_H
#define SLUICE_XXH3_H

#include <xxhash.h>

#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#endif /* SLUICE_XXH3_H */
