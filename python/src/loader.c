/*
 * loader.c - the Loader type: iterate batches, epochs, resumable state.
 *
 * Iteration is all C (tp_iternext), so no Python frame sits between the
 * library handing a batch over and the user's loop receiving it: a
 * KeyboardInterrupt cannot lose a batch there.  next() blocks with the
 * GIL released; when a signal is pending as it returns, the batch is
 * kept as "pending" and delivered by the next call, and state() counts
 * it as not consumed, so a resume after Ctrl-C skips nothing.
 *
 * Held slots: the library fails next() with -EDEADLK when the consumer
 * holds every prefetch slot (tensors kept alive).  Zero-copy tensors
 * cannot give their memory back, so the only sound way on is more
 * memory: this loader "rolls over" - it opens a fresh library loader on
 * the same dataset at the same position (state_get/state_set, exact by
 * the library's contract) and closes the old one, whose slots stay valid
 * until their last tensor is freed.  Memory then grows with what the
 * user keeps, and only then; the steady state never rolls over.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>

#include "pysluice.h"
#include "sluice_tools.h"   /* the forced fallbacks (test knobs) */

PyTypeObject *pysluice_loader_type;

typedef struct {
	PyObject_HEAD
	PySluiceDataset *dataset;      /* strong reference; outlives ld */
	PyObject *stream_refs;         /* a mixture's datasets (a list,
					  strong), or NULL */
	struct sluice_stream *streams; /* their library datasets, weights */
	int nstreams;
	sluice_loader *ld;             /* NULL once closed */
	struct sluice_loader_config cfg;
	sluice_batch *pending;         /* taken from ld, not yet delivered */
	unsigned long long rollovers;
	int busy;                      /* a call runs without the GIL */
	int skip_warned;               /* on_error=skip reported once */
	int cut_warned;                /* pad_length cuts reported once */
} PySluiceLoader;

/* OPT_FORCE: a forced fallback of sluice_tools.h, its SLUICE_FORCE_* bit
 * in the offset column. */
enum opt_kind { OPT_U32, OPT_INT, OPT_U64, OPT_FORCE };

static const struct {
	const char *name;
	size_t offset;
	enum opt_kind kind;
} options[] = {
#define OPT(f, k) { #f, offsetof(struct sluice_loader_config, f), k }
	OPT(batch_size, OPT_U32),     OPT(shuffle, OPT_INT),
	OPT(window_blocks, OPT_U32),  OPT(seed, OPT_U64),
	OPT(drop_last, OPT_INT),      OPT(rank, OPT_INT),
	OPT(world_size, OPT_INT),     OPT(prefetch_depth, OPT_U32),
	OPT(decode_threads, OPT_U32), OPT(queue_depth, OPT_U32),
	OPT(device, OPT_INT),         OPT(device_id, OPT_INT),
	OPT(verify, OPT_INT),         OPT(on_error, OPT_INT),
	OPT(direct_io, OPT_INT),      OPT(sqpoll, OPT_INT),
	OPT(pad_length, OPT_U32),     OPT(cache_bytes, OPT_U64),
	OPT(memory_bytes, OPT_U64),
	OPT(range_reads, OPT_INT),    OPT(device_gather, OPT_INT),
	OPT(epochs, OPT_U64),
#undef OPT
	{ "plain_reads", SLUICE_FORCE_PLAIN_READS, OPT_FORCE },
	{ "pageable_copies", SLUICE_FORCE_PAGEABLE_COPIES, OPT_FORCE },
};

