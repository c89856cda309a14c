/*
 * test_header_example.c - the usage example at the top of
 * include/sluice.h, extracted by the Makefile into header_example.inc,
 * compiled as it stands and run over one epoch of a small dataset, so
 * the header's promise cannot rot.
 */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format_util.h"
#include "sluice.h"

/* The example's text, verbatim; @return: its final r. */
static int header_example(void)
{
#include "header_example.inc"
	if (msg[0])
		fprintf(stderr, "example: %s\n", msg);
	return r;
}

int main(void)
{
	const char *root = tu_scratch("header-example");
	struct sluice_writer_config wc;
	struct sluice_field field;
	sluice_writer *w = NULL;
	uint8_t bytes[16];

	T_EQ(chdir(root), 0);
	T_EQ(mkdir("data", 0777), 0);
	tu_field(&field, "data", "uint8", 1, -1, 0);
	sluice_writer_config_init(&wc);
	T_OK(sluice_writer_open("data/train", &field, 1, &wc, &w));
	for (uint32_t i = 0; i < 1000; i++) {
		const void *v[1] = { bytes };
		uint64_t len[1] = { i % sizeof(bytes) };

		memset(bytes, (int)i, sizeof(bytes));
		T_OK(sluice_writer_add(w, v, len));
	}
	T_OK(sluice_writer_close(w, NULL));

	/* One epoch ends with SLUICE_EOF; any failure is negative. */
	T_EQ(header_example(), SLUICE_EOF);
	printf("PASS: the sluice.h example ran one epoch\n");
	return 0;
}
