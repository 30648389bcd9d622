/* The pool's inline paths: pop a block of a slab, push a freed block of
 * one's own slab, malloc of pool sizes. Used by the lanes (big.c, large.c),
 * misuse.c and the fast paths (fastpath.h). */
#ifndef HAKMEM_HEAP_H
#define HAKMEM_HEAP_H

#include "block.h"

/* *left -= k; spent (<= 0)? (x86-64: one subtraction from memory and the
 * branch on its flags, which gcc does not fuse: 3 instructions.) */
HM_INLINE bool hm_sample_charge(int64_t *left, int64_t k) {
#if defined(__x86_64__)
  __asm__ goto("subq %1, %0\n\tjle %l[spent]" : "+m"(*left) : "r"(k) : "cc" : spent);
  return false;
spent:
  return true;
#else
  return (*left -= k) <= 0;
#endif
}

/* Pop a block of s, a slab of the calling thread's heap; when its free
 * list is empty, take local_free (the owner's frees while a sampled malloc
 * is due: hm_free_own_slow) as the new free list right here; the slow
 * path does the rest. (The heap
 * is loaded there only: a direct size's malloc does not need it.) */
HM_INLINE void *hm_slab_pop(slab_t *s, size_t n) {
  block_t *b = s->free;
  if (unlikely(!hm_head_ok(s, b))) { /* hardening: b != NULL (secure: and not damaged) */
    if (b != NULL || !hm_head_ok(s, b = s->local_free)) return hm_alloc_slow(n, s);
    heap_t *h = hm_tls_heap;
    /* (sampling: the list charged; spent, or exact, the slow path: sample.h) */
    if (unlikely(hm_sample_charge(&h->sample_left[s->cls], hm_slab_free_blocks(s)))) return hm_sample_swap(h, s, n);
    s->local_free = NULL;
    /* blocks taken: all the owner freed, unless s is the foreign cache */
    HM_STAT_REFILL(h, HM_REFILL_LOCAL, s->in_use == SLAB_FOREIGN ? 0 : hm_slab_free_blocks(s));
  }
  hm_check_block(s, b);
  block_t *next = hm_next_decode(s, b);
  s->free = next; /* (no prefetch of next: the newest freed block, in cache; docs/PERFORMANCE.md) */
  s->used++;
  HM_STAT_ADD(hm_tls_heap, alloc[s->cls], 1);
  return hm_block_handout(s, b, next); /* hardening: clears the free tag (secure: checks) */
}

/* malloc for n <= POOL_MAX: pop the current slab's free list. */
HM_INLINE void *hm_malloc_small(size_t n) {
  if (likely(n <= DIRECT_MAX)) return hm_slab_pop(hm_tls_direct[(n + 15) >> 4], n);
  if (likely(n <= MEDIUM_MAX)) return hm_slab_pop(hm_tls_heap->cur[hm_medium_class_of(n)], n);
  return hm_malloc_big(n);
}

/* The owner's free of a block of s counted: credit and used decremented;
 * true if the credit ran out (was 0) or used reached 0 (emptied, or
 * FULL). (x86-64: dec keeps the borrow of the credit's sub, and one branch
 * tests both: one instruction more than used's decrement alone.) */
HM_INLINE bool hm_free_count_own(slab_t *s) {
#if defined(__x86_64__)
  __asm__ goto("subw $1, %0\n\tdecw %1\n\tjbe %l[slow]" : "+m"(s->credit), "+m"(s->used) : : "cc" : slow);
  return false;
slow:
  return true;
#else
  bool spent = s->credit-- == 0;
  return (--s->used == 0) | spent;
#endif
}

/* The owner's push of a block being freed, without atomics: on free, so
 * that the next malloc takes it while it is still in this core's cache.
 * A malloc of it is charged to the sampling countdown here, ahead, from
 * the credit the current slab holds (a slab not current holds none: its
 * list is charged when it is installed). docs/DESIGN.md, "Sampling". */
HM_INLINE void hm_free_push_own(slab_t *s, block_t *b) {
  hm_check_block(s, b);
  HM_STAT_ADD(hm_tls_heap, free_local[s->cls], 1);
  s = hm_slab_route(s); /* s, or the class's foreign cache while s is not current */
  if (unlikely(hm_free_count_own(s))) {
    hm_free_own_slow(b, s);
    return;
  }
  hm_next_set(s, b, s->free);
  s->free = b;
}

/* Push a block being freed: the owner through hm_free_push_own, other
 * threads through hm_free_foreign. */
HM_INLINE void hm_free_push(superslab_t *ss, slab_t *s, block_t *b) {
  heap_t *h = hm_tls_heap;
  if (likely(atomic_load_explicit(&ss->owner, memory_order_relaxed) == h))
    hm_free_push_own(s, b);
  else
    hm_free_foreign(h, ss, b);
}

#endif /* HAKMEM_HEAP_H */
