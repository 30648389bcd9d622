/* The guarded pool (guard.h): one mapping of POOL_BYTES, its first pages
 * the records, the rest pages that are inaccessible unless they hold a
 * live guarded block. A block gets whole pages of its own, with a page on
 * each side that holds no live block; it is placed against its last page's
 * end (an overflow faults at once) or its first page's start (an
 * underflow does), in turn; the bytes of its pages outside it hold a
 * pattern, checked at free (an overflow within the last 16 bytes of a
 * right-placed block, or within the page of a left-placed one). Freed, its
 * pages are made inaccessible, and stay in quarantine (FIFO) until
 * QUARANTINE_RECS blocks or QUARANTINE_PAGES pages are there; they are
 * given back to the OS only while more than RESIDENT_MAX pages of the pool
 * are resident (RESIDENT_MULTI_MAX for a block of several pages), so that a
 * steady workload's one-page samples make no madvise
 * (docs/DESIGN.md, "Guarded pool", and "Memory given back": the budget). */
#include "guard.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "block.h"
#include "heap.h"
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define HM_GUARD_SINGLE_THREADED() (__libc_single_threaded != 0)
#endif
#endif
#ifndef HM_GUARD_SINGLE_THREADED
#define HM_GUARD_SINGLE_THREADED() false
#endif
#include "sample.h"
#include "stack.h"

#define POOL_BYTES ((size_t)8 << 20)       /* 4 registry chunks */
#define GUARD_MAX ((size_t)1 << 20)        /* larger blocks are not guarded */
#define RECS 512                           /* live + quarantined blocks */
#define QUARANTINE_RECS 128
#define DEPTH 16                           /* frames kept per stack */
#define PATTERN 0xa5
#define BACKOFF 4096 /* the pool full: this thread's next mallocs not sampled */

enum { R_FREE, R_LIVE, R_QUARANTINED };

typedef struct {
  uintptr_t p;
  size_t n;
  uint32_t page, npages; /* in the page area */
  uint8_t state, right, nalloc, nfree, asked; /* asked: malloc_usable_size was called */
  uintptr_t alloc_pcs[DEPTH], free_pcs[DEPTH];
} grec_t;

/* A token bucket (guard lock held): `burst` takes, refilled at `per_s` a
 * second; all zero, it is full at its first take. */
typedef struct {
  uint64_t credit_ns, at_ns;
} bucket_t;

static bool bucket_take(bucket_t *b, uint64_t per_s, uint64_t burst) {
  uint64_t now = hm_now_ns(), cost = 1000000000u / per_s, cap = burst * cost;
  uint64_t c = b->credit_ns + (now - b->at_ns); /* (read under the lock: never before the last) */
  b->at_ns = now;
  b->credit_ns = c > cap ? cap : c;
  if (b->credit_ns < cost) return false;
  b->credit_ns -= cost;
  return true;
}

#define AREA_PAGES_MAX (POOL_BYTES / HM_PAGE_SIZE)
typedef struct {
  grec_t rec[RECS];
  uint16_t page_rec[AREA_PAGES_MAX]; /* 1 + the record whose block has the page (live or quarantined) */
  uint16_t qring[RECS], free_recs[RECS];
  uint8_t resident[AREA_PAGES_MAX];  /* the page was written and not given back since */
  unsigned q_head, q_count, q_pages, nfree, n_resident, flip;
  bucket_t multi; /* the multi-page blocks' bucket */
} meta_t;

#define META_BYTES ((sizeof(meta_t) + HM_PAGE_SIZE - 1) & ~(size_t)(HM_PAGE_SIZE - 1))
#define AREA_PAGES ((POOL_BYTES - META_BYTES) / HM_PAGE_SIZE)
#define QUARANTINE_PAGES (AREA_PAGES / 2) /* (given back past RESIDENT_MAX: address space) */
#define RESIDENT_MAX 512u     /* 2 MiB: the quarantine's and a few live blocks' */
/* A freed block of more than a page goes back already past this many
 * resident pages: one-page blocks' quarantine (at most QUARANTINE_RECS
 * pages) stays, the rare big ones' pages do not (at most MULTI_PER_S calls
 * a second). */
