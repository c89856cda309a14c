/*
 * state.c - the resumable loader position as one line of text:
 *
 *   sluice-state v2 seed=0 shuffle=window window=16 records=10000 mix=0
 *   epoch=3 world=4 batch=256 drop=0 batches=17 earlier=8/96/0,3/40/1
 *
 * (one line, single spaces).  mix= is 0 for one dataset, else the
 * fingerprint of a mixture's streams (records and samples).  earlier= lists the epoch's earlier jobs as
 * world/consumed/drop_last, oldest first, or "-" when there were none.
 * The text may come from anywhere, so parsing is strict: the exact magic
 * and version, then key=value pairs separated by one space, in any order,
 * each of the eleven keys exactly once, numbers as plain decimal (no sign, no
 * leading zeros, no overflow), no leading or trailing whitespace (a caller
 * reading a file strips the newline).  Anything else is -SLUICE_ESTATE and
 * leaves the output untouched.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"

#define STATE_MAGIC "sluice-state v2"

enum state_key {
	KEY_SEED,
	KEY_SHUFFLE,
	KEY_WINDOW,
	KEY_RECORDS,
	KEY_MIX,
	KEY_EPOCH,
	KEY_WORLD,
	KEY_BATCH,
	KEY_DROP,
	KEY_BATCHES,
	KEY_EARLIER,
	KEY_COUNT
};

static const char *const key_names[KEY_COUNT] = {
	"seed", "shuffle", "window", "records", "mix", "epoch",
	"world", "batch", "drop", "batches", "earlier",
};

/* Indexed by enum sluice_shuffle. */
static const char *const shuffle_names[] = {"none", "block", "window",
					    "full"};
#define NSHUFFLE ((int)(sizeof(shuffle_names) / sizeof(shuffle_names[0])))

static int state_valid(const struct sluice_state *st)
{
	if (st->world_size < 1 || st->batch_size < 1 || st->shuffle < 0 ||
	    st->shuffle >= NSHUFFLE || (st->drop_last != 0 && st->drop_last != 1) ||
	    (st->shuffle == SLUICE_SHUFFLE_WINDOW && st->window_blocks == 0) ||
	    st->nearlier > SLUICE_STATE_MAX_EARLIER)
		return 0;
	for (uint32_t i = 0; i < st->nearlier; i++)
		if (st->earlier[i].world_size < 1 ||
		    (st->earlier[i].drop_last != 0 &&
		     st->earlier[i].drop_last != 1))
			return 0;
	return 1;
}

/* snprintf into buf + *at, advancing *at; the caller checks for room. */
__attribute__((format(printf, 4, 5)))
static void append(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*at >= len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *at, len - *at, fmt, ap);
	va_end(ap);
	*at += n > 0 ? (size_t)n : 0;
}

SLUICE_API int sluice_state_format(const struct sluice_state *st, char *buf,
				   size_t len)
{
	size_t at = 0;

	if (!st || !buf || len == 0)
		return -EINVAL;
	buf[0] = '\0';
	if (!state_valid(st))
		return -EINVAL;
	append(buf, len, &at,
	       STATE_MAGIC " seed=%" PRIu64 " shuffle=%s window=%" PRIu32
			   " records=%" PRIu64 " mix=%" PRIu64
			   " epoch=%" PRIu64
			   " world=%" PRId32 " batch=%" PRIu32
			   " drop=%" PRId32 " batches=%" PRIu64 " earlier=",
	       st->seed, shuffle_names[st->shuffle], st->window_blocks,
	       st->dataset_records, st->mix, st->epoch, st->world_size,
	       st->batch_size, st->drop_last, st->batches_consumed);
	if (st->nearlier == 0)
		append(buf, len, &at, "-");
	for (uint32_t i = 0; i < st->nearlier; i++)
		append(buf, len, &at, "%s%" PRId32 "/%" PRIu64 "/%" PRId32,
		       i ? "," : "", st->earlier[i].world_size,
		       st->earlier[i].consumed, st->earlier[i].drop_last);
	if (at >= len) {
		buf[0] = '\0';
		return -ENOSPC;
	}
	return (int)at;
}

