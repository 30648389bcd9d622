/* Misuse is detected and stopped (docs/SECURITY.md).
 *
 * Every case runs in a child process (this binary re-executed with
 * `child CASE`), which prints "PTR 0x..." for the pointer it is about to
 * misuse and then misuses it. Asserted, per case:
 *   - HAKMEM_ON_ERROR unset (abort): the child dies of SIGABRT and its stderr
 *     is exactly the one line "hakmem: error: WHAT of PTR (REASON)";
 *   - HAKMEM_ON_ERROR=warn: the same line, then the child goes on: the block
 *     was left alone (a rejected double free does not put a block on a free
 *     list twice: no two live blocks are the same), realloc returned NULL
 *     with EINVAL, malloc_usable_size 0, and the heap still works;
 *   - secure builds (HAKMEM_SECURE): writes into freed blocks and guard pages
 *     are caught (abort or SIGSEGV), and fresh slabs hand out blocks in a
 *     random order.
 *   test_misuse            all cases, both modes
 *   test_misuse child CASE one case (used by the above) */
#define _GNU_SOURCE
#include "test_common.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <setjmp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "hakmem.h"

#define LARGE ((size_t)1 << 20)

static int warn_mode;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (write(1, buf, (size_t)n) != n) _exit(3);
}

/* The pointer about to be misused, for the parent to find in the message. */
static void *announce(void *p) {
  say("PTR %p\n", p);
  return tc_escape(p);
}

/* After a rejected double free of a block of size n (warn mode): had the
 * block gone on a free list twice, two of these would be the same block. */
static void no_block_twice(size_t n) {
  enum { K = 512 };
  static void *v[K];
  for (int i = 0; i < K; i++) {
    v[i] = malloc(n);
    CHECK(v[i] != NULL, "malloc(%zu)", n);
    memset(v[i], 0x5a, n < 64 ? n : 64);
  }
  for (int i = 0; i < K; i++)
    for (int j = 0; j < i; j++) CHECK(v[i] != v[j], "block %p handed out twice after a rejected double free", v[i]);
  for (int i = 0; i < K; i++) free(v[i]);
}

static void heap_still_works(void) {
  static const size_t sizes[] = {1, 16, 100, 1000, 5000, 70000, 300000, 3u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char *p = malloc(sizes[i]);
    CHECK(p != NULL, "malloc(%zu) after the misuse", sizes[i]);
    tc_fill(p, sizes[i], i);
    CHECK_PATTERN(p, sizes[i], i, "after the misuse");
    free(p);
  }
}

/* ---- invalid pointers -------------------------------------------------- */
static int global_var[16];

static void c_stack(void) {
  int local[4] = {0};
  free(announce(local));
}
static void c_global(void) { free(announce(&global_var[2])); }
static void c_own_mmap(void) {
  char *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  free(announce(m + 4096));
}
static void c_wild(void) { free(announce((void *)(uintptr_t)0x123456789a0ull)); }
static void c_wild_high(void) { free(announce((void *)(uintptr_t)0xfff0000000001000ull)); }

static char *live_block(size_t n) {
  char *p = malloc(n);
  CHECK(p != NULL, "malloc(%zu)", n);
  tc_fill(p, n, n);
  return p;
}
/* a live block's address with a bit above the 47-bit space set: its low
 * bits name a slab in the unit map, which free must not read through */
static void c_wild_tagged(void) { free(announce((void *)((uintptr_t)live_block(64) | (uintptr_t)1 << 50))); }
/* warn mode: the block the bad pointer pointed into is intact and frees */
static void block_left_alone(char *p, size_t n) {
  CHECK_PATTERN(p, n, n, "block after a rejected free of a pointer into it");
  free(p);
}
#define INTERIOR_CASE(fn, n, off)            \
  static void fn(void) {                     \
    char *p = live_block(n);                 \
    free(announce(p + (off)));               \
    block_left_alone(p, n);                  \
  }
INTERIOR_CASE(c_interior_tiny, 64, 16)
INTERIOR_CASE(c_unaligned_tiny, 64, 1)
INTERIOR_CASE(c_interior_mid, 20000, 4096)
INTERIOR_CASE(c_interior_big, 200000, 65536)
INTERIOR_CASE(c_interior_large, LARGE, 4096)
INTERIOR_CASE(c_interior_large_tail, 5 * LARGE, 3 * LARGE)

/* blocks hakmem never handed out: past the carved part of a slab, and in
 * a SuperSlab's header */
static void c_uncarved(void) {
  char *p = live_block(64);
  free(announce(p + 64 * 600));
  block_left_alone(p, 64);
}
static void c_superslab_header(void) {
  char *p = live_block(64);
  free(announce((char *)((uintptr_t)p & ~(uintptr_t)((2u << 20) - 1)) + 128));
  block_left_alone(p, 64);
}