#define RESIDENT_MULTI_MAX 160u
/* Blocks of more than a page: at most MULTI_PER_S a second (a burst of
 * MULTI_BURST), so that their pages' return stays within the system-call
 * budget (docs/DESIGN.md, "Memory given back") however hot the loop. */
#define MULTI_PER_S 4u
#define MULTI_BURST 16u
_Static_assert(META_BYTES < POOL_BYTES / 4, "records fit the pool's first chunk");
_Static_assert(AREA_PAGES < 65535 && RECS < 65535, "uint16_t indices");

static meta_t *meta;
static char *area; /* AREA_PAGES pages */
/* 0, or the holder's pthread_self(): a fork from a signal handler that
 * interrupted this thread inside the lock must not wait for it. */
static _Atomic uintptr_t guard_lock_word;
static struct sigaction prev_segv, prev_bus;

static void guard_lock(void) {
  uintptr_t me = (uintptr_t)pthread_self(), expected = 0;
  while (!atomic_compare_exchange_weak_explicit(&guard_lock_word, &expected, me, memory_order_acquire,
                                                memory_order_relaxed)) {
    expected = 0;
    sched_yield();
  }
}
static void guard_unlock(void) { atomic_store_explicit(&guard_lock_word, 0, memory_order_release); }

/* ---- reports (also from the signal handler: no allocation, no lock) ---- */