static int set_option(struct sluice_loader_config *cfg, PyObject *key,
		      PyObject *value)
{
	char name[64];
	char *p = (char *)cfg;

	if (pysluice_utf8(key, name, sizeof(name)) < 0)
		return -1;
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
		long long v;

		if (strcmp(options[i].name, name) != 0)
			continue;
		if (options[i].kind == OPT_U64) {
			unsigned long long u = PyLong_AsUnsignedLongLong(value);

			if (PyErr_Occurred())
				return -1;
			memcpy(p + options[i].offset, &(uint64_t){ u },
			       sizeof(uint64_t));
			return 0;
		}
		v = PyLong_AsLongLong(value);
		if (v == -1 && PyErr_Occurred())
			return -1;
		if (options[i].kind == OPT_FORCE) {
			if (v)
				sluice_loader_config_force(
					cfg, (unsigned)options[i].offset);
		} else if (options[i].kind == OPT_U32) {
			if (v < 0 || v > UINT32_MAX)
				goto range;
			memcpy(p + options[i].offset, &(uint32_t){ (uint32_t)v },
			       sizeof(uint32_t));
		} else {
			if (v < INT32_MIN || v > INT32_MAX)
				goto range;
			memcpy(p + options[i].offset, &(int){ (int)v },
			       sizeof(int));
		}
		return 0;
range:
		PyErr_Format(PyExc_ValueError, "%s=%lld is out of range", name,
			     v);
		return -1;
	}
	PyErr_Format(PyExc_TypeError, "unknown loader option '%s'", name);
	return -1;
}

static PyObject *raise_loader(const sluice_loader *ld, int r,
			      const char *what)
{
	char msg[1024];

	if (ld && sluice_loader_error(ld, msg, sizeof(msg)) > 0)
		return pysluice_raise(r, msg);
	return pysluice_raise_code(r, what);
}

static int state_from_object(PyObject *obj, struct sluice_state *st);

/* The library loader over this loader's dataset or mixture (no GIL). */
static int open_library_loader(PySluiceLoader *self, sluice_dataset *ds,
			       sluice_loader **out)
{
	if (self->nstreams)
		return sluice_loader_open_streams(self->streams,
						  self->nstreams, &self->cfg,
						  out);
	return sluice_loader_open(ds, &self->cfg, out);
}

/* streams: a list of (Dataset handle, weight, samples) tuples. */
static int streams_from_object(PySluiceLoader *self, PyObject *list)
{
	Py_ssize_t n;

	if (!PyList_Check(list)) {
		PyErr_SetString(PyExc_TypeError,
				"streams must be a list of (dataset, weight, "
				"samples)");
		return -1;
	}
	n = PyList_Size(list);
	if (n < 1 || n > SLUICE_MAX_STREAMS) {
		PyErr_Format(PyExc_ValueError,
			     "a mixture needs 1 to %d streams",
			     SLUICE_MAX_STREAMS);
		return -1;
	}
	self->streams = PyMem_Calloc((size_t)n, sizeof(*self->streams));
	if (!self->streams) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t = PyList_GetItem(list, i), *d;
		unsigned long long samples;
		double weight;

		if (!PyTuple_Check(t) ||
		    !PyArg_ParseTuple(t, "O!dK", pysluice_dataset_type, &d,
				      &weight, &samples)) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_TypeError,
						"each stream is (dataset, "
						"weight, samples)");
			return -1;
		}
		if (!((PySluiceDataset *)d)->ds) {
			PyErr_SetString(PyExc_ValueError,
					"a stream's dataset is closed");
			return -1;
		}
		self->streams[i] = (struct sluice_stream){
			((PySluiceDataset *)d)->ds, weight, samples };
	}
	Py_INCREF(list);
	self->stream_refs = list;
	self->nstreams = (int)n;
	return 0;
}

static int loader_init(PyObject *o, PyObject *args, PyObject *kw)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	static char *kwlist[] = { "dataset", "config", "state", "streams",
				  NULL };
	PyObject *dataset, *config = NULL, *state = Py_None;
	PyObject *streams = Py_None;
	PyObject *key, *value;
	Py_ssize_t pos = 0;
	struct sluice_state st;
	sluice_loader *ld = NULL;
	int r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|O!OO", kwlist,
					 pysluice_dataset_type, &dataset,
					 &PyDict_Type, &config, &state,
					 &streams))
		return -1;
	if (self->ld) {
		PyErr_SetString(PyExc_RuntimeError, "loader already open");
		return -1;
	}
	if (!((PySluiceDataset *)dataset)->ds) {
		PyErr_SetString(PyExc_ValueError, "dataset is closed");
		return -1;
	}
	sluice_loader_config_init(&self->cfg);
	while (config && PyDict_Next(config, &pos, &key, &value))
		if (set_option(&self->cfg, key, value) < 0)
			return -1;
	if (state != Py_None && state_from_object(state, &st) < 0)
		return -1;
	if (streams != Py_None && !self->streams &&
	    streams_from_object(self, streams) < 0)
		return -1;
	Py_BEGIN_ALLOW_THREADS
	r = open_library_loader(self, ((PySluiceDataset *)dataset)->ds, &ld);
	if (r == 0 && state != Py_None)
		r = sluice_loader_state_set(ld, &st);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		raise_loader(ld, r, "opening the loader");
		Py_BEGIN_ALLOW_THREADS
		sluice_loader_close(ld);
		Py_END_ALLOW_THREADS
		return -1;
	}
	Py_INCREF(dataset);
	self->dataset = (PySluiceDataset *)dataset;
	self->dataset->nloaders++;
	self->ld = ld;
	return 0;
}

