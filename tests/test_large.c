/* The large lane (src/large.c) and the lane boundaries.
 *
 *   test_large [NAME]   runs one part, or all of them:
 *   boundaries  sizes just below/at/above DIRECT_MAX, the Pool limit and 2 MiB
 *               multiples: the right lane, usable size, content, calloc zero
 *   cache       a freed span is reused without an mmap; a longer one is split
 *   realloc     grow within the span, into a cached neighbour, in place by
 *               mremap, moved by mremap (counted, nothing mapped, content
 *               kept, registry follows: the old address is no block any more),
 *               shrink in place (also below the Pool limit, down to 64 KiB),
 *               shrink into the Pool, Pool -> large
 *   aligned     alignments 8 KiB .. 32 MiB
 *   trim        malloc_trim(0) gives every cached span back
 *   release     hm_large_release(min_idle) unmaps only spans idle that long
 *               (run with HAKMEM_PURGE=off, so that no purge step gives their
 *               pages back first)
 *   dirty       a request takes the cached span whose dirty extent fits it
 *               best, not the newest; hm_large_purge (what the purger calls)
 *               gives back the pages of spans idle that long and keeps them
 *               mapped and cached
 *   bound       HAKMEM_ACE_MAX_MB is honoured (run with the variable set)
 *   trace       HAKMEM_ACE_TRACE=1 lines for Threshold, MapFail (RLIMIT_AS),
 *               Exhaustion, a failed realloc, and none for successes
 *   invalid     double free, a stale pointer after a move (a double free
 *               too: realloc freed it) and an interior pointer abort
 *   threads     4 threads allocating, growing and freeing large blocks
 *   grow_cached a request longer than any cached span grows one (mremap)
 *   gather      ... or is made of several, their pages moved into one mapping
 *   churn       blocks of 5-25 MiB churned in 20 slots: few OS calls
 *
 * hakmem-specific (OS counters, lanes): skipped under the test shim.
 *
 * Built a second time as test_ace_unaligned, with mmap and mremap replaced
 * (below) so that every mapping of whole 2 MiB chunks lands 1 MiB off a
 * chunk boundary, as older kernels may place them: spans then share their
 * first and last chunks with their neighbours. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "hakmem.h"
#include "internal.h" /* DIRECT_MAX, POOL_MAX, SS_SIZE: the lane limits under test */

#ifdef LARGE_UNALIGNED_OS
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define CHUNK ((uintptr_t)2 << 20)
static bool whole_chunks(size_t len) { return len >= CHUNK && len % CHUNK == 0; }

