/*
 * probe.c - the loader's benchmark probes (sluice_tools.h; libsluice.so
 * does not export them): the PCIe limit measured on the loader's own
 * arena, and a stand-in training step on the consumer's stream.  Both
 * pass through to gpu/; the device's message becomes the loader's.
 */
#include <errno.h>
#include <stdio.h>

#include "loader.h"

/* Keep the device's message as the loader's last one; the loader does
 * not fail: a probe is not part of delivering batches. */
static int probe_result(struct loader_core *c, int r)
{
	char msg[256];

	if (r == 0 || r == -EINVAL)
		return r;
	device_last_error(c->dev, msg, sizeof(msg));
	core_lock(c);
	if (!c->failed)   /* a failure's message stays */
		snprintf(c->err, sizeof(c->err), "%s", msg);
	pthread_mutex_unlock(&c->mu);
	return r;
}

int sluice_loader_measure_h2d(sluice_loader *ld, uint64_t bytes, int iters,
			      double *bytes_per_s)
{
	if (bytes_per_s)
		*bytes_per_s = 0;
	if (!ld || !ld->core || !bytes_per_s || bytes == 0 || iters < 1)
		return -EINVAL;
	if (bytes > SIZE_MAX)
		bytes = SIZE_MAX;
	return probe_result(ld->core,
			    device_measure_h2d(ld->core->dev, (size_t)bytes,
					       iters, bytes_per_s));
}

int sluice_loader_compute(sluice_loader *ld, int64_t stream, double ms)
{
	if (!ld || !ld->core)
		return -EINVAL;
	return probe_result(ld->core,
			    device_compute(ld->core->dev, stream, ms));
}
