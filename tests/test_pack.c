/* Packed large blocks (src/pack.c): blocks above the Pool limit up to
 * 1 MiB share 2 MiB chunks at page granularity.
 *
 *   layout    usable size is the request rounded to pages; several blocks
 *             share a chunk; a freed run is reused, and adjacent freed
 *             blocks coalesce into one run; calloc reads zero on reused
 *             pages; no OS call once a pack exists
 *   realloc   shrink in place (the tail is reused), grow in place into the
 *             free pages after the block, moved when they are taken,
 *             moved to a span above 1 MiB, to the Pool at 64 KiB or less; a
 *             Pool block moved by realloc to more than 64 KiB: packed
 *   purge     free pages idle long enough are given back (madvise), the
 *             pack stays mapped; malloc_trim gives back all free pages
 *             and unmaps empty packs
 *   window    after many blocks grown by realloc, new blocks take spans;
 *             after many kept at their size, packs again
 *   off       HAKMEM_LARGE_PACK=0: a block takes a 2 MiB span
 *   pool      pool sizes above HAKMEM_PACK_MIN_KB (32) are packed too:
 *             malloc, calloc and realloc of 32 KiB + 1 to 256 KiB take
 *             pages, up to 32 KiB slabs; the pages of free blocks amid
 *             live ones go back at malloc_trim (a slab's would not)
 *   cache     a freed block of up to 16 pages waits for the next request
 *             of its length (taken without an OS call); a second free of
 *             it and malloc_usable_size on it are reported; a purge step
 *             (the one after the step that found it cached), a thread's
 *             exit purge and malloc_trim put it back into its pack, and
 *             the first free into the cache after a step makes one due;
 *             a block taken from it counts as a request (the packs' free
 *             pages are not idle then)
 *   cache_idle (HAKMEM_BG_PURGE=on) freed blocks left in the cache go
 *             back by themselves while the program makes no call
 *   order     every block lands where a model of the policy (the lowest
 *             pack, by address, with a free run that fits; the shortest
 *             such run there) puts it, through thousands of mallocs, frees,
 *             reallocs and malloc_trims over tens of packs: the search's
 *             tree over the packs' longest runs must follow every change
 *             (run with HAKMEM_PURGE=off: a purge step holds runs)
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "hakmem.h"
#include "internal.h" /* POOL_MAX, SS_SIZE, HM_PACK_MAX, hm_pack_purge */
#include "test_common.h"

#define KiB ((size_t)1024)
#define PG ((size_t)4096)

static struct hak_os_stats st0;
static void mark(void) { hak_os_stats_get(&st0); }
static size_t d_calls(void) {
  struct hak_os_stats s;
  hak_os_stats_get(&s);
  return (s.mmap_calls - st0.mmap_calls) + (s.munmap_calls - st0.munmap_calls) +
         (s.madvise_calls - st0.madvise_calls) + (s.mremap_calls - st0.mremap_calls);
}
static uintptr_t chunk(const void *p) { return (uintptr_t)p & ~(SS_SIZE - 1); }
static size_t pages_of(size_t n) { return (n + PG - 1) / PG * PG; }

static size_t resident(const void *p, size_t len) {
  unsigned char vec[512];
  CHECK(len / PG <= sizeof vec, "range too long");
  CHECK(mincore((void *)p, len, vec) == 0, "mincore");
  size_t n = 0;
  for (size_t i = 0; i < len / PG; i++) n += vec[i] & 1;
  return n;
}

