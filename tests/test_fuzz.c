/* Randomized API fuzzer: malloc, calloc, realloc, the aligned functions,
 * malloc_usable_size, free and malloc_trim in random sequences from several
 * threads that share a table of blocks, so that blocks are freed and
 * reallocated by threads other than their allocator.
 *
 *   test_fuzz [SEED [OPS [THREADS]]]     (OPS per thread, scaled by HAKMEM_TEST_SCALE)
 *
 * Each thread's sequence of operations is a function of SEED and its index;
 * which thread gets a slot first depends on scheduling. Every block carries
 * a pattern derived from its own seed, checked before each realloc and free
 * (all of it up to 4 KiB, then samples); asserted besides: calloc zeroes,
 * alignment, usable size >= requested, realloc keeps the prefix, failures
 * only with ENOMEM. Built with -DUSE_HAK_NAMES it calls the hak_* names (the
 * ThreadSanitizer build). */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "hakmem.h"

#ifdef USE_HAK_NAMES
#define A(fn) hak_##fn
#else
#define A(fn) fn
#endif

#define SLOTS 2048
#define MAX_THREADS 16

struct slot {
  pthread_mutex_t lock;
  char *p;
  size_t n;
  uint64_t seed;
};
static struct slot slots[SLOTS];
static uint64_t base_seed;
static size_t ops_per_thread;

/* Mostly small, some mid, a few large; now and then 0 or an exact class edge. */
static size_t pick_size(tc_rng *r) {
  uint64_t c = tc_below(r, 1000);
  if (c < 5) return 0;
  if (c < 700) return 1 + (size_t)tc_below(r, 1024);
  if (c < 900) return 1025 + (size_t)tc_below(r, 32 * 1024);
  if (c < 985) return 32 * 1024 + (size_t)tc_below(r, 230 * 1024);
  return 256 * 1024 + (size_t)tc_below(r, 3u << 20);
}

static void fill(char *p, size_t n, uint64_t seed) {
  if (n <= 8192) {
    tc_fill(p, n, seed);
    return;
  }
  tc_fill(p, 4096, seed);
  tc_fill(p + n - 4096, 4096, seed ^ n);
  for (size_t i = 4096; i < n - 4096; i += 4093) p[i] = (char)tc_pat_byte(seed, i);
}

static void verify(const char *p, size_t n, uint64_t seed, const char *when) {
  if (n <= 8192) {
    CHECK_PATTERN(p, n, seed, "%s", when);
    return;
  }
  CHECK_PATTERN(p, 4096, seed, "%s (head)", when);
  CHECK_PATTERN(p + n - 4096, 4096, seed ^ n, "%s (tail)", when);
  for (size_t i = 4096; i < n - 4096; i += 4093)
    CHECK((uint8_t)p[i] == tc_pat_byte(seed, i), "%s: byte %zu of %zu-byte block %p", when, i, n, (void *)p);
}

static void check_failure(const char *fn, size_t n) {
  CHECK(errno == ENOMEM, "%s(%zu) returned NULL with errno %d", fn, n, errno);
}

/* A new block of n bytes by one of the allocation functions, or NULL. */
static char *allocate(tc_rng *r, size_t n) {
  char *p = NULL;
  size_t align = 0;
  errno = 0;
  switch (tc_below(r, 8)) {
    case 0:
    case 1:
    case 2:
      p = A(malloc)(n);
      if (!p) check_failure("malloc", n);
      break;
    case 3: {
      size_t k = 1 + (size_t)tc_below(r, 16), m = n / k + 1;
      p = A(calloc)(k, m);
      if (!p) {
        check_failure("calloc", n);
        break;
      }
      size_t bad = tc_find_not(p, k * m < 65536 ? k * m : 65536, 0);
      CHECK(bad == (size_t)-1, "calloc(%zu, %zu): byte %zu not zero", k, m, bad);
      break;
    }
    case 4: {
      align = (size_t)1 << (3 + tc_below(r, 10)); /* 8 .. 4 KiB */
      void *q = NULL;
      int rc = A(posix_memalign)(&q, align, n);
      CHECK(rc == 0 || rc == ENOMEM, "posix_memalign(%zu, %zu) = %d", align, n, rc);
      p = q;
      break;
    }
    case 5:
      align = (size_t)1 << (4 + tc_below(r, 17)); /* 16 .. 1 MiB */
      p = A(aligned_alloc)(align, n);
      if (!p) check_failure("aligned_alloc", n);
      break;
    case 6:
      align = (size_t)1 << tc_below(r, 13);
      p = A(memalign)(align, n);
      if (!p) check_failure("memalign", n);
      break;
    default:
      p = A(realloc)(NULL, n);
      if (!p) check_failure("realloc(NULL)", n);
      break;
  }
  if (p != NULL) {
    if (align) CHECK(((uintptr_t)p & (align - 1)) == 0, "block %p not aligned to %zu", (void *)p, align);
    CHECK(A(malloc_usable_size)(p) >= n, "usable size %zu < %zu", A(malloc_usable_size)(p), n);
  }
  return p;
}

