/* malloc_usable_size's fast path (docs/DESIGN.md, "malloc_usable_size").
 * Programs that account their memory (redis) call it after every malloc
 * and before every free, so a live block costs what free's lookup costs:
 * a SuperSlab block passes free's two checks (a carved block boundary, no
 * free tag) and its size is its shape's; a live span's or packed block's
 * size is read without the large lane's locks. Anything else (NULL, libc
 * blocks, misuse) takes hm_usable_slow, the checked path that reports. */
#ifndef HAKMEM_USABLE_H
#define HAKMEM_USABLE_H

#include "block.h"

HM_HIDDEN size_t hm_usable_slow(void *p);          /* alloc.c */

HM_INLINE size_t hm_usable(void *p) {
  uintptr_t a = (uintptr_t)p, e = hm_unit_entry(p);
  if (likely(e != 0)) {
    superslab_t *ss = hm_ss_of(p);
    /* the slab and its shape, as hm_free finds them */
    const slab_t *s = hm_unit_slab(ss, e);
    const slab_shape_t *sh = hm_unit_shape(ss, e);
    if (likely(hm_slab_holds(sh, p) && ((const uintptr_t *)p)[1] != hm_free_tag_of(s))) return sh->block_size;
  } else {
    size_t u = hm_large_usable_live(p, hm_reg_kind(a));
    if (likely(u != 0)) return u;
  }
  return hm_usable_slow(p);
}

#endif /* HAKMEM_USABLE_H */
