/* API conformance: every size class and lane boundary, every alignment,
 * the errno cases, realloc content preservation, calloc zeroing after reuse,
 * malloc_usable_size, malloc(0).
 *
 * Built twice: test_api (unprefixed names, hakmem_static linked) and
 * test_api_hak (hak_* names, libhakmem.so linked, -DUSE_HAK_NAMES). */
#define _GNU_SOURCE
#include "test_common.h"

#include <limits.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "hakmem.h"

#ifdef USE_HAK_NAMES
#define A(fn) hak_##fn
#define API_NAME "hak_*"
#else
#define A(fn) fn
#define API_NAME "unprefixed"
#endif

#define KiB ((size_t)1 << 10)

static const size_t boundaries[] = {
    0,         1,         15,        16,        17,         128,        129,
    256,       257,       1024,      1025,      8192,       8193,       65536,
    65537,     262144,    262145,    1u << 20,  (1u << 20) + 1, 4u << 20, 64u << 20};
#define NB (sizeof boundaries / sizeof boundaries[0])

static size_t page;

static void check_block(void *p, size_t n, const char *what) {
  CHECK(p != NULL, "%s(%zu) returned NULL (errno %d)", what, n, errno);
  size_t us = A(malloc_usable_size)(p);
  CHECK(us >= n, "%s(%zu): usable size %zu < request", what, n, us);
  if (n >= 16) CHECK(((uintptr_t)p & 15) == 0, "%s(%zu) = %p is not 16-byte aligned", what, n, p);
  /* Natural alignment for small objects (max_align_t-compatible). */
  size_t nat = 1;
  while (nat * 2 <= n && nat < 16) nat *= 2;
  CHECK(((uintptr_t)p & (nat - 1)) == 0, "%s(%zu) = %p not %zu-aligned", what, n, p, nat);
}

/* ---------------------------------------------------------------- */
static void test_hakmem_in_use(void) {
  if (!HAKMEM_SPECIFIC) return;
  void *p = A(malloc)(tc_opaque(100));
  CHECK(p, "malloc(100) failed");
  CHECK(hak_malloc_usable_size(p) == 112,
        "hak_malloc_usable_size(malloc(100)) = %zu, expected 112 (hakmem class size): is hakmem in use?",
        hak_malloc_usable_size(p));
  CHECK(malloc_usable_size(p) == 112, "malloc_usable_size(malloc(100)) = %zu, expected 112",
        malloc_usable_size(p));
  A(free)(p);
  /* Mixed names: memory from one spelling freed by the other. */
  p = hak_malloc(200);
  CHECK(p, "hak_malloc(200) failed");
  tc_fill(p, 200, 1);
  free(p);
  p = malloc(300);
  CHECK(p, "malloc(300) failed");
  CHECK(hak_malloc_usable_size(p) >= 300, "usable");
  hak_free(p);
}

/* ---------------------------------------------------------------- */
static void test_malloc_sizes(void) {
  /* Every size 0..4096, then a geometric sweep up to 8 MiB. */
  for (size_t n = 0; n <= 4096; n++) {
    void *p[3];
    for (int k = 0; k < 3; k++) {
      p[k] = A(malloc)(tc_opaque(n));
      check_block(p[k], n, "malloc");
    }
    for (int k = 0; k < 3; k++) memset(p[k], 0x10 + k, A(malloc_usable_size)(p[k]));
    for (int k = 0; k < 3; k++) {
      size_t us = A(malloc_usable_size)(p[k]);
      size_t bad = tc_find_not(p[k], us, (uint8_t)(0x10 + k));
      CHECK(bad == (size_t)-1, "malloc(%zu) block %d: byte %zu of usable %zu overwritten by a neighbour",
            n, k, bad, us);
    }
    for (int k = 0; k < 3; k++) A(free)(p[k]);
  }
  for (size_t n = 4097; n <= (8u << 20); n += n / 7 + 1) {
    void *p = A(malloc)(tc_opaque(n));
    check_block(p, n, "malloc");
    size_t us = A(malloc_usable_size)(p);
    memset(p, 0x5A, us); /* whole usable size is writable */
    CHECK(tc_find_not(p, us, 0x5A) == (size_t)-1, "malloc(%zu) readback", n);
    A(free)(p);
  }
}

