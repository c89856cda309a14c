/*
 * batch.c - a batch's tensor layout and its export as DLPack.
 *
 * A batch's tensors lie one after another in the batch's memory (256-byte
 * aligned, as CUDA kernels like), each as long as this batch's records
 * need: the memory is taken from the budget once the records' sizes are
 * known (budget.c), not sized for the worst case the headers allow.
 * Exported tensors keep a reference on the slot: its memory returns to
 * the budget only when the batch handle and every tensor taken from it
 * are gone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

static struct tensor_desc *add_tensor(struct tensor_desc *t, uint32_t *n,
				      const char *name, const char *suffix)
{
	struct tensor_desc *d = &t[(*n)++];

	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "%s%s", name, suffix);
	return d;
}

/* The most records a batch holds: batch_size, or this rank's part of an
 * epoch when that is smaller (an elastic resume only shortens the part).
 * Memory is sized for this many: the default budget refused 3 records of
 * 16 KiB at batch_size 1024 for the 16.8 MB that 1024 would take, and a
 * full shuffle of 3 records (10 MB) asked 5.4 GB for 256 records' ranges
 * in flight.  The sampler is open. */
uint32_t batch_records_max(const struct loader_core *c)
{
	return c->sampler.per_rank < c->cfg.batch_size
		? (uint32_t)c->sampler.per_rank : c->cfg.batch_size;
}

/*
 * Compute the tensors of a batch (names, dtypes, shapes but the batch
 * dimension) into c->tensor_layout, and in *@fixed_bytes what a full
 * batch takes besides its variable values (fixed and padded fields,
 * offsets or lengths, alignment), for batch_records_max() records.
 * @return: 0 or -EOVERFLOW.
 */
int slot_layout(struct loader_core *c, uint64_t *fixed_bytes)
{
	const struct shard_schema *sc = &c->ds->schema;
	const DLDataType i64 = { kDLInt, 64, 1 };
	uint64_t b = batch_records_max(c), pad = c->cfg.pad_length, total = 0;
	struct tensor_desc t[LOADER_MAX_TENSORS];
	uint32_t n = 0;

	for (uint32_t f = 0; f < sc->nfields; f++) {
		const struct shard_field *fd = &sc->fields[f];
		struct tensor_desc *d = add_tensor(t, &n, fd->f.name, "");

		d->dtype = fd->f.dtype;
		d->ndim = fd->f.ndim + 1;
		for (int k = 0; k < fd->f.ndim; k++)
			d->shape[k + 1] = fd->f.shape[k];
		if (!fd->variable) {
			total = add_sat(total, mul_sat(b, fd->record_bytes));
		} else if (pad) {
			/* [B, L, *shape[1:]] */
			d->shape[1] = (int64_t)pad;
			total = add_sat(total,
					mul_sat(b, mul_sat(pad, fd->unit_bytes)));
		} else {
			/* flat values [items, *shape[1:]] */
			d->ndim = fd->f.ndim;
			for (int k = 1; k < fd->f.ndim; k++)
				d->shape[k] = fd->f.shape[k];
		}
		total = add_sat(total, SLOT_ALIGN);
		if (fd->variable) {
			struct tensor_desc *a = add_tensor(t, &n, fd->f.name,
							   pad ? ".lengths"
							       : ".offsets");
			a->dtype = i64;
			a->ndim = 1;
			total = add_sat(total, add_sat(mul_sat(b + 1, 8),
						       SLOT_ALIGN));
		}
	}
	if (total >= UINT64_MAX / 2)
		return -EOVERFLOW;
	*fixed_bytes = total;
	c->tensors_per_batch = n;
	memcpy(c->tensor_layout, t, n * sizeof(t[0]));
	return 0;
}

/*
 * Lay the slot's tensors out one after another, from their shapes (the
 * batch dimension, or the values' item count, already set).  @return:
 * the bytes the batch needs.  The shapes were bounded by the batch size
 * and by blocks that fit the arena, so nothing here can overflow.
 */
