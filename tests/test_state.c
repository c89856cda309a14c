/*
 * test_state.c - the state line: round trip, extremes, the earlier-jobs
 * list, and strict rejection of everything else (truncations, one-byte
 * changes, duplicates, overflow, whitespace).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "t.h"

static const char valid_line[] =
	"sluice-state v2 seed=0 shuffle=window window=16 records=10000 "
	"mix=77 epoch=3 world=4 batch=256 drop=0 batches=17 earlier=8/96/0,3/40/1";

static void expect_reject(const char *text)
{
	struct sluice_state st;

	memset(&st, 0xab, sizeof(st));
	if (sluice_state_parse(text, &st) != -SLUICE_ESTATE)
		T_FAIL_AT("accepted or wrong code: \"%s\"", text);
	/* output untouched on failure */
	for (size_t i = 0; i < sizeof(st); i++)
		T_EQ(((unsigned char *)&st)[i], 0xab);
}

/* Replace @find in valid_line by @with and expect rejection. */
static void expect_reject_edit(const char *find, const char *with)
{
	char buf[SLUICE_STATE_TEXT_MAX];
	const char *at = strstr(valid_line, find);

	T_ASSERT(at);
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - valid_line),
		 valid_line, with, at + strlen(find));
	expect_reject(buf);
}

static void round_trip(const struct sluice_state *st)
{
	char buf[SLUICE_STATE_TEXT_MAX];
	struct sluice_state back;
	int n = sluice_state_format(st, buf, sizeof(buf));

	T_LT(0, n);
	T_EQ(n, strlen(buf));
	memset(&back, 0, sizeof(back));
	T_EQ(sluice_state_parse(buf, &back), 0);
	T_ASSERT(memcmp(st, &back, sizeof(back)) == 0);
}

static void test_valid(void)
{
	struct sluice_state st, back;
	char buf[SLUICE_STATE_TEXT_MAX];
	int n;

	T_EQ(sluice_state_parse(valid_line, &st), 0);
	T_EQ(st.seed, 0);
	T_EQ(st.shuffle, SLUICE_SHUFFLE_WINDOW);
	T_EQ(st.window_blocks, 16);
	T_EQ(st.dataset_records, 10000);
	T_EQ(st.mix, 77);
	T_EQ(st.epoch, 3);
	T_EQ(st.world_size, 4);
	T_EQ(st.batch_size, 256);
	T_EQ(st.drop_last, 0);
	T_EQ(st.batches_consumed, 17);
	T_EQ(st.nearlier, 2);
	T_EQ(st.earlier[0].world_size, 8);
	T_EQ(st.earlier[0].consumed, 96);
	T_EQ(st.earlier[0].drop_last, 0);
	T_EQ(st.earlier[1].world_size, 3);
	T_EQ(st.earlier[1].consumed, 40);
	T_EQ(st.earlier[1].drop_last, 1);
	n = sluice_state_format(&st, buf, sizeof(buf));
	T_EQ(n, strlen(valid_line));
	T_ASSERT(strcmp(buf, valid_line) == 0);

	/* no earlier jobs */
	memset(&back, 0, sizeof(back));
	back = st;
	back.nearlier = 0;
	memset(back.earlier, 0, sizeof(back.earlier));
	T_LT(0, sluice_state_format(&back, buf, sizeof(buf)));
	T_ASSERT(strstr(buf, " earlier=-"));
	round_trip(&back);

	/* extremes round-trip, with the longest list of earlier jobs */
	memset(&st, 0, sizeof(st));
	st.seed = UINT64_MAX;
	st.epoch = UINT64_MAX;
	st.batches_consumed = UINT64_MAX;
	st.world_size = INT32_MAX;
	st.batch_size = UINT32_MAX;
	st.window_blocks = UINT32_MAX;
	st.dataset_records = UINT64_MAX;
	st.mix = UINT64_MAX;
	st.drop_last = 1;
	st.nearlier = SLUICE_STATE_MAX_EARLIER;
	for (int i = 0; i < SLUICE_STATE_MAX_EARLIER; i++)
		st.earlier[i] = (struct sluice_state_job){
			INT32_MAX, i & 1, UINT64_MAX };
	for (int sh = 0; sh < 4; sh++) {
		st.shuffle = sh;
		round_trip(&st);
	}
	/* the longest line fits the documented buffer */
	n = sluice_state_format(&st, buf, sizeof(buf));
	T_LT(n, SLUICE_STATE_TEXT_MAX);
	T_EQ(sluice_state_format(&st, buf, (size_t)n), -ENOSPC);
	T_EQ(buf[0], '\0');
	T_EQ(sluice_state_format(&st, buf, (size_t)n + 1), n);

	/* window=0 is fine outside window mode */
	st.shuffle = SLUICE_SHUFFLE_FULL;
	st.window_blocks = 0;
	round_trip(&st);

	/* keys in another order are accepted */
	T_EQ(sluice_state_parse("sluice-state v2 earlier=- batches=1 drop=1 "
				"batch=2 world=3 epoch=0 records=5 window=0 "
				"shuffle=full mix=0 seed=9", &back), 0);
	T_EQ(back.world_size, 3);
	T_EQ(back.seed, 9);
	T_EQ(back.drop_last, 1);
	T_EQ(back.shuffle, SLUICE_SHUFFLE_FULL);
}