static void put_hex(uintptr_t v) {
  char b[2 + 16 + 1], t[16];
  int n = 0;
  do {
    t[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0);
  char *o = b;
  *o++ = '0';
  *o++ = 'x';
  while (n > 0) *o++ = t[--n];
  *o = '\0';
  hm_write_str(b);
}
static void put_dec(size_t v) {
  char b[24];
  hm_format_dec(b, (long)v);
  hm_write_str(b);
}

/* "0xPC (symbol+0xoff, object)": dladdr takes only the loader's lock, a
 * recursive one, and allocates nothing; we are about to abort anyway. */
static void put_pc(uintptr_t pc) {
  put_hex(pc);
  Dl_info di;
  if (dladdr((void *)(pc - 1), &di) == 0) return;
  hm_write_str(" (");
  if (di.dli_sname != NULL) {
    hm_write_str(di.dli_sname);
    hm_write_str("+");
    put_hex(pc - (uintptr_t)di.dli_saddr);
    hm_write_str(", ");
  }
  hm_write_str(di.dli_fname != NULL ? di.dli_fname : "?");
  hm_write_str(")");
}

static void put_stack(const char *what, const uintptr_t *pcs, int n) {
  hm_write_str("hakmem:   ");
  hm_write_str(what);
  hm_write_str(n == 0 ? " (no stack)\n" : ":\n");
  for (int i = 0; i < n; i++) {
    hm_write_str("hakmem:     #");
    put_dec((size_t)i);
    hm_write_str(" ");
    put_pc(pcs[i]);
    hm_write_str("\n");
  }
}

/* hakmem: error: WHAT of ADDR (DETAIL block of N bytes at P; allocated at
 * PC[; freed at PC]), then both stacks. */
static void report(const char *what, uintptr_t addr, const char *detail, size_t k, const grec_t *r) {
  hm_write_str("hakmem: error: ");
  hm_write_str(what);
  hm_write_str(" of ");
  put_hex(addr);
  hm_write_str(" (");
  if (detail != NULL) {
    put_dec(k);
    hm_write_str(detail);
  }
  hm_write_str("block of ");
  put_dec(r->n);
  hm_write_str(" bytes at ");
  put_hex(r->p);
  hm_write_str("; allocated at ");
  if (r->nalloc > 0) put_hex(r->alloc_pcs[0]);
  else hm_write_str("?");
  if (r->state == R_QUARANTINED) {
    hm_write_str("; freed at ");
    if (r->nfree > 0) put_hex(r->free_pcs[0]);
    else hm_write_str("?");
  }
  hm_write_str(")\n");
  put_stack("allocated at", r->alloc_pcs, r->nalloc);
  if (r->state == R_QUARANTINED) put_stack("freed at", r->free_pcs, r->nfree);
}

/* ---- the pool ------------------------------------------------------------- */

static void on_fault(int sig, siginfo_t *si, void *uc);

static bool pool_create(void) {
  size_t chunk = (size_t)1 << SS_SHIFT;
  char *m = mmap(NULL, POOL_BYTES + chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  char *base = (char *)(((uintptr_t)m + chunk - 1) & ~(uintptr_t)(chunk - 1));
  if (base > m) munmap(m, (size_t)(base - m));
  if (base + POOL_BYTES < m + POOL_BYTES + chunk) munmap(base + POOL_BYTES, (size_t)(m + POOL_BYTES + chunk - (base + POOL_BYTES)));
  if (mprotect(base, META_BYTES, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, POOL_BYTES);
    return false;
  }
  meta_t *mt = (meta_t *)base;
  for (unsigned i = 0; i < RECS; i++) mt->free_recs[i] = (uint16_t)(RECS - 1 - i);
  mt->nfree = RECS;
  for (size_t c = 0; c < POOL_BYTES; c += chunk) hm_reg_set((uintptr_t)base + c, REG_GUARD);
  /* The handlers: now, so that those the program installed before are
   * chained (docs/DESIGN.md, "Guarded pool", on later ones). */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &prev_segv);
  sigaction(SIGBUS, &sa, &prev_bus);
  area = base + META_BYTES;
  atomic_store_explicit((_Atomic(meta_t *) *)&meta, mt, memory_order_release);
  return true;
}

static void evict_oldest(void) {
  unsigned r = meta->qring[meta->q_head];
  meta->q_head = (meta->q_head + 1) % RECS;
  meta->q_count--;
  grec_t *g = &meta->rec[r];
  meta->q_pages -= g->npages;
  for (uint32_t i = 0; i < g->npages; i++) meta->page_rec[g->page + i] = 0;
  g->state = R_FREE;
  meta->free_recs[meta->nfree++] = (uint16_t)r;
}

static bool page_live(long i) {
  if (i < 0 || i >= (long)AREA_PAGES) return false;
  unsigned r = meta->page_rec[i];
  return r != 0 && meta->rec[r - 1].state == R_LIVE;
}

/* A page of a block, live or quarantined. */
static bool page_used(long i) { return i >= 0 && i < (long)AREA_PAGES && meta->page_rec[i] != 0; }

/* need pages nobody has, with a page of no block on either side (a touch
 * there is the live block's overflow or underflow, never another block's
 * use after free); first fit from the start, so that the pages resident
 * already are used again (a freed block's pages rest in quarantine). */
static long find_run(uint32_t need) {
  long end = (long)AREA_PAGES - 1;
  for (long i = 1; i + (long)need <= end;) {
    long j = i;
    while (j < i + (long)need && meta->page_rec[j] == 0) j++;
    if (j < i + (long)need) {
      i = j + 1;
      continue;
    }
    if (page_used(i - 1) || page_used(i + (long)need)) {
      i++;
      continue;
    }
    return i;
  }
  return -1;
}

static void *pool_alloc(size_t n, size_t align, const uintptr_t *pcs, int depth) {
  uint32_t need = (uint32_t)((n + HM_PAGE_SIZE - 1) / HM_PAGE_SIZE);
  void *p = NULL;
  guard_lock();
  if (meta == NULL && !pool_create()) goto out;
  if (need > 1 && !bucket_take(&meta->multi, MULTI_PER_S, MULTI_BURST)) goto out;
  if (meta->nfree == 0 && meta->q_count > 0) evict_oldest();
  if (meta->nfree == 0) goto out;
  long run;
  while ((run = find_run(need)) < 0 && meta->q_count > 0) evict_oldest();
  if (run < 0) goto out;
  char *start = area + (size_t)run * HM_PAGE_SIZE, *end = start + (size_t)need * HM_PAGE_SIZE;
  if (mprotect(start, (size_t)need * HM_PAGE_SIZE, PROT_READ | PROT_WRITE) != 0) goto out;
  memset(start, PATTERN, (size_t)need * HM_PAGE_SIZE);
  for (uint32_t i = 0; i < need; i++) {
    meta->n_resident += !meta->resident[run + i];
    meta->resident[run + i] = 1;
  }
  unsigned r = meta->free_recs[--meta->nfree];
  grec_t *g = &meta->rec[r];
  g->right = (uint8_t)(meta->flip ^= 1);
  size_t a = align < 16 ? 16 : align;
  p = g->right ? (void *)((uintptr_t)(end - ((n + 15) & ~(size_t)15)) & ~(uintptr_t)(a - 1)) : start;
  g->p = (uintptr_t)p;
  g->n = n;
  g->page = (uint32_t)run;
  g->npages = need;
  g->state = R_LIVE;
  g->nalloc = (uint8_t)(depth < DEPTH ? depth : DEPTH);
  memcpy(g->alloc_pcs, pcs, g->nalloc * sizeof *pcs);
  g->nfree = 0;
  g->asked = 0;
  for (uint32_t i = 0; i < need; i++) meta->page_rec[run + i] = (uint16_t)(r + 1);
out:
  guard_unlock();
  return p;
}

/* The process's budget (HAKMEM_GUARD_PER_S; docs/DESIGN.md, "Guarded
 * pool"), while the guard samples alone: a bucket of BUDGET_BURST blocks
 * refilled at the option's rate. A sample that finds it empty is served
 * as an ordinary block: the countdowns stay as drawn, so the rate is the
 * option's mean again as soon as the program slows down. */
#define BUDGET_BURST 8u
static bucket_t budget;

static bool budget_take(void) {
  long per_s = hm_opt[HM_OPT_GUARD_PER_S];
  if (!hm_sample_light || per_s == 0) return true;
  guard_lock();
  bool ok = bucket_take(&budget, (uint64_t)per_s, BUDGET_BURST);
  guard_unlock();
  return ok;
}

/* The block malloc (n, align 0) or memalign would have given unsampled. */
static void *ordinary(size_t n, size_t align) {
  if (align > 16) return hm_large_alloc_unsampled(n, align);
  return n <= HM_PACK_MIN ? hm_malloc_small(n) : hm_alloc_above(n, false);
}

/* The sampler's serve hook: a guarded block; past the process's budget,
 * the block malloc would have given; or (the pool full, the block too big
 * or too aligned, the multi-page budget spent) an ordinary large one. */
static void *guard_serve(unsigned fired, size_t n, size_t align, size_t charged) {
  (void)fired;
  (void)charged;
  size_t m = n == 0 ? 1 : n; /* (usable size 0 means a misuse to realloc) */
  if (m <= GUARD_MAX && align <= HM_PAGE_SIZE) {
    if (!budget_take()) return ordinary(m, align);
    uintptr_t pcs[HM_STACK_MAX];
    int depth = hm_stack_capture_at(hm_sample_tls.caller_ra, hm_sample_tls.caller_cfa, pcs, HM_STACK_MAX);
    void *p = pool_alloc(m, align, pcs, depth);
    if (p != NULL) return p;
    hm_sample_tls.left[HM_SAMPLER_GUARD] = BACKOFF;
    /* (and the slab lane's, per class in the heap, when the guard samples alone) */
    if (hm_sample_light && hm_tls_heap != &hm_empty_heap)
      for (unsigned c = 0; c < NUM_CLASSES; c++)
        if (hm_tls_heap->sample_left[c] < BACKOFF) hm_tls_heap->sample_left[c] = BACKOFF;
  }
  return hm_large_alloc_unsampled(m, align);
}

static grec_t *rec_at(uintptr_t a) {
  if (meta == NULL || a < (uintptr_t)area || a >= (uintptr_t)area + AREA_PAGES * HM_PAGE_SIZE) return NULL;
  unsigned r = meta->page_rec[(a - (uintptr_t)area) / HM_PAGE_SIZE];
  return r == 0 ? NULL : &meta->rec[r - 1];
}

/* What malloc_usable_size says: what a block of the size class would. */
static size_t usable(size_t n) { return (n + 15) & ~(size_t)15; }

/* The first byte of [q, e) that is not the pattern, or NULL (8 at a time:
 * byte by byte, this was a third of a sample's cost). */
static const unsigned char *not_pattern(const unsigned char *q, const unsigned char *e) {
  const uint64_t w = 0x0101010101010101ULL * PATTERN;
  for (; q < e && ((uintptr_t)q & 7) != 0; q++)
    if (*q != PATTERN) return q;
  for (uint64_t v; q + 8 <= e; q += 8) {
    memcpy(&v, q, 8);
    if (v != w) break;
  }
  for (; q < e; q++)
    if (*q != PATTERN) return q;
  return NULL;
}

/* The pattern around the block, intact? (bad: where it is not) */
static bool slack_ok(const grec_t *g, uintptr_t *bad) {
  const unsigned char *s = (const unsigned char *)area + (size_t)g->page * HM_PAGE_SIZE;
  const unsigned char *e = s + (size_t)g->npages * HM_PAGE_SIZE, *p = (const unsigned char *)g->p;
  /* (up to the usable size, the bytes are the program's once it asked) */
  const unsigned char *q = not_pattern(s, p);
  if (q == NULL) q = not_pattern(p + (g->asked ? usable(g->n) : g->n), e);
  if (q != NULL) *bad = (uintptr_t)q;
  return q == NULL;
}

static void misuse_end(void) {
  if (hm_opt[HM_OPT_ON_ERROR] != HM_ON_ERROR_WARN) abort();
}

void hm_guard_free(void *p) {
  uintptr_t pcs[HM_STACK_MAX];
  int depth = hm_stack_capture(pcs, HM_STACK_MAX);
  guard_lock();
  grec_t *g = rec_at((uintptr_t)p);
  if (g == NULL || g->p != (uintptr_t)p || g->state != R_LIVE) {
    grec_t copy;
    bool twice = g != NULL && g->p == (uintptr_t)p && g->state == R_QUARANTINED;
    if (twice) copy = *g;
    guard_unlock();
    if (!twice) {
      hm_report_invalid(p, HM_OP_FREE, "not the start of a guarded block");
      return;
    }
    report("double free", (uintptr_t)p, NULL, 0, &copy);
    put_stack("freed again at", pcs, depth);
    misuse_end();
    return;
  }
  uintptr_t bad;
  if (!slack_ok(g, &bad)) {
    grec_t copy = *g;
    guard_unlock();
    bool past = bad >= copy.p + copy.n;
    report("heap-buffer-overflow", bad, past ? " bytes past the " : " bytes before the ",
           past ? bad - (copy.p + copy.n) + 1 : copy.p - bad, &copy);
    put_stack("found at free, at", pcs, depth);
    abort();
  }
  char *start = area + (size_t)g->page * HM_PAGE_SIZE;
  size_t len = (size_t)g->npages * HM_PAGE_SIZE;
  mprotect(start, len, PROT_NONE);
  unsigned cap = g->npages > 1 ? RESIDENT_MULTI_MAX : RESIDENT_MAX;
  if (meta->n_resident > cap && hm_os_purge(start, len) == 0) {
    for (uint32_t i = 0; i < g->npages; i++) meta->resident[g->page + i] = 0;
    meta->n_resident -= g->npages;
  }
  g->state = R_QUARANTINED;
  g->nfree = (uint8_t)(depth < DEPTH ? depth : DEPTH);
  memcpy(g->free_pcs, pcs, g->nfree * sizeof *pcs);
  meta->qring[(meta->q_head + meta->q_count) % RECS] = (uint16_t)(g - meta->rec);
  meta->q_count++;
  meta->q_pages += g->npages;
  while (meta->q_count > QUARANTINE_RECS || meta->q_pages > QUARANTINE_PAGES) evict_oldest();
  guard_unlock();
}

size_t hm_guard_resident(int fd) {
  meta_t *m = atomic_load_explicit((_Atomic(meta_t *) *)&meta, memory_order_acquire);
  return m != NULL ? hm_os_resident_fd(fd, m, POOL_BYTES) : 0;
}

size_t hm_guard_usable(void *p, int op) {
  guard_lock();
  grec_t *g = rec_at((uintptr_t)p);
  size_t n = g != NULL && g->p == (uintptr_t)p && g->state == R_LIVE ? usable(g->n) : 0;
  if (n != 0 && op == HM_OP_USABLE) g->asked = 1;
  bool twice = n == 0 && g != NULL && g->p == (uintptr_t)p;
  guard_unlock();
  if (n == 0 && twice) hm_report_double(p, op, "guarded block already freed");
  else if (n == 0) hm_report_invalid(p, op, "not the start of a guarded block");
  return n;
}

/* ---- the fault handler ---------------------------------------------------- */

/* A fault not ours: to the handler the program had when the pool was made,
 * with its semantics (its mask, SA_RESETHAND, SA_SIGINFO); a default or
 * ignored disposition is put back and the fault left to happen again (or
 * a signal sent by kill raised again), so the process ends as it would
 * have without hakmem. */
static void chain(int sig, siginfo_t *si, void *uc) {
  struct sigaction *o = sig == SIGBUS ? &prev_bus : &prev_segv;
  if (o->sa_handler == SIG_DFL || o->sa_handler == SIG_IGN) { /* (whatever SA_SIGINFO says) */
    if (o->sa_handler == SIG_IGN && si->si_code <= 0) return; /* a kill, ignored */
    sigaction(sig, o, NULL);
    if (si->si_code <= 0) raise(sig); /* (blocked until we return) */
    return;
  }
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &o->sa_mask, &old);
  struct sigaction saved = *o;
  if (o->sa_flags & SA_RESETHAND) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
  }
  if (saved.sa_flags & SA_SIGINFO) saved.sa_sigaction(sig, si, uc);
  else saved.sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void on_fault(int sig, siginfo_t *si, void *uc) {
  uintptr_t a = (uintptr_t)si->si_addr;
  if (si->si_code <= 0 || meta == NULL || a < (uintptr_t)area || a >= (uintptr_t)area + AREA_PAGES * HM_PAGE_SIZE) {
    chain(sig, si, uc);
    return;
  }
  long pg = (long)((a - (uintptr_t)area) / HM_PAGE_SIZE);
  grec_t *g = rec_at(a);
  if (g != NULL && g->state == R_QUARANTINED) {
    report("use-after-free", a, NULL, 0, g);
  } else {
    grec_t *before = page_live(pg - 1) ? &meta->rec[meta->page_rec[pg - 1] - 1] : NULL;
    grec_t *after = page_live(pg + 1) ? &meta->rec[meta->page_rec[pg + 1] - 1] : NULL;
    size_t past = before != NULL ? a - (before->p + before->n) + 1 : SIZE_MAX;
    size_t under = after != NULL ? after->p - a : SIZE_MAX;
    if (before != NULL && past <= under)
      report("heap-buffer-overflow", a, " bytes past the ", past, before);
    else if (after != NULL)
      report("heap-buffer-overflow", a, " bytes before the ", under, after);
    else {
      hm_write_str("hakmem: error: invalid access of ");
      put_hex(a);
      hm_write_str(" (hakmem's guarded pool, no block there)\n");
    }
  }
  abort();
}