static void c_realloc_stack(void) {
  int local[4] = {0};
  errno = 0;
  void *r = realloc(announce(local), 100);
  CHECK(r == NULL && errno == EINVAL, "realloc of a bad pointer in warn mode: %p, errno %d", r, errno);
}
static void c_realloc_interior(void) {
  char *p = live_block(100);
  errno = 0;
  void *r = realloc(announce(p + 32), 200);
  CHECK(r == NULL && errno == EINVAL, "realloc of a bad pointer in warn mode: %p, errno %d", r, errno);
  block_left_alone(p, 100);
}
static void c_usable_stack(void) {
  int local[4] = {0};
  CHECK(malloc_usable_size(announce(local)) == 0, "malloc_usable_size of a bad pointer in warn mode");
}
static void c_usable_interior_large(void) {
  char *p = live_block(LARGE);
  CHECK(malloc_usable_size(announce(p + 100)) == 0, "malloc_usable_size of a bad pointer in warn mode");
  block_left_alone(p, LARGE);
}

/* ---- double frees ------------------------------------------------------ */
#define DOUBLE_CASE(fn, alloc, n)   \
  static void fn(void) {            \
    char *a = alloc;                \
    free(a);                        \
    free(announce(a));              \
    no_block_twice(n);              \
  }
DOUBLE_CASE(c_double_tiny, malloc(16), 16)
DOUBLE_CASE(c_double_small, malloc(1000), 1000)
DOUBLE_CASE(c_double_mid, malloc(20000), 20000)
DOUBLE_CASE(c_double_big, malloc(200000), 200000)
DOUBLE_CASE(c_double_large, malloc(LARGE), LARGE)
DOUBLE_CASE(c_double_calloc, calloc(10, 10), 100)
DOUBLE_CASE(c_double_memalign, memalign(256, 300), 300)
DOUBLE_CASE(c_double_large_aligned, memalign(4 * LARGE, 100), 100)

/* other allocations and frees in between, none of them of a's class */
static void c_double_after_others(void) {
  char *a = malloc(48);
  free(a);
  void *v[200];
  for (int i = 0; i < 200; i++) v[i] = malloc((size_t)(i % 7) * 100 + 200 + (i & 1) * 5000);
  for (int i = 0; i < 200; i += 2) free(v[i]);
  free(announce(a));
  for (int i = 1; i < 200; i += 2) free(v[i]);
  no_block_twice(48);
}
/* the block was handed out again and freed again: a, then b == a */
static void c_double_reused(void) {
  char *a = malloc(48);
  free(a);
  char *b = malloc(48);
  free(b);
  free(announce(a));
  no_block_twice(48);
}
/* a mid block above 64 KiB freed, then left idle at the top of its slab
 * until it was uncarved and given back (src/big.c; the parent sets
 * HAKMEM_BIG_IDLE_SPACING_MS=100), then freed again: still caught */
static void c_double_big_given_back(void) {
  enum { N = 12 };
  const size_t bs = 100 << 10;
  char *v[N], *top = NULL;
  for (int i = 0; i < N; i++) {
    v[i] = malloc(bs);
    memset(v[i], 1, bs);
    if (top == NULL || v[i] > top) top = v[i];
  }
  for (int i = 0; i < N; i++) free(v[i]);
  struct hak_os_stats os0, os;
  hak_os_stats_get(&os0);
  struct timespec ms = {0, 1000000};
  for (int k = 0; k < 20000; k++) { /* two blocks in use at a time: the lowest; the top goes idle */
    char *volatile a = malloc(bs), *volatile b = malloc(bs);
    a[0] = b[0] = 2;
    free(a);
    free(b);
    nanosleep(&ms, NULL);
    hak_os_stats_get(&os);
    if (os.madvise_calls > os0.madvise_calls) break; /* given back (two looks, about 2 s) */
  }
  free(announce(top));
}
static void c_double_interleaved(void) {
  char *a = malloc(32), *b = malloc(32);
  free(a);
  free(b);
  free(announce(a));
  no_block_twice(32);
}
static void c_realloc_freed(void) {
  char *a = malloc(64);
  free(a);
  errno = 0;
  void *r = realloc(announce(a), 100);
  CHECK(r == NULL && errno == EINVAL, "realloc of a freed block in warn mode: %p, errno %d", r, errno);
  no_block_twice(64);
}
static void c_realloc_freed_large(void) {
  char *a = malloc(LARGE);
  free(a);
  errno = 0;
  void *r = realloc(announce(a), 100);
  CHECK(r == NULL && errno == EINVAL, "realloc of a freed block in warn mode: %p, errno %d", r, errno);
}
static void c_usable_freed(void) {
  char *a = malloc(64);
  free(a);
  CHECK(malloc_usable_size(announce(a)) == 0, "malloc_usable_size of a freed block in warn mode");
}

/* malloc_usable_size's fast path (src/usable.h) sends all of these to the
 * checked path: a freed span, a freed packed block (a span in secure
 * mode), a pointer inside a packed block, inside a small block, and into a
 * slab emptied and released since */
