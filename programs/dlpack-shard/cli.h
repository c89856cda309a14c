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

#include "sluice.h"
#include "sluice_dlpack.h"

#define CLI_NAME "dlpack-shard"
#define CLI_EXIT_ERROR 1
#define CLI_EXIT_USAGE 2

/* Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the exit code. */
int cli_convert(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_verify(int argc, char **argv);
int cli_cat(int argc, char **argv);
int cli_merge(int argc, char **argv);

/* The full usage text on @f. */
void cli_usage(FILE *f);

/* "dlpack-shard: MESSAGE" on stderr; returns CLI_EXIT_ERROR. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, plus a hint to run --help; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* A byte count or count: decimal digits with an optional K/M/G/T suffix
 * (powers of 1024; "KiB", "KB", "k" all accepted).  -1 when malformed
 * or out of range. */
int cli_parse_size(const char *s, uint64_t *out);
/* Plain decimal unsigned integer; -1 when malformed. */
int cli_parse_u64(const char *s, uint64_t *out);

/* @s as a JSON string literal (quoted, escaped) on @f. */
void cli_json_string(FILE *f, const char *s);

/* 0 when @dir is missing or empty, else an error message and
 * CLI_EXIT_ERROR: writing a dataset over another would leave its extra
 * shards behind. */
int cli_check_out_dir(const char *dir);

/* Seconds from a monotonic clock. */
double cli_now(void);

/* "uint8" etc., or a "code:bits:lanes" fallback in @buf. */
const char *cli_dtype_name(DLDataType dt, char *buf, size_t len);

#endif /* SLUICE_DATASETS_CLI_H */