/* Size-class waste bound and hakmem class sizes. */
static void test_usable_bounds(void) {
  for (size_t n = 0; n <= 262144 + 4096; n += (n < 4096 ? 1 : n < 65536 ? 13 : 251)) {
    void *p = A(malloc)(tc_opaque(n));
    CHECK(p, "malloc(%zu) failed", n);
    size_t us = A(malloc_usable_size)(p);
    CHECK(us >= n, "usable(%zu)=%zu < request", n, us);
    if (n >= 129 && n <= 262144)
      CHECK(us <= n + n / 8 + 16, "malloc(%zu): usable size %zu wastes more than 12.5%% + 16", n, us);
    if (HAKMEM_SPECIFIC && n >= 1 && n <= 256)
      CHECK(us == ((n + 15) & ~(size_t)15),
            "malloc(%zu): usable size %zu, expected the 16-byte-step class %zu", n, us, (n + 15) & ~(size_t)15);
    A(free)(p);
  }
}

/* Many live blocks of one size never overlap. */
static void test_no_overlap(void) {
  for (size_t bi = 0; bi < NB; bi++) {
    size_t n = boundaries[bi];
    size_t cnt = n <= 1024 ? 4000 : n <= 65536 ? 400 : n <= (1u << 20) ? 40 : 4;
    void **v = A(malloc)(cnt * sizeof *v);
    CHECK(v, "malloc vector");
    for (size_t i = 0; i < cnt; i++) {
      v[i] = A(malloc)(tc_opaque(n));
      check_block(v[i], n, "malloc");
      size_t us = A(malloc_usable_size)(v[i]);
      tc_fill(v[i], us < 64 ? us : 64, (uint64_t)i * 977 + n);
      if (us > 64) tc_fill((char *)v[i] + us - 16, 16, (uint64_t)i * 31 + n);
    }
    for (size_t i = 0; i < cnt; i++) {
      size_t us = A(malloc_usable_size)(v[i]);
      CHECK_PATTERN(v[i], us < 64 ? us : 64, (uint64_t)i * 977 + n, "size %zu #%zu head", n, i);
      if (us > 64) CHECK_PATTERN((char *)v[i] + us - 16, 16, (uint64_t)i * 31 + n, "size %zu #%zu tail", n, i);
    }
    /* insertion sort by address (cnt small enough) via qsort-free approach */
    for (size_t i = 1; i < cnt; i++) {
      void *x = v[i];
      size_t j = i;
      while (j > 0 && (uintptr_t)v[j - 1] > (uintptr_t)x) { v[j] = v[j - 1]; j--; }
      v[j] = x;
    }
    for (size_t i = 0; i + 1 < cnt; i++) {
      size_t us = A(malloc_usable_size)(v[i]);
      CHECK((uintptr_t)v[i] + us <= (uintptr_t)v[i + 1] && v[i] != v[i + 1],
            "size %zu: blocks %p (usable %zu) and %p overlap", n, v[i], us, v[i + 1]);
    }
    for (size_t i = 0; i < cnt; i++) A(free)(v[i]);
    A(free)(v);
  }
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

static void test_malloc_zero_and_free_null(void) {
  enum { N = 2000 };
  void **v = A(malloc)(N * sizeof *v);
  CHECK(v, "malloc");
  for (int i = 0; i < N; i++) {
    v[i] = A(malloc)(tc_opaque(0));
    CHECK(v[i] != NULL, "malloc(0) #%d returned NULL", i);
  }
  qsort(v, N, sizeof *v, cmp_ptr);
  for (int i = 0; i + 1 < N; i++) CHECK(v[i] != v[i + 1], "malloc(0) returned %p twice while live", v[i]);
  for (int i = 0; i < N; i++) A(free)(v[i]);
  A(free)(v);
  for (int i = 0; i < 1000; i++) A(free)(tc_escape(NULL));
  CHECK(A(malloc_usable_size)(tc_escape(NULL)) == 0, "malloc_usable_size(NULL) != 0");
  /* calloc(0, x), calloc(x, 0) */
  void *a = A(calloc)(tc_opaque(0), 16), *b = A(calloc)(16, tc_opaque(0)), *c = A(calloc)(0, 0);
  CHECK(a && b && c, "calloc with a zero count/size returned NULL");
  CHECK(a != b && b != c && a != c, "calloc(0) pointers not unique");
  A(free)(a);
  A(free)(b);
  A(free)(c);
}

/* ---------------------------------------------------------------- */
static void check_aligned(void *p, size_t al, size_t n, const char *fn) {
  CHECK(p != NULL, "%s(align %zu, size %zu) returned NULL (errno %d)", fn, al, n, errno);
  CHECK(((uintptr_t)p & (al - 1)) == 0, "%s(align %zu, size %zu) = %p is misaligned", fn, al, n, p);
  size_t us = A(malloc_usable_size)(p);
  CHECK(us >= n, "%s(align %zu, size %zu): usable %zu < size", fn, al, n, us);
  /* the whole usable size is writable without touching neighbours */
  memset(p, 0xE7, us);
  tc_fill(p, n, al * 7 + n);
}

static void test_alignment(void) {
  const unsigned maxlog = 24; /* 2^0 .. 16 MiB (4 MiB required, larger checked too) */
  for (unsigned lg = 0; lg <= maxlog; lg++) {
    size_t al = (size_t)1 << lg;
    size_t sizes[] = {0, 1, al > 1 ? al - 1 : 3, al, al + 1, al + al / 2 + 5, 100, 5000, 3 * al + 16};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      size_t n = sizes[si];
      if (n > (48u << 20)) continue;
      void *hold[4];
      /* posix_memalign: alignment must be a power-of-two multiple of sizeof(void*) */
      if (al >= sizeof(void *)) {
        void *p = (void *)0x1;
        int rc = A(posix_memalign)(&p, tc_opaque(al), tc_opaque(n));
        CHECK(rc == 0, "posix_memalign(align %zu, size %zu) = %d", al, n, rc);
        check_aligned(p, al, n, "posix_memalign");
        hold[0] = p;
      } else {
        hold[0] = NULL;
      }
      errno = 0;
      hold[1] = A(aligned_alloc)(tc_opaque(al), tc_opaque(n));
      check_aligned(hold[1], al, n, "aligned_alloc");
      hold[2] = A(memalign)(tc_opaque(al), tc_opaque(n));
      check_aligned(hold[2], al, n, "memalign");
      /* a neighbour allocation of the same shape must not overlap */
      hold[3] = A(memalign)(tc_opaque(al), tc_opaque(n));
      check_aligned(hold[3], al, n, "memalign");
      for (int k = 0; k < 4; k++)
        if (hold[k]) CHECK_PATTERN(hold[k], n, al * 7 + n, "aligned block %d align %zu size %zu", k, al, n);
      for (int k = 0; k < 4; k++) A(free)(hold[k]);
    }
  }
  /* many small aligned blocks interleaved with plain ones */
  for (unsigned lg = 3; lg <= 13; lg++) {
    size_t al = (size_t)1 << lg;
    void *v[256];
    for (int i = 0; i < 256; i++) {
      size_t n = (size_t)(i * 37 % 700) + 1;
      v[i] = (i & 1) ? A(malloc)(n) : A(aligned_alloc)(al, n);
      CHECK(v[i], "alloc");
      if (!(i & 1)) CHECK(((uintptr_t)v[i] & (al - 1)) == 0, "aligned_alloc(%zu,%zu) misaligned", al, n);
      tc_fill(v[i], n, (uint64_t)i + al);
    }
    for (int i = 0; i < 256; i++) {
      CHECK_PATTERN(v[i], (size_t)(i * 37 % 700) + 1, (uint64_t)i + al, "interleaved aligned align %zu", al);
      A(free)(v[i]);
    }
  }
}