/* Reserve len bytes at an address 1 MiB past a chunk boundary. */
static void *map_off_chunk(size_t len, int prot, int flags) {
  long raw = syscall(SYS_mmap, NULL, len + CHUNK, prot, flags, -1, 0);
  if (raw == -1) return MAP_FAILED;
  uintptr_t r = (uintptr_t)raw, t = ((r + CHUNK / 2 + CHUNK - 1) & ~(CHUNK - 1)) - CHUNK / 2;
  if (t > r) syscall(SYS_munmap, r, t - r);
  syscall(SYS_munmap, t + len, r + len + CHUNK - (t + len));
  return (void *)t;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (addr == NULL && fd == -1 && (flags & MAP_ANONYMOUS) && whole_chunks(len)) return map_off_chunk(len, prot, flags);
  return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  if (flags & MREMAP_FIXED) { /* (a move to a place of the caller's) */
    va_list ap;
    va_start(ap, flags);
    void *to = va_arg(ap, void *);
    va_end(ap);
    return (void *)syscall(SYS_mremap, old, old_len, new_len, flags, to);
  }
  long r = syscall(SYS_mremap, old, old_len, new_len, flags & ~MREMAP_MAYMOVE, NULL);
  if (r != -1 || !(flags & MREMAP_MAYMOVE) || (flags & MREMAP_FIXED) || !whole_chunks(new_len)) {
    if (r == -1 && (flags & MREMAP_MAYMOVE) && !(flags & MREMAP_FIXED))
      r = syscall(SYS_mremap, old, old_len, new_len, flags, NULL);
    return (void *)r;
  }
  void *t = map_off_chunk(new_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  if (t == MAP_FAILED) return MAP_FAILED;
  r = syscall(SYS_mremap, old, old_len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, t);
  if (r == -1) {
    int e = errno;
    syscall(SYS_munmap, t, new_len);
    errno = e;
  }
  return (void *)r;
}
#endif

static struct hak_os_stats st0;
static void mark(void) { hak_os_stats_get(&st0); }
static size_t d_mmap(void) {
  struct hak_os_stats s;
  hak_os_stats_get(&s);
  return s.mmap_calls - st0.mmap_calls;
}
static size_t d_munmap(void) {
  struct hak_os_stats s;
  hak_os_stats_get(&s);
  return s.munmap_calls - st0.munmap_calls;
}
static size_t d_mremap(void) {
  struct hak_os_stats s;
  hak_os_stats_get(&s);
  return s.mremap_calls - st0.mremap_calls;
}
static size_t span_of(size_t n) { return (n + SS_SIZE - 1) & ~(SS_SIZE - 1); }

/* ---- boundaries --------------------------------------------------------- */

static void one_size(size_t n, uint64_t seed) {
  char *p = malloc(tc_opaque(n));
  CHECK(p, "malloc(%zu)", n);
  size_t us = malloc_usable_size(p);
  CHECK(us >= n, "usable(%zu) = %zu", n, us);
  if (n <= POOL_MAX) {
    CHECK(n <= 128 || us <= n + n / 8 + 16, "malloc(%zu) in the Pool: usable %zu wastes more than 12.5%%", n, us);
    CHECK(us < SS_SIZE, "malloc(%zu): usable %zu, a Pool block expected", n, us);
  } else {
    CHECK(us == span_of(n), "malloc(%zu) in the large lane: usable %zu, expected the span %zu", n, us, span_of(n));
#ifdef LARGE_UNALIGNED_OS
    CHECK(((uintptr_t)p & (SS_SIZE - 1)) == SS_SIZE / 2, "unaligned mmap not in effect: %p", (void *)p);
#endif
    CHECK(((uintptr_t)p & 4095) == 0, "large block %p not page aligned", (void *)p);
  }
  tc_fill(p, us, seed);
  CHECK_PATTERN(p, us, seed, "malloc(%zu)", n);
  free(p);
  /* calloc after a dirty block of the same size was freed */
  p = calloc(1, tc_opaque(n));
  CHECK(p, "calloc(%zu)", n);
  CHECK(tc_find_not(p, n, 0) == (size_t)-1, "calloc(%zu) after reuse not zeroed", n);
  free(p);
}

static void test_boundaries(void) {
  const size_t limits[] = {DIRECT_MAX, POOL_MAX, SS_SIZE, 2 * SS_SIZE, 3 * SS_SIZE, 32 * SS_SIZE, 33 * SS_SIZE};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
    for (int d = -1; d <= 1; d++) one_size(limits[i] + (size_t)(ptrdiff_t)d, 100 + i * 3 + (size_t)(d + 1));
  one_size(POOL_MAX + 4096, 7);
  /* just above the limit: a large block, of one chunk */
  void *p = malloc(tc_opaque(POOL_MAX + 1));
  CHECK(malloc_usable_size(p) == SS_SIZE, "malloc(POOL_MAX + 1) not a one-chunk span");
  free(p);
}

/* ---- cache ---------------------------------------------------------------- */

static void test_cache(void) {
  malloc_trim(0);
  char *p = malloc(3 * MiB);
  CHECK(p, "malloc(3 MiB)");
  memset(p, 1, 3 * MiB);
  free(p);
  mark();
  char *q = malloc(3 * MiB + 4096); /* same span length */
  CHECK(q, "malloc(3 MiB + 4 KiB)");
  CHECK(d_mmap() == 0 && d_munmap() == 0, "reuse made %zu mmap / %zu munmap", d_mmap(), d_munmap());
  CHECK(q == p, "the cached span %p was not reused (got %p)", (void *)p, (void *)q);
  free(q);
  /* a longer cached span is split for a shorter request, the rest kept */
  char *big = malloc(6 * MiB);
  CHECK(big, "malloc(6 MiB)");
  free(big);
  malloc_trim(0);
  big = malloc(6 * MiB);
  free(big);
  mark();
  char *a = malloc(2 * MiB), *b = malloc(4 * MiB);
  CHECK(a && b, "malloc from a split span");
  CHECK(d_mmap() == 0, "splitting a cached 6 MiB span made %zu mmap calls", d_mmap());
  CHECK(a == big && b == big + 2 * MiB, "split pieces at %p and %p, span at %p", (void *)a, (void *)b, (void *)big);
  free(a);
  free(b);
}

/* ---- realloc ---------------------------------------------------------------- */

static void test_realloc(void) {
  malloc_trim(0);
  /* within the span: no OS call, same block */
  char *p = malloc(POOL_MAX + 1);
  tc_fill(p, POOL_MAX + 1, 1);
  mark();
  char *q = realloc(p, SS_SIZE);
  CHECK(q == p && d_mremap() == 0 && d_mmap() == 0, "grow within the span moved (%p -> %p) or called the OS",
        (void *)p, (void *)q);
  CHECK_PATTERN(q, POOL_MAX + 1, 1, "grow within the span");
  free(q);

  /* into a cached neighbour: a 6 MiB span split into 2 MiB (used) + 4 MiB (cached) */
  malloc_trim(0);
  char *big = malloc(6 * MiB);
  free(big);
  p = malloc(2 * MiB);
  CHECK(p == big, "2 MiB not split from the cached 6 MiB span");
  tc_fill(p, 2 * MiB, 2);
  mark();
  q = realloc(p, 5 * MiB);
  CHECK(q == p, "grow into the cached neighbour moved the block");
  CHECK(d_mremap() == 0 && d_mmap() == 0, "grow into the cached neighbour called the OS");
  CHECK(malloc_usable_size(q) == 6 * MiB, "usable %zu after growing to 5 MiB", malloc_usable_size(q));
  CHECK_PATTERN(q, 2 * MiB, 2, "grow into a neighbour");
  memset(q + 2 * MiB, 3, 3 * MiB);
  free(q);

  /* in place by mremap: the neighbour was given back, its range is free */
  malloc_trim(0);
  big = malloc(6 * MiB);
  free(big);
  p = malloc(2 * MiB);
  CHECK(p == big, "2 MiB not split from the cached 6 MiB span");
  malloc_trim(0); /* unmaps the 4 MiB rest: a hole right after p */
  tc_fill(p, 2 * MiB, 4);
  mark();
  q = realloc(p, 5 * MiB);
  CHECK(q != NULL && d_mremap() == 1 && d_mmap() == 0, "in-place grow: %zu mremap, %zu mmap", d_mremap(), d_mmap());
  CHECK(q == p, "grow into a free range moved the block (%p -> %p)", (void *)p, (void *)q);
  CHECK_PATTERN(q, 2 * MiB, 4, "in-place mremap");
  memset(q + 2 * MiB, 5, 3 * MiB);
  free(q);

  /* moved by mremap: another live block follows */
  malloc_trim(0);
  big = malloc(6 * MiB);
  free(big);
  p = malloc(2 * MiB);
  char *after = malloc(2 * MiB);
  CHECK(p == big && after == big + 2 * MiB, "layout: %p %p in %p", (void *)p, (void *)after, (void *)big);
  tc_fill(p, 2 * MiB, 6);
  tc_fill(after, 2 * MiB, 7);
  mark();
  q = realloc(p, 9 * MiB);
  CHECK(q != NULL && q != p, "grow with a live neighbour did not move");
  CHECK(d_mremap() >= 1 && d_mmap() == 0, "move: %zu mremap, %zu mmap (pages must be moved, not copied)",
        d_mremap(), d_mmap());
  CHECK_PATTERN(q, 2 * MiB, 6, "moved by mremap");
  CHECK_PATTERN(after, 2 * MiB, 7, "neighbour of a moved block");
  CHECK(malloc_usable_size(q) == 10 * MiB, "usable %zu after the move", malloc_usable_size(q));
  memset(q + 2 * MiB, 8, 7 * MiB);
  /* the moved block grows again, shrinks, and is freed normally */
  q = realloc(q, 10 * MiB);
  CHECK_PATTERN(q, 2 * MiB, 6, "second grow");
  free(after);
  free(q);

  /* shrink in place: the chunks past the end are cached and reused */
  malloc_trim(0);
  p = malloc(7 * MiB);
  tc_fill(p, 3 * MiB, 9);
  mark();
  q = realloc(p, 3 * MiB);
  CHECK(q == p && malloc_usable_size(q) == 4 * MiB, "shrink 8 -> 4 MiB span: %p -> %p, usable %zu", (void *)p,
        (void *)q, malloc_usable_size(q));
  char *tail = malloc(4 * MiB);
  CHECK(tail == p + 4 * MiB && d_mmap() == 0 && d_munmap() == 0, "the cut-off 4 MiB was not reused (%p)",
        (void *)tail);
  CHECK_PATTERN(q, 3 * MiB, 9, "shrink in place");
  free(tail);
  free(q);

  /* below the Pool limit but above 64 KiB: stays in the span's first chunk
   * (no copy), the rest cached */
  p = malloc(5 * MiB);
  tc_fill(p, 200 * 1024, 11);
  q = realloc(p, 200 * 1024);
  CHECK(q == p && malloc_usable_size(q) == 2 * MiB, "shrink 6 MiB -> 200 KiB: %p -> %p, usable %zu", (void *)p,
        (void *)q, malloc_usable_size(q));
  CHECK_PATTERN(q, 200 * 1024, 11, "shrink to 200 KiB in place");
  free(q);
  /* to 64 KiB or less: moved into the Pool, the span freed */
  p = malloc(3 * MiB);
  tc_fill(p, 3 * MiB, 10);
  q = realloc(p, 1000);
  CHECK(q != p && malloc_usable_size(q) < 2 * 1000, "shrink below the Pool limit stayed large");
  CHECK_PATTERN(q, 1000, 10, "shrink into the Pool");
  /* and back up */
  p = realloc(q, 5 * MiB);
  CHECK(p != NULL && malloc_usable_size(p) == 6 * MiB, "Pool -> large");
  CHECK_PATTERN(p, 1000, 10, "Pool -> large");
  free(p);
}

/* ---- aligned ----------------------------------------------------------------- */

static void test_aligned(void) {
  const size_t sizes[] = {1, 4096, POOL_MAX + 1, 3 * MiB};
  for (unsigned sh = 13; sh <= 25; sh++) {
    size_t al = (size_t)1 << sh;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      void *p = NULL;
      CHECK(posix_memalign(&p, al, sizes[i]) == 0 && p, "posix_memalign(%zu, %zu)", al, sizes[i]);
      CHECK(((uintptr_t)p & (al - 1)) == 0, "posix_memalign(%zu, %zu) = %p", al, sizes[i], p);
      CHECK(malloc_usable_size(p) >= sizes[i], "usable of an aligned block");
      tc_fill(p, sizes[i], sh * 10 + i);
      void *q = aligned_alloc(al, sizes[i]);
      CHECK(q && ((uintptr_t)q & (al - 1)) == 0, "aligned_alloc(%zu, %zu) = %p", al, sizes[i], q);
      CHECK_PATTERN(p, sizes[i], sh * 10 + i, "aligned %zu", al);
      free(q);
      free(p);
    }
  }
}

