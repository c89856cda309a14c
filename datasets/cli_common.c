/*
 * cli_common.c - helpers shared by the dlpack-shard subcommands.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"

/* Messages quote names from the input (tar members, file names), which
 * may hold terminal control sequences: C0 controls, DEL and UTF-8 C1
 * controls are written as \xNN instead. */
static void put_escaped(const char *s, FILE *f)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			fprintf(f, "\\x%02x", *p);
		} else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			fprintf(f, "\\xc2\\x%02x", p[1]);
			p++;
		} else {
			fputc(*p, f);
		}
	}
}

static void vreport(const char *fmt, va_list ap)
	__attribute__((format(printf, 1, 0)));
static void vreport(const char *fmt, va_list ap)
{
	char msg[4096];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	fputs(CLI_NAME ": ", stderr);
	put_escaped(msg, stderr);
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
	fprintf(stderr, "Run '" CLI_NAME " --help' for usage.\n");
	return CLI_EXIT_USAGE;
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
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
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

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *cli_dtype_name(DLDataType dt, char *buf, size_t len)
{
	const char *name = sluice_dtype_name(dt);

	if (name)
		return name;
	snprintf(buf, len, "dtype(%u:%u:%u)", dt.code, dt.bits, dt.lanes);
	return buf;
}

int cli_check_out_dir(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int empty = 1;

	if (!d)
		return errno == ENOENT ? 0 : cli_error("%s: %s", dir,
						     strerror(errno));
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			empty = 0;
			break;
		}
	closedir(d);
	if (!empty)
		return cli_error("%s: not empty; stale shards would outlive "
				 "the new dataset, so remove it or choose "
				 "another --out", dir);
	return 0;
}