static void *worker(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  tc_rng r = {tc_mix64(base_seed * 1000003u + id)};
  for (size_t op = 0; op < ops_per_thread; op++) {
    struct slot *s = &slots[tc_below(&r, SLOTS)];
    pthread_mutex_lock(&s->lock);
    uint64_t c = tc_below(&r, 100);
    if (s->p == NULL) {
      size_t n = pick_size(&r);
      char *p = allocate(&r, n);
      if (p != NULL) {
        s->p = p;
        s->n = n;
        s->seed = tc_next(&r);
        fill(p, n, s->seed);
      }
    } else if (c < 25) { /* realloc: grow or shrink, keep the prefix */
      verify(s->p, s->n, s->seed, "before realloc");
      size_t n = tc_below(&r, 2) ? pick_size(&r) : s->n + (size_t)tc_below(&r, 64);
      if (n == 0) n = 1; /* realloc(p, 0) frees: not this operation */
      errno = 0;
      char *q = A(realloc)(s->p, n);
      if (q == NULL) {
        check_failure("realloc", n);
        verify(s->p, s->n, s->seed, "after a failed realloc");
      } else {
        /* the old block's pattern covers all of it up to 8 KiB, else its first 4 KiB */
        size_t keep = n < s->n ? n : s->n, whole = s->n <= 8192 ? s->n : 4096;
        CHECK_PATTERN(q, keep < whole ? keep : whole, s->seed, "prefix after realloc %zu -> %zu", s->n, n);
        CHECK(A(malloc_usable_size)(q) >= n, "usable size after realloc");
        s->p = q;
        s->n = n;
        s->seed = tc_next(&r);
        fill(q, n, s->seed);
      }
    } else if (c < 27) { /* realloc(p, 0) frees */
      verify(s->p, s->n, s->seed, "before realloc(p, 0)");
      CHECK(A(realloc)(s->p, 0) == NULL, "realloc(p, 0) returned a block");
      s->p = NULL;
    } else {
      verify(s->p, s->n, s->seed, "before free");
      A(free)(s->p);
      s->p = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    if (tc_below(&r, 20000) == 0) A(malloc_trim)(0);
  }
  return NULL;
}

int main(int argc, char **argv) {
  tc_test_name = "fuzz";
  base_seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
  ops_per_thread = tc_scaled(argc > 2 ? strtoull(argv[2], NULL, 0) : 200000);
  unsigned nthreads = argc > 3 ? (unsigned)atoi(argv[3]) : 4;
  if (nthreads < 1 || nthreads > MAX_THREADS) FAILF("THREADS must be 1..%d", MAX_THREADS);
  for (int i = 0; i < SLOTS; i++) pthread_mutex_init(&slots[i].lock, NULL);
  pthread_t t[MAX_THREADS];
  for (unsigned i = 0; i < nthreads; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0, "pthread_create");
  for (unsigned i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  size_t live = 0;
  for (int i = 0; i < SLOTS; i++)
    if (slots[i].p != NULL) {
      verify(slots[i].p, slots[i].n, slots[i].seed, "at the end");
      A(free)(slots[i].p);
      live++;
    }
  printf("fuzz: seed %llu, %u threads x %zu operations, %zu blocks live at the end, all intact\n",
         (unsigned long long)base_seed, nthreads, ops_per_thread, live);
  return 0;
}