/* realloc of big-alignment blocks keeps contents (alignment need not be kept) */
static void test_aligned_realloc(void) {
  for (unsigned lg = 4; lg <= 22; lg += 2) {
    size_t al = (size_t)1 << lg;
    size_t n = al / 2 + 100;
    void *p = NULL;
    CHECK(A(posix_memalign)(&p, al, n) == 0, "posix_memalign(%zu, %zu)", al, n);
    tc_fill(p, n, al);
    size_t targets[] = {n * 3, n + 1, n / 3 + 1, 100, 300000, 5000000, 17};
    size_t cur = n;
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
      void *q = A(realloc)(p, targets[t]);
      CHECK(q, "realloc of a %zu-aligned block to %zu", al, targets[t]);
      CHECK_PATTERN(q, cur < targets[t] ? cur : targets[t], al + t, "realloc of a %zu-aligned block %zu -> %zu", al,
                    cur, targets[t]);
      cur = targets[t];
      tc_fill(q, cur, al + t + 1);
      p = q;
    }
    A(free)(p);
  }
}

/* free() leaves errno alone (glibc >= 2.33, POSIX.1-2024) */
static void test_free_preserves_errno(void) {
  for (size_t bi = 0; bi < NB; bi++) {
    void *p = A(malloc)(boundaries[bi]);
    CHECK(p, "malloc");
    void *q = A(memalign)(1u << 21, boundaries[bi] ? boundaries[bi] : 1); /* size 0: see alignment step */
    CHECK(q, "memalign");
    errno = 4321;
    A(free)(p);
    CHECK(errno == 4321, "free of a %zu-byte block changed errno to %d", boundaries[bi], errno);
    A(free)(q);
    CHECK(errno == 4321, "free of a 2 MiB-aligned %zu-byte block changed errno to %d", boundaries[bi], errno);
  }
}

