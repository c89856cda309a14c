/*
 * t.h - the test harness: asserts that print the expression and both
 * values, and the exit codes the runner understands (0 pass, 1 fail,
 * 77 skip).
 */
#ifndef SLUICE_TESTS_T_H
#define SLUICE_TESTS_T_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_SKIP 77

#define T_FAIL_AT(...)                                                      \
	do {                                                                \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);             \
		fprintf(stderr, __VA_ARGS__);                               \
		fputc('\n', stderr);                                        \
		exit(1);                                                    \
	} while (0)

#define T_ASSERT(cond)                                                      \
	do {                                                                \
		if (!(cond))                                                \
			T_FAIL_AT("assertion failed: %s", #cond);           \
	} while (0)

/* Integers of any width, compared as int64 and printed both ways. */
#define T_EQ(a, b)                                                          \
	do {                                                                \
		long long t_a_ = (long long)(a), t_b_ = (long long)(b);     \
		if (t_a_ != t_b_)                                           \
			T_FAIL_AT("%s == %s: %lld != %lld", #a, #b, t_a_,   \
				  t_b_);                                    \
	} while (0)

#define T_NE(a, b)                                                          \
	do {                                                                \
		long long t_a_ = (long long)(a), t_b_ = (long long)(b);     \
		if (t_a_ == t_b_)                                           \
			T_FAIL_AT("%s != %s: both %lld", #a, #b, t_a_);     \
	} while (0)

#define T_LT(a, b)                                                          \
	do {                                                                \
		long long t_a_ = (long long)(a), t_b_ = (long long)(b);     \
		if (!(t_a_ < t_b_))                                         \
			T_FAIL_AT("%s < %s: %lld >= %lld", #a, #b, t_a_,    \
				  t_b_);                                    \
	} while (0)

/* A call returning 0 or a negative sluice/errno code. */
#define T_OK(call)                                                          \
	do {                                                                \
		int t_r_ = (call);                                          \
		if (t_r_ != 0)                                              \
			T_FAIL_AT("%s: returned %d (%s)", #call, t_r_,      \
				  sluice_strerror(t_r_));                   \
	} while (0)

#define T_MEMEQ(a, b, n)                                                    \
	do {                                                                \
		size_t t_n_ = (n);                                          \
		if (memcmp((a), (b), t_n_) != 0)                            \
			T_FAIL_AT("memcmp(%s, %s, %zu) != 0", #a, #b, t_n_); \
	} while (0)

/* Substring check on a message. */
#define T_CONTAINS(hay, needle)                                             \
	do {                                                                \
		const char *t_h_ = (hay), *t_n_ = (needle);                 \
		if (!t_h_ || !strstr(t_h_, t_n_))                           \
			T_FAIL_AT("\"%s\" does not contain \"%s\"",         \
				  t_h_ ? t_h_ : "(null)", t_n_);            \
	} while (0)

#define T_SKIP_BECAUSE(...)                                                 \
	do {                                                                \
		printf("skip: ");                                           \
		printf(__VA_ARGS__);                                        \
		putchar('\n');                                              \
		exit(T_SKIP);                                               \
	} while (0)

/* The first part of this test that could not run here ("" when none). */
static inline char *t_skipped_part(void)
{
	static char why[256];

	return why;
}

/* A part of a test that cannot run here: say so, go on with the rest,
 * and let t_done() end the test as SKIP rather than PASS. */
#define T_SKIP_PART(...)                                                    \
	do {                                                                \
		printf("skip part: ");                                      \
		printf(__VA_ARGS__);                                        \
		putchar('\n');                                              \
		if (!t_skipped_part()[0])                                   \
			snprintf(t_skipped_part(), 256, __VA_ARGS__);       \
	} while (0)

/* main's exit code: T_SKIP naming the first skipped part, else 0. */
static inline int t_done(void)
{
	if (!t_skipped_part()[0])
		return 0;
	printf("skip: %s (every other part passed)\n", t_skipped_part());
	return T_SKIP;
}

#endif /* SLUICE_TESTS_T_H */