uint64_t slot_place_tensors(const struct loader_core *c, struct slot *s)
{
	uint64_t off = 0;

	for (uint32_t k = 0; k < c->tensors_per_batch; k++) {
		struct tensor_desc *d = &s->tensors[k];

		d->offset = off;
		d->bytes = tensor_bytes(d);
		off = align_up(off + d->bytes, SLOT_ALIGN);
	}
	return off;
}

/* Set up slot @id; its memory comes per batch from the budget. */
int slot_init(struct loader_core *c, struct slot *s, uint32_t id)
{
	uint32_t b = c->cfg.batch_size;

	s->id = id;
	s->indices = malloc(b * sizeof(*s->indices));
	s->rec_entry = malloc(b * sizeof(*s->rec_entry));
	s->rec_in_block = malloc(b * sizeof(*s->rec_in_block));
	s->entries = malloc(b * sizeof(*s->entries));
	s->wait_next = malloc(b * sizeof(*s->wait_next));
	s->handle.core = c;
	s->handle.slot = id;
	memcpy(s->tensors, c->tensor_layout,
	       c->tensors_per_batch * sizeof(s->tensors[0]));
	if (c->chunks.chunked) {
		s->chunk.rows = malloc(b * sizeof(*s->chunk.rows));
		if (s->chunk.rows && c->nvariable && !c->cfg.pad_length)
			s->chunk.items = malloc((size_t)b * c->nvariable *
						sizeof(*s->chunk.items));
	}
	if (!s->indices || !s->rec_entry || !s->rec_in_block || !s->entries ||
	    !s->wait_next ||
	    (c->chunks.chunked && !s->chunk.rows) ||
	    (c->chunks.chunked && c->nvariable && !c->cfg.pad_length &&
	     !s->chunk.items) ||
	    slot_gather_init(c, s))
		return -ENOMEM;
	return slot_ranges_init(c, s);
}

/* Free slot @s (NULL is fine) and what it owns, at close or after a
 * failed slot_init. */
void slot_free(struct slot *s)
{
	if (!s)
		return;
	free(s->indices);
	free(s->rec_entry);
	free(s->rec_in_block);
	free(s->entries);
	free(s->wait_next);
	free(s->chunk.rows);
	free(s->chunk.items);
	slot_ranges_free(s);
	free(s->gather.runs);
	slot_own_host_free(s);
	free(s);
}

