/* The fast paths: malloc and free, inline into override.c's malloc/free
 * and alloc.c's hak_malloc/hak_free (docs/DESIGN.md, "Fast paths"). Above
 * the lanes, below the API. */
#ifndef HAKMEM_FASTPATH_H
#define HAKMEM_FASTPATH_H

#include "heap.h"

/* (Not written as hm_malloc_small behind a POOL_MAX test: testing DIRECT_MAX
 * first saves direct sizes a compare and a branch.) */
HM_INLINE void *hm_malloc(size_t n) {
  if (likely(n <= DIRECT_MAX)) return hm_slab_pop(hm_tls_direct[(n + 15) >> 4], n);
  if (likely(n <= HM_PACK_MIN)) return hm_slab_pop(hm_tls_heap->cur[hm_medium_class_of(n)], n);
  return hm_alloc_above(n, false);
}

/* free for a thread that trades blocks with others (hm_tls_free_id): its
 * frees are its own blocks and others' by turns, a branch on which is
 * mispredicted every other time (docs/DESIGN.md, "Threads"). So both go
 * on its foreign cache of the class, or on the stand-in while the shape
 * names none (fc_off), whose `used` of 1 sends the block to
 * hm_free_push_slow: one list per class, whose newest block the next
 * malloc takes while it is still in this core's cache. Every thread checks
 * the block against the shape (the descriptor's line stays with the
 * owner). */
HM_INLINE void hm_free_trading(uintptr_t id, superslab_t *ss, slab_t *s, const slab_shape_t *sh, void *p) {
  heap_t *h = (heap_t *)(id - 1); /* (id: h + 1, hm_tls_free_id) */
  if (unlikely(!hm_block_mark_free(sh, s, p))) { /* hardening */
    hm_free_suspect(p);
    return;
  }
  uint16_t fc_off = __atomic_load_n(&sh->fc_off, __ATOMIC_RELAXED);
  slab_t *t = (slab_t *)((char *)id + fc_off); /* (fc_off counts from id: no h needed here) */
  block_t *b = (block_t *)p;
#if HM_FAST_COUNTERS
  if (atomic_load_explicit(&ss->owner, memory_order_relaxed) == h)
    HM_STAT_ADD(h, free_local[s->cls], 1);
  else if (t != &h->fc_stand_in)
    HM_STAT_ADD(h, free_remote[t->cls], 1);
#endif
  b->next = t->free;
  t->free = b;
  /* over budget, or the stand-in */
  if (unlikely(--t->used == 0)) hm_free_push_slow(h, ss, t, b);
}

/* free: the unit map names the slab (NULL: not a SuperSlab's unit) and the
 * SuperSlab owner's tag, in one entry; other threads find the shape a
 * fixed distance from the descriptor and the SuperSlab by masking. */
HM_INLINE void hm_free(void *p) {
  uintptr_t u = (uintptr_t)p >> SS_UNIT_SHIFT;
  if (likely(u < HM_PEEK(hm_unit_map_n))) {
    const unit_entry_t *e = &HM_PEEK(hm_unit_map)[u];
    /* The owner checks the block against the descriptor it writes anyway,
     * another thread against the shape (the descriptor's line stays with
     * the owner). A thread that trades never takes this branch, whose
     * outcome would be a coin toss for it: its SuperSlabs' tag is 0. A
     * tag is set only where the slab is (types.h): no NULL test here. */
    if (likely(HM_PEEK(e->owner_tag) == hm_thread_tag())) {
      slab_t *s = HM_PEEK(e->slab);
      if (unlikely(!hm_block_mark_free_own(s, p))) { /* hardening */
        hm_free_suspect(p);
        return;
      }
      hm_free_push_own(s, (block_t *)p);
      return;
    }
    slab_t *s = HM_PEEK(e->slab);
    if (likely(s != NULL)) {
      const slab_shape_t *sh = hm_shape_of(s);
      superslab_t *ss = hm_ss_of(p);
      uintptr_t id = hm_tls_free_id;
#ifndef HAKMEM_SECURE
      if (id & 1) {
        hm_free_trading(id, ss, s, sh, p);
        return;
      }
#endif
      if (unlikely(!hm_block_mark_free(sh, s, p))) {
        hm_free_suspect(p);
        return;
      }
      hm_free_foreign((heap_t *)id, ss, (block_t *)p);
      return;
    }
  }
  hm_free_slow(p);
}

#endif /* HAKMEM_FASTPATH_H */