/* millions of tiny blocks live at once */
static void test_bulk(void) {
  size_t n = tc_scaled(2000000);
  uint64_t **v = A(malloc)(n * sizeof *v);
  CHECK(v, "malloc of the pointer array");
  for (size_t i = 0; i < n; i++) {
    size_t sz = 8 + (i % 3) * 8;
    v[i] = A(malloc)(sz);
    CHECK(v[i], "malloc #%zu", i);
    v[i][0] = i * 0x9E3779B97F4A7C15ull;
  }
  /* free every third, then reallocate them, then free in a scattered order */
  for (size_t i = 0; i < n; i += 3) {
    CHECK(v[i][0] == i * 0x9E3779B97F4A7C15ull, "tiny block %zu corrupted", i);
    A(free)(v[i]);
  }
  for (size_t i = 0; i < n; i += 3) {
    v[i] = A(malloc)(16);
    CHECK(v[i], "malloc");
    v[i][0] = i * 0x9E3779B97F4A7C15ull;
  }
  size_t stride = 7919; /* prime, coprime with n unless n is a multiple */
  if (n % stride == 0) stride = 7907;
  for (size_t k = 0, i = 0; k < n; k++, i = (i + stride) % n) {
    CHECK(v[i][0] == i * 0x9E3779B97F4A7C15ull, "tiny block %zu corrupted", i);
    A(free)(v[i]);
  }
  A(free)(v);
}

static void test_alignment_errors(void) {
  const size_t bad_pm[] = {0, 1, 2, 4, 12, 24, 48, 100, 4097, (3u << 20), SIZE_MAX, ((size_t)1 << 63) + 8};
  for (size_t i = 0; i < sizeof bad_pm / sizeof bad_pm[0]; i++) {
    if (bad_pm[i] == sizeof(void *)) continue;
    void *sentinel = (void *)(uintptr_t)0xDEADBEE0;
    void *p = sentinel;
    int rc = A(posix_memalign)(&p, tc_opaque(bad_pm[i]), 64);
    CHECK(rc == EINVAL, "posix_memalign(align %zu) = %d, expected EINVAL (%d)", bad_pm[i], rc, EINVAL);
    CHECK(p == sentinel, "posix_memalign(align %zu) failed but modified *out (%p)", bad_pm[i], p);
  }
  /* ENOMEM for huge sizes */
  const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1, SIZE_MAX - 4096};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    size_t als[] = {8, 64, 4096, 1u << 20};
    for (size_t j = 0; j < 4; j++) {
      void *sentinel = (void *)(uintptr_t)0xDEADBEE0;
      void *p = sentinel;
      int rc = A(posix_memalign)(&p, als[j], tc_opaque(huge[i]));
      CHECK(rc == ENOMEM, "posix_memalign(align %zu, size %zu) = %d, expected ENOMEM", als[j], huge[i], rc);
      CHECK(p == sentinel, "posix_memalign(huge) failed but modified *out");
      errno = 0;
      p = A(aligned_alloc)(als[j], tc_opaque(huge[i]));
      CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(%zu, %zu) = %p errno %d, expected NULL/ENOMEM", als[j],
            huge[i], p, errno);
      errno = 0;
      p = A(memalign)(als[j], tc_opaque(huge[i]));
      CHECK(p == NULL && errno == ENOMEM, "memalign(%zu, %zu) = %p errno %d, expected NULL/ENOMEM", als[j],
            huge[i], p, errno);
    }
  }
  if (HAKMEM_SPECIFIC) {
    /* hakmem: aligned_alloc/memalign reject non-power-of-two alignments
     * (glibc 2.36 rounds them up instead). */
    const size_t npot[] = {3, 24, 48, 100, 4097, 3u << 20};
    for (size_t i = 0; i < sizeof npot / sizeof npot[0]; i++) {
      errno = 0;
      void *p = A(aligned_alloc)(tc_opaque(npot[i]), 64);
      CHECK(p == NULL && errno == EINVAL, "aligned_alloc(align %zu) = %p errno %d, expected NULL/EINVAL", npot[i], p,
            errno);
      errno = 0;
      p = A(memalign)(tc_opaque(npot[i]), 64);
      CHECK(p == NULL && errno == EINVAL, "memalign(align %zu) = %p errno %d, expected NULL/EINVAL", npot[i], p,
            errno);
    }
  }
}