static void c_usable_freed_large(void) {
  char *a = malloc(8u << 20);
  free(a);
  CHECK(malloc_usable_size(announce(a)) == 0, "malloc_usable_size of a freed block in warn mode");
}
static void c_usable_freed_packed(void) {
  char *a = malloc(300000), *b = malloc(300000); /* b keeps the pack */
  free(a);
  CHECK(malloc_usable_size(announce(a)) == 0, "malloc_usable_size of a freed block in warn mode");
  free(b);
}
static void c_usable_interior_packed(void) {
  char *p = live_block(300000);
  CHECK(malloc_usable_size(announce(p + 8192)) == 0, "malloc_usable_size of a bad pointer in warn mode");
  block_left_alone(p, 300000);
}
static void c_usable_interior_tiny(void) {
  char *p = live_block(64);
  CHECK(malloc_usable_size(announce(p + 16)) == 0, "malloc_usable_size of a bad pointer in warn mode");
  block_left_alone(p, 64);
}

/* across threads: a is allocated by the main thread (its owner); each of
 * the two frees is by the owner or by another thread */
static void *thread_free(void *p) {
  free(p);
  return NULL;
}
static void *thread_free_announced(void *p) {
  free(announce(p));
  return NULL;
}
static void free_in_thread(void *(*fn)(void *), void *p) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fn, p) == 0, "pthread_create");
  pthread_join(t, NULL);
}
static void c_double_owner_then_remote(void) {
  char *a = malloc(80);
  free(a);
  free_in_thread(thread_free_announced, a);
  no_block_twice(80);
}
static void c_double_remote_then_owner(void) {
  char *a = malloc(80);
  free_in_thread(thread_free, a);
  free(announce(a));
  no_block_twice(80);
}
static void c_double_remote_twice(void) {
  char *a = malloc(80);
  free_in_thread(thread_free, a);
  free_in_thread(thread_free_announced, a);
  no_block_twice(80);
}
/* The other thread is still alive at the owner's free: its first free left
 * the block in that thread's foreign cache, not on any list of the slab. */
static pthread_barrier_t cached_barrier;
static void *thread_free_and_stay(void *p) {
  free(p);
  pthread_barrier_wait(&cached_barrier); /* freed */
  pthread_barrier_wait(&cached_barrier); /* the owner's free is done */
  return NULL;
}
static void c_double_cached_then_owner(void) {
  char *a = malloc(80);
  pthread_t t;
  CHECK(pthread_barrier_init(&cached_barrier, NULL, 2) == 0, "pthread_barrier_init");
  CHECK(pthread_create(&t, NULL, thread_free_and_stay, a) == 0, "pthread_create");
  pthread_barrier_wait(&cached_barrier);
  free(announce(a));
  pthread_barrier_wait(&cached_barrier);
  pthread_join(t, NULL);
  no_block_twice(80);
}
/* a block of an exited thread (its SuperSlab abandoned), freed twice */
static void *thread_alloc(void *unused) {
  (void)unused;
  return malloc(80);
}
static void c_double_abandoned(void) {
  pthread_t t;
  void *a;
  CHECK(pthread_create(&t, NULL, thread_alloc, NULL) == 0, "pthread_create");
  pthread_join(t, &a);
  free(a);
  free(announce(a));
}

/* Free the blocks of v[0..n) in the 64 KiB slab at `slab`. */
static void free_slab_blocks(char **v, int n, uintptr_t slab) {
  for (int i = 0; i < n; i++)
    if (((uintptr_t)v[i] & ~(uintptr_t)0xffff) == slab) free(v[i]);
}

/* 64-byte blocks fill 64 KiB slabs: of RELEASE_N such blocks in v (three
 * slabs), free those of the middle slab, which becomes the class's spare,
 * then those of the first one's slab, which empties and releases that
 * slab, the class having a spare (the SuperSlab stays in use). Returns
 * the first slab's address. */
enum { RELEASE_N = 3000 };
static uintptr_t release_first_slab(char **v) {
  for (int i = 0; i < RELEASE_N; i++) CHECK((v[i] = malloc(64)) != NULL, "malloc");
  uintptr_t slab = (uintptr_t)v[0] & ~(uintptr_t)0xffff;
  uintptr_t middle = (uintptr_t)v[RELEASE_N / 2] & ~(uintptr_t)0xffff;
  uintptr_t last = (uintptr_t)v[RELEASE_N - 1] & ~(uintptr_t)0xffff;
  CHECK(middle != slab && middle != last, "the 64-byte blocks are not in three slabs");
  free_slab_blocks(v, RELEASE_N, middle);
  free_slab_blocks(v, RELEASE_N, slab);
  return slab;
}

/* The second free comes after the block's slab was emptied and released. */
static void c_double_released_slab(void) {
  static char *v[RELEASE_N];
  release_first_slab(v);
  free(announce(v[0]));
}

/* The same, but the released slab's memory went back to the OS before the
 * second free (malloc_trim): the block holds no free tag any more, and
 * the owner's block check alone must refuse it. */
static void c_usable_released_slab(void) {
  static char *v[RELEASE_N];
  release_first_slab(v);
  CHECK(malloc_usable_size(announce(v[0])) == 0, "malloc_usable_size of a freed block in warn mode");
}

static void c_double_released_purged(void) {
  static char *v[RELEASE_N];
  release_first_slab(v);
  malloc_trim(0);
  CHECK(((volatile uintptr_t *)v[0])[1] == 0, "the released slab's memory was not given back");
  free(announce(v[0]));
}

