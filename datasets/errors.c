/*
 * errors.c - error texts and dtype names.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shard_internal.h"
#include "sluice.h"

static const char *const sluice_error_text[] = {
	[SLUICE_ECORRUPT - SLUICE_ECORRUPT] = "corrupt data",
	[SLUICE_ESCHEMA - SLUICE_ECORRUPT] = "schema mismatch or bad field",
	[SLUICE_EFORMAT - SLUICE_ECORRUPT] = "not a dlpack-shard file or "
					     "unsupported version",
	[SLUICE_EZSTD - SLUICE_ECORRUPT] = "zstd error",
	[SLUICE_ECUDA - SLUICE_ECORRUPT] = "CUDA error",
	[SLUICE_ENODEVICE - SLUICE_ECORRUPT] = "no usable GPU",
	[SLUICE_EINPUT - SLUICE_ECORRUPT] = "malformed input source",
	[SLUICE_ESTATE - SLUICE_ECORRUPT] = "state does not fit this loader",
	[SLUICE_ECLOSED - SLUICE_ECORRUPT] = "loader failed earlier or is "
					     "closing",
};

SLUICE_API const char *sluice_strerror(int code)
{
	const char *text;

	if (code == 0)
		return "success";
	if (code == SLUICE_EOF)
		return "end of epoch";
	if (code < 0) {
		if (code == -2147483647 - 1)
			return "unknown error";
		code = -code;
	}
	if (code >= SLUICE_ECORRUPT && code <= SLUICE_ECLOSED)
		return sluice_error_text[code - SLUICE_ECORRUPT];
	/* strerrordesc_np returns static text (strerror may not). */
	text = strerrordesc_np(code);
	return text ? text : "unknown error";
}

struct dtype_name {
	const char *name;
	uint8_t code;
	uint8_t bits;
};

static const struct dtype_name dtype_names[] = {
	{ "int8", kDLInt, 8 },       { "int16", kDLInt, 16 },
	{ "int32", kDLInt, 32 },     { "int64", kDLInt, 64 },
	{ "uint8", kDLUInt, 8 },     { "uint16", kDLUInt, 16 },
	{ "uint32", kDLUInt, 32 },   { "uint64", kDLUInt, 64 },
	{ "float16", kDLFloat, 16 }, { "float32", kDLFloat, 32 },
	{ "float64", kDLFloat, 64 }, { "bfloat16", kDLBfloat, 16 },
	{ "bool", kDLBool, 8 },
};

SLUICE_API int sluice_dtype_parse(const char *name, DLDataType *out)
{
	size_t i;

	if (!name || !out)
		return -SLUICE_ESCHEMA;
	for (i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++) {
		if (strcmp(name, dtype_names[i].name) == 0) {
			out->code = dtype_names[i].code;
			out->bits = dtype_names[i].bits;
			out->lanes = 1;
			return 0;
		}
	}
	return -SLUICE_ESCHEMA;
}

SLUICE_API const char *sluice_dtype_name(DLDataType dtype)
{
	size_t i;

	if (dtype.lanes != 1)
		return NULL;
	for (i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++)
		if (dtype.code == dtype_names[i].code &&
		    dtype.bits == dtype_names[i].bits)
			return dtype_names[i].name;
	return NULL;
}

void errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int shard_name_is_plain(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 255 || strchr(name, '/') || strstr(name, ".."))
		return 0;
	if (strcmp(name, ".") == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20)
			return 0;
	return 1;
}
