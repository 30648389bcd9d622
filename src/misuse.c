/* Misuse detection: invalid and double frees (docs/SECURITY.md).
 *
 * The fast path of free (block.h, hm_block_mark_free) only checks that p
 * is a carved block boundary of its slab and that the block's second word
 * does not hold the free tag. Whatever fails that comes here, as do realloc
 * and malloc_usable_size, which check the same before using a block:
 *   - not a block: "invalid free of 0x... (why)", with the reason;
 *   - tagged: a double free, unless a scan of the slab's free lists shows
 *     that the program merely stored the tag's value there (the owner only,
 *     and only for slabs none of whose blocks went into another thread's
 *     foreign cache, which the scan cannot see: no other thread may walk
 *     those lists; otherwise the tag decides: a program cannot hold it by
 *     chance, block.h has why).
 * Reports go through error.c's hm_report_*: abort, or print and leave the
 * block alone under HAKMEM_ON_ERROR=warn. */
#include "guard.h"
#include "heap.h"

/* Why p, in slab s's SuperSlab, is not a block hakmem handed out. */
static const char *ss_reason(const slab_t *s, const void *p, char *buf, size_t cap) {
  uintptr_t start = (uintptr_t)hm_slab_start(s), a = (uintptr_t)p;
  unsigned carved = __atomic_load_n(&hm_shape_of(s)->carved, __ATOMIC_RELAXED);
  if (carved == 0 || a < start) return "not a block: free space or metadata in a hakmem SuperSlab";
  uintptr_t off = (a - start) % hm_slab_bs(s), idx = (a - start) / hm_slab_bs(s);
  if (idx >= carved) return "not a block hakmem handed out";
  char num[24];
  buf[0] = '\0';
  hm_str_append(buf, cap, (a & 15) != 0 ? "unaligned pointer: byte " : "interior pointer: byte ");
  hm_format_dec(num, (long)off);
  hm_str_append(buf, cap, num);
  hm_str_append(buf, cap, " of a ");
  hm_format_dec(num, (long)hm_slab_bs(s));
  hm_str_append(buf, cap, num);
  hm_str_append(buf, cap, "-byte block");
  return buf;
}

/* Is p on the list? Bounded: a corrupt list ends the walk. */
static bool on_list(const slab_t *s, const block_t *b, const void *p) {
  for (unsigned n = 0; b != NULL && n <= s->capacity; n++, b = hm_next_get(s, b))
    if (b == p) return true;
  return false;
}

/* Is p in the calling thread's foreign cache of its class, where the
 * owner's frees of a slab not current go (slab_t.route)? */
static bool in_own_cache(const slab_t *s, const void *p) {
#ifdef HAKMEM_SECURE
  (void)s, (void)p;
  return false;
#else
  heap_t *h = hm_tls_heap;
  if (h == &hm_empty_heap) return false;
  return on_list(&h->foreign[s->cls], h->foreign[s->cls].free, p) || on_list(&h->fc_serve[s->cls], h->fc_serve[s->cls].free, p);
#endif
}

/* p holds the free tag: is it really on a free list of s? */
static bool tagged_block_is_free(superslab_t *ss, slab_t *s, const void *p) {
  if (atomic_load_explicit(&ss->owner, memory_order_relaxed) != hm_tls_heap) return true;
  /* Another thread's foreign cache, which no list here shows, may hold it:
   * the tag decides, as for other threads. */
  if (__atomic_load_n(&hm_shape_of(s)->cls, __ATOMIC_RELAXED) & SLAB_CLS_CACHED) return true;
  /* The remote list only grows at its head while we (the only thread that
   * takes from it) hold a snapshot, so walking the snapshot is safe. */
  const block_t *r = (const block_t *)(atomic_load_explicit(hm_slab_remote(s), memory_order_acquire) & ~REMOTE_NOTIFY);
  return on_list(s, s->free, p) || on_list(s, s->local_free, p) || on_list(s, r, p) || in_own_cache(s, p);
}

/* The bytes blocks of slab s may occupy, whatever its class: [*start, *end)
 * (after the header in slab 0, before the guard page in secure mode's last). */