/* The same, but the released slab is then carved again for 48-byte
 * blocks, so that the slab's second 64-byte block (byte 64 of the slab's
 * blocks, 16 bytes into a 48-byte one) is no block boundary any more: the
 * free tag it still holds tells the second free. (Secure mode hands the
 * blocks out in random order: the slab's lowest block is its first.) */
static void c_double_recarved_slab(void) {
  static char *v[RELEASE_N], *w[RELEASE_N];
  uintptr_t slab = release_first_slab(v);
  /* (the pointers stay valid to compare: only their blocks were freed) */
  char *first = v[0], *second = NULL;
  for (int i = 0; i < RELEASE_N; i++)
    if (((uintptr_t)v[i] & ~(uintptr_t)0xffff) == slab && v[i] < first) first = v[i];
  for (int i = 0; i < RELEASE_N; i++)
    if (v[i] == first + 64) second = v[i];
  CHECK(second != NULL, "the slab's second block");
  int reused = 0;
  for (int i = 0; i < RELEASE_N; i++) {
    CHECK((w[i] = malloc(48)) != NULL, "malloc");
    reused |= ((uintptr_t)w[i] & ~(uintptr_t)0xffff) == slab;
  }
  CHECK(reused, "the released slab was not carved again for 48-byte blocks");
  free(announce(second));
}

/* A live block whose second word holds the free tag's value (read here from
 * a freed block): not a double free; the owner's list scan tells. */
static void c_tag_value_in_live_block(void) {
  uintptr_t *a = malloc(32);
  free(a);
  uintptr_t tag = ((volatile uintptr_t *)a)[1]; /* deliberately reads freed memory */
  uintptr_t *b = malloc(32);
  b[1] = tag;
  free(b);
  no_block_twice(32);
  say("CONTINUED\n");
  _exit(0);
}

/* A live block of a SuperSlab's first slab whose second word holds the
 * SuperSlab's base address (the end pointer of a buffer ending just below
 * it): not a double free, also when another thread frees it, where the tag
 * decides without a scan. (The default build's tag is a descriptor's
 * address; a descriptor at the SuperSlab's base made this a double free.) */
static void c_chunk_base_in_live_block(void) {
  enum { N = 70000 }; /* 32-byte blocks: more than a SuperSlab of 64 KiB slabs */
  static uintptr_t *v[N];
  const uintptr_t chunk = (uintptr_t)2 << 20;
  uintptr_t *b = NULL;
  for (int i = 0; i < N; i++) {
    CHECK((v[i] = malloc(32)) != NULL, "malloc");
    uintptr_t off = (uintptr_t)v[i] & (chunk - 1);
    if (b == NULL && off >= 4096 && off < 65536) b = v[i];
  }
  CHECK(b != NULL, "no 32-byte block in the first slab of a SuperSlab");
  b[1] = (uintptr_t)b & ~(chunk - 1);
  free_in_thread(thread_free, b);
  for (int i = 0; i < N; i++)
    if (v[i] != b) free(v[i]);
  no_block_twice(32);
  say("CONTINUED\n");
  _exit(0);
}

#ifdef HAKMEM_SECURE
/* ---- secure mode ------------------------------------------------------- */
/* Allocate blocks of a's size until a would be handed out again. */
static void reach(char *a, size_t n) {
  announce(a);
  for (int i = 0; i < 100000; i++)
    if (malloc(n) == a) FAILF("the modified freed block %p was handed out", (void *)a);
  FAILF("the freed block %p never came back", (void *)a);
}
/* a byte of the fill pattern (bytes 8..HM_FILL_BYTES) */
#if HM_FILL_BYTES == 16
#define FILL_PROBE 12
#elif HM_FILL_BYTES == 32
#define FILL_PROBE 20
#else
#define FILL_PROBE 40
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
static void c_write_after_free(void) {
  char *a = malloc(128);
  free(a);
  a[FILL_PROBE] ^= 1; /* (flipped: the random pattern's byte may be 1 already) */
  reach(a, 128);
}
static void c_write_after_free_tag(void) {
  char *a = malloc(128);
  free(a);
  a[9] ^= 1; /* the tag word (flipped, as above) */
  reach(a, 128);
}
/* a's list pointer: the damage is found when the list is followed past a,
 * and the message names the pointer it decoded to */
static void c_freelist_overwritten(void) {
  char *a = malloc(128), *b = malloc(128);
  free(b);
  free(a);
  memcpy(a, &b, sizeof b); /* a plain pointer where an encoded one belongs */
  announce(a);
  for (int i = 0; i < 100000; i++) (void)malloc(128);
  FAILF("the damaged list was never followed");
}
static void c_guard_superslab(void) {
  char *p = malloc(64);
  volatile char *end = (char *)((uintptr_t)p | ((2u << 20) - 1));
  announce((void *)end);
  *end = 1;
}
static void c_guard_large(void) {
  char *p = malloc(LARGE + 5000);
  size_t u = malloc_usable_size(p);
  memset(p, 1, u); /* all of the usable size is usable */
  announce(p + u);
  ((volatile char *)p)[u] = 1;
}
/* The span comes back from the cache at the same length, its guard page
 * still in place (no mprotect): it must still be there. (The block after
 * it keeps the freed span from merging with the free rest of the mapping.) */