/* ---- trim and the byte bound ----------------------------------------------------- */

static void test_trim(void) {
  void *p[4];
  for (int i = 0; i < 4; i++) p[i] = malloc((size_t)(i + 1) * 3 * MiB);
  for (int i = 0; i < 4; i++) free(p[i]);
  struct hak_os_stats a, b;
  hak_os_stats_get(&a);
  CHECK(malloc_trim(0) == 1, "malloc_trim(0) with cached spans returned 0");
  hak_os_stats_get(&b);
  CHECK(b.munmap_calls > a.munmap_calls, "malloc_trim made no munmap");
  CHECK(a.committed_bytes - b.committed_bytes >= (4 + 6 + 10 + 12) * MiB,
        "malloc_trim gave back %zu KiB, the cache held 32 MiB", (a.committed_bytes - b.committed_bytes) / 1024);
  mark();
  free(malloc(3 * MiB));
  CHECK(d_mmap() == 1, "after malloc_trim a large block still came from the cache");
}

static void test_dirty(void) {
  malloc_trim(0);
  /* three 2 MiB spans, each from one refill; the live third keeps the
   * second from merging with the refill's clean rest */
  char *big = malloc(1900 * 1024), *small = malloc(300 * 1024), *sep = malloc(300 * 1024);
  CHECK(big && small && sep, "malloc");
  memset(big, 1, 1900 * 1024);
  memset(small, 1, 300 * 1024);
  free(small);
  free(big); /* newest, but dirty to 1900 KiB */
  mark();
  char *a = malloc(300 * 1024);
  CHECK(a == small, "a 300 KiB request took %p, not the span dirty to 300 KiB (%p; newest %p)", (void *)a,
        (void *)small, (void *)big);
  char *b = malloc(1900 * 1024);
  CHECK(b == big, "a 1900 KiB request took %p, not the span dirty to 1900 KiB (%p)", (void *)b, (void *)big);
  CHECK(d_mmap() == 0, "reuse made %zu mmap calls", d_mmap());
  free(a);
  free(b);
  /* purge: pages of spans idle that long given back, the spans kept */
  struct hak_os_stats s0, s1;
  hak_os_stats_get(&s0);
  uint64_t due = UINT64_MAX;
  CHECK(hm_large_purge(hm_now_ns(), 60ull * 1000 * 1000 * 1000, 64u << 20, &due) == 0,
        "purge(idle 60 s) gave back spans freed just now");
  CHECK(due != UINT64_MAX && due > hm_now_ns(), "purge(idle 60 s) set no due time");
  size_t got = hm_large_purge(hm_now_ns(), 0, 64u << 20, &due);
  hak_os_stats_get(&s1);
  CHECK(got >= (1900 + 300) * 1024, "purge(0) gave back %zu KiB, expected at least 2200", got / 1024);
  CHECK(s1.madvise_calls > s0.madvise_calls && s1.munmap_calls == s0.munmap_calls,
        "purge made %zu madvise and %zu munmap calls", s1.madvise_calls - s0.madvise_calls,
        s1.munmap_calls - s0.munmap_calls);
  CHECK(s1.committed_bytes == s0.committed_bytes, "purge changed committed bytes");
  CHECK(hm_large_purge(hm_now_ns(), 0, 64u << 20, &due) == 0, "a second purge found more");
  mark();
  a = malloc(1900 * 1024);
  CHECK(a == big || a == small, "the purged spans were not reused (%p)", (void *)a);
  CHECK(d_mmap() == 0, "reusing a purged span made %zu mmap calls", d_mmap());
  memset(a, 2, 1900 * 1024);
  free(a);
  free(sep);
  malloc_trim(0);
}