static void test_valloc_pvalloc(void) {
  size_t sizes[] = {1, 15, 100, 4095, 4096, 4097, 10000, 65537, 262145, 1u << 20, (1u << 20) + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    void *v = A(valloc)(tc_opaque(n));
    CHECK(v, "valloc(%zu) NULL", n);
    CHECK(((uintptr_t)v & (page - 1)) == 0, "valloc(%zu) = %p not page aligned", n, v);
    CHECK(A(malloc_usable_size)(v) >= n, "valloc usable");
    memset(v, 0x77, n);
    void *pv = A(pvalloc)(tc_opaque(n));
    CHECK(pv, "pvalloc(%zu) NULL", n);
    CHECK(((uintptr_t)pv & (page - 1)) == 0, "pvalloc(%zu) = %p not page aligned", n, pv);
    size_t rounded = (n + page - 1) & ~(page - 1);
    size_t us = A(malloc_usable_size)(pv);
    CHECK(us >= rounded, "pvalloc(%zu): usable %zu < size rounded up to a page (%zu)", n, us, rounded);
    memset(pv, 0x66, rounded);
    CHECK(tc_find_not(v, n, 0x77) == (size_t)-1, "valloc block clobbered by pvalloc block");
    A(free)(v);
    A(free)(pv);
  }
  void *v0 = A(valloc)(0);
  CHECK(v0 && ((uintptr_t)v0 & (page - 1)) == 0, "valloc(0) = %p", v0);
  A(free)(v0);
  const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1, SIZE_MAX - 100};
  for (size_t i = 0; i < 4; i++) {
    errno = 0;
    void *p = A(valloc)(tc_opaque(huge[i]));
    CHECK(p == NULL && errno == ENOMEM, "valloc(%zu) = %p errno %d", huge[i], p, errno);
    errno = 0;
    p = A(pvalloc)(tc_opaque(huge[i]));
    CHECK(p == NULL && errno == ENOMEM, "pvalloc(%zu) = %p errno %d (page rounding may overflow)", huge[i], p,
          errno);
  }
}