static void c_guard_large_reused(void) {
  char *p = malloc(LARGE + 5000), *after = malloc(LARGE + 5000);
  memset(p, 1, malloc_usable_size(p));
  free(p);
  char *q = malloc(LARGE + 5000);
  free(after);
  CHECK(q == p, "the freed span was not reused (%p, then %p): the case tests nothing", (void *)p, (void *)q);
  size_t u = malloc_usable_size(q);
  memset(q, 2, u);
  announce(q + u);
  ((volatile char *)q)[u] = 1;
}

/* Probes of large blocks, a fault caught and compared with the address
 * expected to fault (NULL: none may). */
static sigjmp_buf probe_env;
static volatile char *probe_expect;
static void probe_handler(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)ctx;
  if ((volatile char *)si->si_addr != probe_expect) {
    say("FAIL: fault at %p, expected %p\n", si->si_addr, (void *)probe_expect);
    _exit(2);
  }
  siglongjmp(probe_env, 1);
}
static void probe_write(volatile char *at, volatile char *expect) {
  probe_expect = expect;
  if (sigsetjmp(probe_env, 1) == 0) {
    *at = 1;
    CHECK(expect == NULL, "no guard page at %p, the end of a large block", (void *)at);
  }
  probe_expect = NULL;
}
/* Large blocks through every path that moves a span's end (split from a
 * longer cached span, merged with cached neighbours, grown into them,
 * shrunk, grown or moved by mremap, reused at the same length, aligned,
 * calloc): each block handed out is writable up to its usable size and
 * faults right after it. A PROT_NONE page left inside a span would be a
 * former span end, a multiple of 2 MiB from its base: the last byte
 * before each such boundary is written (writing every page would take
 * seconds). */
static void check_large_block(char *p, size_t n) {
  size_t u = malloc_usable_size(p);
  CHECK(u >= n, "usable size %zu of a %zu-byte block", u, n);
  for (size_t k = (size_t)2 << 20; k < u; k += (size_t)2 << 20) probe_write(p + k - 1, NULL);
  probe_write(p + u - 1, NULL);
  probe_write(p + u, p + u);
}
static void c_guard_large_paths(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = probe_handler;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  enum { SLOTS = 12, OPS = 4000 };
  char *slot[SLOTS] = {0};
  size_t size[SLOTS] = {0};
  tc_rng r = {5};
  for (int i = 0; i < OPS; i++) {
    int k = (int)tc_below(&r, SLOTS);
    size_t n = ((size_t)256 << 10) + tc_below(&r, (size_t)12 << 20); /* 1 to 7 chunks */
    if (slot[k] == NULL) {
      switch (tc_below(&r, 4)) {
      case 0: /* the same size again: a cached span of this length, guard in place */
        n = size[k] != 0 ? size[k] : n;
        slot[k] = malloc(n);
        break;
      case 1:
        slot[k] = calloc(1, n);
        CHECK(slot[k] != NULL, "calloc(%zu)", n);
        for (size_t j = 0; j < n; j += 4096) CHECK(slot[k][j] == 0, "calloc(%zu): byte %zu is %d", n, j, slot[k][j]);
        CHECK(slot[k][n - 1] == 0, "calloc(%zu): the last byte is %d", n, slot[k][n - 1]);
        break;
      case 2:
        if (posix_memalign((void **)&slot[k], (size_t)1 << (12 + tc_below(&r, 11)), n) != 0) slot[k] = NULL;
        break;
      default:
        slot[k] = malloc(n);
      }
      CHECK(slot[k] != NULL, "allocation of %zu bytes", n);
    } else if (tc_below(&r, 2) == 0) {
      if (tc_below(&r, 4) == 0) n = size[k] + tc_below(&r, 4096); /* within its span */
      char *q = realloc(slot[k], n);
      CHECK(q != NULL, "realloc(%p, %zu)", (void *)slot[k], n);
      slot[k] = q;
    } else {
      free(slot[k]);
      slot[k] = NULL;
      continue;
    }
    size[k] = n;
    check_large_block(slot[k], n);
  }
  for (int k = 0; k < SLOTS; k++) free(slot[k]);
  say("CONTINUED\n");
  _exit(0);
}
/* In a fresh thread (fresh slabs), 200 blocks of one class: hakmem's plain
 * build hands them out in address order, secure mode in a random one. */
static void *order_thread(void *out) {
  uintptr_t *v = out;
  for (int i = 0; i < 200; i++) v[i] = (uintptr_t)malloc(208);
  return NULL;
}
static void c_random_order(void) {
  uintptr_t v[200];
  free_in_thread(order_thread, v);
  int ascending = 0;
  for (int i = 1; i < 200; i++) ascending += v[i] > v[i - 1];
  CHECK(ascending < 150, "secure mode: %d of 199 consecutive blocks in ascending address order", ascending);
  for (int i = 0; i < 200; i++) free((void *)v[i]);
  say("CONTINUED\n");
  _exit(0);
}
#endif

