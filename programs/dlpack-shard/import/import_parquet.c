/*
 * import_parquet.c - parquet through pyarrow: runs
 * `$SLUICE_PYTHON -m sluice.parquet` (python3 by default), which reads the
 * files with pyarrow and writes with ShardWriter.write_batch (numeric
 * columns as fixed fields, list/binary/string columns as variable ones).
 * Debian ships no Arrow C or C++ library, and pyarrow's reader is what a
 * Python user has anyway; the child reports its summary as JSON on a pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "import_common.h"

#define ARGS_MAX 32
#define SUMMARY_MAX 4096

/* @key's number in the child's JSON summary; 0 when absent. */
static double summary_number(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	return p ? strtod(p + strlen(pat), NULL) : 0.0;
}

static void parse_summary(const char *json, struct sluice_writer_summary *s)
{
	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
	s->records = (uint64_t)summary_number(json, "records");
	s->blocks = (uint64_t)summary_number(json, "blocks");
	s->shards = (uint32_t)summary_number(json, "shards");
	s->raw_bytes = (uint64_t)summary_number(json, "raw_bytes");
	s->stored_bytes = (uint64_t)summary_number(json, "stored_bytes");
	s->seconds = summary_number(json, "seconds");
}

/* Read the child's summary until EOF (bounded). */
static size_t read_all(int fd, char *buf, size_t cap)
{
	size_t len = 0;

	while (len + 1 < cap) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	return len;
}

int import_parquet(const struct import_options *o,
		   struct sluice_writer_summary *sum, char *err, size_t errlen)
{
	const struct sluice_writer_config *c = &o->wcfg;
	const char *py = getenv("SLUICE_PYTHON");
	char num[6][32], fdarg[16], json[SUMMARY_MAX];
	const char *argv[ARGS_MAX];
	int argc = 0, pipefd[2], status;
	pid_t pid;

	if (o->part_count > 1)
		return import_fail(err, errlen, -EINVAL,
				   "%s: --part is not supported with --from "
				   "parquet (give each job its own files)",
				   o->src);
	if (!py || !*py)
		py = "python3";
	if (pipe2(pipefd, O_CLOEXEC) != 0)
		return import_fail(err, errlen, -errno, "pipe: %s",
				   strerror(errno));
	snprintf(fdarg, sizeof(fdarg), "%d", pipefd[1]);
	snprintf(num[0], sizeof(num[0]), "%u", c->threads);
	snprintf(num[1], sizeof(num[1]), "%d", c->compression_level);
	snprintf(num[2], sizeof(num[2]), "%llu",
		 (unsigned long long)c->block_size);
	snprintf(num[3], sizeof(num[3]), "%llu",
		 (unsigned long long)c->shard_size);
	snprintf(num[4], sizeof(num[4]), "%llu",
		 (unsigned long long)c->records_per_shard);
	argv[argc++] = py;
	argv[argc++] = "-m";
	argv[argc++] = "sluice.parquet";
	argv[argc++] = o->src;
	argv[argc++] = "--out";
	argv[argc++] = o->out_dir;
	argv[argc++] = "--compression-level";
	argv[argc++] = num[1];
	argv[argc++] = "--block-size";
	argv[argc++] = num[2];
	if (c->threads) {
		argv[argc++] = "--threads";
		argv[argc++] = num[0];
	}
	if (c->records_per_shard) {
		argv[argc++] = "--records-per-shard";
		argv[argc++] = num[4];
	} else {
		argv[argc++] = "--shard-size";
		argv[argc++] = num[3];
	}
	if (c->prefix) {
		argv[argc++] = "--prefix";
		argv[argc++] = c->prefix;
	}
	if (!o->progress)
		argv[argc++] = "--quiet";
	argv[argc++] = "--summary-fd";
	argv[argc++] = fdarg;
	argv[argc] = NULL;

	pid = fork();
	if (pid < 0) {
		int r = -errno;

		close(pipefd[0]);
		close(pipefd[1]);
		return import_fail(err, errlen, r, "fork: %s", strerror(-r));
	}
	if (pid == 0) {
		/* The write end must survive exec: the child reports on it. */
		fcntl(pipefd[1], F_SETFD, 0);
		execvp(py, (char *const *)(uintptr_t)argv);
		fprintf(stderr, "dlpack-shard: %s: %s\n", py, strerror(errno));
		_exit(127);
	}
	close(pipefd[1]);
	read_all(pipefd[0], json, sizeof(json));
	close(pipefd[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return import_fail(err, errlen, -errno, "waitpid: %s",
					   strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return import_fail(err, errlen, -EIO,
				   "%s: converting with '%s -m sluice.parquet' "
				   "failed (%s %d, its message above; it needs "
				   "the sluice Python "
				   "package and pyarrow, SLUICE_PYTHON picks "
				   "the interpreter)",
				   o->src, py,
				   WIFEXITED(status) ? "exit" : "signal",
				   WIFEXITED(status) ? WEXITSTATUS(status)
						     : WTERMSIG(status));
	parse_summary(json, sum);
	return 0;
}