static void drop_pending(PySluiceLoader *self)
{
	sluice_batch_release(self->pending);
	self->pending = NULL;
}

static void loader_close_now(PySluiceLoader *self)
{
	sluice_loader *ld = self->ld;

	drop_pending(self);
	if (!ld)
		return;
	self->ld = NULL;
	/* Joins the loader's threads; held batches stay valid. */
	Py_BEGIN_ALLOW_THREADS
	sluice_loader_close(ld);
	Py_END_ALLOW_THREADS
	self->dataset->nloaders--;
}

static void loader_dealloc(PyObject *o)
{
	PySluiceLoader *self = (PySluiceLoader *)o;

	loader_close_now(self);
	Py_XDECREF(self->dataset);
	Py_XDECREF(self->stream_refs);
	PyMem_Free(self->streams);
	pysluice_free(o);
}

/*
 * The library's loader is driven by one consumer thread, and next() runs
 * without the GIL: a second Python thread arriving meanwhile (another
 * next(), close(), state()) is refused rather than racing it.
 */
static int need_open(PySluiceLoader *self)
{
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError,
				"loader used from two threads at once");
		return -1;
	}
	if (self->ld)
		return 0;
	PyErr_SetString(PyExc_ValueError, "loader is closed");
	return -1;
}

/* Continue at the same position on a fresh library loader (see top). */
static int rollover(PySluiceLoader *self)
{
	struct sluice_state st;
	sluice_loader *old = self->ld, *nl = NULL;
	int r;

	r = sluice_loader_state_get(old, &st);
	if (r < 0) {
		raise_loader(old, r, "reading the loader's position");
		return -1;
	}
	Py_BEGIN_ALLOW_THREADS
	r = open_library_loader(self, self->dataset->ds, &nl);
	if (r == 0)
		r = sluice_loader_state_set(nl, &st);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		raise_loader(nl, r,
			     "every prefetch slot is held by live tensors and "
			     "a new loader could not be opened");
		Py_BEGIN_ALLOW_THREADS
		sluice_loader_close(nl);
		Py_END_ALLOW_THREADS
		return -1;
	}
	self->ld = nl;
	self->rollovers++;
	Py_BEGIN_ALLOW_THREADS
	sluice_loader_close(old);
	Py_END_ALLOW_THREADS
	return 0;
}

/*
 * Data the loop does not see in full: records skipped (on_error=skip) and
 * values cut by pad_length are each reported once through warnings.
 * -1: a warning became an exception.
 */
static int warn_losses(PySluiceLoader *self)
{
	struct sluice_stats st = { .size = sizeof(st) };
	char msg[512];
	int skip = self->cfg.on_error == SLUICE_ON_ERROR_SKIP &&
		   !self->skip_warned;
	int pad = self->cfg.pad_length && !self->cut_warned;

	if ((!skip && !pad) || sluice_loader_stats(self->ld, &st) < 0)
		return 0;
	if (skip && st.records_skipped) {
		self->skip_warned = 1;
		sluice_loader_skipped(self->ld, msg, sizeof(msg));
		if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
				     "sluice: on_error='skip' skipped %llu "
				     "records of corrupt blocks "
				     "(stats()['records_skipped'] counts them "
				     "all); the first: %s",
				     (unsigned long long)st.records_skipped,
				     msg) < 0)
			return -1;
	}
	if (pad && st.values_truncated) {
		self->cut_warned = 1;
		if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
				     "sluice: pad_length=%u cut %llu values of "
				     "longer records (stats()['values_truncated']"
				     " counts them all; F.lengths keeps the true "
				     "lengths)",
				     (unsigned)self->cfg.pad_length,
				     (unsigned long long)st.values_truncated) < 0)
			return -1;
	}
	return 0;
}