static void test_release(void) {
  malloc_trim(0);
  /* longer than a refill's half: each mapped exactly; sep keeps old and
   * young apart */
  char *old = malloc(20 * MiB), *sep = malloc(10 * MiB), *young = malloc(40 * MiB);
  CHECK(old && sep && young, "malloc");
  free(old);
  usleep(300 * 1000);
  free(young);
  struct hak_os_stats a, b;
  hak_os_stats_get(&a);
  size_t got = hm_large_release(200ull * 1000 * 1000);
  hak_os_stats_get(&b);
  CHECK(got == 20 * MiB, "release(200 ms) gave back %zu KiB, expected the 20 MiB span idle for 300 ms", got / 1024);
  CHECK(a.committed_bytes - b.committed_bytes == 20 * MiB, "committed fell by %zu KiB",
        (a.committed_bytes - b.committed_bytes) / 1024);
  got = hm_large_release(0);
  CHECK(got >= 40 * MiB, "release(0) gave back %zu KiB, the 40 MiB span is cached", got / 1024);
  CHECK(hm_large_release(0) == 0, "a second release(0) found more");
  free(sep);
  malloc_trim(0);
  /* neighbours freed more than an epoch (1 s) apart are not merged: the
   * idle one keeps its age */
  char *x = malloc(20 * MiB), *y = malloc(20 * MiB);
  CHECK(x && y && (x == y + 20 * MiB || y == x + 20 * MiB), "two 20 MiB spans not adjacent: %p %p", (void *)x,
        (void *)y);
  free(x);
  usleep(1200 * 1000);
  free(y);
  got = hm_large_release(1000ull * 1000 * 1000);
  CHECK(got == 20 * MiB, "release(1 s) gave back %zu KiB: the idle span was merged with a fresh one", got / 1024);
  malloc_trim(0);
}

