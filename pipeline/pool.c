/*
 * pool.c - first-fit over a sorted array of free extents.  Each
 * allocation splits at most one extent, so max_allocs + 1 extents always
 * suffice; the arrays are short (cache entries, batch slots), so linear
 * scans beat anything cleverer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

int pool_init(struct pool *p, uint64_t size, uint64_t align,
	      uint32_t max_allocs)
{
	memset(p, 0, sizeof(*p));
	p->size = size & ~(align - 1);
	p->align = align;
	p->cap = max_allocs + 1;
	p->free = calloc(p->cap, sizeof(*p->free));
	if (!p->free)
		return -ENOMEM;
	if (p->size) {
		p->free[0] = (struct pool_extent){ 0, p->size };
		p->nfree = 1;
	}
	return 0;
}

void pool_destroy(struct pool *p)
{
	free(p->free);
	memset(p, 0, sizeof(*p));
}

uint64_t pool_round(const struct pool *p, uint64_t len)
{
	if (len > UINT64_MAX - p->align)
		return UINT64_MAX & ~(p->align - 1);
	return (len + p->align - 1) & ~(p->align - 1);
}

int pool_alloc(struct pool *p, uint64_t len, uint64_t *off)
{
	len = pool_round(p, len ? len : 1);
	for (uint32_t i = 0; i < p->nfree; i++) {
		struct pool_extent *x = &p->free[i];

		if (x->len < len)
			continue;
		*off = x->off;
		x->off += len;
		x->len -= len;
		if (x->len == 0) {
			memmove(x, x + 1, (p->nfree - i - 1) * sizeof(*x));
			p->nfree--;
		}
		p->used += len;
		return 0;
	}
	return -ENOSPC;
}

void pool_free(struct pool *p, uint64_t off, uint64_t len)
{
	uint32_t i = 0;

	len = pool_round(p, len ? len : 1);
	p->used -= len;
	while (i < p->nfree && p->free[i].off < off)
		i++;
	/* Merge with the extent before, the one after, or both. */
	if (i > 0 && p->free[i - 1].off + p->free[i - 1].len == off) {
		p->free[i - 1].len += len;
		if (i < p->nfree && off + len == p->free[i].off) {
			p->free[i - 1].len += p->free[i].len;
			memmove(&p->free[i], &p->free[i + 1],
				(p->nfree - i - 1) * sizeof(p->free[0]));
			p->nfree--;
		}
		return;
	}
	if (i < p->nfree && off + len == p->free[i].off) {
		p->free[i].off = off;
		p->free[i].len += len;
		return;
	}
	if (p->nfree == p->cap) {
		/* More live allocations than pool_init() was told of: a
		 * caller's sizing bug.  Keep the range (lost to the pool)
		 * rather than write past the array; tests stop here. */
#ifdef SLUICE_TESTING
		abort();
#endif
		p->used += len;
		return;
	}
	memmove(&p->free[i + 1], &p->free[i],
		(p->nfree - i) * sizeof(p->free[0]));
	p->free[i] = (struct pool_extent){ off, len };
	p->nfree++;
}

int pool_take(struct pool *p, uint64_t off, uint64_t len)
{
	len = pool_round(p, len ? len : 1);
	for (uint32_t i = 0; i < p->nfree; i++) {
		struct pool_extent *x = &p->free[i];
		uint64_t end = x->off + x->len;

		if (off < x->off || off - x->off > x->len ||
		    len > end - off)
			continue;
		if (off == x->off) {
			x->off += len;
			x->len -= len;
			if (x->len == 0) {
				memmove(x, x + 1,
					(p->nfree - i - 1) * sizeof(*x));
				p->nfree--;
			}
		} else if (off + len == end) {
			x->len -= len;
		} else {
			/* split in two: at most one more extent per
			 * allocation, as pool_init counted */
			if (p->nfree == p->cap)
				return -ENOSPC;
			memmove(x + 1, x, (p->nfree - i) * sizeof(*x));
			x->len = off - x->off;
			x[1].off = off + len;
			x[1].len = end - off - len;
			p->nfree++;
		}
		p->used += len;
		return 0;
	}
	return -ENOSPC;
}

uint64_t pool_longest_free_after(const struct pool *p, uint64_t off,
				 uint64_t len)
{
	uint64_t best = 0;

	len = len ? pool_round(p, len) : 0;
	for (uint32_t i = 0; i < p->nfree; i++) {
		const struct pool_extent *x = &p->free[i];
		uint64_t a = x->len, b = 0;

		if (len && off >= x->off && off - x->off < x->len &&
		    len <= x->len - (off - x->off)) {
			a = off - x->off;
			b = x->len - a - len;
		}
		if (a > best)
			best = a;
		if (b > best)
			best = b;
	}
	return best;
}