/* ---- the table --------------------------------------------------------- */
enum { ABORTS, SURVIVES, SEGV };
struct mcase {
  const char *name;
  void (*fn)(void);
  int expect;          /* ABORTS: misuse; SURVIVES: no report; SEGV: a guard page */
  const char *what;    /* "invalid free", "double free", ... */
  const char *reason;  /* exact text in parentheses ("a|b": a or b) */
  int always_aborts;   /* heap corruption: HAKMEM_ON_ERROR=warn does not apply */
  int other_ptr;       /* the message names a pointer the child cannot know */
};

static const struct mcase cases[] = {
    {"stack", c_stack, ABORTS, "invalid free", "not allocated by hakmem", 0, 0},
    {"global", c_global, ABORTS, "invalid free", "not allocated by hakmem", 0, 0},
    {"own_mmap", c_own_mmap, ABORTS, "invalid free", "not allocated by hakmem", 0, 0},
    {"wild", c_wild, ABORTS, "invalid free", "not allocated by hakmem", 0, 0},
    {"wild_high", c_wild_high, ABORTS, "invalid free", "not allocated by hakmem", 0, 0},
    {"wild_tagged", c_wild_tagged, ABORTS, "invalid free", "not allocated by hakmem", 0, 0},
    {"interior_tiny", c_interior_tiny, ABORTS, "invalid free", "interior pointer: byte 16 of a 64-byte block", 0, 0},
    {"unaligned_tiny", c_unaligned_tiny, ABORTS, "invalid free", "unaligned pointer: byte 1 of a 64-byte block", 0, 0},
    {"interior_mid", c_interior_mid, ABORTS, "invalid free", "interior pointer: byte 4096 of a 20480-byte block", 0, 0},
    {"interior_big", c_interior_big, ABORTS, "invalid free", "interior pointer: byte 65536 of a 212992-byte block",
     0, 0},
    {"interior_large", c_interior_large, ABORTS, "invalid free", "inside a large block, not its start", 0, 0},
    {"interior_large_tail", c_interior_large_tail, ABORTS, "invalid free", "inside a large block, not its start", 0, 0},
    {"uncarved", c_uncarved, ABORTS, "invalid free", "not a block hakmem handed out", 0, 0},
    {"superslab_header", c_superslab_header, ABORTS, "invalid free",
     "not a block: free space or metadata in a hakmem SuperSlab", 0, 0},
    {"realloc_stack", c_realloc_stack, ABORTS, "invalid free", "realloc: not allocated by hakmem", 0, 0},
    {"realloc_interior", c_realloc_interior, ABORTS, "invalid free",
     "realloc: interior pointer: byte 32 of a 112-byte block", 0, 0},
    {"usable_stack", c_usable_stack, ABORTS, "invalid free", "malloc_usable_size: not allocated by hakmem", 0, 0},
    {"usable_interior_large", c_usable_interior_large, ABORTS, "invalid free",
     "malloc_usable_size: inside a large block, not its start", 0, 0},
    {"double_tiny", c_double_tiny, ABORTS, "double free", "block already free", 0, 0},
    {"double_small", c_double_small, ABORTS, "double free", "block already free", 0, 0},
    {"double_mid", c_double_mid, ABORTS, "double free", "block already free", 0, 0},
    {"double_big", c_double_big, ABORTS, "double free", "block already free", 0, 0},
    {"double_large", c_double_large, ABORTS, "double free", "large block already freed", 0, 0},
    {"double_calloc", c_double_calloc, ABORTS, "double free", "block already free", 0, 0},
    {"double_memalign", c_double_memalign, ABORTS, "double free", "block already free", 0, 0},
    {"double_large_aligned", c_double_large_aligned, ABORTS, "double free", "large block already freed", 0, 0},
    /* the allocations between may have emptied, released and carved again
     * the block's slab (secure mode: the freed block's slab is not kept) */
    {"double_after_others", c_double_after_others, ABORTS, "double free",
     "block already free|block already free; its slab has been emptied since", 0, 0},
    {"double_reused", c_double_reused, ABORTS, "double free", "block already free", 0, 0},
    {"double_big_given_back", c_double_big_given_back, ABORTS, "invalid free", "not a block hakmem handed out", 0, 0},
    {"double_interleaved", c_double_interleaved, ABORTS, "double free", "block already free", 0, 0},
    {"realloc_freed", c_realloc_freed, ABORTS, "double free", "realloc: block already free", 0, 0},
    {"realloc_freed_large", c_realloc_freed_large, ABORTS, "double free", "realloc: large block already freed", 0, 0},
    {"usable_freed", c_usable_freed, ABORTS, "double free", "malloc_usable_size: block already free", 0, 0},
    {"usable_freed_large", c_usable_freed_large, ABORTS, "double free", "malloc_usable_size: large block already freed",
     0, 0},
    {"usable_freed_packed", c_usable_freed_packed, ABORTS, "double free",
     "malloc_usable_size: large block already freed", 0, 0},
    {"usable_interior_packed", c_usable_interior_packed, ABORTS, "invalid free",
     "malloc_usable_size: inside a large block, not its start", 0, 0},
    {"usable_interior_tiny", c_usable_interior_tiny, ABORTS, "invalid free",
     "malloc_usable_size: interior pointer: byte 16 of a 64-byte block", 0, 0},
    {"usable_released_slab", c_usable_released_slab, ABORTS, "double free",
     "malloc_usable_size: block already free; its slab has been emptied since", 0, 0},
    {"double_owner_then_remote", c_double_owner_then_remote, ABORTS, "double free", "block already free", 0, 0},
    {"double_remote_then_owner", c_double_remote_then_owner, ABORTS, "double free", "block already free", 0, 0},
    {"double_remote_twice", c_double_remote_twice, ABORTS, "double free", "block already free", 0, 0},
    {"double_cached_then_owner", c_double_cached_then_owner, ABORTS, "double free", "block already free", 0, 0},
    {"double_abandoned", c_double_abandoned, ABORTS, "double free", "block already free", 0, 0},
    {"double_released_slab", c_double_released_slab, ABORTS, "double free",
     "block already free; its slab has been emptied since", 0, 0},
    {"double_released_purged", c_double_released_purged, ABORTS, "double free",
     "block already free; its slab has been emptied since", 0, 0},
    {"double_recarved_slab", c_double_recarved_slab, ABORTS, "double free",
     "block already free; its slab has been emptied since", 0, 0},
    {"tag_value_in_live_block", c_tag_value_in_live_block, SURVIVES, NULL, NULL, 0, 0},
    {"chunk_base_in_live_block", c_chunk_base_in_live_block, SURVIVES, NULL, NULL, 0, 0},
#ifdef HAKMEM_SECURE
    {"write_after_free", c_write_after_free, ABORTS, "write after free", "freed block modified at byte " STR(FILL_PROBE), 1, 0},
    {"write_after_free_tag", c_write_after_free_tag, ABORTS, "write after free", "freed block modified at byte 9", 1, 0},
    {"freelist_overwritten", c_freelist_overwritten, ABORTS, "heap corruption",
     "free-list pointer of a freed block overwritten (write after free?)", 1, 1},
    {"guard_superslab", c_guard_superslab, SEGV, NULL, NULL, 1, 0},
    {"guard_large", c_guard_large, SEGV, NULL, NULL, 1, 0},
    {"guard_large_reused", c_guard_large_reused, SEGV, NULL, NULL, 1, 0},
    {"guard_large_paths", c_guard_large_paths, SURVIVES, NULL, NULL, 0, 0},
    {"random_order", c_random_order, SURVIVES, NULL, NULL, 0, 0},
#endif
};
#define NCASES (sizeof cases / sizeof cases[0])