static void test_layout(void) {
  malloc_trim(0);
  size_t n = 300 * KiB + 1;
  char *a = malloc(n), *b = malloc(n), *c = malloc(n);
  CHECK(a && b && c, "malloc");
  CHECK(malloc_usable_size(a) == pages_of(n), "usable %zu of a packed %zu-byte block", malloc_usable_size(a), n);
  CHECK(((uintptr_t)a & (PG - 1)) == 0, "packed block %p not page aligned", (void *)a);
  CHECK(chunk(a) == chunk(b) && chunk(b) == chunk(c), "three 300 KiB blocks in three chunks: %p %p %p", (void *)a,
        (void *)b, (void *)c);
  memset(a, 1, n);
  memset(b, 2, n);
  memset(c, 3, n);
  mark();
  free(b);
  char *d = malloc(n);
  CHECK(d == b, "the freed run at %p was not reused (%p)", (void *)b, (void *)d);
  CHECK(d_calls() == 0, "reusing a packed run made %zu OS calls", d_calls());
  /* adjacent freed blocks coalesce: a block of both their sizes fits there */
  char *lo = a < d ? a : d, *hi = a < d ? d : a;
  if (hi == lo + pages_of(n)) {
    free(lo);
    free(hi);
    char *e = malloc(2 * pages_of(n));
    CHECK(e == lo, "two adjacent freed runs did not serve a block of both (%p, expected %p)", (void *)e, (void *)lo);
    CHECK(malloc_usable_size(e) == 2 * pages_of(n), "usable %zu", malloc_usable_size(e));
    free(e);
  } else {
    free(a);
    free(d);
  }
  /* calloc over reused (dirty) pages reads zero */
  char *z = calloc(1, n);
  CHECK(z, "calloc");
  for (size_t i = 0; i < n; i += 512) CHECK(z[i] == 0, "calloc byte %zu = %d", i, z[i]);
  free(z);
  free(c);
  /* the lane limits: above POOL_MAX packed, above HM_PACK_MAX a span */
  char *lo_p = malloc(POOL_MAX + 1), *hi_p = malloc(HM_PACK_MAX), *span = malloc(HM_PACK_MAX + 1);
  CHECK(malloc_usable_size(lo_p) == pages_of(POOL_MAX + 1), "usable %zu", malloc_usable_size(lo_p));
  CHECK(malloc_usable_size(hi_p) == HM_PACK_MAX, "usable %zu", malloc_usable_size(hi_p));
  CHECK(malloc_usable_size(span) == SS_SIZE, "usable %zu above the packs' limit", malloc_usable_size(span));
  free(lo_p);
  free(hi_p);
  free(span);
}

static void test_realloc(void) {
  malloc_trim(0);
  char *a = malloc(400 * KiB), *b = malloc(400 * KiB);
  CHECK(a && b && chunk(a) == chunk(b), "two 400 KiB blocks");
  char *lo = a < b ? a : b, *hi = a < b ? b : a;
  CHECK(hi == lo + 400 * KiB, "blocks not adjacent: %p %p", (void *)lo, (void *)hi);
  tc_fill(lo, 400 * KiB, 1);
  /* shrink in place; the tail is free and taken by the next fitting block */
  char *q = realloc(lo, 100 * KiB);
  CHECK(q == lo && malloc_usable_size(q) == 100 * KiB, "shrink: %p -> %p, usable %zu", (void *)lo, (void *)q,
        malloc_usable_size(q));
  /* grow in place into the freed tail */
  q = realloc(q, 350 * KiB);
  CHECK(q == lo && malloc_usable_size(q) == 352 * KiB, "grow in place: %p -> %p, usable %zu", (void *)lo, (void *)q,
        malloc_usable_size(q));
  for (size_t i = 0; i < 100 * KiB; i += 997) CHECK((uint8_t)q[i] == tc_pat_byte(1, i), "content lost at %zu", i);
  /* hi follows: growing past it moves the block (contents kept) */
  char *m = realloc(q, 600 * KiB);
  CHECK(m != NULL && m != q, "a block grown past its neighbour stayed at %p", (void *)q);
  for (size_t i = 0; i < 100 * KiB; i += 997) CHECK((uint8_t)m[i] == tc_pat_byte(1, i), "content lost at %zu", i);
  /* above the packs' limit: a span */
  char *s = realloc(m, HM_PACK_MAX + PG);
  CHECK(s && malloc_usable_size(s) == SS_SIZE, "grown past 1 MiB: usable %zu", malloc_usable_size(s));
  for (size_t i = 0; i < 100 * KiB; i += 997) CHECK((uint8_t)s[i] == tc_pat_byte(1, i), "content lost at %zu", i);
  free(s);
  /* to 64 KiB or less: into the Pool */
  char *p = realloc(hi, 1000);
  CHECK(p && malloc_usable_size(p) < 2000, "shrunk to 1000 B: usable %zu", malloc_usable_size(p));
  /* a Pool block moved by realloc to more than 64 KiB goes to a pack */
  memset(p, 5, 1000);
  char *r = realloc(p, 100 * KiB);
  CHECK(r && malloc_usable_size(r) == 100 * KiB, "a Pool block realloc'd to 100 KiB: usable %zu (a Pool class?)",
        malloc_usable_size(r));
  for (size_t i = 0; i < 1000; i++) CHECK(r[i] == 5, "content lost at %zu", i);
  free(r);
}