static void slab_bounds(const superslab_t *ss, const slab_t *s, uintptr_t *start, uintptr_t *end) {
  unsigned i = hm_slab_idx(s);
  uintptr_t base = (uintptr_t)ss + ((uintptr_t)i << ss->slab_shift);
  *start = base + (i == 0 ? SS_HEADER_SIZE : 0);
  *end = base + ((uintptr_t)1 << ss->slab_shift) - (i + 1u == ss->nslabs ? HM_GUARD_SIZE : 0);
}

/* Was p a block of slab s, since emptied and released? (A released slab
 * keeps its block size until it is used again.) Then p is a stale pointer:
 * freed already. */
static bool released_block(const superslab_t *ss, const slab_t *s, const void *p) {
  if (__atomic_load_n(&s->in_use, __ATOMIC_RELAXED) != SLAB_UNUSED || hm_slab_bs(s) == 0) return false;
  uintptr_t a = (uintptr_t)p, start, end;
  slab_bounds(ss, s, &start, &end);
  return a >= start && a + hm_slab_bs(s) <= end && (a - start) % hm_slab_bs(s) == 0;
}

/* Does p, no block boundary of its slab now, still hold the free tag of a
 * block that started there before the slab was emptied and carved again
 * for another size? Then p is a stale pointer: freed already. (Only a
 * free writes the tag, which is the same for every block the slab ever
 * held.) */
static bool stale_tagged(const superslab_t *ss, const slab_t *s, const void *p) {
  uintptr_t a = (uintptr_t)p, start, end;
  slab_bounds(ss, s, &start, &end);
  return (a & 15) == 0 && a >= start && a + 16 <= end && ((const uintptr_t *)p)[1] == hm_free_tag_of(s);
}

/* p in a SuperSlab chunk: true if it is a live block; else reported. */
static bool ss_block_live(void *p, int op) {
  superslab_t *ss = hm_ss_of(p);
  slab_t *s = hm_slab_of(ss, p);
  char buf[96];
  if (!hm_slab_holds(hm_shape_of(s), p)) {
    if (released_block(ss, s, p) || stale_tagged(ss, s, p))
      hm_report_double(p, op, "block already free; its slab has been emptied since");
    else
      hm_report_invalid(p, op, ss_reason(s, p, buf, sizeof buf));
    return false;
  }
  if (((uintptr_t *)p)[1] == hm_free_tag_of(s) && tagged_block_is_free(ss, s, p)) {
    hm_report_double(p, op, "block already free");
    return false;
  }
  return true;
}

/* The fast path of free found p suspect. */
void hm_free_suspect(void *p) {
  if (!ss_block_live(p, HM_OP_FREE)) return;
  /* a live block whose second word held the tag's value: free it */
  superslab_t *ss = hm_ss_of(p);
  slab_t *s = hm_slab_of(ss, p);
  hm_block_tag_free(hm_slab_bs(s), hm_free_tag_of(s), p);
  hm_free_push(ss, s, (block_t *)p);
}

/* Usable size of p for realloc / malloc_usable_size / free of a pointer
 * the fast path did not take; 0 after reporting a pointer that is not a
 * live hakmem block (NULL and libc blocks are the caller's business). */
size_t hm_usable_checked(void *p, int op) {
  switch (hm_reg_kind((uintptr_t)p)) {
    case REG_SS:
      return ss_block_live(p, op) ? hm_slab_bs(hm_slab_of(hm_ss_of(p), p)) : 0;
    case REG_LARGE_HEAD:
    case REG_LARGE_TAIL:
    case REG_LARGE_PACK: {
      size_t u = hm_large_usable(p);
      if (u == 0 && hm_large_is_freed(p))
        hm_report_double(p, op, "large block already freed");
      else if (u == 0)
        hm_report_invalid(p, op, "inside a large block, not its start");
      return u;
    }
    case REG_LARGE_FREED:
      hm_report_double(p, op, "large block already freed");
      return 0;
    case REG_GUARD:
      return hm_guard_usable(p, op);
    default:
      hm_report_invalid(p, op, "not allocated by hakmem");
      return 0;
  }
}
