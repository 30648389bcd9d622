/* floor_alloc: the least a preloaded allocator can do for blocks of 16 B to
 * 1 KiB, to measure how fast any design could run bench_random_mixed
 * (docs/PERFORMANCE.md, "Where random_mixed's time goes"). Not an
 * allocator for programs: it never gives memory back, to the OS or to
 * another thread, and keeps no count of anything.
 *
 * A thread keeps one free list per 16-byte class. Slabs are 64 KiB,
 * aligned, carved whole from one reserved 4 GiB region (so that free's
 * test is a shift and a compare); the slab's first 64 bytes say its class.
 * Above 1 KiB, and every aligned allocation, is glibc's (its pointers lie
 * outside the region).
 *
 * Built twice (bench/CMakeLists.txt): libfloor_alloc.so, and with
 * -DFLOOR_CHECKS libfloor_alloc_checks.so, which adds hakmem's two misuse
 * checks on free, made the same way (docs/SECURITY.md): the block check (a
 * multiply and a compare against the slab's geometry) and the free tag
 * (the slab's address in the block's second word while it is free). A
 * failed check prints a line and aborts. A third, libfloor_alloc_map.so
 * (-DFLOOR_CHECKS -DFLOOR_MAP), finds the slab as hakmem does, in a table
 * per 64 KiB (one load more on free) instead of by masking the address.
 * For one-thread measurements:
 * nothing here is made safe for fork. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define TLS __attribute__((tls_model("initial-exec"))) __thread
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define SLAB_SHIFT 16
#define SLAB_SIZE ((size_t)1 << SLAB_SHIFT)
#define SLAB_HEADER 64
#define REGION_SHIFT 32
#define REGION_SIZE ((size_t)1 << REGION_SHIFT) /* reserved, no commit charge (valgrind refuses 64 GiB) */
#define SMALL_MAX 1024
#define NCLS (SMALL_MAX / 16 + 1)

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

typedef struct block {
  struct block *next;
  uintptr_t tag; /* FLOOR_CHECKS: the slab's address while free */
} block_t;

typedef struct {
  uint64_t div_mul; /* the block check: offset * div_mul < limit */
  uint64_t limit;
  uint32_t start_lo; /* first block's address, low 32 bits */
  uint32_t cls;
} slab_t;
_Static_assert(sizeof(slab_t) <= SLAB_HEADER, "header fits");

static TLS block_t *tc[NCLS];
#ifdef FLOOR_MAP
static slab_t **unit_map; /* per 64 KiB of the region: its slab */
#endif

/* The region's address >> REGION_SHIFT; until it is mapped, that of no
 * user pointer (every pointer is glibc's). */
static uintptr_t region_hi = UINTPTR_MAX >> REGION_SHIFT;
static size_t region_used; /* carved slabs' bytes (under lock) */
static int lock_word;
static size_t (*libc_usable)(void *);

static void lock(void) {
  while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static void unlock(void) { __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE); }

static bool region_mapped(void) { return region_hi != UINTPTR_MAX >> REGION_SHIFT; }