/* ---- parent: run a case in a child and check what it did ---------------- */
struct out {
  char o[4096], e[4096];
  size_t no, ne;
};

static void drain(int fd, char *buf, size_t *n, size_t cap) {
  ssize_t r = read(fd, buf + *n, cap - 1 - *n);
  if (r > 0) *n += (size_t)r;
  buf[*n] = '\0';
}

/* Cases run with no foreign cache: they need a slab emptied by the
 * owner's frees, which wait in the cache while their slab is not current
 * and empty it only when they go home (docs/DESIGN.md, "Threads"). */
static bool without_cache(const char *name) {
  static const char *const names[] = {"usable_released_slab", "double_released_slab", "double_released_purged",
                                      "double_recarved_slab"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i]) == 0) return true;
  return false;
}

static int run_child(const char *self, const char *name, int warn, struct out *out) {
  int po[2], pe[2];
  CHECK(pipe(po) == 0 && pipe(pe) == 0, "pipe");
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(po[0]);
    close(pe[0]);
    if (warn) setenv("HAKMEM_ON_ERROR", "warn", 1);
    else unsetenv("HAKMEM_ON_ERROR");
    setenv("HAKMEM_BIG_IDLE_SPACING_MS", "100", 1); /* (double_big_given_back) */
    if (without_cache(name)) setenv("HAKMEM_FOREIGN_CACHE_KB", "0", 1);
    execl(self, self, "child", name, (char *)NULL);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  memset(out, 0, sizeof *out);
  struct pollfd pf[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    CHECK(poll(pf, 2, 30000) > 0, "case %s: child silent for 30 s", name);
    for (int i = 0; i < 2; i++) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP))) continue;
      size_t before = i == 0 ? out->no : out->ne;
      if (i == 0) drain(pf[i].fd, out->o, &out->no, sizeof out->o);
      else drain(pf[i].fd, out->e, &out->ne, sizeof out->e);
      if ((i == 0 ? out->no : out->ne) == before) { /* EOF */
        close(pf[i].fd);
        pf[i].fd = -1;
        open_fds--;
      }
    }
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  return st;
}