/* A request longer than every cached span grows the most resident one
 * (mremap) instead of mapping a fresh span: no mmap, and the mapping grows
 * only by the difference. */
static void test_grow_cached(void) {
  malloc_trim(0);
  char *a = malloc(6 * MiB);
  memset(a, 1, 6 * MiB);
  free(a);
  malloc_trim(0); /* nothing cached but... */
  a = malloc(6 * MiB);
  memset(a, 1, 6 * MiB);
  char *sep = malloc(3 * MiB); /* (whatever the refill left after a, taken) */
  free(a); /* ...a: a span of 6 MiB, resident */
  struct hak_os_stats s0, s1;
  hak_os_stats_get(&s0);
  mark();
  char *b = malloc(20 * MiB);
  hak_os_stats_get(&s1);
  CHECK(b != NULL, "malloc");
  CHECK(d_mmap() == 0, "a 20 MiB request with a 6 MiB span cached: %zu mmap, %zu mremap", d_mmap(), d_mremap());
  CHECK(s1.committed_bytes - s0.committed_bytes <= 14 * MiB, "the lane mapped %zu KiB more for 20 MiB, 6 MiB cached",
        (s1.committed_bytes - s0.committed_bytes) / 1024);
  CHECK(malloc_usable_size(b) == 20 * MiB, "usable %zu", malloc_usable_size(b));
  memset(b, 2, 20 * MiB);
  free(b);
  free(sep);
}

