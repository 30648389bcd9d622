/* HAKMEM_FORCE_LIBC_ALLOC=1 (set by ctest) makes every call forward to
 * glibc's allocator.  Checked by handing blocks between the hakmem entry
 * points and glibc's own functions (found with dlsym(RTLD_NEXT)) in both
 * directions, and by comparing usable sizes with glibc's. */
#define _GNU_SOURCE
#include "test_common.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "hakmem.h"

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static void *(*real_realloc)(void *, size_t);
static size_t (*real_usable)(void *);

static void *sym(const char *name) {
  void *p = dlsym(RTLD_NEXT, name);
  if (!p) FAILF("dlsym(RTLD_NEXT, %s): %s", name, dlerror());
  return p;
}

static void exchange(unsigned id) {
  for (int i = 0; i < 3000; i++) {
    size_t n = (size_t)((i * 7919u + id) % (i % 50 == 0 ? 400000 : 3000)) + 1;
    /* hakmem entry points -> glibc free */
    void *a = malloc(n);
    void *b = calloc(1, n);
    void *c = memalign(64, n);
    void *d = NULL;
    CHECK(posix_memalign(&d, 4096, n) == 0, "posix_memalign");
    void *e = aligned_alloc(256, n);
    void *f = hak_malloc(n);
    CHECK(a && b && c && d && e && f, "allocation failed");
    CHECK(tc_find_not(b, n, 0) == (size_t)-1, "calloc not zeroed");
    tc_fill(a, n, (uint64_t)i);
    a = realloc(a, n * 2);
    CHECK(a, "realloc");
    CHECK_PATTERN(a, n, (uint64_t)i, "realloc");
    void *v[] = {a, b, c, d, e, f};
    for (int k = 0; k < 6; k++) {
      CHECK(real_usable(v[k]) == malloc_usable_size(v[k]), "usable sizes differ between glibc and forwarded call");
      real_free(v[k]);
    }
    /* glibc -> hakmem entry points */
    char *g = real_malloc(n);
    CHECK(g, "glibc malloc");
    tc_fill(g, n, (uint64_t)i + 1);
    CHECK(hak_malloc_usable_size(g) == real_usable(g), "hak_malloc_usable_size of a glibc block");
    g = hak_realloc(g, n + 100);
    CHECK(g, "hak_realloc of a glibc block");
    CHECK_PATTERN(g, n, (uint64_t)i + 1, "hak_realloc of a glibc block");
    g = real_realloc(g, n + 200);
    CHECK(g, "glibc realloc");
    free(g);
    hak_free(real_malloc(n));
  }
}

static void *thr(void *arg) {
  exchange((unsigned)(uintptr_t)arg);
  return NULL;
}

int main(void) {
  tc_test_name = "force_libc";
  const char *env = getenv("HAKMEM_FORCE_LIBC_ALLOC");
  CHECK(env && !strcmp(env, "1"), "run me with HAKMEM_FORCE_LIBC_ALLOC=1 (ctest does)");
  real_malloc = (void *(*)(size_t))sym("malloc");
  real_free = (void (*)(void *))sym("free");
  real_realloc = (void *(*)(void *, size_t))sym("realloc");
  real_usable = (size_t (*)(void *))sym("malloc_usable_size");
  CHECK((void *)real_malloc != (void *)malloc || !HAKMEM_SPECIFIC, "RTLD_NEXT found hakmem's malloc again");
  /* glibc: malloc(100) has usable size 104; hakmem's class would be 112 */
  size_t sizes[] = {1, 24, 100, 1000, 5000, 70000, 300000, 5u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = malloc(sizes[i]);
    void *q = real_malloc(sizes[i]);
    CHECK(p && q, "malloc");
    CHECK(hak_malloc_usable_size(p) == real_usable(q),
          "malloc(%zu) has usable size %zu, glibc's is %zu: HAKMEM_FORCE_LIBC_ALLOC=1 did not forward to glibc",
          sizes[i], hak_malloc_usable_size(p), real_usable(q));
    real_free(p);
    free(q);
  }
  exchange(0);
  pthread_t t[3];
  for (unsigned i = 0; i < 3; i++) CHECK(pthread_create(&t[i], NULL, thr, (void *)(uintptr_t)(i + 1)) == 0, "pthread");
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("force_libc: all calls forwarded to glibc\n");
  return 0;
}
