/*
 * cli.h - the dlpack-shard command line: one function per subcommand and
 * the helpers they share.  CLI-only (never linked into the library).
 *
 * Exit codes: 0 success, 1 error ("dlpack-shard: <message>" on stderr),
 * 2 usage error.
 */
#ifndef SLUICE_DATASETS_CLI_H
#define SLUICE_DATASETS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "cli_util.h"
#include "sluice.h"
#include "sluice_dlpack.h"

#define CLI_NAME "dlpack-shard"

/* Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the exit code. */
int cli_convert(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_verify(int argc, char **argv);
int cli_cat(int argc, char **argv);
int cli_merge(int argc, char **argv);
int cli_clean(int argc, char **argv);

/* The full usage text on @f. */
void cli_usage(FILE *f);

/* 0 when @dir is missing or empty, else an error message and
 * CLI_EXIT_ERROR: writing a dataset over another would leave its extra
 * shards behind. */
int cli_check_out_dir(const char *dir);

/* 0 when no live writer holds @dir (missing, or its lock file unheld),
 * else "DIR: busy: a writer (process PID) ..." and CLI_EXIT_ERROR. */
int cli_check_busy(const char *dir);

/* "uint8" etc., or a "code:bits:lanes" fallback in @buf. */
const char *cli_dtype_name(DLDataType dt, char *buf, size_t len);

#endif /* SLUICE_DATASETS_CLI_H */
