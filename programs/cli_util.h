/*
 * cli_util.h - what both command-line programs (sluice, dlpack-shard)
 * share: command dispatch, error messages and exit codes, number parsing,
 * JSON string escaping, the clock.  Programs only; never in the library.
 */
#ifndef SLUICE_PROGRAMS_CLI_UTIL_H
#define SLUICE_PROGRAMS_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit status of every program and command. */
#define CLI_EXIT_ERROR 1
#define CLI_EXIT_USAGE 2

struct cli_subcommand {
	const char *name;
	/* argv[0] is the command's name; @return: the exit status. */
	int (*run)(int argc, char **argv);
};

struct cli_program {
	const char *name;              /* prefixes every message */
	void (*usage)(FILE *f);        /* the full --help text */
	const struct cli_subcommand *commands;
	size_t ncommands;
};

/*
 * The whole of main(): --help, --version, then the command named by
 * argv[1] with the arguments after it.  @return: the exit status.
 */
int cli_main(const struct cli_program *p, int argc, char **argv);

/* "PROGRAM: MESSAGE" on stderr; @return: CLI_EXIT_ERROR. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, plus a hint to run --help; @return: CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/* @msg, or sluice_strerror(@code) when @msg is empty, as cli_error. */
int cli_error_code(const char *msg, int code);

/* Plain decimal unsigned integer.  @return: 0, or -1 when malformed or
 * out of range (*@out untouched). */
int cli_parse_u64(const char *s, uint64_t *out);
/* A byte count or count: decimal digits with an optional K/M/G/T suffix
 * (powers of 1024; "K", "k", "KB", "KiB" alike).  @return: 0 or -1. */
int cli_parse_size(const char *s, uint64_t *out);

/* @s (NULL: empty) as a JSON string literal, quoted and escaped, on @f. */
void cli_json_string(FILE *f, const char *s);

/* CLOCK_MONOTONIC in nanoseconds, the clock the library's stats use. */
uint64_t clock_ns(void);

#endif /* SLUICE_PROGRAMS_CLI_UTIL_H */