/* ---- start-up, fork ------------------------------------------------------- */

void hm_guard_init(void) {
  if (hm_opt[HM_OPT_GUARD_SAMPLE] == 0 || hm_force_libc) return;
  hm_stack_warm();
  hm_sampler_enable(HM_SAMPLER_GUARD, (uint64_t)hm_opt[HM_OPT_GUARD_SAMPLE], false, guard_serve);
}

/* Fork: the lock is a leaf (nothing else is taken under it), so it comes
 * last, after src/fork.c's prepare handler has taken libc's stdio list lock
 * and hakmem's (registered first: prepare handlers run in reverse order);
 * and, as there, not in a single-threaded process, nor in a fork from a
 * signal handler that interrupted this thread inside it (docs/DESIGN.md,
 * "Fork"). */
static _Atomic bool fork_held;
static void guard_fork_prepare(void) {
  fork_held = !HM_GUARD_SINGLE_THREADED() &&
              atomic_load_explicit(&guard_lock_word, memory_order_relaxed) != (uintptr_t)pthread_self();
  if (fork_held) guard_lock();
}
static void guard_fork_after(void) {
  if (fork_held) guard_unlock();
}

void hm_guard_fork_init(void) { pthread_atfork(guard_fork_prepare, guard_fork_after, guard_fork_after); }
