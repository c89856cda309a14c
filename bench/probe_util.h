/*
 * probe_util.h - what the sweeps' probes (budget_probe.c, state_probe.c)
 * both need: a shuffle mode by name, a JSON string body.
 */
#ifndef SLUICE_BENCH_PROBE_UTIL_H
#define SLUICE_BENCH_PROBE_UTIL_H

#include <stdio.h>
#include <string.h>

#include "sluice.h"

/* none|block|window|full into *@out; -1 for anything else. */
static inline int parse_shuffle(const char *s, enum sluice_shuffle *out)
{
	static const char *const names[] = { "none", "block", "window", "full" };

	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i])) {
			*out = (enum sluice_shuffle)i;
			return 0;
		}
	return -1;
}

/* @s as a JSON string body: quotes, backslashes and controls escaped. */
static inline void json_str(const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned)*s);
		else
			putchar(*s);
	}
}

#endif /* SLUICE_BENCH_PROBE_UTIL_H */
