/*
 * test_api_growth.c - the public API's conventions for growth (sluice.h,
 * top of the file):
 * - statistics (sluice_stats, sluice_writer_summary) begin with a size
 *   the caller sets; the library fills that many bytes at most, zeroes
 *   what it does not know of a larger struct, and says what it filled;
 *   size 0 is refused;
 * - the tri-states agree: AUTO 0, ON 1, OFF 2; direct_io's old -1 still
 *   means AUTO; values past OFF are refused;
 * - the forced fallbacks of sluice_tools.h live in the config's reserved
 *   space and still work.
 */
#include <errno.h>
#include <stddef.h>

#include "loader_fixture.h"
#include "sluice_tools.h"

#define N 300

static sluice_loader *open_cfg(sluice_dataset *ds,
			       const struct sluice_loader_config *cfg, int *r)
{
	sluice_loader *ld = NULL;

	*r = sluice_loader_open(ds, cfg, &ld);
	if (*r < 0) {
		sluice_loader_close(ld);
		return NULL;
	}
	return ld;
}

static void drain(sluice_loader *ld)
{
	sluice_batch *b;
	int r;

	while ((r = sluice_loader_next(ld, &b)) == 0)
		sluice_batch_release(b);
	T_EQ(r, SLUICE_EOF);
}

static void test_stats_size(sluice_dataset *ds)
{
	struct sluice_loader_config cfg;
	struct sluice_stats full = { .size = sizeof(full) };
	/* An older caller: a struct that ends after `decode`. */
	size_t old = offsetof(struct sluice_stats, decode) +
		     sizeof(struct sluice_stage_stats);
	union {
		struct sluice_stats st;
		unsigned char bytes[sizeof(struct sluice_stats) + 64];
	} u;
	int r;
	sluice_loader *ld;

	sluice_loader_config_init(&cfg);
	cfg.batch_size = 32;
	cfg.device = SLUICE_DEVICE_HOST;
	ld = open_cfg(ds, &cfg, &r);
	T_OK(r);
	drain(ld);
	T_OK(sluice_loader_stats(ld, &full));
	T_EQ(full.size, sizeof(full));
	T_EQ(full.records, N);
	T_ASSERT(full.decode.bytes > 0);

	/* size 0: refused, nothing written */
	memset(&u, 0xab, sizeof(u));
	u.st.size = 0;
	T_EQ(sluice_loader_stats(ld, &u.st), -EINVAL);
	T_EQ(u.bytes[sizeof(uint32_t) + 8], 0xab);

	/* older caller: the prefix, not a byte more */
	memset(&u, 0xab, sizeof(u));
	u.st.size = (uint32_t)old;
	T_OK(sluice_loader_stats(ld, &u.st));
	T_EQ(u.st.size, old);
	T_EQ(u.st.read.bytes, full.read.bytes);
	T_EQ(u.st.decode.bytes, full.decode.bytes);
	for (size_t i = old; i < sizeof(u.bytes); i++)
		T_EQ(u.bytes[i], 0xab);

	/* newer caller: all we know, the rest zeroed, size says how much */
	memset(&u, 0xab, sizeof(u));
	u.st.size = (uint32_t)sizeof(u.bytes);
	T_OK(sluice_loader_stats(ld, &u.st));
	T_EQ(u.st.size, sizeof(struct sluice_stats));
	T_EQ(u.st.records, N);
	T_EQ(u.st.device_memory_bytes, full.device_memory_bytes);
	for (size_t i = sizeof(struct sluice_stats); i < sizeof(u.bytes); i++)
		T_EQ(u.bytes[i], 0);
	sluice_loader_close(ld);
	printf("stats: size honoured (0 refused, older prefix, newer zeroed)\n");
}

static void test_summary_size(const char *root)
{
	char dir[512];
	struct sluice_field f = t_field("x", (DLDataType){ kDLInt, 32, 1 }, 1);
	struct sluice_writer_summary sum;
	sluice_writer *w = NULL;
	int32_t x = 7;
	const void *vals[1] = { &x };
	uint64_t lens[1] = { sizeof(x) };
	size_t old = offsetof(struct sluice_writer_summary, records) +
		     sizeof(uint64_t);

	/* size 0: refused before anything is written, the writer gone */
	snprintf(dir, sizeof(dir), "%s/zero", root);
	T_OK(sluice_writer_open(dir, &f, 1, NULL, &w));
	T_OK(sluice_writer_add(w, vals, lens));
	memset(&sum, 0, sizeof(sum));
	T_EQ(sluice_writer_close(w, &sum), -EINVAL);
	snprintf(dir, sizeof(dir), "%s/zero/dataset.json", root);
	T_EQ(access(dir, F_OK), -1);

	/* an older caller's prefix: records, and not the blocks after it */
	snprintf(dir, sizeof(dir), "%s/old", root);
	T_OK(sluice_writer_open(dir, &f, 1, NULL, &w));
	for (int i = 0; i < 5; i++)
		T_OK(sluice_writer_add(w, vals, lens));
	memset(&sum, 0xab, sizeof(sum));
	sum.size = (uint32_t)old;
	T_OK(sluice_writer_close(w, &sum));
	T_EQ(sum.size, old);
	T_EQ(sum.records, 5);
	T_EQ(sum.blocks, 0xababababababababull);

	/* merge: the same rule */
	{
		const char *parts[1] = { dir };
		char out[512], err[256] = "";

		snprintf(out, sizeof(out), "%s/merged", root);
		memset(&sum, 0, sizeof(sum));
		T_EQ(sluice_merge(parts, 1, out, 0, &sum, err, sizeof(err)),
		     -EINVAL);
		T_ASSERT(strstr(err, "size") != NULL);
		sum.size = sizeof(sum);
		T_OK(sluice_merge(parts, 1, out, 0, &sum, err, sizeof(err)));
		T_EQ(sum.size, sizeof(sum));
		T_EQ(sum.records, 5);
		T_EQ(sum.shards, 1);
	}
	printf("writer summary: size honoured (0 refused, older prefix)\n");
}