static void test_format_errors(void)
{
	struct sluice_state st, back;
	char buf[SLUICE_STATE_TEXT_MAX], small[40];

	T_EQ(sluice_state_parse(valid_line, &st), 0);
	T_EQ(sluice_state_format(&st, small, sizeof(small)), -ENOSPC);
	T_EQ(small[0], '\0');
	T_EQ(sluice_state_format(&st, NULL, 10), -EINVAL);
	T_EQ(sluice_state_format(&st, buf, 0), -EINVAL);
	T_EQ(sluice_state_format(NULL, buf, sizeof(buf)), -EINVAL);
	back = st;
	back.world_size = 0;
	T_EQ(sluice_state_format(&back, buf, sizeof(buf)), -EINVAL);
	back = st;
	back.shuffle = 4;
	T_EQ(sluice_state_format(&back, buf, sizeof(buf)), -EINVAL);
	back = st;
	back.batch_size = 0;
	T_EQ(sluice_state_format(&back, buf, sizeof(buf)), -EINVAL);
	back = st;
	back.drop_last = 2;
	T_EQ(sluice_state_format(&back, buf, sizeof(buf)), -EINVAL);
	back = st;
	back.window_blocks = 0;
	T_EQ(sluice_state_format(&back, buf, sizeof(buf)), -EINVAL);
	back = st;
	back.nearlier = SLUICE_STATE_MAX_EARLIER + 1;
	T_EQ(sluice_state_format(&back, buf, sizeof(buf)), -EINVAL);
	back = st;
	back.earlier[1].world_size = 0;
	T_EQ(sluice_state_format(&back, buf, sizeof(buf)), -EINVAL);
	T_EQ(sluice_state_parse(NULL, &back), -EINVAL);
	T_EQ(sluice_state_parse(valid_line, NULL), -EINVAL);
}

