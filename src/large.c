/* Large lane: blocks above SMALL_MAX, each in its own mapping.
 *
 * A span is 2 MiB aligned and padded to a multiple of 2 MiB so that its
 * registry chunks are hakmem's alone; its header sits at the span base, the
 * block after it at the requested alignment. (The large-lane issue adds a
 * span cache and mremap; this is the plain mapping path.) */
#include <stdint.h>

#include "internal.h"

#define LARGE_MAGIC 0x4c474b4d454d4b48ULL /* "HKMEMKGL" */
#define LARGE_HDR 64

typedef struct large_hdr {
  uint64_t magic;
  void *block;
  size_t span; /* bytes mapped from the span base */
} large_hdr_t;

void *hm_large_alloc(size_t n, size_t align) {
  hm_ensure_init();
  if (hm_force_libc) return align > 16 ? __libc_memalign(align, n) : __libc_malloc(n);
  if (align < LARGE_HDR) align = LARGE_HDR;
  /* base <= raw + 2 MiB, block <= base + align, end <= block + n + 2 MiB */
  if (n > (size_t)PTRDIFF_MAX - align - 3 * SS_SIZE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t total = (n + align + 2 * SS_SIZE + HM_GUARD_SIZE + PAGE_SIZE_ - 1) & ~(size_t)(PAGE_SIZE_ - 1);
  char *raw = hm_os_map(total);
  if (raw == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  char *base = (char *)(((uintptr_t)raw + SS_MASK) & ~SS_MASK);
  char *block = (char *)(((uintptr_t)base + LARGE_HDR + align - 1) & ~(uintptr_t)(align - 1));
  /* n + 1: a zero-size block aligned to 2 MiB still needs its own chunk */
  char *end = (char *)(((uintptr_t)block + n + 1 + HM_GUARD_SIZE + SS_MASK) & ~SS_MASK);
  hm_os_unmap(raw, (size_t)(base - raw));
  hm_os_unmap(end, (size_t)(raw + total - end));
  large_hdr_t *h = (large_hdr_t *)base;
  h->magic = LARGE_MAGIC;
  h->block = block;
  h->span = (size_t)(end - base);
#ifdef HAKMEM_SECURE
  hm_secure_guard(end - HM_GUARD_SIZE); /* the span's last page */
#endif
  hm_reg_set((uintptr_t)base, REG_LARGE_HEAD);
  for (char *c = base + SS_SIZE; c < end; c += SS_SIZE) hm_reg_set((uintptr_t)c, REG_LARGE_TAIL);
  return block;
}

/* The header of the span holding p, or NULL if p is not a large block. */
static large_hdr_t *large_header(const void *p) {
  uintptr_t c = (uintptr_t)p & ~SS_MASK;
  while (hm_reg_kind(c) == REG_LARGE_TAIL) c -= SS_SIZE;
  if (hm_reg_kind(c) != REG_LARGE_HEAD) return NULL;
  large_hdr_t *h = (large_hdr_t *)c;
  return h->magic == LARGE_MAGIC && h->block == p ? h : NULL;
}

void hm_large_free(void *p) {
  large_hdr_t *h = large_header(p);
  if (h == NULL) {
    hm_report_invalid(p, HM_OP_FREE, "inside a large block, not its start");
    return;
  }
  size_t span = h->span;
  h->magic = 0;
  for (uintptr_t c = (uintptr_t)h; c < (uintptr_t)h + span; c += SS_SIZE) hm_reg_set(c, REG_NONE);
  /* hardening: a second free of p says "double free"; set before the unmap,
   * after which the chunk may become hakmem's again */
  hm_reg_set((uintptr_t)p, REG_LARGE_FREED);
  hm_os_unmap(h, span);
}

/* 0 if p is not the start of a large block (the caller reports it). */
size_t hm_large_usable(const void *p) {
  large_hdr_t *h = large_header(p);
  if (h == NULL) return 0;
  return (size_t)((char *)h + h->span - HM_GUARD_SIZE - (char *)p);
}

/* Every span goes back to the OS at free: nothing is cached yet. */
size_t hm_large_release(uint64_t min_idle_ns) {
  (void)min_idle_ns;
  return 0;
}
