/*
 * test_no_gpu.c - the message a machine without a usable GPU gets.  The
 * CUDA runtime answers cudaErrorInsufficientDriver both when the driver
 * is too old and when there is none at all; the user must be told which
 * (issue 25).  Each case of cuda_no_gpu_explain, then this machine's own
 * facts against what the probe says.
 */
#include <stdio.h>
#include <string.h>

#include "device_util.h"

#ifdef SLUICE_HAVE_CUDA

static const char *explain(struct cuda_no_gpu f, char *buf, size_t len)
{
	char whole[512];

	cuda_no_gpu_explain(&f, whole, sizeof(whole));
	T_LT(strlen(whole), len);
	cuda_no_gpu_explain(&f, buf, len);
	printf("  %s\n", buf);
	return buf;
}

static void assert_lacks(const char *hay, const char *needle)
{
	if (strstr(hay, needle))
		T_FAIL_AT("\"%s\" contains \"%s\"", hay, needle);
}

static void test_cases(void)
{
	struct cuda_no_gpu f = {
		.error = cudaErrorInsufficientDriver,
		.error_text = "CUDA driver version is insufficient for CUDA "
			      "runtime version",
		.runtime_version = 13000,
	};
	/* device.c's reason is "no CUDA GPU found: WHY; host batches" in
	 * 200 bytes: every WHY must fit whole */
	char buf[200 - 34];

	/* No driver at all: never "insufficient" or "too old". */
	explain(f, buf, sizeof(buf));
	T_CONTAINS(buf, "no NVIDIA driver");
	T_CONTAINS(buf, "install it");
	assert_lacks(buf, "insufficient");
	assert_lacks(buf, "too old");

	/* Device nodes but no library: a container without the runtime. */
	f.device_nodes = 1;
	explain(f, buf, sizeof(buf));
	T_CONTAINS(buf, "libcuda.so.1 does not load");
	assert_lacks(buf, "too old");

	/* An old driver: both versions, and what to do. */
	f.driver_lib = 1;
	f.driver_version = 12040;
	explain(f, buf, sizeof(buf));
	T_CONTAINS(buf, "too old");
	T_CONTAINS(buf, "supports CUDA 12.4");
	T_CONTAINS(buf, "this build needs 13.0");
	T_CONTAINS(buf, "update the driver");
	assert_lacks(buf, "no NVIDIA driver");

	f.driver_version = 0;
	explain(f, buf, sizeof(buf));
	T_CONTAINS(buf, "too old for this build's CUDA 13.0 runtime");

	/* A driver that sees no device. */
	f.error = cudaErrorNoDevice;
	f.driver_version = 13000;
	explain(f, buf, sizeof(buf));
	T_CONTAINS(buf, "installed but sees no GPU");
	assert_lacks(buf, "too old");
	f.visible = "";
	explain(f, buf, sizeof(buf));
	T_CONTAINS(buf, "CUDA_VISIBLE_DEVICES=''");

	/* Anything else: the runtime's own words. */
	f.error = cudaErrorUnknown;
	f.error_text = "unknown error";
	explain(f, buf, sizeof(buf));
	T_CONTAINS(buf, "the CUDA driver says: unknown error");
}

/* This machine: the probe's message matches what is installed. */
static void test_this_machine(void)
{
	struct cuda_no_gpu f;
	char why[300];
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e == cudaSuccess) {
		printf("a GPU is present (%d): the no-driver message is not "
		       "reachable here\n", n);
		return;
	}
	(void)cudaGetLastError();
	cuda_no_gpu_facts((int)e, &f);
	printf("this machine: error %d, libcuda %d, /dev/nvidia* %d, "
	       "driver %d, runtime %d\n", f.error, f.driver_lib,
	       f.device_nodes, f.driver_version, f.runtime_version);
	T_EQ(cuda_device_probe(0, why, sizeof(why)), -SLUICE_ENODEVICE);
	printf("  probe: %s\n", why);
	if (!f.driver_lib && !f.device_nodes) {
		T_CONTAINS(why, "no NVIDIA driver");
		assert_lacks(why, "insufficient");
	}
}

int main(void)
{
	test_cases();
	test_this_machine();
	printf("no-GPU messages: ok\n");
	return 0;
}

#else

int main(void)
{
	printf("skip: built without CUDA (CUDA=0): no CUDA probe to test\n");
	return T_SKIP;
}

#endif