/* A request longer than every cached span, with two dirty cached spans
 * that fit in it together: their pages are moved into one new mapping
 * (one mmap and an mremap each), so the lane maps no more memory than
 * before, and the block starts with the most resident one's pages, then
 * the other's (their contents show it). */
static void test_gather(void) {
  malloc_trim(0);
  char *a = malloc(10 * MiB), *s1 = malloc(10 * MiB), *b = malloc(12 * MiB), *s2 = malloc(10 * MiB);
  CHECK(a && s1 && b && s2, "malloc");
  memset(a, 0xA1, 10 * MiB);
  memset(b, 0xB2, 12 * MiB);
  free(a);
  free(b); /* (the blocks between keep them apart) */
  struct hak_os_stats s0, st;
  hak_os_stats_get(&s0);
  mark();
  unsigned char *c = malloc(22 * MiB);
  hak_os_stats_get(&st);
  CHECK(c != NULL, "malloc");
  CHECK(d_mmap() == 1 && d_mremap() == 2, "gathering two spans: %zu mmap, %zu mremap", d_mmap(), d_mremap());
  CHECK(st.committed_bytes == s0.committed_bytes, "the lane mapped %ld KiB more for 22 MiB with 22 MiB cached",
        (long)(st.committed_bytes - s0.committed_bytes) / 1024);
  CHECK(c[0] == 0xB2 && c[12 * MiB - 1] == 0xB2 && c[12 * MiB] == 0xA1 && c[22 * MiB - 1] == 0xA1,
        "the block does not hold the cached spans' pages: %#x %#x %#x %#x", c[0], c[12 * MiB - 1], c[12 * MiB],
        c[22 * MiB - 1]);
  memset(c, 3, 22 * MiB);
  free(c);
  free(s1);
  free(s2);
}

/* Blocks of 5-25 MiB churned in 20 slots (each step replaces a random one,
 * the new block allocated before the old one is freed, as C++'s
 * `v[j] = make_unique<char[]>(n)` does): after a warm-up, spans are reused
 * across sizes (split, merged back, grown), so the lane makes few calls. */
static void test_churn(void) {
  malloc_trim(0);
  enum { SLOTS = 20, WARM = 100, STEPS = 400 };
  char *v[SLOTS] = {0};
  tc_rng r = {42};
  for (int i = 0; i < WARM + STEPS; i++) {
    if (i == WARM) mark();
    size_t j = tc_below(&r, SLOTS), n = (5 + tc_below(&r, 21)) * MiB;
    char *p = malloc(n);
    CHECK(p != NULL, "malloc(%zu)", n);
    p[0] = p[n - 1] = 1;
    free(v[j]);
    v[j] = p;
  }
  size_t calls = d_mmap() + d_munmap() + d_mremap();
  CHECK(calls <= STEPS / 20, "%d steps made %zu mmap, %zu munmap, %zu mremap", STEPS, d_mmap(), d_munmap(),
        d_mremap());
  for (int j = 0; j < SLOTS; j++) free(v[j]);
}

/* HAKMEM_ACE_MAX_MB=8 (set by ctest): of six 4 MiB spans freed, at most
 * 8 MiB stay cached (and some do), and only that much is reused. */
static void test_bound(void) {
  const char *v = getenv("HAKMEM_ACE_MAX_MB");
  if (v == NULL || strcmp(v, "8") != 0) FAILF("run with HAKMEM_ACE_MAX_MB=8");
  malloc_trim(0);
  void *p[6];
  for (int i = 0; i < 6; i++) CHECK((p[i] = malloc(3 * MiB)) != NULL, "malloc");
  struct hak_os_stats a, b;
  hak_os_stats_get(&a);
  for (int i = 0; i < 6; i++) {
    free(p[i]);
    hak_os_stats_get(&b);
    size_t cached = (size_t)(i + 1) * 4 * MiB - (a.committed_bytes - b.committed_bytes);
    CHECK(cached <= 8 * MiB, "%zu KiB cached after %d frees, bound 8 MiB", cached / 1024, i + 1);
  }
  size_t cached = 24 * MiB - (a.committed_bytes - b.committed_bytes);
  CHECK(cached >= 4 * MiB, "only %zu KiB cached", cached / 1024);
  CHECK(b.munmap_calls > a.munmap_calls, "no span was unmapped");
  mark();
  /* (a cached span shorter than a request is grown to it by mremap) */
  for (int i = 0; i < 6; i++) p[i] = malloc(3 * MiB);
  CHECK(d_mmap() + d_mremap() == 6 - cached / (4 * MiB), "re-allocating six with %zu KiB cached: %zu mmap, %zu mremap",
        cached / 1024, d_mmap(), d_mremap());
  for (int i = 0; i < 6; i++) free(p[i]);
}