/* Under the lock, at the first slab. */
static bool region_map(void) {
  /* twice the size, to align it to its size */
  void *m = mmap(NULL, 2 * REGION_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
#ifdef FLOOR_MAP
  unit_map = mmap(NULL, (REGION_SIZE >> SLAB_SHIFT) * sizeof *unit_map, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (unit_map == MAP_FAILED) {
    munmap(m, 2 * REGION_SIZE);
    return false;
  }
#endif
  __atomic_store_n(&region_hi, ((uintptr_t)m + REGION_SIZE - 1) >> REGION_SHIFT, __ATOMIC_RELEASE);
  return true;
}

__attribute__((constructor)) static void floor_init(void) {
  libc_usable = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
}

static int ours(const void *p) { return (uintptr_t)p >> REGION_SHIFT == region_hi; }
/* Class c's block size (class 0, malloc(0)'s, has 16-byte blocks). */
static size_t class_size(unsigned c) { return c == 0 ? 16 : (size_t)c * 16; }
static slab_t *slab_of(const void *p) {
#ifdef FLOOR_MAP
  return unit_map[((uintptr_t)p & (REGION_SIZE - 1)) >> SLAB_SHIFT];
#else
  return (slab_t *)((uintptr_t)p & ~(uintptr_t)(SLAB_SIZE - 1));
#endif
}

#ifdef FLOOR_CHECKS
static __attribute__((noinline)) void misuse(const char *what, void *p) {
  char buf[96];
  int n = snprintf(buf, sizeof buf, "floor_alloc: free(%p): %s\n", p, what);
  ssize_t w = write(2, buf, (size_t)n);
  (void)w;
  abort();
}
#endif

/* A new slab of class c, every block but the first on the calling
 * thread's list (NULL: the region is full or cannot be had). */
static __attribute__((noinline)) void *refill(unsigned c) {
  lock();
  if ((!region_mapped() && !region_map()) || region_used == REGION_SIZE) {
    unlock();
    return NULL;
  }
  char *s = (char *)(region_hi << REGION_SHIFT) + region_used;
#ifdef FLOOR_MAP
  unit_map[region_used >> SLAB_SHIFT] = (slab_t *)s;
#endif
  region_used += SLAB_SIZE;
  unlock();
  size_t bs = class_size(c);
  size_t count = (SLAB_SIZE - SLAB_HEADER) / bs;
  slab_t *h = (slab_t *)s;
  unsigned k = (unsigned)__builtin_ctzl(bs);
  /* hakmem's constant (src/heap.c, slab_set_class; src/block.h says why
   * it works): the odd part's inverse mod 2^64 by Newton's iteration */
  uint64_t odd = bs >> k, inv = odd;
  for (int i = 0; i < 5; i++) inv *= 2 - odd * inv;
  h->div_mul = inv * (1u + ((uint64_t)1 << (64 - k)));
  h->limit = (uint64_t)count << k;
  h->start_lo = (uint32_t)(uintptr_t)(s + SLAB_HEADER);
  h->cls = c;
  block_t *head = NULL;
  for (size_t i = count; i-- > 1;) {
    block_t *b = (block_t *)(s + SLAB_HEADER + i * bs);
    b->next = head;
    b->tag = (uintptr_t)h;
    head = b;
  }
  tc[c] = head;
  return s + SLAB_HEADER;
}

/* malloc's slow path: a class's list is empty, or n is glibc's. */
static __attribute__((noinline)) void *malloc_slow(size_t n) {
  if (n <= SMALL_MAX) {
    block_t *b = refill((unsigned)((n + 15) >> 4));
    if (b != NULL) {
#ifdef FLOOR_CHECKS
      b->tag = 0;
#endif
      return b;
    }
  }
  return __libc_malloc(n); /* (also when the region cannot be had) */
}

EXPORT void *malloc(size_t n) {
  if (likely(n <= SMALL_MAX)) {
    block_t **l = &tc[(n + 15) >> 4]; /* (class 0: malloc(0)'s, of 16-byte blocks) */
    block_t *b = *l;
    if (likely(b != NULL)) {
      *l = b->next;
#ifdef FLOOR_CHECKS
      b->tag = 0;
#endif
      return b;
    }
  }
  return malloc_slow(n);
}

EXPORT void free(void *p) {
  if (likely(ours(p))) {
    slab_t *s = slab_of(p);
#ifdef FLOOR_CHECKS
    uint32_t x = (uint32_t)(uintptr_t)p - s->start_lo;
    if (unlikely((uint64_t)x * s->div_mul >= s->limit)) return misuse("not a block", p);
    if (unlikely(((block_t *)p)->tag == (uintptr_t)s)) return misuse("double free", p);
    ((block_t *)p)->tag = (uintptr_t)s;
#endif
    block_t **l = &tc[s->cls];
    ((block_t *)p)->next = *l;
    *l = (block_t *)p;
    return;
  }
  __libc_free(p);
}

EXPORT void *calloc(size_t k, size_t n) {
  size_t t;
  if (__builtin_mul_overflow(k, n, &t)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = malloc(t);
  if (p != NULL) memset(p, 0, t);
  return p;
}

EXPORT size_t malloc_usable_size(void *p) {
  if (p != NULL && ours(p)) return class_size(slab_of(p)->cls);
  return libc_usable != NULL ? libc_usable(p) : 0;
}

EXPORT void *realloc(void *p, size_t n) {
  if (p == NULL) return malloc(n);
  if (!ours(p)) return __libc_realloc(p, n);
  size_t have = malloc_usable_size(p);
  if (n <= have && n > 0) return p;
  void *q = malloc(n == 0 ? 1 : n);
  if (q == NULL) return NULL;
  memcpy(q, p, have < n ? have : n);
  free(p);
  return q;
}

EXPORT void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
EXPORT void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
EXPORT int posix_memalign(void **out, size_t a, size_t n) {
  if (a < sizeof(void *) || (a & (a - 1)) != 0) return EINVAL;
  void *p = __libc_memalign(a, n);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
EXPORT void *valloc(size_t n) { return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), n); }
