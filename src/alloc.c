/* The allocation API (hak_*): glibc semantics on top of the lanes.
 * override.c exports the same functions under the standard names. */
#include <dlfcn.h>
#include <stdint.h>

#include "fastpath.h"
#include "guard.h"
#include "usable.h"

void *hak_malloc(size_t n) { return hm_malloc(n); }
void hak_free(void *p) { hm_free(p); }

/* free of something the unit map names no slab for: NULL, a large block, a
 * libc block (HAKMEM_FORCE_LIBC_ALLOC), a pointer that is not ours, or a
 * SuperSlab block where there is no unit map (its mapping was refused, as
 * under an RLIMIT_AS below its reservation) or its page could not be made
 * writable: the checked path frees that one. */
void hm_free_slow(void *p) {
  if (p == NULL) return;
  unsigned k = hm_reg_kind((uintptr_t)p);
  if (k == REG_SS) {
    hm_free_suspect(p);
    return;
  }
  if (hm_reg_large(k)) {
    if (unlikely(hm_sample_active) && hm_prof_free(p, k)) return; /* (sampled blocks are large ones: prof.c) */
    hm_large_free(p);
    hm_purge_tick();
    return;
  }
  if (k == REG_GUARD) {
    hm_guard_free(p);
    return;
  }
  hm_ensure_init();
  if (k == REG_NONE && hm_force_libc) {
    __libc_free(p);
    return;
  }
  hm_usable_checked(p, HM_OP_FREE); /* reports it */
}

static void *libc_symbol(const char *name) {
  return dlsym(RTLD_NEXT, name);
}

/* HAKMEM_FORCE_LIBC_ALLOC=1 and p is not hakmem's: a libc block. */
static bool is_libc_block(const void *p) {
  if (hm_reg_kind((uintptr_t)p) != REG_NONE) return false;
  hm_ensure_init();
  return hm_force_libc != 0;
}

size_t hak_malloc_usable_size(void *p) { return hm_usable(p); }

/* Past hm_usable's fast path: NULL, libc blocks, and what is reported. */
size_t hm_usable_slow(void *p) {
  if (p == NULL) return 0;
  if (is_libc_block(p)) {
    size_t (*libc_usable)(void *) = (size_t (*)(void *))libc_symbol("malloc_usable_size");
    return libc_usable != NULL ? libc_usable(p) : 0;
  }
  return hm_usable_checked(p, HM_OP_USABLE); /* 0 after a report (HAKMEM_ON_ERROR=warn) */
}

void *hak_calloc(size_t nmemb, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(nmemb, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  if (likely(n <= HM_PACK_MIN)) {
    void *p = hm_malloc_small(n);
    if (p != NULL) memset(p, 0, n);
    return p;
  }
  return hm_alloc_above(n, true);
}

#define REALLOC_PACK_MIN ((size_t)64 << 10)

void *hak_realloc(void *p, size_t n) {
  if (p == NULL) return hm_malloc(n);
  if (n == 0) {
    hm_free(p);
    return NULL;
  }
  /* a live block passes malloc_usable_size's checks (free's); anything
   * else takes the checked path, which reports */
  size_t old = hm_usable_live(p);
  if (unlikely(old == 0)) {
    if (is_libc_block(p)) return __libc_realloc(p, n);
    old = hm_usable_checked(p, HM_OP_REALLOC);
    if (old == 0) { /* reported, and HAKMEM_ON_ERROR=warn: p is left alone */
      errno = EINVAL;
      return NULL;
    }
  }
  unsigned k = hm_reg_kind((uintptr_t)p);
  /* A sampled block always moves (below): its free is recorded, the new one
   * may be sampled. (Kept, it would be a small block in the large lane.) */
  bool sampled = k == REG_GUARD || (hm_reg_large(k) && unlikely(hm_sample_active) && hm_prof_freed(p));
  if (hm_reg_large(k) && !sampled) return hm_large_realloc(p, n);
  /* Keep the block when it fits and would not waste more than half. */
  if (n <= old && (old <= 256 || n >= old / 2) && !sampled) return p;
  /* Grown by a little: a quarter more room for the next steps, but not past
   * the power of two above n, where programs cap what they grow (redis's
   * 8 KiB listpacks; docs/DESIGN.md, "realloc"). */
  if (n > old && n < old + old / 4 && old + old / 4 <= REALLOC_PACK_MIN) {
    size_t room = old + old / 4, pow2 = (size_t)1 << (64 - __builtin_clzll((unsigned long long)n - 1));
    n = room < pow2 ? room : pow2;
  }
  /* A move of more than 64 KiB goes to a pack when packs are on: the copy
   * touches every page it fills, and a pack reuses pages one by one, where
   * a pool block keeps them for good (docs/DESIGN.md, "Large lane"). */
  void *q = n > REALLOC_PACK_MIN && hm_pack_enabled() ? hm_large_alloc(n, 0) : hm_malloc(n);
  if (q == NULL) return NULL; /* errno is ENOMEM; p is untouched */
  memcpy(q, p, n < old ? n : old);
  hm_free(p);
  return q;
}

void *hak_reallocarray(void *p, size_t nmemb, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(nmemb, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  return hak_realloc(p, n);
}

/* align: a power of two. Small requests with align <= 4 KiB take the first
 * class whose size is a multiple of align: slabs start 4 KiB aligned, so
 * every block of such a class is aligned and stays a plain block. */
static void *aligned_impl(size_t align, size_t n) {
  if (align <= 16) return hm_malloc(n);
  hm_ensure_init();
  if (hm_force_libc) return __libc_memalign(align, n);
  size_t need = n < align ? align : n;
  if (need <= POOL_MAX && align <= HM_PAGE_SIZE) {
    unsigned c = hm_size_class(need);
    while (c < NUM_CLASSES && (hm_class_size[c] & (align - 1)) != 0) c++;
    if (c < NUM_CLASSES) return hm_alloc_class(c);
  }
  return hm_large_alloc(n, align);
}

static bool is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

int hak_posix_memalign(void **out, size_t align, size_t n) {
  if (!is_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
  int saved = errno;
  void *p = aligned_impl(align, n);
  if (p == NULL) return ENOMEM;
  errno = saved;
  *out = p;
  return 0;
}

void *hak_aligned_alloc(size_t align, size_t n) {
  if (!is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned_impl(align, n);
}

void *hak_memalign(size_t align, size_t n) {
  if (align == 0) return hm_malloc(n);
  if (!is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned_impl(align, n);
}

void *hak_valloc(size_t n) { return aligned_impl(HM_PAGE_SIZE, n); }

void *hak_pvalloc(size_t n) {
  size_t r;
  if (__builtin_add_overflow(n, HM_PAGE_SIZE - 1, &r)) {
    errno = ENOMEM;
    return NULL;
  }
  r &= ~(size_t)(HM_PAGE_SIZE - 1);
  return aligned_impl(HM_PAGE_SIZE, r == 0 ? HM_PAGE_SIZE : r);
}

int hak_malloc_trim(size_t pad) {
  hm_ensure_init();
  if (hm_force_libc) {
    int (*libc_trim)(size_t) = (int (*)(size_t))libc_symbol("malloc_trim");
    return libc_trim != NULL ? libc_trim(pad) : 0;
  }
  (void)pad;
  return hm_collect(true);
}

int hak_collect(bool all) {
  hm_ensure_init();
  if (hm_force_libc) return 0;
  return hm_collect(all);
}
