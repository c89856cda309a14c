/*
 * cli_cat.c - `dlpack-shard cat PATH --index I --field F` writes one
 * record's field bytes to stdout (sluice_dataset_read);
 * `dlpack-shard cat PATH --hash` prints "INDEX FIELD XXH64" (seed 0,
 * 16 lowercase hex digits) per record and field, in dataset order and
 * schema order, decoding each block once.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli.h"
#include "sluice_tools.h"

static int cat_one(const char *path, uint64_t index, const char *field)
{
	sluice_dataset *ds = NULL;
	char msg[1024];
	size_t cap = 1 << 16, len = 0;
	void *buf = NULL;
	int r;

	r = sluice_dataset_open(path, &ds);
	if (r < 0) {
		msg[0] = '\0';
		if (ds)
			sluice_dataset_error(ds, msg, sizeof(msg));
		sluice_dataset_close(ds);
		return cli_error_code(msg, r);
	}
	for (;;) {
		void *nb = realloc(buf, cap ? cap : 1);

		if (!nb) {
			r = -ENOMEM;
			break;
		}
		buf = nb;
		r = sluice_dataset_read(ds, index, field, buf, cap, &len);
		if (r != -ENOSPC || len <= cap)
			break;
		cap = len;
	}
	if (r < 0) {
		msg[0] = '\0';
		sluice_dataset_error(ds, msg, sizeof(msg));
		free(buf);
		sluice_dataset_close(ds);
		if (r == -ERANGE)
			return cli_error("%s: record %llu out of range", path,
					 (unsigned long long)index);
		if (r == -ENOENT)
			return cli_error("%s: no field '%s'", path, field);
		return cli_error_code(msg, r);
	}
	if (len && fwrite(buf, 1, len, stdout) != len)
		r = -EIO;
	if (fflush(stdout) != 0)
		r = -EIO;
	free(buf);
	sluice_dataset_close(ds);
	if (r < 0)
		return cli_error("writing to stdout: %s", strerror(-r));
	return 0;
}

/* Hash every record of one shard (of the fields @s); @first is its first
 * global index. */
static int hash_shard(const struct shard_schema *s,
		      const struct shard_file *sf, uint64_t first,
		      struct block_reader *br, char *err, size_t errlen)
{
	int fd, r = 0;

	fd = file_open_regular(sf->path, O_RDONLY, NULL, err, errlen);
	if (fd < 0)
		return fd;
	for (uint64_t b = 0; b < sf->block_count && r == 0; b++) {
		const struct shard_block *blk = &sf->blocks[b];
		struct block_view v;

		r = block_read(br, fd, s, sf, b, &v, err, errlen);
		for (uint32_t i = 0; r == 0 && i < blk->record_count; i++)
			for (uint32_t f = 0; f < s->nfields; f++) {
				const uint8_t *p;
				uint64_t len;

				block_view_get(s, &v, f, i, &p, &len);
				printf("%llu %s %016llx\n",
				       (unsigned long long)(first +
							    blk->first_record +
							    i),
				       s->fields[f].f.name,
				       (unsigned long long)XXH64(p, len, 0));
			}
	}
	close(fd);
	return r;
}

static int cat_hash(const char *path)
{
	static char outbuf[1 << 16];
	struct block_reader br = { 0 };
	struct dataset ds;
	char err[1024] = "";
	int r;

	memset(&ds, 0, sizeof(ds));
	r = dataset_load(path, &ds, err, sizeof(err));
	if (r < 0) {
		dataset_free(&ds);
		return cli_error_code(err, r);
	}
	setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
	for (uint32_t s = 0; s < ds.nshards && r == 0; s++)
		r = hash_shard(&ds.schema, &ds.shards[s], ds.shard_first[s],
			       &br, err, sizeof(err));
	block_reader_free(&br);
	dataset_free(&ds);
	if (fflush(stdout) != 0 && r == 0)
		return cli_error("writing to stdout: %s", strerror(errno));
	if (r < 0)
		return cli_error_code(err, r);
	return 0;
}

int cli_cat(int argc, char **argv)
{
	const char *path = NULL, *field = NULL;
	uint64_t index = 0;
	int have_index = 0, hash = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--index") == 0 || strcmp(a, "--field") == 0) {
			if (i + 1 == argc)
				return cli_usage_error("%s needs a value", a);
			if (a[2] == 'f') {
				field = argv[++i];
			} else {
				if (cli_parse_u64(argv[++i], &index) < 0)
					return cli_usage_error(
						"--index: bad number '%s'",
						argv[i]);
				have_index = 1;
			}
		} else if (strcmp(a, "--hash") == 0) {
			hash = 1;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			cli_usage(stdout);
			return 0;
		} else if (a[0] == '-' && a[1]) {
			return cli_usage_error("cat: bad option '%s'", a);
		} else if (path) {
			return cli_usage_error("cat takes one PATH");
		} else {
			path = a;
		}
	}
	if (!path)
		return cli_usage_error("cat needs a PATH");
	if (hash) {
		if (have_index || field)
			return cli_usage_error("--hash excludes --index and "
					       "--field");
		return cat_hash(path);
	}
	if (!have_index || !field)
		return cli_usage_error("cat needs --index I --field F, or "
				       "--hash");
	return cat_one(path, index, field);
}
