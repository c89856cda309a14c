/*
 * test_hostile.c - hostile inputs to the library (issue 24): special files
 * where a shard or dataset.json should be.  Each case hung or was refused
 * late before its fix; an alarm turns a hang into a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format_util.h"
#include "shard.h"

struct lines {
	char text[8192];
	int count;
};

static void collect(void *ctx, const char *line)
{
	struct lines *l = ctx;
	size_t used = strlen(l->text);

	snprintf(l->text + used, sizeof(l->text) - used, "%s\n", line);
	l->count++;
}

static void on_alarm(int sig)
{
	static const char msg[] = "test_hostile: timed out: a reader blocked "
				  "on a special file\n";

	(void)sig;
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

/* Opening @what fails with @code and a message containing @needle. */
static void expect_open_fails(const char *what, int code, const char *needle)
{
	sluice_dataset *ds;
	char msg[1024];
	int r = sluice_dataset_open(what, &ds);

	sluice_dataset_error(ds, msg, sizeof(msg));
	if (r != code)
		T_FAIL_AT("open %s: %d (%s), expected %d; message: %s", what, r,
			  sluice_strerror(r), code, msg);
	T_CONTAINS(msg, needle);
	sluice_dataset_close(ds);
}

/* dataset_verify of @what reports a problem containing @needle. */
static void expect_verify_reports(const char *what, const char *needle)
{
	struct lines l = { { 0 }, 0 };

	T_ASSERT(dataset_verify(what, collect, &l) != 0);
	T_CONTAINS(l.text, needle);
}

static void copy_dir(const char *from, const char *to, int nshards)
{
	char src[1200], dst[1200];
	uint8_t *b;
	size_t n;

	T_EQ(mkdir(to, 0755), 0);
	for (int i = -1; i < nshards; i++) {
		if (i < 0) {
			TU_FMT(src, "%s/dataset.json", from);
			TU_FMT(dst, "%s/dataset.json", to);
		} else {
			TU_FMT(src, "%s/data-%05d.dls", from, i);
			TU_FMT(dst, "%s/data-%05d.dls", to, i);
		}
		b = tu_slurp(src, &n);
		tu_spit(dst, b, n);
		free(b);
	}
}

/* A FIFO (no writer ever comes) as a shard named exactly, as
 * dataset.json, as a shard the manifest lists, and matched by a glob. */
static void test_fifos(const char *root, const char *base)
{
	char dir[1100], path[1200], glob[1200];

	/* A shard named exactly. */
	TU_FMT(path, "%s/lone.dls", root);
	T_EQ(mkfifo(path, 0644), 0);
	expect_open_fails(path, -SLUICE_EFORMAT, "lone.dls: not a regular "
						 "file (it is a FIFO)");
	expect_verify_reports(path, "lone.dls: not a regular file");

	/* dataset.json. */
	TU_FMT(dir, "%s/manifest_fifo", root);
	copy_dir(base, dir, 3);
	TU_FMT(path, "%s/dataset.json", dir);
	T_EQ(unlink(path), 0);
	T_EQ(mkfifo(path, 0644), 0);
	expect_open_fails(dir, -SLUICE_EFORMAT,
			  "dataset.json: not a regular file (it is a FIFO)");
	expect_verify_reports(dir, "dataset.json: not a regular file");

	/* A shard the manifest lists. */
	TU_FMT(dir, "%s/shard_fifo", root);
	copy_dir(base, dir, 3);
	TU_FMT(path, "%s/data-00001.dls", dir);
	T_EQ(unlink(path), 0);
	T_EQ(mkfifo(path, 0644), 0);
	expect_open_fails(dir, -SLUICE_EFORMAT,
			  "data-00001.dls: not a regular file (it is a FIFO)");
	expect_verify_reports(dir, "data-00001.dls: not a regular file");

	/* Matched by a glob, and in a comma list. */
	TU_FMT(glob, "%s/*.dls", dir);
	expect_open_fails(glob, -SLUICE_EFORMAT, "data-00001.dls: not a "
						 "regular file");
	expect_verify_reports(glob, "data-00001.dls: not a regular file");
	TU_FMT(glob, "%s/data-00000.dls,%s", dir, path);
	expect_open_fails(glob, -SLUICE_EFORMAT, "data-00001.dls: not a "
						 "regular file");
}

/* A shard swapped for a FIFO after the dataset was opened: the loader's
 * own open (io/) must refuse it, not wait for a writer. */
