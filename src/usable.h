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

/* Does p, a block of slab s (hm_unit_slab), pass free's two checks? Its
 * shape. */
HM_INLINE const slab_shape_t *hm_usable_shape(void *p, const slab_t *s) {
  /* the shape, as hm_free finds it */
  const slab_shape_t *sh = hm_shape_of(s);
  return hm_slab_holds(sh, p) && ((const uintptr_t *)p)[1] != hm_free_tag_of(s) ? sh : NULL;
}

HM_INLINE size_t hm_usable(void *p) {
  uintptr_t a = (uintptr_t)p;
  const slab_t *s = hm_unit_slab(p);
  if (likely(s != NULL)) {
    const slab_shape_t *sh = hm_usable_shape(p, s);
    if (likely(sh != NULL)) return sh->block_size;
  } else {
    size_t u = hm_large_usable_live(p, hm_reg_kind(a));
    if (likely(u != 0)) return u;
  }
  return hm_usable_slow(p);
}

/* hm_usable without its slow path: 0 for anything but a live block (the
 * caller takes a checked path). */
HM_INLINE size_t hm_usable_live(void *p) {
  const slab_t *s = hm_unit_slab(p);
  if (likely(s != NULL)) {
    const slab_shape_t *sh = hm_usable_shape(p, s);
    return likely(sh != NULL) ? sh->block_size : 0;
  }
  return hm_large_usable_live(p, hm_reg_kind((uintptr_t)p));
}

#endif /* HAKMEM_USABLE_H */
