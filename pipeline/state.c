/*
 * state.c - the resumable loader position as one line of text:
 *
 *   sluice-state v1 seed=0 epoch=3 batches=17 rank=0 world=1 batch=256
 *   shuffle=window records=10000
 *
 * (one line, single spaces).  The text may come from anywhere, so parsing is
 * strict: the exact magic and version, then key=value pairs separated by
 * one space, in any order, each of the eight keys exactly once, numbers as
 * plain decimal (no sign, no leading zeros, no overflow), no leading or
 * trailing whitespace (a caller reading a file strips the newline).
 * Anything else is -SLUICE_ESTATE and leaves the output untouched.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"

#define STATE_MAGIC "sluice-state v1"
/* Far above the longest valid line (about 220 bytes); bounds the scan. */
#define STATE_MAX_TEXT 512

enum state_key {
	KEY_SEED,
	KEY_EPOCH,
	KEY_BATCHES,
	KEY_RANK,
	KEY_WORLD,
	KEY_BATCH,
	KEY_SHUFFLE,
	KEY_RECORDS,
	KEY_COUNT
};

static const char *const key_names[KEY_COUNT] = {
	"seed", "epoch", "batches", "rank",
	"world", "batch", "shuffle", "records",
};

/* Indexed by enum sluice_shuffle. */
static const char *const shuffle_names[] = {"none", "block", "window",
					    "full"};
#define NSHUFFLE ((int)(sizeof(shuffle_names) / sizeof(shuffle_names[0])))

static int state_valid(const struct sluice_state *st)
{
	return st->world_size >= 1 && st->rank >= 0 &&
	       st->rank < st->world_size && st->batch_size >= 1 &&
	       st->shuffle >= 0 && st->shuffle < NSHUFFLE;
}

SLUICE_API int sluice_state_format(const struct sluice_state *st, char *buf,
				   size_t len)
{
	int n;

	if (!st || !buf || len == 0)
		return -EINVAL;
	buf[0] = '\0';
	if (!state_valid(st))
		return -EINVAL;
	n = snprintf(buf, len,
		     STATE_MAGIC " seed=%" PRIu64 " epoch=%" PRIu64
				 " batches=%" PRIu64 " rank=%" PRId32
				 " world=%" PRId32 " batch=%" PRIu32
				 " shuffle=%s records=%" PRIu64,
		     st->seed, st->epoch, st->batches_consumed, st->rank,
		     st->world_size, st->batch_size,
		     shuffle_names[st->shuffle], st->dataset_records);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= len) {
		buf[0] = '\0';
		return -ENOSPC;
	}
	return n;
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

static int lookup_key(const char *p, size_t n)
{
	for (int k = 0; k < KEY_COUNT; k++)
		if (strlen(key_names[k]) == n && memcmp(p, key_names[k], n) == 0)
			return k;
	return -1;
}

static int lookup_shuffle(const char *p, size_t n)
{
	for (int i = 0; i < NSHUFFLE; i++)
		if (strlen(shuffle_names[i]) == n &&
		    memcmp(p, shuffle_names[i], n) == 0)
			return i;
	return -1;
}

/* Store one value; -1 when it is out of range for its key. */
static int set_value(struct sluice_state *st, int key, const char *v,
		     size_t n)
{
	uint64_t x;
	int sh;

	if (key == KEY_SHUFFLE) {
		sh = lookup_shuffle(v, n);
		if (sh < 0)
			return -1;
		st->shuffle = sh;
		return 0;
	}
	switch (key) {
	case KEY_RANK:
		if (parse_number(v, n, INT32_MAX, &x))
			return -1;
		st->rank = (int32_t)x;
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
	if (strnlen(text, STATE_MAX_TEXT + 1) > STATE_MAX_TEXT ||
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
		key = lookup_key(tok, (size_t)(eq - tok));
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