static PyObject *loader_iternext(PyObject *o)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	sluice_batch *b = NULL;
	int r;

	if (need_open(self))
		return NULL;
	if (self->pending) {
		b = self->pending;
		self->pending = NULL;
		return pysluice_batch_new(b, sluice_loader_device(self->ld));
	}
	self->busy = 1;
	for (;;) {
		sluice_loader *ld = self->ld;

		Py_BEGIN_ALLOW_THREADS
		r = sluice_loader_next(ld, &b);
		Py_END_ALLOW_THREADS
		if (r != -EDEADLK)
			break;
		if (rollover(self) < 0) {
			self->busy = 0;
			return NULL;
		}
	}
	self->busy = 0;
	if (r == SLUICE_EOF)
		return NULL; /* StopIteration; the library is at the next epoch */
	if (r < 0)
		return raise_loader(self->ld, r, "next batch");
	if (PyErr_CheckSignals() < 0 || warn_losses(self) < 0) {
		self->pending = b;
		return NULL;
	}
	return pysluice_batch_new(b, sluice_loader_device(self->ld));
}

static PyObject *loader_set_epoch(PyObject *o, PyObject *args)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	unsigned long long epoch;
	sluice_loader *ld;
	int r;

	if (!PyArg_ParseTuple(args, "K", &epoch) || need_open(self))
		return NULL;
	drop_pending(self);
	ld = self->ld;
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	r = sluice_loader_set_epoch(ld, epoch);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	if (r < 0)
		return raise_loader(ld, r, "set_epoch");
	Py_RETURN_NONE;
}

/*
 * The state as a dict of plain ints, the same on every rank (rank 0 saves
 * it, every rank loads it); "earlier" lists the epoch's earlier jobs of an
 * elastic resume as (world_size, consumed, drop_last) tuples.
 */
static PyObject *state_to_dict(const struct sluice_state *st)
{
	PyObject *earlier = PyList_New(0), *d;

	if (!earlier)
		return NULL;
	for (uint32_t i = 0; i < st->nearlier; i++) {
		PyObject *job = Py_BuildValue(
			"(iKi)", (int)st->earlier[i].world_size,
			(unsigned long long)st->earlier[i].consumed,
			(int)st->earlier[i].drop_last);

		if (!job || PyList_Append(earlier, job) < 0) {
			Py_XDECREF(job);
			Py_DECREF(earlier);
			return NULL;
		}
		Py_DECREF(job);
	}
	d = Py_BuildValue(
		"{sKsisIsKsKsKsisIsisKsN}", "seed",
		(unsigned long long)st->seed, "shuffle", (int)st->shuffle,
		"window_blocks", (unsigned int)st->window_blocks,
		"dataset_records", (unsigned long long)st->dataset_records,
		"mix", (unsigned long long)st->mix, "epoch",
		(unsigned long long)st->epoch, "world_size",
		(int)st->world_size, "batch_size",
		(unsigned int)st->batch_size, "drop_last", (int)st->drop_last,
		"batches_consumed", (unsigned long long)st->batches_consumed,
		"earlier", earlier);
	return d;
}

/* An int of @d[@key] in [0, max]. */
static int dict_u64(PyObject *d, const char *key, uint64_t max,
		    uint64_t *out)
{
	PyObject *v = PyDict_GetItemString(d, key);
	unsigned long long x;

	if (!v) {
		PyErr_Format(PyExc_KeyError, "state has no '%s'", key);
		return -1;
	}
	x = PyLong_AsUnsignedLongLong(v);
	if (PyErr_Occurred())
		return -1;
	if (x > max) {
		PyErr_Format(PyExc_ValueError, "state field '%s' out of range",
			     key);
		return -1;
	}
	*out = x;
	return 0;
}