/* ---- trace ------------------------------------------------------------------ */

static void limit_as(size_t headroom) {
  size_t vm = tc_status_bytes("VmSize");
  struct rlimit rl = {vm + headroom, vm + headroom};
  if (setrlimit(RLIMIT_AS, &rl) != 0) FAILF("setrlimit: %s", strerror(errno));
}

/* Child side: make one allocation fail (or none), exit 0 if it behaved. */
static int trace_child(const char *what) {
  errno = 0;
  if (strcmp(what, "threshold") == 0) {
    void *p = malloc(tc_opaque((size_t)PTRDIFF_MAX));
    return p == NULL && errno == ENOMEM ? 0 : 1;
  }
  if (strcmp(what, "mapfail") == 0) {
    malloc_trim(0); /* nothing cached: the OS refuses outright */
    limit_as(32 * MiB);
    void *p = malloc(tc_opaque(256 * MiB));
    return p == NULL && errno == ENOMEM ? 0 : 1;
  }
  if (strcmp(what, "exhaustion") == 0) {
    malloc_trim(0);
    free(malloc(8 * MiB)); /* cached */
    limit_as(32 * MiB);
    struct hak_os_stats a, b;
    hak_os_stats_get(&a);
    void *p = malloc(tc_opaque(256 * MiB));
    hak_os_stats_get(&b);
    if (b.munmap_calls == a.munmap_calls) return 2; /* the cached span must have been given back */
    return p == NULL && errno == ENOMEM ? 0 : 1;
  }
  if (strcmp(what, "realloc") == 0) {
    malloc_trim(0);
    char *p = malloc(8 * MiB);
    tc_fill(p, 8 * MiB, 77);
    malloc_trim(0); /* the rest of the refill: nothing cached */
    limit_as(32 * MiB);
    void *q = realloc(p, tc_opaque(512 * MiB));
    if (q != NULL || errno != ENOMEM) return 1;
    CHECK_PATTERN(p, 8 * MiB, 77, "after a failed realloc");
    free(p);
    return 0;
  }
  if (strcmp(what, "success") == 0) {
    for (size_t n = POOL_MAX + 1; n < 64 * MiB; n = n * 3 / 2) {
      char *p = malloc(n);
      p = realloc(p, n * 2);
      free(p);
    }
    return 0;
  }
  return 3;
}

/* Run `test_ace trace-child WHAT` with HAKMEM_ACE_TRACE=1; return its stderr. */
static void run_trace_child(const char *what, char *err, size_t cap) {
  int fd[2];
  if (pipe(fd) != 0) FAILF("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    setenv("HAKMEM_ACE_TRACE", "1", 1);
    execl("/proc/self/exe", "test_ace", "trace-child", what, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < cap && (r = read(fd[0], err + got, cap - 1 - got)) > 0) got += (size_t)r;
  err[got] = 0;
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "trace child %s: status %#x, stderr: %s", what, status, err);
}

static void test_trace(void) {
  char err[4096], want[256];
  run_trace_child("threshold", err, sizeof err);
  snprintf(want, sizeof want, "hakmem: large: Threshold size=%zu errno=12 (Cannot allocate memory)\n",
           (size_t)PTRDIFF_MAX);
  CHECK(strcmp(err, want) == 0, "Threshold trace: got \"%s\"", err);
  run_trace_child("mapfail", err, sizeof err);
  snprintf(want, sizeof want, "hakmem: large: MapFail size=%zu errno=12 (Cannot allocate memory)\n", 256 * MiB);
  CHECK(strcmp(err, want) == 0, "MapFail trace: got \"%s\"", err);
  run_trace_child("exhaustion", err, sizeof err);
  snprintf(want, sizeof want, "hakmem: large: Exhaustion size=%zu errno=12 (Cannot allocate memory)\n", 256 * MiB);
  CHECK(strcmp(err, want) == 0, "Exhaustion trace: got \"%s\"", err);
  run_trace_child("realloc", err, sizeof err);
  snprintf(want, sizeof want, "hakmem: large: MapFail size=%zu errno=12 (Cannot allocate memory)\n", 512 * MiB);
  CHECK(strcmp(err, want) == 0, "failed realloc trace: got \"%s\"", err);
  run_trace_child("success", err, sizeof err);
  CHECK(err[0] == 0, "trace lines without a failure: \"%s\"", err);
}