static void test_purge(void) {
  malloc_trim(0);
  char *keep = malloc(300 * KiB), *a = malloc(600 * KiB);
  CHECK(keep && a && chunk(keep) == chunk(a), "two blocks in one pack");
  memset(a, 7, 600 * KiB);
  free(a);
  CHECK(resident(a, 600 * KiB) == 600 * KiB / PG, "the freed block's pages are not resident before a purge");
  uint64_t due = UINT64_MAX;
  CHECK(hm_pack_purge(hm_now_ns(), 60ull * 1000 * 1000 * 1000, 64u << 20, &due) == 0,
        "purge(idle 60 s) gave back pages freed just now");
  CHECK(due != UINT64_MAX && due > hm_now_ns(), "purge(idle 60 s) set no due time");
  mark();
  size_t got = hm_pack_purge(hm_now_ns(), 0, 64u << 20, &due);
  CHECK(got >= 600 * KiB, "purge(0) gave back %zu KiB, expected at least 600", got / KiB);
  CHECK(d_calls() >= 1, "purge made no madvise");
  CHECK(resident(a, 600 * KiB) == 0, "%zu pages still resident after the purge", resident(a, 600 * KiB));
  CHECK(hm_pack_purge(hm_now_ns(), 0, 64u << 20, &due) == 0, "a second purge found more");
  /* purged pages are reused, reading zero */
  char *z = calloc(1, 600 * KiB);
  CHECK(z == a, "the purged run was not reused (%p, expected %p)", (void *)z, (void *)a);
  for (size_t i = 0; i < 600 * KiB; i += 4096) CHECK(z[i] == 0, "byte %zu = %d", i, z[i]);
  memset(z, 8, 600 * KiB);
  free(z);
  /* malloc_trim: free pages given back, the empty pack unmapped */
  free(keep);
  struct hak_os_stats s0, s1;
  hak_os_stats_get(&s0);
  CHECK(malloc_trim(0) == 1, "malloc_trim with a free pack returned 0");
  hak_os_stats_get(&s1);
  CHECK(s1.munmap_calls > s0.munmap_calls && s1.committed_bytes + SS_SIZE <= s0.committed_bytes,
        "malloc_trim unmapped %zu bytes (%zu munmap calls)", (size_t)(s0.committed_bytes - s1.committed_bytes),
        (size_t)(s1.munmap_calls - s0.munmap_calls));
}

/* Blocks take spans (where realloc grows them without a copy) for a
 * window of 256 large allocations after one with more than 1 realloc
 * within the lane for 8 of them; blocks that keep their size are packed
 * again. */
static void test_window(void) {
  malloc_trim(0);
  for (int i = 0; i < 600; i++) {
    char *p = tc_escape(malloc(tc_opaque(300 * KiB)));
    CHECK(p, "malloc");
    p = tc_escape(realloc(p, tc_opaque(500 * KiB)));
    CHECK(p, "realloc");
    free(p);
  }
  char *a = malloc(300 * KiB);
  CHECK(a && malloc_usable_size(a) == SS_SIZE, "after 600 growing blocks: usable %zu, a span expected",
        malloc_usable_size(a));
  free(a);
  for (int i = 0; i < 600; i++) free(tc_escape(malloc(tc_opaque(300 * KiB))));
  a = malloc(300 * KiB);
  CHECK(a && malloc_usable_size(a) == 300 * KiB, "after 600 blocks kept their size: usable %zu, packed expected",
        malloc_usable_size(a));
  free(a);
}