static int earlier_from_object(PyObject *list, struct sluice_state *st)
{
	Py_ssize_t n;

	if (!PyList_Check(list) && !PyTuple_Check(list)) {
		PyErr_SetString(PyExc_TypeError,
				"state['earlier'] must be a list of "
				"(world_size, consumed, drop_last)");
		return -1;
	}
	n = PySequence_Size(list);
	if (n < 0)
		return -1;
	if (n > SLUICE_STATE_MAX_EARLIER) {
		PyErr_SetString(PyExc_ValueError,
				"state lists too many earlier jobs");
		return -1;
	}
	st->nearlier = (uint32_t)n;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *job = PySequence_GetItem(list, i);
		unsigned long long w, c, d;
		int ok;

		if (!job)
			return -1;
		ok = PyTuple_Check(job) || PyList_Check(job);
		if (ok) {
			PyObject *t = PySequence_Tuple(job);

			ok = t && PyArg_ParseTuple(t, "KKK", &w, &c, &d);
			Py_XDECREF(t);
		}
		Py_DECREF(job);
		if (!ok || w < 1 || w > INT32_MAX || d > 1) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError,
						"state['earlier']: each job is "
						"(world_size >= 1, consumed, "
						"drop_last 0 or 1)");
			return -1;
		}
		st->earlier[i] = (struct sluice_state_job){
			.world_size = (int32_t)w,
			.consumed = c,
			.drop_last = (int32_t)d,
		};
	}
	return 0;
}

/* A dict from state() or the library's text line. */
static int state_from_object(PyObject *obj, struct sluice_state *st)
{
	uint64_t v[10];
	static const char *keys[10] = { "seed", "shuffle", "window_blocks",
					"dataset_records", "epoch",
					"world_size", "batch_size",
					"drop_last", "batches_consumed",
					"mix" };
	static const uint64_t max[10] = { UINT64_MAX, 3, UINT32_MAX,
					  UINT64_MAX, UINT64_MAX, INT32_MAX,
					  UINT32_MAX, 1, UINT64_MAX,
					  UINT64_MAX };
	PyObject *earlier;

	memset(st, 0, sizeof(*st));
	if (PyUnicode_Check(obj)) {
		char line[SLUICE_STATE_TEXT_MAX];

		if (pysluice_utf8(obj, line, sizeof(line)) < 0)
			return -1;
		if (sluice_state_parse(line, st) < 0) {
			PyErr_Format(PyExc_ValueError,
				     "not a sluice state line: '%s'", line);
			return -1;
		}
		return 0;
	}
	if (!PyDict_Check(obj)) {
		PyErr_SetString(PyExc_TypeError,
				"state must be a dict from state_dict() or a "
				"state line");
		return -1;
	}
	for (int i = 0; i < 10; i++)
		if (dict_u64(obj, keys[i], max[i], &v[i]) < 0)
			return -1;
	st->seed = v[0];
	st->shuffle = (int32_t)v[1];
	st->window_blocks = (uint32_t)v[2];
	st->dataset_records = v[3];
	st->epoch = v[4];
	st->world_size = (int32_t)v[5];
	st->batch_size = (uint32_t)v[6];
	st->drop_last = (int32_t)v[7];
	st->batches_consumed = v[8];
	st->mix = v[9];
	earlier = PyDict_GetItemString(obj, "earlier");
	if (!earlier) {
		PyErr_SetString(PyExc_KeyError, "state has no 'earlier'");
		return -1;
	}
	return earlier_from_object(earlier, st);
}

static int current_state(PySluiceLoader *self, struct sluice_state *st)
{
	int r = sluice_loader_state_get(self->ld, st);

	if (r < 0) {
		raise_loader(self->ld, r, "state");
		return -1;
	}
	/* A batch taken but not delivered (Ctrl-C) is still to come. */
	if (self->pending && st->batches_consumed > 0)
		st->batches_consumed--;
	return 0;
}

