/*
 * fuzzing.h - the fuzz build mode.  Built with -DSLUICE_FUZZING (`make
 * fuzz` and the corpus replays in `make test`), the parsers accept any
 * checksum, so that a fuzzer's mutations reach the code behind the
 * checksums instead of dying at them (zstd's
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION).  Never defined in the library.
 */
#ifndef SLUICE_DATASETS_FUZZING_H
#define SLUICE_DATASETS_FUZZING_H

#ifdef SLUICE_FUZZING
#define FUZZING_SKIPS_CHECKSUMS 1
#else
#define FUZZING_SKIPS_CHECKSUMS 0
#endif

#endif /* SLUICE_DATASETS_FUZZING_H */