static void check_case(const char *self, const struct mcase *c, int warn) {
  struct out out;
  int st = run_child(self, c->name, warn, &out);
  const char *mode = warn ? "HAKMEM_ON_ERROR=warn" : "default";
  char ptr[64] = "";
  const char *pl = strstr(out.o, "PTR ");
  if (pl) sscanf(pl + 4, "%63s", ptr);
  if (c->expect == SEGV) {
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "case %s (%s): expected SIGSEGV on the guard page %s, got "
          "status 0x%x; stderr: %s", c->name, mode, ptr, st, out.e);
    const char *fl = strstr(out.o, "FAULT ");
    char fault[64] = "";
    if (fl) sscanf(fl + 6, "%63s", fault);
    CHECK(ptr[0] != '\0' && strcmp(fault, ptr) == 0, "case %s (%s): the fault was at %s, not at the guard page %s",
          c->name, mode, fault[0] ? fault : "(none reported)", ptr[0] ? ptr : "(not reached)");
    return;
  }
  if (c->expect == SURVIVES) {
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out.o, "CONTINUED"),
          "case %s (%s): expected a normal exit, got status 0x%x; stdout: %s stderr: %s", c->name, mode, st, out.o,
          out.e);
    CHECK(out.ne == 0, "case %s (%s): unexpected message: %s", c->name, mode, out.e);
    return;
  }
  CHECK(ptr[0] != '\0', "case %s (%s): the child did not get to the misuse (status 0x%x); stdout: %s stderr: %s",
        c->name, mode, st, out.o, out.e);
  char want[512];
  if (c->other_ptr) { /* "hakmem: error: WHAT of 0x<hex> (REASON)\n" */
    char head[128], tail[384];
    snprintf(head, sizeof head, "hakmem: error: %s of 0x", c->what);
    snprintf(tail, sizeof tail, " (%s)\n", c->reason);
    size_t nh = strlen(head), nt = strlen(tail);
    CHECK(out.ne > nh + nt && strncmp(out.e, head, nh) == 0 && strcmp(out.e + out.ne - nt, tail) == 0 &&
              strspn(out.e + nh, "0123456789abcdef") == out.ne - nh - nt,
          "case %s (%s): stderr\n  %s  expected\n  %s<hex>%s", c->name, mode, out.e, head, tail);
  } else {
    /* each alternative of the reason in turn */
    const char *r = c->reason;
    bool match = false;
    for (;;) {
      const char *bar = strchr(r, '|');
      int n = bar ? (int)(bar - r) : (int)strlen(r);
      snprintf(want, sizeof want, "hakmem: error: %s of %s (%.*s)\n", c->what, ptr, n, r);
      if ((match = strcmp(out.e, want) == 0) || !bar) break;
      r = bar + 1;
    }
    CHECK(match, "case %s (%s): stderr\n  %s  expected exactly\n  hakmem: error: %s of %s (%s)\n", c->name, mode,
          out.e, c->what, ptr, c->reason);
  }
  if (warn && !c->always_aborts) {
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out.o, "CONTINUED"),
          "case %s (warn): the program should continue after the message; status 0x%x, stdout: %s", c->name, st,
          out.o);
  } else {
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "case %s (%s): expected SIGABRT, got status 0x%x", c->name,
          mode, st);
  }
}

/* SEGV cases: the child says where it faulted ("FAULT 0x...", as %p
 * prints it), then dies of the fault (the handler is reset). */
static void fault_handler(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)ctx;
  char line[32] = "FAULT 0x", *at = line + 8;
  uintptr_t a = (uintptr_t)si->si_addr;
  int shift = 60;
  while (shift > 0 && (a >> shift) == 0) shift -= 4;
  for (; shift >= 0; shift -= 4) *at++ = "0123456789abcdef"[(a >> shift) & 15];
  *at++ = '\n';
  if (write(1, line, (size_t)(at - line)) < 0) _exit(3);
}
static void report_fault(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fault_handler;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &sa, NULL);
}

int main(int argc, char **argv) {
  tc_test_name = "misuse";
  if (argc == 3 && strcmp(argv[1], "child") == 0) {
    const char *v = getenv("HAKMEM_ON_ERROR");
    warn_mode = v != NULL && strcmp(v, "warn") == 0;
    for (size_t i = 0; i < NCASES; i++)
      if (strcmp(cases[i].name, argv[2]) == 0) {
        static char name[80];
        snprintf(name, sizeof name, "misuse %s", argv[2]);
        tc_test_name = name;
        if (cases[i].expect == SEGV) report_fault();
        cases[i].fn();
        /* reached only when hakmem let the program go on (warn mode) */
        heap_still_works();
        say("CONTINUED\n");
        return 0;
      }
    FAILF("no case %s", argv[2]);
  }
  if (!HAKMEM_SPECIFIC) {
    printf("misuse: hakmem-specific, skipped under the shim\n");
    return 77;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0, "readlink /proc/self/exe");
  self[n] = '\0';
  for (size_t i = 0; i < NCASES; i++) {
    check_case(self, &cases[i], 0);
    if (cases[i].expect == ABORTS) check_case(self, &cases[i], 1);
  }
  printf("misuse: %zu cases, each in the default mode%s and with HAKMEM_ON_ERROR=warn\n", NCASES,
#ifdef HAKMEM_SECURE
         " (secure build)"
#else
         ""
#endif
  );
  return 0;
}
