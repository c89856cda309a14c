/*
 * fuzz_state_parse.c - the input is a saved state line (a file the user
 * hands to --state-in, or a Python string): the strict parser must reject
 * or accept it without crashing, and whatever it accepts must format to
 * a line that parses to the same state again (keys may come in any
 * order; nothing else is accepted loosely), as long as the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[SLUICE_STATE_TEXT_MAX + 8];
	char line[SLUICE_STATE_TEXT_MAX], again[SLUICE_STATE_TEXT_MAX];
	struct sluice_state st, back;
	int n;

	if (size >= sizeof(text))
		size = sizeof(text) - 1;
	memcpy(text, data, size);
	text[size] = '\0';
	if (sluice_state_parse(text, &st) != 0)
		return 0;
	n = sluice_state_format(&st, line, sizeof(line));
	if (n < 0 || (size_t)n != strlen(text) ||
	    sluice_state_parse(line, &back) != 0 ||
	    sluice_state_format(&back, again, sizeof(again)) != n ||
	    strcmp(line, again) != 0)
		abort();
	return 0;
}