/* Plain decimal in [0, max]: digits only, no leading zero, no overflow. */
static int parse_number(const char *p, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || (n > 1 && p[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint64_t d;

		if (p[i] < '0' || p[i] > '9')
			return -1;
		d = (uint64_t)(p[i] - '0');
		if (v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int lookup(const char *const *names, int count, const char *p,
		  size_t n)
{
	for (int k = 0; k < count; k++)
		if (strlen(names[k]) == n && memcmp(p, names[k], n) == 0)
			return k;
	return -1;
}

/* One earlier job, "W/c/d", in [p, end). */
static int parse_job(const char *p, const char *end,
		     struct sluice_state_job *job)
{
	const char *a = memchr(p, '/', (size_t)(end - p)), *b;
	uint64_t w, c, d;

	if (!a)
		return -1;
	b = memchr(a + 1, '/', (size_t)(end - a - 1));
	if (!b || parse_number(p, (size_t)(a - p), INT32_MAX, &w) || w == 0 ||
	    parse_number(a + 1, (size_t)(b - a - 1), UINT64_MAX, &c) ||
	    parse_number(b + 1, (size_t)(end - b - 1), 1, &d))
		return -1;
	job->world_size = (int32_t)w;
	job->consumed = c;
	job->drop_last = (int32_t)d;
	return 0;
}

/* "-" or W/c/d[,W/c/d...]: the earlier jobs, oldest first. */
static int parse_earlier(struct sluice_state *st, const char *v, size_t n)
{
	const char *end = v + n;

	st->nearlier = 0;
	if (n == 1 && v[0] == '-')
		return 0;
	for (;;) {
		const char *comma = memchr(v, ',', (size_t)(end - v));
		const char *stop = comma ? comma : end;

		if (st->nearlier == SLUICE_STATE_MAX_EARLIER ||
		    parse_job(v, stop, &st->earlier[st->nearlier]))
			return -1;
		st->nearlier++;
		if (!comma)
			return 0;
		v = comma + 1;
	}
}

/* Store one value; -1 when it is out of range for its key. */
static int set_value(struct sluice_state *st, int key, const char *v,
		     size_t n)
{
	uint64_t x;

	switch (key) {
	case KEY_SHUFFLE:
		st->shuffle = lookup(shuffle_names, NSHUFFLE, v, n);
		return st->shuffle < 0 ? -1 : 0;
	case KEY_EARLIER:
		return parse_earlier(st, v, n);
	case KEY_WINDOW:
		if (parse_number(v, n, UINT32_MAX, &x))
			return -1;
		st->window_blocks = (uint32_t)x;
		return 0;
	case KEY_WORLD:
		if (parse_number(v, n, INT32_MAX, &x) || x == 0)
			return -1;
		st->world_size = (int32_t)x;
		return 0;
	case KEY_BATCH:
		if (parse_number(v, n, UINT32_MAX, &x) || x == 0)
			return -1;
		st->batch_size = (uint32_t)x;
		return 0;
	case KEY_DROP:
		if (parse_number(v, n, 1, &x))
			return -1;
		st->drop_last = (int32_t)x;
		return 0;
	default:
		break;
	}
	if (parse_number(v, n, UINT64_MAX, &x))
		return -1;
	if (key == KEY_SEED)
		st->seed = x;
	else if (key == KEY_EPOCH)
		st->epoch = x;
	else if (key == KEY_BATCHES)
		st->batches_consumed = x;
	else if (key == KEY_MIX)
		st->mix = x;
	else
		st->dataset_records = x;
	return 0;
}

SLUICE_API int sluice_state_parse(const char *text, struct sluice_state *st)
{
	struct sluice_state tmp;
	int seen[KEY_COUNT] = {0};
	const char *p;
	size_t magic_len = strlen(STATE_MAGIC);

	if (!text || !st)
		return -EINVAL;
	if (strnlen(text, SLUICE_STATE_TEXT_MAX) >= SLUICE_STATE_TEXT_MAX ||
	    strncmp(text, STATE_MAGIC, magic_len) != 0)
		return -SLUICE_ESTATE;
	memset(&tmp, 0, sizeof(tmp));
	p = text + magic_len;
	while (*p) {
		const char *tok, *eq, *end;
		int key;

		if (*p != ' ')
			return -SLUICE_ESTATE;
		tok = p + 1;
		end = tok;
		while (*end && *end != ' ')
			end++;
		eq = memchr(tok, '=', (size_t)(end - tok));
		if (!eq)
			return -SLUICE_ESTATE;
		key = lookup(key_names, KEY_COUNT, tok, (size_t)(eq - tok));
		if (key < 0 || seen[key])
			return -SLUICE_ESTATE;
		seen[key] = 1;
		if (set_value(&tmp, key, eq + 1, (size_t)(end - eq - 1)))
			return -SLUICE_ESTATE;
		p = end;
	}
	for (int k = 0; k < KEY_COUNT; k++)
		if (!seen[k])
			return -SLUICE_ESTATE;
	if (!state_valid(&tmp))
		return -SLUICE_ESTATE;
	*st = tmp;
	return 0;
}