/* Drop one reference; the last returns the slot and its memory. */
void slot_release_ref(struct loader_core *c, struct slot *s)
{
	if (atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	batch_memory_release_begin(c);
	if (c->dev_info.caps & DEVICE_CAP_MIRROR) {
		/* Later copies wait for the consumer's use of the device
		 * memory; the host memory is written again only after its
		 * own copy has read it. */
		device_slot_release(c->dev, s->id);
		device_slot_wait_copied(c->dev, s->id);
	}
	core_lock(c);
	batch_memory_free_locked(c, s);
	s->state = SLOT_FREE;
	batch_memory_grant_locked(c);
	batch_memory_release_end_locked(c);
	pthread_mutex_unlock(&c->mu);
	if (c->ring)
		io_ring_wake(c->ring);
	core_unref(c);
}

SLUICE_API uint32_t sluice_batch_size(const sluice_batch *b)
{
	return b ? b->core->slots[b->slot]->delivered : 0;
}

SLUICE_API uint64_t sluice_batch_epoch(const sluice_batch *b)
{
	return b ? b->core->slots[b->slot]->epoch : 0;
}

SLUICE_API const uint64_t *sluice_batch_indices(const sluice_batch *b)
{
	return b ? b->core->slots[b->slot]->indices : NULL;
}

SLUICE_API int sluice_batch_tensor_count(const sluice_batch *b)
{
	return b ? (int)b->core->tensors_per_batch : 0;
}

SLUICE_API const char *sluice_batch_tensor_name(const sluice_batch *b, int i)
{
	if (!b || i < 0 || (uint32_t)i >= b->core->tensors_per_batch)
		return NULL;
	return b->core->slots[b->slot]->tensors[i].name;
}

/* What both DLPack flavours carry, allocated in one piece. */
struct export_ctx {
	struct loader_core *core;
	struct slot *slot;
	int64_t shape[SLUICE_MAX_NDIM + 1];
	union {
		DLManagedTensor legacy;
		DLManagedTensorVersioned versioned;
	} m;
};

static void export_release(struct export_ctx *x)
{
	struct loader_core *c = x->core;
	struct slot *s = x->slot;

	free(x);
	slot_release_ref(c, s);
}

static void delete_legacy(DLManagedTensor *t)
{
	if (t)
		export_release(t->manager_ctx);
}

static void delete_versioned(DLManagedTensorVersioned *t)
{
	if (t)
		export_release(t->manager_ctx);
}

static int export_tensor(sluice_batch *b, const char *name, int64_t stream,
			 struct export_ctx **out, DLTensor *dl)
{
	struct loader_core *c;
	struct slot *s;
	const struct tensor_desc *d = NULL;
	struct export_ctx *x;
	uint8_t *data;
	int r;

	if (!b || !name || !out)
		return -EINVAL;
	c = b->core;
	s = c->slots[b->slot];
	for (uint32_t i = 0; i < c->tensors_per_batch && !d; i++)
		if (strcmp(s->tensors[i].name, name) == 0)
			d = &s->tensors[i];
	if (!d)
		return -ENOENT;
	if (c->dev_info.caps & DEVICE_CAP_MIRROR) {
		r = device_slot_export(c->dev, s->id, stream);
		if (r)
			return r;
		data = (uint8_t *)device_mirror_ptr(c->dev, s->host) +
		       d->offset;
	} else if (s->place == PLACE_VIEW) {
		data = s->view.data[d - s->tensors];
	} else {
		data = s->host + d->offset;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->core = c;
	x->slot = s;
	memcpy(x->shape, d->shape, sizeof(x->shape));
	*out = x;
	atomic_fetch_add(&s->refs, 1);
	*dl = (DLTensor){
		.data = data,
		.device = c->dev_info.dl,
		.ndim = d->ndim,
		.dtype = d->dtype,
		.shape = x->shape,
		.strides = NULL,
		.byte_offset = 0,
	};
	return 0;
}

SLUICE_API int sluice_batch_tensor(sluice_batch *b, const char *name,
				   int64_t stream, DLManagedTensor **out)
{
	struct export_ctx *x;
	DLTensor dl;
	int r = export_tensor(b, name, stream, &x, &dl);

	if (r)
		return r;
	x->m.legacy.dl_tensor = dl;
	x->m.legacy.manager_ctx = x;
	x->m.legacy.deleter = delete_legacy;
	*out = &x->m.legacy;
	return 0;
}

SLUICE_API int sluice_batch_tensor_versioned(sluice_batch *b,
					     const char *name, int64_t stream,
					     DLManagedTensorVersioned **out)
{
	struct export_ctx *x;
	DLTensor dl;
	int r = export_tensor(b, name, stream, &x, &dl);

	if (r)
		return r;
	x->m.versioned.version = (DLPackVersion){ DLPACK_MAJOR_VERSION,
						  DLPACK_MINOR_VERSION };
	x->m.versioned.flags = 0;
	x->m.versioned.dl_tensor = dl;
	x->m.versioned.manager_ctx = x;
	x->m.versioned.deleter = delete_versioned;
	*out = &x->m.versioned;
	return 0;
}

SLUICE_API void sluice_batch_release(sluice_batch *b)
{
	if (b)
		slot_release_ref(b->core, b->core->slots[b->slot]);
}