static void test_off(void) {
  const char *v = getenv("HAKMEM_LARGE_PACK");
  if (v == NULL || strcmp(v, "0") != 0) FAILF("run with HAKMEM_LARGE_PACK=0");
  char *a = malloc(300 * KiB), *b = malloc(300 * KiB);
  CHECK(a && b && malloc_usable_size(a) == SS_SIZE && chunk(a) != chunk(b), "packs off: usable %zu, %p %p",
        malloc_usable_size(a), (void *)a, (void *)b);
  free(a);
  free(b);
  char *p = realloc(malloc(1000), 100 * KiB);
  CHECK(p && malloc_usable_size(p) != 100 * KiB && malloc_usable_size(p) < SS_SIZE,
        "packs off: realloc to 100 KiB not in the Pool (usable %zu)", malloc_usable_size(p));
  free(p);
}

/* Pool sizes above HAKMEM_PACK_MIN_KB (docs/DESIGN.md, "Packed pool sizes"). */
static void test_pool(void) {
  malloc_trim(0);
  char *s = malloc(32 * KiB), *a = malloc(32 * KiB + 1), *b = malloc(POOL_MAX);
  char *z = calloc(1, 48 * KiB);
  CHECK(s && a && b && z, "malloc");
  CHECK(hm_reg_kind((uintptr_t)s) == REG_SS, "32 KiB not a slab block");
  CHECK(hm_reg_kind((uintptr_t)a) == REG_LARGE_PACK && hm_reg_kind((uintptr_t)b) == REG_LARGE_PACK &&
            hm_reg_kind((uintptr_t)z) == REG_LARGE_PACK,
        "32 KiB + 1, 256 KiB, calloc(48 KiB) not packed (%u %u %u)", hm_reg_kind((uintptr_t)a),
        hm_reg_kind((uintptr_t)b), hm_reg_kind((uintptr_t)z));
  CHECK(malloc_usable_size(a) == 36 * KiB, "usable %zu", malloc_usable_size(a));
  for (size_t i = 0; i < 48 * KiB; i += 256) CHECK(z[i] == 0, "calloc byte %zu = %d", i, z[i]);
  /* realloc: down to 40 KiB in place, to 32 KiB into the slabs, back up packed */
  tc_fill(b, POOL_MAX, 7);
  char *q = realloc(b, 40 * KiB);
  CHECK(q == b && malloc_usable_size(q) == 40 * KiB, "shrink in place: %p -> %p", (void *)b, (void *)q);
  q = realloc(q, 20 * KiB);
  CHECK(q && hm_reg_kind((uintptr_t)q) == REG_SS && tc_verify(q, 20 * KiB, 7) == (size_t)-1, "realloc to 20 KiB not a slab block");
  q = realloc(q, 100 * KiB);
  CHECK(q && hm_reg_kind((uintptr_t)q) == REG_LARGE_PACK && tc_verify(q, 20 * KiB, 7) == (size_t)-1, "realloc to 100 KiB not packed");
  free(q);
  free(s);
  free(a);
  free(z);
  /* Every other block of 48 KiB freed, each written whole: malloc_trim
   * gives back their pages though their neighbours stay live. */
  enum { N = 64 };
  char *blk[N];
  for (int i = 0; i < N; i++) {
    blk[i] = malloc(48 * KiB);
    CHECK(blk[i], "malloc");
    tc_fill(blk[i], 48 * KiB, (uint64_t)i + 1);
  }
  for (int i = 0; i < N; i += 2) free(blk[i]);
  malloc_trim(0);
  size_t res = 0;
  for (int i = 0; i < N; i += 2) res += resident(blk[i], 48 * KiB);
  CHECK(res == 0, "%zu pages of %d free 48 KiB blocks still resident after malloc_trim", res, N / 2);
  for (int i = 1; i < N; i += 2) {
    CHECK(tc_verify(blk[i], 48 * KiB, (uint64_t)i + 1) == (size_t)-1 && resident(blk[i], 48 * KiB) == 12, "live block %d", i);
    free(blk[i]);
  }
}

/* ---- order: placement against an independent model ------------------------ */

#define MPAGES ((unsigned)(SS_SIZE / PG)) /* a pack's pages; page 0 is its header */
#define MPACKS 256

/* The model's packs, by address: which pages are in blocks. */
static struct mpack {
  uintptr_t base;
  unsigned char used[MPAGES];
} mp[MPACKS];
static unsigned nmp;

static struct mpack *mp_of(const void *b) {
  for (unsigned i = 0; i < nmp; i++)
    if (mp[i].base == chunk(b)) return &mp[i];
  return NULL;
}