static void test_rejections(void)
{
	struct sluice_state back;
	char buf[SLUICE_STATE_TEXT_MAX];

	/* every truncation is rejected, except cuts inside the list of
	 * earlier jobs that leave a shorter valid list: those must be
	 * canonical lines */
	{
		size_t list = (size_t)(strstr(valid_line, "earlier=") -
				       valid_line) + strlen("earlier=");
		int valid = 0;

		for (size_t len = 0; len < strlen(valid_line); len++) {
			char again[SLUICE_STATE_TEXT_MAX];

			snprintf(buf, sizeof(buf), "%.*s", (int)len,
				 valid_line);
			if (len <= list) {
				expect_reject(buf);
				continue;
			}
			if (sluice_state_parse(buf, &back) != 0)
				continue;
			valid++;
			T_LT(0, sluice_state_format(&back, again,
						    sizeof(again)));
			T_ASSERT(strcmp(buf, again) == 0);
		}
		T_EQ(valid, 1); /* earlier=8/96/0 */
	}

	expect_reject("garbage");
	expect_reject("");
	expect_reject("sluice-state v1 seed=0 epoch=3 batches=17 rank=0 "
		      "world=1 batch=256 shuffle=window records=10000");
	expect_reject("sluice-state v2");
	/* extra, duplicate, unknown keys */
	expect_reject_edit("earlier=", "extra=1 earlier=");
	expect_reject_edit("seed=0", "seed=0 seed=0");
	expect_reject_edit("seed=0", "sed=0");
	expect_reject_edit("seed=0", "seed");
	expect_reject_edit("seed=0", "=0");
	/* numbers: overflow, negative, sign, leading zero, junk, empty */
	expect_reject_edit("seed=0", "seed=18446744073709551616");
	expect_reject_edit("seed=0", "seed=99999999999999999999");
	expect_reject_edit("seed=0", "seed=-1");
	expect_reject_edit("seed=0", "seed=+1");
	expect_reject_edit("seed=0", "seed=01");
	expect_reject_edit("seed=0", "seed=0x1");
	expect_reject_edit("seed=0", "seed=");
	expect_reject_edit("seed=0", "seed=1=2");
	expect_reject_edit("epoch=3", "epoch=3a");
	expect_reject_edit("mix=77 ", "");
	expect_reject_edit("mix=77", "mix=077");
	expect_reject_edit("world=4", "world=0");
	expect_reject_edit("world=4", "world=2147483648");
	expect_reject_edit("batch=256", "batch=0");
	expect_reject_edit("batch=256", "batch=4294967296");
	expect_reject_edit("drop=0", "drop=2");
	expect_reject_edit("drop=0", "drop=");
	expect_reject_edit("window=16", "window=0"); /* window mode */
	expect_reject_edit("window=16", "window=4294967296");
	expect_reject_edit("shuffle=window", "shuffle=Window");
	expect_reject_edit("shuffle=window", "shuffle=2");
	expect_reject_edit("shuffle=window", "shuffle=");
	/* the earlier jobs */
	expect_reject_edit("earlier=8/96/0,3/40/1", "earlier=");
	expect_reject_edit("earlier=8/96/0,3/40/1", "earlier=--");
	expect_reject_edit("earlier=8/96/0,3/40/1", "earlier=-,8/96/0");
	expect_reject_edit("8/96/0", "0/96/0");
	expect_reject_edit("8/96/0", "8/96/2");
	expect_reject_edit("8/96/0", "8/96");
	expect_reject_edit("8/96/0", "8//0");
	expect_reject_edit("8/96/0", "8/96/0/1");
	expect_reject_edit("8/96/0", "8/-96/0");
	expect_reject_edit("8/96/0", "08/96/0");
	expect_reject_edit("8/96/0", "2147483648/96/0");
	expect_reject_edit("8/96/0", "8/18446744073709551616/0");
	expect_reject_edit("8/96/0,", "8/96/0,,");
	expect_reject_edit("3/40/1", "3/40/1,");
	expect_reject_edit("8/96/0,", "8/96/0;");
	{
		/* one more than the most earlier jobs */
		char list[SLUICE_STATE_TEXT_MAX] = "earlier=1/1/0";

		for (int i = 1; i <= SLUICE_STATE_MAX_EARLIER; i++)
			strcat(list, ",1/1/0");
		expect_reject_edit("earlier=8/96/0,3/40/1", list);
	}
	/* whitespace */
	expect_reject_edit("seed=0 ", "seed=0  ");
	expect_reject_edit("seed=0 ", "seed=0\t");
	expect_reject_edit("3/40/1", "3/40/1 ");
	expect_reject_edit("3/40/1", "3/40/1\n");
	expect_reject_edit("sluice-state", " sluice-state");
	expect_reject_edit("v2 ", "v2x ");

	/* an endless line is refused without being walked to its end */
	{
		size_t big = 1 << 20;
		char *huge = malloc(big + 1);

		T_ASSERT(huge);
		memset(huge, '1', big);
		huge[big] = '\0';
		memcpy(huge, valid_line, strlen(valid_line));
		expect_reject(huge);
		free(huge);
	}

	/* every one-byte change: rejected, or a canonical line that formats
	 * back to itself (the parser accepts nothing loosely) */
	{
		static const char subst[] = "0195 =-+,/azA\t\n\x01\xff";
		size_t len = strlen(valid_line);

		for (size_t i = 0; i < len; i++)
			for (size_t k = 0; k < sizeof(subst) - 1; k++) {
				char mut[SLUICE_STATE_TEXT_MAX];
				char again[SLUICE_STATE_TEXT_MAX];

				memcpy(mut, valid_line, len + 1);
				if (mut[i] == subst[k])
					continue;
				mut[i] = subst[k];
				if (sluice_state_parse(mut, &back) != 0)
					continue;
				T_LT(0, sluice_state_format(&back, again,
							    sizeof(again)));
				if (strcmp(mut, again) != 0)
					T_FAIL_AT("loose parse: \"%s\"", mut);
			}
	}
}

int main(void)
{
	test_valid();
	test_format_errors();
	test_rejections();
	return 0;
}