/* ---------------------------------------------------------------- */
static void test_errno_cases(void) {
  const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1, SIZE_MAX - 15, SIZE_MAX - 4096,
                         ((size_t)1 << 63) + ((size_t)1 << 40)};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    errno = 0;
    void *p = A(malloc)(tc_opaque(huge[i]));
    CHECK(p == NULL && errno == ENOMEM, "malloc(%zu) = %p errno %d, expected NULL/ENOMEM", huge[i], p, errno);
    errno = 0;
    p = A(calloc)(1, tc_opaque(huge[i]));
    CHECK(p == NULL && errno == ENOMEM, "calloc(1, %zu) = %p errno %d", huge[i], p, errno);
    errno = 0;
    p = A(realloc)(NULL, tc_opaque(huge[i]));
    CHECK(p == NULL && errno == ENOMEM, "realloc(NULL, %zu) = %p errno %d", huge[i], p, errno);
  }
  /* multiplication overflow */
  struct { size_t a, b; } ov[] = {{SIZE_MAX / 2, 3},
                                  {(size_t)1 << 33, (size_t)1 << 33},
                                  {SIZE_MAX, SIZE_MAX},
                                  {2, SIZE_MAX / 2 + 1},
                                  {65537, (SIZE_MAX / 65536)},
                                  {(size_t)1 << 32, ((size_t)1 << 32) + 1}};
  for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++) {
    errno = 0;
    void *p = A(calloc)(tc_opaque(ov[i].a), tc_opaque(ov[i].b));
    CHECK(p == NULL && errno == ENOMEM, "calloc(%zu, %zu) overflow: %p errno %d", ov[i].a, ov[i].b, p, errno);
    errno = 0;
    p = A(reallocarray)(NULL, tc_opaque(ov[i].a), tc_opaque(ov[i].b));
    CHECK(p == NULL && errno == ENOMEM, "reallocarray(NULL, %zu, %zu) overflow: %p errno %d", ov[i].a, ov[i].b, p,
          errno);
  }
  /* failing realloc/reallocarray keeps the old block intact */
  for (size_t bi = 1; bi < NB; bi++) {
    size_t n = boundaries[bi];
    char *p = A(malloc)(n);
    CHECK(p, "malloc(%zu)", n);
    tc_fill(p, n, 4242 + n);
    for (size_t i = 0; i < 3; i++) {
      errno = 0;
      void *q = A(realloc)(p, tc_opaque(huge[i]));
      CHECK(q == NULL && errno == ENOMEM, "realloc(%zu-byte block, %zu) = %p errno %d", n, huge[i], q, errno);
      CHECK_PATTERN(p, n, 4242 + n, "after failed realloc of a %zu-byte block", n);
      errno = 0;
      q = A(reallocarray)(p, tc_opaque(ov[i].a), tc_opaque(ov[i].b));
      CHECK(q == NULL && errno == ENOMEM, "reallocarray(%zu-byte block, %zu, %zu) = %p errno %d", n, ov[i].a, ov[i].b,
            q, errno);
      CHECK_PATTERN(p, n, 4242 + n, "after failed reallocarray of a %zu-byte block", n);
    }
    CHECK(A(malloc_usable_size)(p) >= n, "usable after failed realloc");
    A(free)(p);
  }
  /* reallocarray success path */
  int *a = A(reallocarray)(NULL, 100, sizeof(int));
  CHECK(a, "reallocarray(NULL, 100, 4)");
  for (int i = 0; i < 100; i++) a[i] = i * 3;
  a = A(reallocarray)(a, 100000, sizeof(int));
  CHECK(a, "reallocarray grow");
  for (int i = 0; i < 100; i++) CHECK(a[i] == i * 3, "reallocarray lost element %d", i);
  A(free)(a);
}