/* Pages [first page of b, +k) become used (v) or free. */
static void mp_mark(const void *b, unsigned k, bool v) {
  struct mpack *m = mp_of(b);
  CHECK(m != NULL, "%p is in no pack of the model", b);
  unsigned s = (unsigned)(((uintptr_t)b - m->base) / PG);
  CHECK(s != 0 && s + k <= MPAGES, "block %p of %u pages out of its pack", b, k);
  for (unsigned i = s; i < s + k; i++) {
    CHECK(m->used[i] != v, "page %u of the pack at %#lx is %s already", i, (unsigned long)m->base, v ? "used" : "free");
    m->used[i] = v;
  }
}

/* Where the policy puts a block of k pages: the lowest pack with a free
 * run of k pages, its shortest such run (the first of equals); NULL: a new
 * pack. */
static char *mp_expect(unsigned k) {
  for (unsigned i = 0; i < nmp; i++) {
    unsigned at = 0, len = MPAGES;
    for (unsigned r = 1; r < MPAGES;) {
      if (mp[i].used[r]) {
        r++;
        continue;
      }
      unsigned e = r;
      while (e < MPAGES && !mp[i].used[e]) e++;
      if (e - r >= k && e - r < len) at = r, len = e - r;
      r = e;
    }
    if (at != 0) return (char *)(mp[i].base + at * PG);
  }
  return NULL;
}

/* A block of k pages was placed at got: where the model says. */
static void mp_placed(const char *got, unsigned k, const char *what) {
  char *want = mp_expect(k);
  if (want != NULL) {
    CHECK(got == want, "%s of %u pages at %p, the lowest pack's best fit is %p", what, k, (const void *)got,
          (void *)want);
  } else {
    CHECK(mp_of(got) == NULL && (uintptr_t)got == chunk(got) + PG, "%s of %u pages at %p, a new pack's page 1 expected",
          what, k, (const void *)got);
    CHECK(nmp < MPACKS, "more than %u packs", MPACKS);
    unsigned i = nmp++;
    for (; i > 0 && mp[i - 1].base > chunk(got); i--) mp[i] = mp[i - 1];
    memset(&mp[i], 0, sizeof mp[i]);
    mp[i].base = chunk(got);
    mp[i].used[0] = 1;
  }
  mp_mark(got, k, true);
}

/* malloc_trim: the empty packs leave. */
static void mp_trim(void) {
  unsigned j = 0;
  for (unsigned i = 0; i < nmp; i++) {
    unsigned busy = 0;
    for (unsigned pg = 1; pg < MPAGES; pg++) busy += mp[i].used[pg];
    if (busy != 0) mp[j++] = mp[i];
  }
  nmp = j;
}

static unsigned pages_for(size_t n) { return (unsigned)((n + PG - 1) / PG); }

