/*
 * import_tar_sources.c - expand the tar source spec of a WebDataset
 * conversion into paths, in order (see import_tar_sources.h).  The brace
 * grammar is WebDataset's (braceexpand): "{a,b,c}" alternatives and
 * "{N..M}" integer ranges, zero-padded to the wider endpoint when either
 * is written with a leading zero; no nesting.
 */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import_common.h"
#include "import_tar_sources.h"
#include "sluice_tools.h"

static int push(struct tar_sources *s, const char *path, size_t len,
		char *err, size_t errlen)
{
	if (s->n == TAR_SOURCES_MAX)
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "tar sources: more than %d paths",
				   TAR_SOURCES_MAX);
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		char **p = realloc(s->paths, cap * sizeof(*p));

		if (!p)
			return import_fail(err, errlen, -ENOMEM,
					   "out of memory");
		s->paths = p;
		s->cap = cap;
	}
	s->paths[s->n] = strndup(path, len);
	if (!s->paths[s->n])
		return import_fail(err, errlen, -ENOMEM, "out of memory");
	s->n++;
	return 0;
}

/* A path without braces: globbed when it has glob characters. */
static int add_path(struct tar_sources *s, const char *path, char *err,
		    size_t errlen)
{
	glob_t g;
	int r;

	if (!strpbrk(path, "*?["))
		return push(s, path, strlen(path), err, errlen);
	r = glob(path, 0, NULL, &g);
	if (r != 0) {
		globfree(&g);
		if (r == GLOB_NOSPACE)
			return import_fail(err, errlen, -ENOMEM,
					   "out of memory");
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: no file matches", path);
	}
	r = 0;
	for (size_t i = 0; r == 0 && i < g.gl_pathc; i++) {
		struct stat st;

		/* A pipe streams when named alone; one a glob happens to
		 * match would wait for a writer that never comes. */
		if (stat(g.gl_pathv[i], &st) == 0 && !S_ISREG(st.st_mode)) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"%s: matched by '%s' but not a regular "
					"file (it is %s)",
					g.gl_pathv[i], path,
					file_kind(st.st_mode));
			break;
		}
		r = push(s, g.gl_pathv[i], strlen(g.gl_pathv[i]), err,
			 errlen);
	}
	globfree(&g);
	return r;
}

/* "N..M" -> bounds and the zero-padded width; 0 when not a range. */
static int parse_range(const char *p, size_t len, long long *lo,
		       long long *hi, int *width)
{
	char buf[64], *dots, *end;

	if (len == 0 || len >= sizeof(buf))
		return 0;
	memcpy(buf, p, len);
	buf[len] = '\0';
	dots = strstr(buf, "..");
	if (!dots || dots == buf || dots[2] == '\0')
		return 0;
	*dots = '\0';
	errno = 0;
	*lo = strtoll(buf, &end, 10);
	if (*end || errno)
		return 0;
	*hi = strtoll(dots + 2, &end, 10);
	if (*end || errno)
		return 0;
	*width = 0;
	if ((buf[0] == '0' && buf[1]) || (dots[2] == '0' && dots[3])) {
		size_t a = strlen(buf), b = strlen(dots + 2);

		*width = (int)(a > b ? a : b);
	}
	return 1;
}

/*
 * Expand the first brace group of @pat (prefix + {group} + rest), each
 * alternative recursively, so results come out left to right.
 */
static int expand(struct tar_sources *s, const char *pat, char *err,
		  size_t errlen)
{
	const char *open = strchr(pat, '{'), *close;
	size_t pre, glen;
	char *buf;
	int r = 0;

	if (!open)
		return add_path(s, pat, err, errlen);
	close = strchr(open, '}');
	if (!close || memchr(open + 1, '{', (size_t)(close - open - 1)))
		return import_fail(err, errlen, -SLUICE_EINPUT,
				   "%s: unbalanced or nested braces", pat);
	pre = (size_t)(open - pat);
	glen = (size_t)(close - open - 1);
	/* room for prefix + longest alternative (a 20-digit number) + rest */
	buf = malloc(pre + glen + 24 + strlen(close + 1) + 1);
	if (!buf)
		return import_fail(err, errlen, -ENOMEM, "out of memory");
	memcpy(buf, pat, pre);

	long long lo, hi;
	int width;

	if (parse_range(open + 1, glen, &lo, &hi, &width)) {
		long long step = lo <= hi ? 1 : -1;

		if ((hi - lo) * step >= TAR_SOURCES_MAX) {
			free(buf);
			return import_fail(err, errlen, -SLUICE_EINPUT,
					   "%s: range of more than %d",
					   pat, TAR_SOURCES_MAX);
		}
		for (long long v = lo; r == 0; v += step) {
			sprintf(buf + pre, "%0*lld%s", width, v, close + 1);
			r = expand(s, buf, err, errlen);
			if (v == hi)
				break;
		}
	} else {
		const char *alt = open + 1;

		for (;;) {
			const char *comma = memchr(alt, ',',
						   (size_t)(close - alt));
			size_t n = (size_t)((comma ? comma : close) - alt);

			memcpy(buf + pre, alt, n);
			strcpy(buf + pre + n, close + 1);
			r = expand(s, buf, err, errlen);
			if (r || !comma)
				break;
			alt = comma + 1;
		}
	}
	free(buf);
	return r;
}

int tar_sources_expand(const char *spec, struct tar_sources *out, char *err,
		       size_t errlen)
{
	const char *item = spec;
	int r = 0;

	memset(out, 0, sizeof(*out));
	while (r == 0) {
		const char *p = item;
		int depth = 0;
		char *one;

		/* the item ends at a comma outside braces */
		while (*p && (*p != ',' || depth > 0)) {
			depth += *p == '{';
			depth -= *p == '}' && depth > 0;
			p++;
		}
		if (p == item) {
			r = import_fail(err, errlen, -SLUICE_EINPUT,
					"'%s': empty path in the list", spec);
			break;
		}
		one = strndup(item, (size_t)(p - item));
		if (!one) {
			r = import_fail(err, errlen, -ENOMEM, "out of memory");
			break;
		}
		r = expand(out, one, err, errlen);
		free(one);
		if (!*p)
			break;
		item = p + 1;
	}
	if (r < 0)
		tar_sources_free(out);
	return r;
}

void tar_sources_free(struct tar_sources *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->paths[i]);
	free(s->paths);
	memset(s, 0, sizeof(*s));
}