/* ---------------------------------------------------------------- */
static void test_realloc(void) {
  /* realloc(NULL, n) == malloc(n) */
  for (size_t bi = 0; bi < NB; bi++) {
    size_t n = boundaries[bi];
    void *p = A(realloc)(NULL, tc_opaque(n));
    check_block(p, n, "realloc(NULL)");
    memset(p, 1, n);
    A(free)(p);
  }
  /* realloc(p, 0) frees and returns NULL (glibc behaviour) */
  size_t rss0 = tc_rss_bytes();
  for (int i = 0; i < 20000; i++) {
    size_t n = boundaries[i % NB];
    if (n > (1u << 20)) n = 4096;
    void *p = A(malloc)(n);
    CHECK(p, "malloc");
    memset(p, 3, n);
    void *q = A(realloc)(p, tc_opaque(0));
    CHECK(q == NULL, "realloc(%zu-byte block, 0) returned %p, expected NULL (glibc frees)", n, q);
  }
  size_t rss1 = tc_rss_bytes();
  CHECK(rss1 < rss0 + 64 * MiB, "realloc(p, 0) leaks: RSS grew from %zu to %zu MiB", rss0 / MiB, rss1 / MiB);

  /* grow through every boundary, then shrink back */
  char *p = A(malloc)(1);
  CHECK(p, "malloc(1)");
  size_t cur = 1;
  tc_fill(p, cur, 1);
  uint64_t seed = 1;
  for (size_t bi = 0; bi < NB; bi++) {
    size_t n = boundaries[bi];
    char *q = A(realloc)(p, tc_opaque(n));
    if (n == 0) {
      CHECK(q == NULL, "realloc(p, 0) returned %p", q);
      p = A(malloc)(1);
      CHECK(p, "malloc");
      cur = 1;
      tc_fill(p, 1, ++seed);
      continue;
    }
    check_block(q, n, "realloc grow");
    CHECK_PATTERN(q, cur < n ? cur : n, seed, "realloc grow %zu -> %zu", cur, n);
    p = q;
    cur = n;
    tc_fill(p, cur, ++seed);
  }
  for (size_t bi = NB; bi-- > 1;) {
    size_t n = boundaries[bi];
    char *q = A(realloc)(p, tc_opaque(n));
    check_block(q, n, "realloc shrink");
    CHECK_PATTERN(q, cur < n ? cur : n, seed, "realloc shrink %zu -> %zu", cur, n);
    p = q;
    cur = n;
    tc_fill(p, cur, ++seed);
  }
  A(free)(p);

  /* every pair of boundaries (both directions), plus a neighbour kept live */
  for (size_t i = 1; i < NB; i++) {
    for (size_t j = 1; j < NB; j++) {
      size_t a = boundaries[i], b = boundaries[j];
      if (a > (4u << 20) || b > (4u << 20)) continue;
      uint64_t s = a * 1000003u + b;
      char *x = A(malloc)(a);
      char *nb = A(malloc)(a);
      CHECK(x && nb, "malloc(%zu)", a);
      tc_fill(x, a, s);
      tc_fill(nb, a, ~s);
      char *y = A(realloc)(x, tc_opaque(b));
      check_block(y, b, "realloc");
      CHECK_PATTERN(y, a < b ? a : b, s, "realloc %zu -> %zu", a, b);
      memset(y, 0xEE, b);
      CHECK_PATTERN(nb, a, ~s, "neighbour of realloc %zu -> %zu", a, b);
      A(free)(y);
      A(free)(nb);
    }
  }
  /* in-place-ish small steps: grow by 1 byte up to 5000, each time check */
  char *g = NULL;
  for (size_t n = 1; n <= 5000; n++) {
    char *q = A(realloc)(g, n);
    CHECK(q, "realloc step %zu", n);
    for (size_t k = 0; k + 1 < n; k++)
      if ((uint8_t)q[k] != (uint8_t)(k * 7 + 3)) FAILF("realloc step %zu lost byte %zu", n, k);
    q[n - 1] = (char)((n - 1) * 7 + 3);
    g = q;
  }
  A(free)(g);
}

/* ---------------------------------------------------------------- */
static void test_calloc_reuse(void) {
  for (size_t bi = 1; bi < NB; bi++) {
    size_t n = boundaries[bi];
    size_t cnt = n <= 1024 ? 512 : n <= 65536 ? 64 : n <= (1u << 20) ? 8 : 2;
    void *v[512];
    for (int round = 0; round < 3; round++) {
      for (size_t i = 0; i < cnt; i++) {
        v[i] = A(malloc)(n);
        CHECK(v[i], "malloc(%zu)", n);
        memset(v[i], 0xAB, A(malloc_usable_size)(v[i]));
      }
      for (size_t i = 0; i < cnt; i++) A(free)(v[i]);
      for (size_t i = 0; i < cnt; i++) {
        /* vary the nmemb/size split */
        size_t nm = (i % 3 == 0) ? 1 : (i % 3 == 1) ? n : (n % 16 == 0 ? n / 16 : n);
        size_t sz = (i % 3 == 0) ? n : (i % 3 == 1) ? 1 : (n % 16 == 0 ? 16 : 1);
        v[i] = A(calloc)(tc_opaque(nm), tc_opaque(sz));
        CHECK(v[i], "calloc(%zu, %zu)", nm, sz);
        size_t bad = tc_find_not(v[i], n, 0);
        CHECK(bad == (size_t)-1, "calloc(%zu, %zu) after reuse: byte %zu is 0x%02x, not zero", nm, sz, bad,
              ((uint8_t *)v[i])[bad == (size_t)-1 ? 0 : bad]);
      }
      for (size_t i = 0; i < cnt; i++) {
        memset(v[i], 0xAB, n);
        A(free)(v[i]);
      }
    }
  }
  /* calloc of dirty memory freed from aligned allocations and reallocs */
  for (int r = 0; r < 200; r++) {
    size_t n = (size_t)(r * 97 % 3000) + 1;
    void *p = A(memalign)(64, n);
    CHECK(p, "memalign");
    memset(p, 0xAB, A(malloc_usable_size)(p));
    p = A(realloc)(p, n * 2);
    CHECK(p, "realloc");
    memset(p, 0xCD, n * 2);
    A(free)(p);
    void *z = A(calloc)(n * 2, 1);
    CHECK(z, "calloc");
    CHECK(tc_find_not(z, n * 2, 0) == (size_t)-1, "calloc(%zu) after memalign/realloc reuse not zeroed", n * 2);
    void *z2 = A(calloc)(1, n);
    CHECK(z2, "calloc");
    CHECK(tc_find_not(z2, n, 0) == (size_t)-1, "calloc(%zu) after reuse not zeroed", n);
    A(free)(z);
    A(free)(z2);
  }
}