static void test_order(void) {
  const char *v = getenv("HAKMEM_PURGE");
  if (v == NULL || strcmp(v, "off") != 0) FAILF("run with HAKMEM_PURGE=off");
  enum { SLOTS = 512, OPS = 40000 };
  static char *blk[SLOTS];
  static unsigned pages[SLOTS];
  tc_rng r = {12345};
  malloc_trim(0);
  unsigned npk_max = 0, moved = 0, in_place = 0;
  for (unsigned op = 0; op < OPS; op++) {
    unsigned j = (unsigned)tc_below(&r, SLOTS);
    /* mostly blocks of a few pages to a quarter of a pack, some to 1 MiB:
     * the low packs fill with small ones, large ones go higher */
    size_t n = POOL_MAX + 1 + tc_below(&r, tc_below(&r, 4) == 0 ? HM_PACK_MAX - POOL_MAX : 128 * KiB);
    unsigned k = pages_for(n);
    if (blk[j] == NULL) {
      blk[j] = malloc(n);
      CHECK(blk[j] != NULL, "malloc");
      mp_placed(blk[j], k, "malloc");
      pages[j] = k;
    } else if (tc_below(&r, 32) == 0) {
      /* realloc: in place if the pages after it are free, else moved (the
       * new block placed while the old one is held) */
      struct mpack *m = mp_of(blk[j]);
      unsigned s = (unsigned)(((uintptr_t)blk[j] - m->base) / PG), end = s + pages[j];
      while (end < MPAGES && !m->used[end]) end++;
      char *q = realloc(blk[j], n);
      CHECK(q != NULL, "realloc");
      if (k <= pages[j] || s + k <= end) {
        CHECK(q == blk[j], "realloc of %u to %u pages (free up to page %u) moved %p -> %p", pages[j], k, end,
              (void *)blk[j], (void *)q);
        if (k < pages[j]) mp_mark(blk[j] + (size_t)k * PG, pages[j] - k, false);
        if (k > pages[j]) mp_mark(blk[j] + (size_t)pages[j] * PG, k - pages[j], true);
        in_place++;
      } else {
        mp_placed(q, k, "realloc");
        mp_mark(blk[j], pages[j], false);
        moved++;
      }
      blk[j] = q;
      pages[j] = k;
    } else {
      free(blk[j]);
      mp_mark(blk[j], pages[j], false);
      blk[j] = NULL;
    }
    if (nmp > npk_max) npk_max = nmp;
    if (op % 8000 == 7999) {
      /* empty a band of middle packs, and drop the empty packs: the packs
       * above move down in the search's arrays */
      uintptr_t lo = nmp > 4 ? mp[nmp / 4].base : 0, hi = nmp > 4 ? mp[nmp / 2].base : 0;
      for (unsigned i = 0; i < SLOTS; i++) {
        if (blk[i] != NULL && chunk(blk[i]) >= lo && chunk(blk[i]) <= hi) {
          free(blk[i]);
          mp_mark(blk[i], pages[i], false);
          blk[i] = NULL;
        }
      }
      malloc_trim(0);
      mp_trim();
    }
  }
  CHECK(npk_max >= 40 && moved >= 10 && in_place >= 10, "too easy a run: %u packs at most, %u reallocs moved, %u in place",
        npk_max, moved, in_place);
  printf("pack order: %u ops, up to %u packs, %u reallocs moved, %u in place\n", (unsigned)OPS, npk_max, moved, in_place);
  for (unsigned i = 0; i < SLOTS; i++) free(blk[i]);
}

/* In a child: misuse(p) on a cached block p; it must die of SIGABRT with
 * a report naming `what`. */