/* ---- invalid pointers --------------------------------------------------------- */

static void expect_abort(void (*fn)(void), const char *text) {
  int fd[2];
  if (pipe(fd) != 0) FAILF("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    fn();
    _exit(0);
  }
  close(fd[1]);
  char err[1024];
  size_t got = 0;
  ssize_t r;
  while (got + 1 < sizeof err && (r = read(fd[0], err + got, sizeof err - 1 - got)) > 0) got += (size_t)r;
  err[got] = 0;
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "expected an abort (%s), status %#x", text, status);
  CHECK(strstr(err, text) != NULL, "expected \"%s\" on stderr, got \"%s\"", text, err);
}

static void double_free(void) {
  char *p = malloc(3 * MiB);
  free(p);
  free(tc_escape(p));
}
static void stale_after_move(void) {
  malloc_trim(0);
  char *big = malloc(6 * MiB);
  free(big);
  char *p = malloc(2 * MiB), *after = malloc(2 * MiB);
  (void)after;
  char *q = realloc(p, 9 * MiB);
  if (q == p) _exit(3);
  free(tc_escape(p));
}
static void interior_free(void) {
  char *p = malloc(5 * MiB);
  free(tc_escape(p + 2 * MiB));
}

static void test_invalid(void) {
  expect_abort(double_free, "double free");
  expect_abort(stale_after_move, "double free"); /* realloc freed p when it moved the block */
  expect_abort(interior_free, "invalid free");
}

/* ---- threads ------------------------------------------------------------------ */

static void *thread_main(void *arg) {
  tc_rng r = {(uint64_t)(uintptr_t)arg};
  char *slot[16] = {0};
  size_t size[16] = {0};
  for (size_t i = 0; i < tc_scaled(4000); i++) {
    unsigned k = (unsigned)tc_below(&r, 16);
    if (slot[k] == NULL) {
      size[k] = POOL_MAX + 1 + (size_t)tc_below(&r, 6 * MiB);
      slot[k] = malloc(size[k]);
      CHECK(slot[k], "malloc");
      slot[k][0] = (char)k;
      slot[k][size[k] - 1] = (char)k;
    } else if (tc_below(&r, 3) == 0) {
      size_t n = size[k] + (size_t)tc_below(&r, 4 * MiB);
      char *q = realloc(slot[k], n);
      CHECK(q && q[0] == (char)k && q[size[k] - 1] == (char)k, "realloc lost data");
      slot[k] = q;
      size[k] = n;
      q[n - 1] = (char)k;
    } else {
      CHECK(slot[k][0] == (char)k && slot[k][size[k] - 1] == (char)k, "block corrupted");
      free(slot[k]);
      slot[k] = NULL;
    }
  }
  for (int k = 0; k < 16; k++) free(slot[k]);
  return NULL;
}

static void test_threads(void) {
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, thread_main, (void *)(i + 1));
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
}

int main(int argc, char **argv) {
  tc_test_name = "large";
  if (!HAKMEM_SPECIFIC) return 77;
  if (argc == 3 && strcmp(argv[1], "trace-child") == 0) return trace_child(argv[2]);
  static const struct {
    const char *name;
    void (*fn)(void);
  } parts[] = {{"boundaries", test_boundaries}, {"cache", test_cache},   {"realloc", test_realloc},
               {"aligned", test_aligned},       {"trim", test_trim},     {"release", test_release}, {"dirty", test_dirty}, {"trace", test_trace},
               {"invalid", test_invalid},       {"threads", test_threads}, {"bound", test_bound},
               {"grow_cached", test_grow_cached}, {"gather", test_gather}, {"churn", test_churn}};
  int ran = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    bool bound = strcmp(parts[i].name, "bound") == 0;
    if (argc > 1 ? strcmp(argv[1], parts[i].name) != 0 : bound) continue;
    tc_test_name = parts[i].name;
    parts[i].fn();
    printf("large %s: ok\n", parts[i].name);
    ran++;
  }
  if (ran == 0) FAILF("no part named %s", argv[1]);
  return 0;
}