static void test_tristates(sluice_dataset *ds)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld;
	int r;

	/* one convention: AUTO 0, ON 1, OFF 2 */
	T_EQ(SLUICE_DIRECT_IO_AUTO, 0);
	T_EQ(SLUICE_RANGE_READS_AUTO, 0);
	T_EQ(SLUICE_DEVICE_GATHER_AUTO, 0);
	T_EQ(SLUICE_DIRECT_IO_ON, 1);
	T_EQ(SLUICE_RANGE_READS_ON, 1);
	T_EQ(SLUICE_DEVICE_GATHER_ON, 1);
	T_EQ(SLUICE_DIRECT_IO_OFF, 2);
	T_EQ(SLUICE_RANGE_READS_OFF, 2);
	T_EQ(SLUICE_DEVICE_GATHER_OFF, 2);
	sluice_loader_config_init(&cfg);
	T_EQ(cfg.direct_io, SLUICE_DIRECT_IO_AUTO);
	T_EQ(cfg.range_reads, SLUICE_RANGE_READS_AUTO);
	T_EQ(cfg.device_gather, SLUICE_DEVICE_GATHER_AUTO);

	/* the page cache holds the fixture just written: AUTO (and the old
	 * -1) reads it buffered and says it found it cached */
	cfg.device = SLUICE_DEVICE_HOST;
	cfg.direct_io = (enum sluice_direct_io)-1;
	ld = open_cfg(ds, &cfg, &r);
	T_OK(r);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.direct_io, 0);
	T_EQ(st.cached_shards, sluice_dataset_shards(ds));
	sluice_loader_close(ld);
	cfg.direct_io = SLUICE_DIRECT_IO_OFF;
	ld = open_cfg(ds, &cfg, &r);
	T_OK(r);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.direct_io, 0);
	T_EQ(st.cached_shards, 0);   /* OFF does not probe the cache */
	sluice_loader_close(ld);

	/* past OFF: refused, naming the field */
	for (int k = 0; k < 3; k++) {
		char msg[512] = "";
		sluice_loader *bad = NULL;

		sluice_loader_config_init(&cfg);
		cfg.device = SLUICE_DEVICE_HOST;
		if (k == 0)
			cfg.direct_io = (enum sluice_direct_io)3;
		else if (k == 1)
			cfg.range_reads = (enum sluice_range_reads)3;
		else
			cfg.device_gather = (enum sluice_device_gather)3;
		T_EQ(sluice_loader_open(ds, &cfg, &bad), -EINVAL);
		sluice_loader_error(bad, msg, sizeof(msg));
		T_ASSERT(strstr(msg, k == 0 ? "direct_io 3" : k == 1
				? "range_reads 3" : "device_gather 3") != NULL);
		sluice_loader_close(bad);
	}
	printf("tri-states: AUTO 0, ON 1, OFF 2; -1 still AUTO; 3 refused\n");
}

static void test_forced(sluice_dataset *ds)
{
	struct sluice_loader_config cfg;
	struct sluice_stats st = { .size = sizeof(st) };
	sluice_loader *ld;
	int r;

	sluice_loader_config_init(&cfg);
	T_EQ(sluice_loader_config_forced(&cfg), 0);
	cfg.device = SLUICE_DEVICE_HOST;
	sluice_loader_config_force(&cfg, SLUICE_FORCE_PLAIN_READS);
	T_EQ(sluice_loader_config_forced(&cfg), SLUICE_FORCE_PLAIN_READS);
	ld = open_cfg(ds, &cfg, &r);
	T_OK(r);
	drain(ld);
	T_OK(sluice_loader_stats(ld, &st));
	T_EQ(st.registered_buffers, 0);
	T_EQ(st.records, N);
	T_ASSERT(strstr(st.fallbacks, "plain") != NULL ||
		 strstr(st.fallbacks, "registered") != NULL);
	sluice_loader_close(ld);
	printf("forced fallbacks through sluice_tools.h: %s\n", st.fallbacks);
}

int main(void)
{
	char *root = fx_tmpdir();
	char dir[512];
	sluice_dataset *ds = NULL;

	snprintf(dir, sizeof(dir), "%s/ds", root);
	fx_write(dir, N, 4096, 0, 100);
	T_OK(sluice_dataset_open(dir, &ds));
	test_stats_size(ds);
	test_summary_size(root);
	test_tristates(ds);
	test_forced(ds);
	sluice_dataset_close(ds);
	fx_rmrf(root);
	free(root);
	return 0;
}
