/*
 * replay.c - run every file of the directory argv[1] through
 * LLVMFuzzerTestOneInput, without libFuzzer: CI replays the corpus under
 * the sanitizers with this.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return -1;
	}
	/* Exactly the file's size, so ASan catches reads past its end. */
	buf = malloc(n ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	struct dirent *e;
	char path[4096];
	int count = 0;
	DIR *d;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	d = opendir(argv[1]);
	if (!d) {
		printf("no corpus at %s: nothing to replay\n", argv[1]);
		return 0;
	}
	while ((e = readdir(d)) != NULL) {
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (replay_file(path) != 0) {
			fprintf(stderr, "%s: cannot read\n", path);
			closedir(d);
			return 1;
		}
		count++;
	}
	closedir(d);
	printf("replayed %d inputs from %s\n", count, argv[1]);
	return 0;
}