static PyObject *loader_state(PyObject *o, PyObject *unused)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	struct sluice_state st;

	(void)unused;
	if (need_open(self) || current_state(self, &st) < 0)
		return NULL;
	return state_to_dict(&st);
}

static PyObject *loader_state_line(PyObject *o, PyObject *unused)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	struct sluice_state st;
	char line[SLUICE_STATE_TEXT_MAX];

	(void)unused;
	if (need_open(self) || current_state(self, &st) < 0)
		return NULL;
	if (sluice_state_format(&st, line, sizeof(line)) < 0)
		return pysluice_raise_code(-EINVAL, "formatting the state");
	return PyUnicode_FromString(line);
}

static PyObject *loader_set_state(PyObject *o, PyObject *obj)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	struct sluice_state st;
	sluice_loader *ld;
	int r;

	if (need_open(self) || state_from_object(obj, &st) < 0)
		return NULL;
	drop_pending(self);
	ld = self->ld;
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	r = sluice_loader_state_set(ld, &st);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	if (r < 0)
		return raise_loader(ld, r, "set_state");
	Py_RETURN_NONE;
}

static PyObject *loader_batches(PyObject *o, PyObject *unused)
{
	PySluiceLoader *self = (PySluiceLoader *)o;

	(void)unused;
	if (need_open(self))
		return NULL;
	return PyLong_FromUnsignedLongLong(sluice_loader_batches(self->ld));
}

static PyObject *loader_device(PyObject *o, PyObject *unused)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	DLDevice d;

	(void)unused;
	if (need_open(self))
		return NULL;
	d = sluice_loader_device(self->ld);
	return Py_BuildValue("(ii)", (int)d.device_type, (int)d.device_id);
}

static PyObject *stage_dict(const struct sluice_stage_stats *s)
{
	return Py_BuildValue("{sKsKsKsK}", "bytes",
			     (unsigned long long)s->bytes, "ops",
			     (unsigned long long)s->ops, "busy_ns",
			     (unsigned long long)s->busy_ns, "wait_ns",
			     (unsigned long long)s->wait_ns);
}

static PyObject *loader_stats(PyObject *o, PyObject *unused)
{
	PySluiceLoader *self = (PySluiceLoader *)o;
	struct sluice_stats s = { .size = sizeof(s) };
	int r;

	(void)unused;
	if (need_open(self))
		return NULL;
	r = sluice_loader_stats(self->ld, &s);
	if (r < 0)
		return raise_loader(self->ld, r, "stats");
	/* Counters are per library loader: they restart after a rollover. */
	return Py_BuildValue(
		"{sNsNsNsNsKsKsKsKsKsKsKsKsIsKsKsKsisIsisisisisssKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsIsKsK}",
		"read",
		stage_dict(&s.read), "decode", stage_dict(&s.decode),
		"assemble", stage_dict(&s.assemble), "copy",
		stage_dict(&s.copy), "consumer_wait_ns",
		(unsigned long long)s.consumer_wait_ns, "batches",
		(unsigned long long)s.batches, "records",
		(unsigned long long)s.records, "records_skipped",
		(unsigned long long)s.records_skipped, "values_truncated",
		(unsigned long long)s.values_truncated, "blocks_read",
		(unsigned long long)s.blocks_read, "block_cache_hits",
		(unsigned long long)s.block_cache_hits, "slot_occupancy_sum",
		(unsigned long long)s.slot_occupancy_sum, "prefetch_depth",
		(unsigned int)s.prefetch_depth, "memory_bytes",
		(unsigned long long)s.memory_bytes, "io_memory_bytes",
		(unsigned long long)s.io_memory_bytes, "batches_over_budget",
		(unsigned long long)s.batches_over_budget, "direct_io", s.direct_io,
		"cached_shards", (unsigned int)s.cached_shards,
		"registered_buffers", s.registered_buffers,
		"registered_files", s.registered_files, "sqpoll", s.sqpoll,
		"device_pinned", s.device_pinned, "fallbacks", s.fallbacks,
		"rollovers", self->rollovers, "cpu_read_ns",
		(unsigned long long)s.cpu_read_ns, "cpu_verify_ns",
		(unsigned long long)s.cpu_verify_ns, "cpu_decompress_ns",
		(unsigned long long)s.cpu_decompress_ns, "cpu_assemble_ns",
		(unsigned long long)s.cpu_assemble_ns, "batches_viewed",
		(unsigned long long)s.batches_viewed, "blocks_direct",
		(unsigned long long)s.blocks_direct, "arena_resident_ns",
		(unsigned long long)s.arena_resident_ns, "range_reads",
		(unsigned long long)s.range_reads, "range_records",
		(unsigned long long)s.range_records, "batches_gathered",
		(unsigned long long)s.batches_gathered, "gather_runs",
		(unsigned long long)s.gather_runs, "device_upload_bytes",
		(unsigned long long)s.device_upload_bytes, "device_memory_bytes",
		(unsigned long long)s.device_memory_bytes,
		"bytes_verified_landing",
		(unsigned long long)s.bytes_verified_landing, "read_ahead_blocks",
		(unsigned long long)s.read_ahead_blocks, "bytes_verified_device",
		(unsigned long long)s.bytes_verified_device, "bytes_staged",
		(unsigned long long)s.bytes_staged, "device_upload_ns",
		(unsigned long long)s.device_upload_ns,
		"bytes_staged_overlapped",
		(unsigned long long)s.bytes_staged_overlapped, "device_check_ns",
		(unsigned long long)s.device_check_ns, "lock_wait_ns",
		(unsigned long long)s.lock_wait_ns, "decode_threads",
		(unsigned)s.decode_threads, "range_records_in_place",
		(unsigned long long)s.range_records_in_place,
		"records_decoded_in_batch",
		(unsigned long long)s.records_decoded_in_batch);
}