static void test_trim(void) {
  void *keep[64];
  for (int i = 0; i < 64; i++) {
    keep[i] = A(malloc)((size_t)(i + 1) * 1000);
    CHECK(keep[i], "malloc");
    tc_fill(keep[i], (size_t)(i + 1) * 1000, (uint64_t)i);
  }
  for (int i = 0; i < 2000; i++) A(free)(A(malloc)((size_t)(i % 50 + 1) * 4096));
  int r = A(malloc_trim)(0);
  CHECK(r == 0 || r == 1, "malloc_trim returned %d", r);
  r = A(malloc_trim)(1u << 20);
  CHECK(r == 0 || r == 1, "malloc_trim(1MiB) returned %d", r);
  for (int i = 0; i < 64; i++) {
    CHECK_PATTERN(keep[i], (size_t)(i + 1) * 1000, (uint64_t)i, "live block after malloc_trim");
    A(free)(keep[i]);
  }
  void *p = A(malloc)(12345);
  CHECK(p, "malloc after trim");
  A(free)(p);
}

int main(void) {
  tc_test_name = "api(" API_NAME ")";
  page = (size_t)sysconf(_SC_PAGESIZE);
  struct { const char *name; void (*fn)(void); } steps[] = {
      {"hakmem_in_use", test_hakmem_in_use},
      {"malloc_sizes", test_malloc_sizes},
      {"usable_bounds", test_usable_bounds},
      {"no_overlap", test_no_overlap},
      {"malloc_zero_free_null", test_malloc_zero_and_free_null},
      {"alignment", test_alignment},
      {"aligned_realloc", test_aligned_realloc},
      {"alignment_errors", test_alignment_errors},
      {"free_preserves_errno", test_free_preserves_errno},
      {"bulk", test_bulk},
      {"valloc_pvalloc", test_valloc_pvalloc},
      {"errno_cases", test_errno_cases},
      {"realloc", test_realloc},
      {"calloc_reuse", test_calloc_reuse},
      {"trim", test_trim},
  };
  /* Each step runs in a child process so that one failure does not hide
   * the others; the test fails if any step fails. */
  int failed = 0;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    printf("[%s] %s ...\n", API_NAME, steps[i].name);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
      steps[i].fn();
      fflush(stdout);
      _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    if (WIFSIGNALED(st)) {
      fprintf(stderr, "FAIL [api(%s)] step %s: killed by signal %d (%s)\n", API_NAME, steps[i].name, WTERMSIG(st),
              strsignal(WTERMSIG(st)));
      failed++;
    } else if (WEXITSTATUS(st) != 0) {
      fprintf(stderr, "FAIL [api(%s)] step %s: exit status %d\n", API_NAME, steps[i].name, WEXITSTATUS(st));
      failed++;
    }
  }
  if (failed) {
    fprintf(stderr, "FAIL [api(%s)]: %d step(s) failed\n", API_NAME, failed);
    return 1;
  }
  printf("[%s] all API checks passed (hakmem-specific checks %s)\n", API_NAME,
         HAKMEM_SPECIFIC ? "on" : "off");
  return 0;
}