static void child_reports(char *p, void (*misuse)(char *), const char *what) {
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(fds[1], 2);
    misuse(p);
    _exit(0);
  }
  close(fds[1]);
  char buf[512] = "";
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = '\0';
  close(fds[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s of a cached block: status 0x%x, stderr: %s", what, st, buf);
  CHECK(strstr(buf, what) != NULL, "%s of a cached block: stderr: %s", what, buf);
}
static void free_it(char *p) { free(p); }
static void usable_it(char *p) { (void)malloc_usable_size(p); }

static void test_cache(void) {
  const size_t n = 40 * KiB; /* 10 pages */
  uint64_t due = UINT64_MAX;
  malloc_trim(0);
  char *keep = malloc(n), *a = malloc(n);
  CHECK(keep && a && chunk(keep) == chunk(a), "two blocks in one pack");
  memset(a, 1, n);
  free(a);
  mark();
  char *b = malloc(n);
  CHECK(b == a && d_calls() == 0, "the freed block was not taken again (%p, expected %p; %zu calls)", (void *)b,
        (void *)a, d_calls());
  free(b);
  child_reports(b, free_it, "double free");
  child_reports(b, usable_it, "malloc_usable_size");
  /* a purge step puts it back into the pack: free pages, given back */
  CHECK(resident(b, n) == n / PG, "the cached block is not resident");
  CHECK(hm_pack_purge(hm_now_ns(), 0, 64u << 20, &due) >= n, "the step gave back less than the cached block");
  CHECK(resident(b, n) == 0, "%zu pages of the cached block still resident after a step", resident(b, n));
  hm_tick_countdown = 1u << 30; /* (no step from this thread's own calls meanwhile) */
  /* a block taken from the cache is a request: the packs' free pages are
   * not given back as idle while the cache serves the lane */
  char *x = malloc(600 * KiB), *y = malloc(n);
  memset(x, 5, 600 * KiB);
  memset(y, 5, n);
  free(x); /* (free pages, resident) */
  free(y);
  usleep(100000); /* (the last request through the lock: longer ago than the idle time below) */
  char *z = malloc(n);
  CHECK(z == y, "the cached block was not taken");
  due = UINT64_MAX;
  CHECK(hm_pack_purge(hm_now_ns(), 50ull * 1000 * 1000, 64u << 20, &due) == 0,
        "a step gave back free pages as idle while the cache served requests");
  free(z);
  /* a step puts back only what it found cached at the step before */
  size_t fd0 = hm_pack_free_dirty();
  char *e = malloc(n);
  memset(e, 4, n);
  free(e);
  due = UINT64_MAX;
  hm_pack_purge(hm_now_ns(), 60ull * 1000 * 1000 * 1000, 64u << 20, &due);
  CHECK(hm_pack_free_dirty() == fd0, "a step put back a block cached since the step before");
  CHECK(due <= hm_now_ns() + hm_purge_delay_now(), "no step due for the block left cached");
  hm_pack_purge(hm_now_ns(), 60ull * 1000 * 1000 * 1000, 64u << 20, &due);
  CHECK(hm_pack_free_dirty() == fd0 + n, "the next step did not put it back (%zu free dirty bytes, expected %zu)",
        hm_pack_free_dirty(), fd0 + n);
  hm_tick_countdown = 1;
  /* the first free into the cache after that makes a step due */
  atomic_store(&hm_purge_due_ns, UINT64_MAX);
  char *c = malloc(n);
  memset(c, 2, n);
  free(c);
  CHECK(atomic_load(&hm_purge_due_ns) != UINT64_MAX, "no step due with a block in the cache");
  /* a thread's exit purge */
  unsigned calls;
  hm_pack_purge_longest(64, &calls);
  CHECK(resident(c, n) == 0, "%zu pages of the cached block resident after the exit purge", resident(c, n));
  /* malloc_trim: the pack, empty once the cached block is back, unmapped */
  char *d = malloc(n);
  memset(d, 3, n);
  free(d);
  free(keep);
  struct hak_os_stats s0, s1;
  hak_os_stats_get(&s0);
  CHECK(malloc_trim(0) == 1, "malloc_trim returned 0");
  hak_os_stats_get(&s1);
  CHECK(s1.committed_bytes + SS_SIZE <= s0.committed_bytes, "malloc_trim unmapped %zu bytes, not the pack",
        (size_t)(s0.committed_bytes - s1.committed_bytes));
}

/* Blocks freed into the cache, then no call: the background purger's
 * steps give them back. */
static void test_cache_idle(void) {
  const size_t n = 40 * KiB;
  char *keep = malloc(n), *a = malloc(n), *b = malloc(n);
  memset(a, 1, n);
  memset(b, 1, n);
  free(a);
  free(b);
  uint64_t t0 = hm_now_ns();
  while ((resident(a, n) != 0 || resident(b, n) != 0) && hm_now_ns() - t0 < 8000000000ull) usleep(50000);
  CHECK(resident(a, n) == 0 && resident(b, n) == 0, "%zu + %zu pages of cached blocks still resident after %.1f s",
        resident(a, n), resident(b, n), (double)(hm_now_ns() - t0) / 1e9);
  printf("pack cache_idle: given back after %.2f s\n", (double)(hm_now_ns() - t0) / 1e9);
  free(keep);
}

int main(int argc, char **argv) {
  tc_test_name = "pack";
  if (!HAKMEM_SPECIFIC) return 77;
  const struct {
    const char *name;
    void (*fn)(void);
  } parts[] = {{"layout", test_layout}, {"realloc", test_realloc}, {"purge", test_purge}, {"window", test_window},
                 {"pool", test_pool},     {"off", test_off},       {"order", test_order},
                 {"cache", test_cache},   {"cache_idle", test_cache_idle}};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    if (argc > 1 && strcmp(argv[1], parts[i].name) != 0) continue;
    if (argc == 1 && (strcmp(parts[i].name, "off") == 0 || strcmp(parts[i].name, "order") == 0 ||
                      strcmp(parts[i].name, "cache_idle") == 0))
      continue;
    parts[i].fn();
    printf("pack %s: ok\n", parts[i].name);
  }
  return 0;
}