static PyObject *loader_close(PyObject *o, PyObject *unused)
{
	PySluiceLoader *self = (PySluiceLoader *)o;

	(void)unused;
	if (self->ld && need_open(self))
		return NULL;
	loader_close_now(self);
	Py_RETURN_NONE;
}

static PyMethodDef loader_methods[] = {
	{ "set_epoch", loader_set_epoch, METH_VARARGS,
	  "set_epoch(epoch): restart at the beginning of epoch" },
	{ "state", loader_state, METH_NOARGS,
	  "state() -> dict: the position after the last delivered batch" },
	{ "state_line", loader_state_line, METH_NOARGS,
	  "state_line() -> the same position as the library's text line" },
	{ "set_state", loader_set_state, METH_O,
	  "set_state(dict or line): continue from a saved position" },
	{ "batches", loader_batches, METH_NOARGS,
	  "batches() -> batches in this rank's epoch" },
	{ "device", loader_device, METH_NOARGS,
	  "device() -> (DLDeviceType, device_id) of the batches" },
	{ "stats", loader_stats, METH_NOARGS, "stats() -> counters dict" },
	{ "close", loader_close, METH_NOARGS,
	  "close(): stop the loader; batches and tensors held stay valid" },
	{ NULL, NULL, 0, NULL },
};

static PyType_Slot loader_slots[] = {
	{ Py_tp_doc, (void *)"Loader(dataset, config={}, state=None)" },
	{ Py_tp_new, (void *)PyType_GenericNew },
	{ Py_tp_init, (void *)loader_init },
	{ Py_tp_dealloc, (void *)loader_dealloc },
	{ Py_tp_iter, (void *)PyObject_SelfIter },
	{ Py_tp_iternext, (void *)loader_iternext },
	{ Py_tp_methods, loader_methods },
	{ 0, NULL },
};

static PyType_Spec loader_spec = {
	"sluice._sluice.Loader",
	sizeof(PySluiceLoader),
	0,
	Py_TPFLAGS_DEFAULT,
	loader_slots,
};

int pysluice_loader_init(PyObject *module)
{
	pysluice_loader_type = (PyTypeObject *)PyType_FromSpec(&loader_spec);
	if (!pysluice_loader_type)
		return -1;
	Py_INCREF(pysluice_loader_type);
	if (PyModule_AddObject(module, "Loader",
			       (PyObject *)pysluice_loader_type) < 0) {
		Py_DECREF(pysluice_loader_type);
		return -1;
	}
	return 0;
}