static void test_fifo_after_open(const char *root, const char *base)
{
	struct sluice_loader_config cfg;
	sluice_dataset *ds;
	sluice_loader *ld = NULL;
	char dir[1100], path[1200], msg[1024];
	int r;

	TU_FMT(dir, "%s/swapped", root);
	copy_dir(base, dir, 3);
	T_OK(sluice_dataset_open(dir, &ds));
	TU_FMT(path, "%s/data-00002.dls", dir);
	T_EQ(unlink(path), 0);
	T_EQ(mkfifo(path, 0644), 0);
	sluice_loader_config_init(&cfg);
	cfg.batch_size = 8;
	cfg.device = SLUICE_DEVICE_HOST;
	r = sluice_loader_open(ds, &cfg, &ld);
	T_NE(r, 0);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, "data-00002.dls");
	T_CONTAINS(msg, "not a regular file");
	sluice_loader_close(ld);
	/* sluice_dataset_read opens the shard itself. */
	{
		uint8_t buf[64];
		size_t len;
		uint64_t rec = sluice_dataset_records(ds) - 1;

		r = sluice_dataset_read(ds, rec, "label", buf, sizeof(buf),
					&len);
		T_EQ(r, -SLUICE_EFORMAT);
		sluice_dataset_error(ds, msg, sizeof(msg));
		T_CONTAINS(msg, "data-00002.dls: not a regular file");
	}
	sluice_dataset_close(ds);
}

/* A state whose epoch or batch is past what the dataset can have is
 * refused (an epoch of 2^64 - 1 was taken, and streamed nothing). */
static void test_state_bounds(const char *base)
{
	struct sluice_loader_config cfg;
	struct sluice_state st, at;
	sluice_dataset *ds;
	sluice_loader *ld = NULL;
	uint64_t last;
	char msg[1024];

	T_OK(sluice_dataset_open(base, &ds));
	sluice_loader_config_init(&cfg);
	cfg.batch_size = 8;
	cfg.device = SLUICE_DEVICE_HOST;
	T_OK(sluice_loader_open(ds, &cfg, &ld));
	T_OK(sluice_loader_state_get(ld, &st));
	last = UINT64_MAX / 300 - 1;

	at = st;
	at.epoch = UINT64_MAX;
	T_EQ(sluice_loader_state_set(ld, &at), -SLUICE_ESTATE);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, "epoch 18446744073709551615 is past the last epoch");
	at.epoch = last + 1;
	T_EQ(sluice_loader_state_set(ld, &at), -SLUICE_ESTATE);
	at.epoch = last;
	T_OK(sluice_loader_state_set(ld, &at));
	at.epoch = 2;
	at.batches_consumed = sluice_loader_batches(ld) + 1;
	T_EQ(sluice_loader_state_set(ld, &at), -SLUICE_ESTATE);
	sluice_loader_error(ld, msg, sizeof(msg));
	T_CONTAINS(msg, "more batches than the epoch has");
	at.batches_consumed = sluice_loader_batches(ld);
	T_OK(sluice_loader_state_set(ld, &at));
	sluice_loader_close(ld);
	sluice_dataset_close(ds);
}

/* A manifest that lists one shard 100,000 times is refused from the
 * manifest alone: before any shard is read (the shard it names is not
 * even there), in one line, in O(N log N) (it took 27 s). */
static void test_manifest_duplicates(const char *root, const char *base)
{
	struct lines l = { { 0 }, 0 };
	char dir[1100], path[1200];
	uint8_t *text;
	size_t n;
	FILE *f;
	char *entry, *end, *shards;
	int e;

	TU_FMT(dir, "%s/dup", root);
	copy_dir(base, dir, 3);
	TU_FMT(path, "%s/dataset.json", dir);
	text = tu_slurp(path, &n);
	text[n] = '\0';
	/* The first entry of "shards": [ {...}, ... ] */
	shards = strstr((char *)text, "\"shards\"");
	T_ASSERT(shards);
	entry = strchr(shards, '{');
	T_ASSERT(entry);
	end = strchr(entry, '}');
	T_ASSERT(end);
	f = fopen(path, "w");
	T_ASSERT(f);
	fprintf(f, "%.*s", (int)(entry - (char *)text), (char *)text);
	for (e = 0; e < 100000; e++)
		fprintf(f, "%s%.*s", e ? "," : "", (int)(end + 1 - entry),
			entry);
	fprintf(f, "]}\n");
	T_EQ(fclose(f), 0);
	free(text);
	TU_FMT(path, "%s/data-00000.dls", dir);
	T_EQ(unlink(path), 0);

	expect_open_fails(dir, -SLUICE_ECORRUPT,
			  "lists data-00000.dls 100000 times (shards 0, 1, 2, "
			  "...)");
	T_EQ(dataset_verify(dir, collect, &l), 1);
	T_CONTAINS(l.text, "lists data-00000.dls 100000 times");

	/* A list naming one (missing) shard three times: the same, before
	 * any open. */
	{
		char spec[4000];

		TU_FMT(spec, "%s,%s,%s", path, path, path);
		expect_open_fails(spec, -SLUICE_ECORRUPT,
				  "data-00000.dls 3 times");
	}
}

int main(void)
{
	struct sluice_writer_config cfg;
	const char *root = tu_scratch("hostile");
	char base[1100];

	signal(SIGALRM, on_alarm);
	alarm(60);

	sluice_writer_config_init(&cfg);
	cfg.block_size = 4096;
	cfg.records_per_shard = 100;
	cfg.threads = 1;
	TU_FMT(base, "%s/base", root);
	T_OK(tu_write(base, &cfg, 300, 0, NULL));

	test_fifos(root, base);
	test_fifo_after_open(root, base);
	test_state_bounds(base);
	test_manifest_duplicates(root, base);
	return 0;
}
