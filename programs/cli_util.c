/*
 * cli_util.c - the helpers both programs share (cli_util.h).
 */
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli_util.h"
#include "sluice.h"

/* Set once by cli_main, before any command runs. */
static const char *program_name = "sluice";

__attribute__((format(printf, 1, 0)))
static void vreport(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", program_name);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int cli_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(fmt, ap);
	va_end(ap);
	return CLI_EXIT_ERROR;
}

int cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(fmt, ap);
	va_end(ap);
	fprintf(stderr, "Run '%s --help' for usage.\n", program_name);
	return CLI_EXIT_USAGE;
}

int cli_error_code(const char *msg, int code)
{
	return cli_error("%s", msg && msg[0] ? msg : sluice_strerror(code));
}

int cli_main(const struct cli_program *p, int argc, char **argv)
{
	const char *cmd;

	program_name = p->name;
	if (argc < 2) {
		p->usage(stderr);
		return CLI_EXIT_USAGE;
	}
	cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
	    strcmp(cmd, "help") == 0) {
		p->usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0) {
		printf("%s %d.%d.%d\n", p->name, SLUICE_VERSION_MAJOR,
		       SLUICE_VERSION_MINOR, SLUICE_VERSION_PATCH);
		return 0;
	}
	for (size_t i = 0; i < p->ncommands; i++)
		if (strcmp(cmd, p->commands[i].name) == 0)
			return p->commands[i].run(argc - 1, argv + 1);
	return cli_usage_error("unknown command '%s'", cmd);
}

int cli_parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (!s || !*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *p = s;
	uint64_t v = 0;
	int shift = 0;

	if (!s || *s < '0' || *s > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p) {
		const char *u = strchr(units, *p >= 'a' ? *p - 32 : *p);

		if (!u || !*u)
			return -1;
		shift = 10 * (int)(u - units + 1);
		p++;
		if (strcasecmp(p, "") != 0 && strcasecmp(p, "B") != 0 &&
		    strcasecmp(p, "iB") != 0)
			return -1;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = v << shift;
	return 0;
}

void cli_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

uint64_t clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
