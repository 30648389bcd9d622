/* The large lane: blocks above the pool limit (POOL_MAX), each the
 * whole of a span mapped from the OS, except blocks up to HM_PACK_MAX,
 * which pack.c packs into one-chunk spans taken from here (while the
 * program does not resize its large blocks often: pack_alloc). Freed
 * spans are kept in a cache and reused, so a steady workload makes no
 * system calls.
 *
 * Spans: a span is a multiple of 2 MiB long and its block starts at its
 * base (no header), so a 4 MiB block is exactly two chunks and any span
 * mapped on a 2 MiB boundary serves alignments up to 2 MiB. Descriptors live
 * beside the spans, in a two-level table indexed by the 2 MiB chunk where a
 * span starts: every span is at least 2 MiB long, so no two spans start in
 * the same chunk. A span is usually 2 MiB aligned (the kernel aligns large
 * anonymous mappings; the cache never splits a span off a chunk boundary)
 * but need not be: mremap may move one anywhere, and then its first and
 * last chunks may be shared with other mappings. Nothing in a span is read
 * to look it up, so a shared chunk is harmless.
 *
 * Registry bytes (registry.c): HEAD where a span starts, TAIL where spans
 * only pass through, PACK for a pack's chunk; free() takes HEAD or TAIL to
 * this file, which accepts only the base of a live span, and PACK to
 * pack.c.
 *
 * The cache: one list of free spans per length in chunks (1..LARGE_BUCKETS),
 * newest first. A request takes the newest span of its length, else splits
 * a longer one, else maps (a "miss", which raises the length's capacity by
 * one; a short span is mapped as part of a larger refill whose rest is
 * cached). A freed span is kept if its length is below capacity, merged
 * with cached neighbours freed in the same epoch; over HAKMEM_ACE_MAX_MB
 * the oldest cached memory is unmapped. A length nobody asked for during
 * an epoch (1 s) has its capacity halved. Each span knows how far blocks
 * may have touched it (dirty); a request takes the span whose extent fits
 * it best, and hm_large_purge gives back the pages of spans left idle (the
 * purger), keeping them mapped; hm_large_release unmaps them (malloc_trim,
 * out-of-memory).
 * docs/DESIGN.md, "Large lane", has the design; docs/PERFORMANCE.md the
 * measurements behind the constants.
 *
 * Locking: one mutex, a leaf lock: no call that can take the backend's
 * lock (hm_backend_map_span, hm_meta_alloc) is made while holding it,
 * because the backend's out-of-memory hook calls hm_large_release. munmap is done after
 * unlocking, from a list of spans already taken out of the registry. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "heap.h"
#include "list.h"

#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define tsan_acquire(p) __tsan_acquire(p)
#define tsan_release(p) __tsan_release(p)
#else
#define tsan_acquire(p) ((void)0)
#define tsan_release(p) ((void)0)
#endif

#define LARGE_BUCKETS 32                        /* spans of up to 64 MiB are cached */
#define LARGE_CAP_MAX 256                       /* per length */
#define LARGE_EPOCH_NS 1000000000ull            /* capacity of unused lengths decays */
#define LARGE_ALIGN_SCAN 16                     /* cached spans looked at for an aligned request */
#define LARGE_REFILL_MIN ((size_t)16 << 20)     /* a miss for a short span maps at least this */
#define LARGE_REFILL_MAX ((size_t)LARGE_BUCKETS << SS_SHIFT) /* the rest fits a bucket */
#define LARGE_LIMIT ((size_t)1 << REG_ADDR_BITS) /* larger requests: Threshold */
#define LARGE_SHRINK_MOVE ((size_t)64 << 10)     /* realloc to this or less moves a block into the pool */

/* SPAN_PURGING: out of the cache while a purge step gives its pages back. */
enum { SPAN_NONE = 0, SPAN_USED = 1, SPAN_CACHED = 2, SPAN_PURGING = 3 };

typedef struct span {
  char *base;
  size_t len;                 /* a multiple of SS_SIZE */
  /* Bytes from base that may be resident: the largest block handed out in
   * it since it was mapped or purged (page rounded; 0: nothing resident).
   * A span reused for a smaller block keeps the larger one's pages. */
  size_t dirty;
  uint64_t freed_ns;          /* when it entered the cache */
  uint64_t purged_ns;         /* when a purge step gave its pages back (0: never) */
  struct span *next, *prev;   /* cache list; next also chains spans to unmap or purge */
  uint32_t state;
#ifdef HAKMEM_SECURE
  bool guarded;               /* its last page is PROT_NONE now (see guard_on) */
#endif
} span_t;

/* Descriptor table: chunk index -> descriptor, leaves of 2^13 (16 GiB of
 * address space each) taken from metadata memory as needed. */
#define LEAF_BITS 13
#define LEAF_MASK (((uintptr_t)1 << LEAF_BITS) - 1)
#define DIR_SIZE ((size_t)1 << (REG_ADDR_BITS - SS_SHIFT - LEAF_BITS))
#define LEAF_BYTES (sizeof(span_t) << LEAF_BITS)

typedef struct bucket {
  span_t *head, *tail;  /* newest, oldest */
  uint32_t count, cap;
  bool wanted;          /* requested during this epoch */
} bucket_t;

static pthread_mutex_t large_lock = PTHREAD_MUTEX_INITIALIZER;
static span_t *_Atomic dir[DIR_SIZE];
static bucket_t buckets[LARGE_BUCKETS + 1]; /* index: length in chunks */
static size_t cache_bytes;
/* Of the cached bytes, those that are not resident (hakmem's resident
 * estimate): never handed out, or given back by a purge step. */
static _Atomic size_t cache_clean;
static _Atomic size_t cache_bytes_pub;  /* cache_bytes, for readers without the lock */
static _Atomic size_t mapped_bytes;     /* all spans, used and cached */
static uint64_t next_epoch_ns;
static uint64_t last_alloc_ns;          /* the last request the lane served (hm_large_purge) */

static uintptr_t chunk_of(const void *p) { return (uintptr_t)p >> SS_SHIFT; }
static size_t span_len_for(size_t n) { return n == 0 ? SS_SIZE : (n + SS_MASK) & ~(size_t)SS_MASK; }
static size_t page_round(size_t n) { return (n + HM_PAGE_SIZE - 1) & ~(size_t)(HM_PAGE_SIZE - 1); }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }
static size_t max_cached(void) { return (size_t)hm_opt[HM_OPT_LARGE_CACHE_MB] << 20; }

/* Descriptor slot of chunk c, or NULL when its leaf does not exist. */
static span_t *slot(uintptr_t c) {
  span_t *leaf = atomic_load_explicit(&dir[c >> LEAF_BITS], memory_order_acquire);
  return leaf != NULL ? &leaf[c & LEAF_MASK] : NULL;
}

/* The live span whose block is p, or NULL. */
static span_t *span_at(const void *p, uint32_t state) {
  if (hm_reg_kind((uintptr_t)p) != REG_LARGE_HEAD) return NULL;
  span_t *s = slot(chunk_of(p));
  return s != NULL && s->state == state && s->base == p ? s : NULL;
}

/* ---- descriptor leaves ---------------------------------------------------- */

/* Leaves a caller holds for a span it is about to create: taken before the
 * OS call (allocating if need be), installed after it under the lock, the
 * unused ones handed back, so that recording a span never allocates. */
typedef struct leaves {
  void *chain; /* linked through each leaf's first word */
  size_t n;
} leaves_t;

static void *spare_leaves; /* leaves handed back, for the next caller */

/* Leaves a span of len bytes may need, wherever the OS puts it. */
static size_t leaves_for(size_t len) { return (len >> (SS_SHIFT + LEAF_BITS)) + 2; }

/* Leaves [p, p+len) lacks. */
static size_t leaves_missing(const char *p, size_t len) {
  size_t n = 0;
  for (uintptr_t t = chunk_of(p) >> LEAF_BITS; t <= chunk_of(p + len - 1) >> LEAF_BITS; t++)
    n += atomic_load_explicit(&dir[t], memory_order_acquire) == NULL;
  return n;
}

static void leaf_push(void **chain, void *leaf) {
  *(void **)leaf = *chain;
  *chain = leaf;
}

static void *leaf_pop(void **chain) {
  void *leaf = *chain;
  *chain = *(void **)leaf;
  *(void **)leaf = NULL;
  return leaf;
}

/* Take `want` leaves. Lock not held. */
static bool leaves_claim(leaves_t *l, size_t want) {
  l->chain = NULL;
  l->n = 0;
  hm_mutex_lock(&large_lock);
  while (l->n < want && spare_leaves != NULL) {
    leaf_push(&l->chain, leaf_pop(&spare_leaves));
    l->n++;
  }
  hm_mutex_unlock(&large_lock);
  while (l->n < want) {
    void *leaf = hm_meta_alloc(LEAF_BYTES); /* fresh metadata memory reads zero */
    if (leaf == NULL) {
      hm_mutex_lock(&large_lock);
      while (l->chain != NULL) leaf_push(&spare_leaves, leaf_pop(&l->chain));
      hm_mutex_unlock(&large_lock);
      return false;
    }
    leaf_push(&l->chain, leaf);
    l->n++;
  }
  return true;
}

/* Give [p, p+len) its leaves (none if p is NULL); hand back the rest.
 * Lock held. */
static void leaves_install(const char *p, size_t len, leaves_t *l) {
  for (uintptr_t t = chunk_of(p) >> LEAF_BITS; p != NULL && t <= chunk_of(p + len - 1) >> LEAF_BITS; t++)
    if (atomic_load_explicit(&dir[t], memory_order_relaxed) == NULL)
      atomic_store_explicit(&dir[t], (span_t *)leaf_pop(&l->chain), memory_order_release);
  while (l->chain != NULL) leaf_push(&spare_leaves, leaf_pop(&l->chain));
}

/* ---- registry ------------------------------------------------------------- */

/* Recompute the byte of chunk c, which a span starts, ends or passes in:
 * HEAD if a live span starts in it, TAIL if one covers part of it. Only the
 * last span starting before c can reach into it; the chunks between are
 * TAIL. SuperSlab chunks are never shared, so they are left alone. */
static void reg_refresh(uintptr_t c) {
  unsigned k = __atomic_load_n(&hm_registry[c], __ATOMIC_RELAXED);
  if (k == REG_SS || k == REG_LARGE_PACK) return;
  span_t *s = slot(c);
  uint8_t v = REG_NONE;
  if (s != NULL && s->state != SPAN_NONE) {
    v = REG_LARGE_HEAD;
  } else if (s != NULL && s->base != NULL && chunk_of(s->base) == c) {
    v = REG_LARGE_FREED; /* a span started here and was given back: a second free is a double free */
  } else {
    uintptr_t h = c;
    while (h > 0 && __atomic_load_n(&hm_registry[h - 1], __ATOMIC_RELAXED) == REG_LARGE_TAIL) h--;
    if (h > 0 && __atomic_load_n(&hm_registry[h - 1], __ATOMIC_RELAXED) == REG_LARGE_HEAD) {
      s = slot(h - 1);
      if (s->state != SPAN_NONE && (uintptr_t)(s->base + s->len) > (c << SS_SHIFT)) v = REG_LARGE_TAIL;
    }
  }
  __atomic_store_n(&hm_registry[c], (uint8_t)v, __ATOMIC_RELAXED);
}

/* Record a span (its state already set) / forget one (state NONE). */
static void reg_mark(const span_t *s) {
  uintptr_t c0 = chunk_of(s->base), c1 = chunk_of(s->base + s->len - 1);
  __atomic_store_n(&hm_registry[c0], (uint8_t)REG_LARGE_HEAD, __ATOMIC_RELAXED);
  for (uintptr_t c = c0 + 1; c < c1; c++) __atomic_store_n(&hm_registry[c], (uint8_t)REG_LARGE_TAIL, __ATOMIC_RELAXED);
  if (c1 != c0) reg_refresh(c1);
}

static void reg_unmark(const span_t *s) {
  uintptr_t c0 = chunk_of(s->base), c1 = chunk_of(s->base + s->len - 1);
  for (uintptr_t c = c0 + 1; c < c1; c++) __atomic_store_n(&hm_registry[c], (uint8_t)REG_NONE, __ATOMIC_RELAXED);
  reg_refresh(c0);
  if (c1 != c0) reg_refresh(c1);
}

/* A new descriptor for [p, p+len) in state st; leaves installed. */
static span_t *span_record(char *p, size_t len, uint32_t st) {
  span_t *s = slot(chunk_of(p));
  HM_ASSERT(s->state == SPAN_NONE);
  tsan_acquire(s); /* (see unmap_list) */
  s->base = p;
  s->len = len;
  s->next = s->prev = NULL;
  s->state = st;
  s->dirty = 0;
  s->purged_ns = 0;
#ifdef HAKMEM_SECURE
  s->guarded = false;
#endif
  reg_mark(s);
  return s;
}

/* ---- guard pages (secure mode) -------------------------------------------- */

/* The last page of a span handed out is PROT_NONE (docs/SECURITY.md). It
 * stays there while the span is cached, so that a span reused at the same
 * length costs no mprotect; it goes with the span's end when a span is cut
 * (span_cut), and is lifted where the end stops being one: merged with the
 * span after it, grown in place or moved by mremap. No PROT_NONE page is
 * ever inside a span. In the default build none of this exists.
 *
 * s is about to be handed out (the caller's: no lock needed). A refusal
 * (vm.max_map_count) leaves the guard out; the next hand-out tries again. */
static void guard_on(span_t *s) {
#ifdef HAKMEM_SECURE
  if (!s->guarded) s->guarded = hm_secure_guard(s->base + s->len - HM_GUARD_SIZE);
#else
  (void)s;
#endif
}

/* s's end is about to stop being its end. Lock held, or s is the caller's. */
static void guard_lift(span_t *s) {
#ifdef HAKMEM_SECURE
  if (s->guarded) hm_secure_unguard(s->base + s->len - HM_GUARD_SIZE);
  s->guarded = false;
#else
  (void)s;
#endif
}

/* Merge n, which starts where s ends and is on no list, into s. */
static void span_merge(span_t *s, span_t *n) {
  n->state = SPAN_NONE;
  guard_lift(s);
#ifdef HAKMEM_SECURE
  s->guarded = n->guarded;
#endif
  if (n->dirty != 0) s->dirty = s->len + n->dirty;
  s->len += n->len;
}

/* Cut s to len bytes; the rest becomes a span of its own (recorded as in
 * use, on no list), which takes s's end and so its guard page. */
static span_t *span_cut(span_t *s, size_t len) {
  size_t rest = s->len - len;
  s->len = len;
  span_t *r = span_record(s->base + len, rest, SPAN_USED);
  r->dirty = s->dirty > len ? s->dirty - len : 0;
  if (s->dirty > len) s->dirty = len;
#ifdef HAKMEM_SECURE
  r->guarded = s->guarded;
  s->guarded = false;
#endif
  return r;
}

/* ---- the cache (lock held) -------------------------------------------------- */

#ifdef HAKMEM_DEBUG
/* Every listed span is cached, in the bucket of its length, registered;
 * counts and bytes add up. */
static void cache_check(void) {
  size_t bytes = 0;
  for (unsigned k = 1; k <= LARGE_BUCKETS; k++) {
    uint32_t n = 0;
    for (span_t *s = buckets[k].head; s != NULL; s = s->next, n++) {
      HM_ASSERT(s->state == SPAN_CACHED && s->len == (size_t)k << SS_SHIFT);
      HM_ASSERT(span_at(s->base, SPAN_CACHED) == s);
      HM_ASSERT(s->next != NULL || buckets[k].tail == s);
      bytes += s->len;
    }
    HM_ASSERT(n == buckets[k].count);
  }
  HM_ASSERT(bytes == cache_bytes);
}
#else
#define cache_check() ((void)0)
#endif

/* Span s enters the cache: its state and the counts (the caller links it
 * into its bucket, b). */
static bucket_t *cache_enter(span_t *s) {
  bucket_t *b = &buckets[s->len >> SS_SHIFT];
  s->state = SPAN_CACHED;
  b->count++;
  cache_bytes += s->len;
  atomic_store_explicit(&cache_bytes_pub, cache_bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&cache_clean, s->len - s->dirty, memory_order_relaxed);
  return b;
}

static void cache_push(span_t *s, uint64_t freed_ns) {
  bucket_t *b = cache_enter(s);
  s->freed_ns = freed_ns;
  HM_QUEUE_PUSH_HEAD(b->head, b->tail, s, next, HM_PREV);
}

/* A span just purged goes last: it is the oldest, and the least wanted. */
static void cache_push_oldest(span_t *s) {
  bucket_t *b = cache_enter(s);
  HM_QUEUE_PUSH_TAIL(b->head, b->tail, s, next, HM_PREV);
}

static void cache_unlink(span_t *s) {
  bucket_t *b = &buckets[s->len >> SS_SHIFT];
  HM_QUEUE_UNLINK(b->head, b->tail, s, next, HM_PREV);
  b->count--;
  cache_bytes -= s->len;
  atomic_store_explicit(&cache_bytes_pub, cache_bytes, memory_order_relaxed);
  atomic_fetch_sub_explicit(&cache_clean, s->len - s->dirty, memory_order_relaxed);
}

/* Take s out of the cache and the registry and chain it for unmapping
 * once the lock is dropped. */
static void doom(span_t *s, span_t **list) {
  if (s->state == SPAN_CACHED) cache_unlink(s);
  s->state = SPAN_NONE;
  reg_unmark(s);
  s->next = *list;
  *list = s;
}

static size_t unmap_list(span_t *s) {
  size_t bytes = 0;
  while (s != NULL) {
    span_t *next = s->next;
    char *base = s->base;
    size_t len = s->len;
    /* Once the range is unmapped, another thread may map it and record a
     * span in this slot: the kernel orders that after these reads, which
     * ThreadSanitizer cannot see, so it is told (tsan_release/acquire). */
    tsan_release(s);
    bytes += len;
    atomic_fetch_sub_explicit(&mapped_bytes, len, memory_order_relaxed);
    hm_os_unmap(base, len); /* from here on the slot may be reused */
    s = next;
  }
  return bytes;
}

/* Over its bound, unmap the oldest cached memory down to 7/8 of the bound
 * (so that a workload hovering at the bound makes few, larger calls):
 * whole spans, or the end of one when that is enough (a span coalesced
 * from many must not take them all with it). */
static void cache_trim(span_t **list) {
  size_t max = max_cached();
  if (cache_bytes <= max) return;
  max -= max / 8;
  while (cache_bytes > max) {
    span_t *oldest = NULL;
    for (unsigned k = 1; k <= LARGE_BUCKETS; k++) {
      span_t *t = buckets[k].tail;
      if (t != NULL && (oldest == NULL || t->freed_ns < oldest->freed_ns)) oldest = t;
    }
    size_t cut = (cache_bytes - max + SS_MASK) & ~(size_t)SS_MASK;
    if (cut < oldest->len) {
      cache_unlink(oldest);
      doom(span_cut(oldest, oldest->len - cut), list);
      cache_push(oldest, oldest->freed_ns);
    } else {
      doom(oldest, list);
    }
  }
}

/* The live span that ends exactly at x, if any: the last span starting
 * before x; the chunks it passes through are TAIL. */
static span_t *span_ending_at(const char *x) {
  uintptr_t c = chunk_of(x - 1);
  for (unsigned walked = 0; walked <= LARGE_BUCKETS; walked++, c--) {
    span_t *s = slot(c);
    if (s != NULL && s->state != SPAN_NONE && s->base < x) return s->base + s->len == x ? s : NULL;
    if (c == 0 || (__atomic_load_n(&hm_registry[c], __ATOMIC_RELAXED) != REG_LARGE_TAIL && __atomic_load_n(&hm_registry[c], __ATOMIC_RELAXED) != REG_LARGE_HEAD)) return NULL;
  }
  return NULL;
}

/* May cached span c, freed at c->freed_ns, merge with s (freed at now)? If
 * a bucket holds the two, and c was freed in the last epoch: an idle span
 * stays apart, so that its age still tells when to give it back. Unless
 * `any`, the right one of the two must also be clean: a span's resident
 * pages are tracked as one extent from its base, which a dirty right half
 * stretches over the left one, and spans kept apart let a request pick the
 * one whose extent fits it (bucket_find). */
static bool mergeable(const span_t *c, const span_t *s, uint64_t now, const span_t *right, bool any) {
  if (c == NULL || (s->len + c->len) >> SS_SHIFT > LARGE_BUCKETS) return false;
  const span_t *left = right == s ? c : s;
  /* Or the left one is longer than a chunk and dirty to within a chunk of
   * its end: the merged extent overstates the resident pages by less than
   * a chunk, and a block and the rest of the span it was split from come
   * together again (else a churn of blocks of many sizes splits the cache
   * into short dirty spans that fit no request). */
  bool whole = left->len > SS_SIZE && left->dirty + SS_SIZE >= left->len;
  return any || ((right->dirty == 0 || whole) && now - c->freed_ns < LARGE_EPOCH_NS);
}

/* Merge s (leaving the cache's lists, not yet in them) with the cached
 * spans right before and after it: free memory stays in few spans, so any
 * length can be split from it. *freed_ns: s's time on entry, the merged
 * span's on return (its oldest dirty part's). */
static span_t *coalesce(span_t *s, uint64_t now, uint64_t *freed_ns, bool any) {
  span_t *n = span_at(s->base + s->len, SPAN_CACHED);
  if (mergeable(n, s, now, n, any)) {
    cache_unlink(n);
    if (n->dirty != 0 && n->freed_ns < *freed_ns) *freed_ns = n->freed_ns;
    span_merge(s, n);
  }
  span_t *p = span_ending_at(s->base);
  if (p != NULL && p->state == SPAN_CACHED && mergeable(p, s, now, s, any)) {
    cache_unlink(p);
    span_merge(p, s);
    if (p->dirty != 0 && p->freed_ns < *freed_ns) *freed_ns = p->freed_ns;
    s = p;
  }
  s->state = SPAN_CACHED;
  reg_mark(s);
  return s;
}

/* Keep a span that no block uses: always if `spare` (the rest of a split
 * or shrunk span), else within its length's capacity, or past it when it
 * merges with a cached neighbour (and so leaves its length). */
static void cache_put(span_t *s, uint64_t now, bool spare, span_t **list) {
  size_t k = s->len >> SS_SHIFT;
  if (k <= LARGE_BUCKETS && s->len <= max_cached()) {
    bool room = spare || buckets[k].count < buckets[k].cap;
    uint64_t freed_ns = now;
    size_t len = s->len;
    s = coalesce(s, now, &freed_ns, !room);
    /* (past capacity and merged with no neighbour, still kept while the
     * cache is within its bound: a cached span serves any length, split,
     * grown or gathered) */
    if (room || s->len != len || cache_bytes + s->len <= max_cached()) {
      cache_push(s, freed_ns);
      cache_trim(list);
      cache_check();
      return;
    }
    s->state = SPAN_USED; /* (coalesce marked it cached; it is on no list) */
  }
  doom(s, list);
  cache_check();
}

/* Cut s to len bytes; the rest becomes a spare span in the cache. */
static void span_split(span_t *s, size_t len, uint64_t freed_ns, span_t **list) {
  cache_put(span_cut(s, len), freed_ns, true, list);
}

/* Once per epoch: halve the capacity of every length nobody asked for,
 * so that fewer of its spans are kept when freed. The spans already cached
 * stay: their pages go when idle (hm_large_purge), the spans at the byte bound, or at
 * malloc_trim; coalesced and split-off spans sit in lengths nobody asks
 * for by name. */
static void cache_decay(uint64_t now) {
  if (now < next_epoch_ns) return;
  if (next_epoch_ns != 0) {
    for (unsigned k = 1; k <= LARGE_BUCKETS; k++) {
      if (!buckets[k].wanted) buckets[k].cap /= 2;
      buckets[k].wanted = false;
    }
  }
  next_epoch_ns = now + LARGE_EPOCH_NS;
}

/* Of the newest spans of a bucket at alignment align, the one whose dirty
 * extent fits a block of `need` bytes best: the least dirty one covering
 * it, else the dirtiest. A span keeps every page any block touched in it,
 * so handing the dirtiest spans to the largest blocks keeps the resident
 * pages close to what the live blocks need. */
static span_t *bucket_find(const bucket_t *b, size_t align, size_t need) {
  span_t *best = NULL;
  unsigned n = 0;
  for (span_t *s = b->head; s != NULL && n < LARGE_ALIGN_SCAN; s = s->next, n++) {
    if (((uintptr_t)s->base & (align - 1)) != 0) continue;
    if (best == NULL || (best->dirty < need ? s->dirty > best->dirty : s->dirty >= need && s->dirty < best->dirty))
      best = s;
    if (best->dirty == need) break;
  }
  return best;
}

/* Bytes of s and the cached spans right after it, stopping once len is
 * reached. */
static size_t run_length(const span_t *s, size_t len) {
  size_t have = s->len;
  span_t *n;
  while (have < len && (n = span_at(s->base + have, SPAN_CACHED)) != NULL) have += n->len;
  return have;
}

/* Merge into s (on no list) the cached spans after it, up to have bytes. */
static void absorb_run(span_t *s, size_t have) {
  while (s->len < have) {
    span_t *n = span_at(s->base + s->len, SPAN_CACHED);
    cache_unlink(n);
    span_merge(s, n);
  }
  reg_mark(s);
}

/* No cached span is len bytes long: a run of adjacent cached spans may be
 * (freed spans are kept apart while dirty, see mergeable). The first such
 * run found is merged into its first span, which is returned (cached). */
static span_t *cache_take_run(size_t len, size_t align) {
  for (unsigned k = 1; k <= LARGE_BUCKETS; k++) {
    for (span_t *s = buckets[k].head; s != NULL; s = s->next) {
      if (((uintptr_t)s->base & (align - 1)) != 0) continue;
      size_t have = run_length(s, len);
      if (have < len || have >> SS_SHIFT > LARGE_BUCKETS) continue;
      uint64_t freed_ns = s->freed_ns;
      cache_unlink(s);
      absorb_run(s, have);
      cache_push(s, freed_ns);
      return s;
    }
  }
  return NULL;
}

/* A cached span for a block of len bytes, need of them used (page
 * rounded), at alignment align (<= 2 MiB). */
static span_t *cache_take(size_t len, size_t need, size_t align, uint64_t now, span_t **list) {
  size_t k = len >> SS_SHIFT;
  if (k > LARGE_BUCKETS) return NULL;
  bucket_t *b = &buckets[k];
  b->wanted = true;
  span_t *s = bucket_find(b, align, need);
  if (s == NULL) {
    if (b->cap < LARGE_CAP_MAX) b->cap++; /* a miss: keep one more of these */
    /* a longer span split for it is a miss of that length too: spans come
     * back longer than they left when realloc grows them */
    for (size_t j = k + 1; j <= LARGE_BUCKETS && s == NULL; j++) {
      if ((s = bucket_find(&buckets[j], align, need)) == NULL) continue;
      buckets[j].wanted = true;
      if (buckets[j].cap < LARGE_CAP_MAX) buckets[j].cap++;
    }
    if (s == NULL) s = cache_take_run(len, align);
    if (s == NULL) return NULL;
  }
  cache_unlink(s);
  s->state = SPAN_USED;
  /* (the rest keeps its age: splitting a request off an idle span must
   * not keep the rest from being given back) */
  if (s->len > len) span_split(s, len, s->freed_ns, list);
  if (s->purged_ns != 0 && s->dirty < need) hm_purge_regret(s->purged_ns, now); /* faults again */
  s->purged_ns = 0;
  s->dirty = max_sz(s->dirty, need);
  return s;
}

/* ---- failures --------------------------------------------------------------- */

/* HAKMEM_LARGE_TRACE=1: one line per failed large allocation, written at
 * once (lines of threads failing together do not mix), without allocating.
 * Sets errno to ENOMEM. */
static void *fail(const char *reason, size_t n, size_t align, int err) {
  if (hm_opt[HM_OPT_LARGE_TRACE]) {
    hm_line_t o;
    hm_line_init(&o, NULL, 2);
    hm_line_put(&o, "hakmem: large: ");
    hm_line_put(&o, reason);
    hm_line_put(&o, " size=");
    hm_line_dec(&o, n, 0);
    if (align > 16) {
      hm_line_put(&o, " align=");
      hm_line_dec(&o, align, 0);
    }
    hm_line_put(&o, " errno=");
    hm_line_dec(&o, (uint64_t)err, 0);
    hm_line_put(&o, " (");
    const char *text = strerrordesc_np(err);
    hm_line_put(&o, text != NULL ? text : "unknown error");
    hm_line_put(&o, ")\n");
    hm_line_flush(&o);
  }
  errno = ENOMEM;
  return NULL;
}

/* The OS refused: Exhaustion if the lane had cached spans (given back by
 * the backend's retry before this refusal), else MapFail. */
static void *fail_refused(bool had_cache, size_t n, size_t align, int err) {
  return fail(had_cache ? "Exhaustion" : "MapFail", n, align, err);
}

/* ---- allocation --------------------------------------------------------- */

/* Map len bytes at alignment align from the OS; errno set on failure. */
static char *map_span(size_t len, size_t align) {
  char *p = NULL;
  if (align <= SS_SIZE) {
    p = hm_backend_map_span(len); /* large anonymous mappings are usually 2 MiB aligned already */
    if (p == NULL || ((uintptr_t)p & (align - 1)) == 0) return p;
    hm_os_unmap(p, len);
  }
  char *raw = hm_backend_map_span(len + align);
  if (raw == NULL) return NULL;
  p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  hm_os_unmap(raw, (size_t)(p - raw));
  hm_os_unmap(p + len, (size_t)(raw + align - p));
  return p;
}

/* No cached span is long enough for a block of len bytes: the cached
 * spans with the most resident pages that fit in it together (at most
 * LARGE_GATHER_MAX, the most resident first), taken out of the cache, so
 * that a block larger than any cached span takes their pages and faults
 * in only the rest, where a fresh mapping faults in all of it while the
 * cached spans sit unused (and the bound unmaps them). One piece stays a
 * span in use (span_take grows it: large_grow); several leave the
 * registry, to be moved into a new mapping (gather). Returns how many. */
#define LARGE_GATHER_MAX 8
#define LARGE_GATHER_SCAN 64
#define LARGE_PIECES_MIN ((size_t)4 << 20) /* longer requests take pieces */
typedef struct piece {
  char *base;
  size_t len, dirty;
} piece_t;

static unsigned cache_take_pieces(size_t len, span_t **one, piece_t *pieces) {
  span_t *cand[LARGE_GATHER_SCAN];
  unsigned nc = 0;
  for (size_t k = (len >> SS_SHIFT) - 1; k >= 1; k--) {
    unsigned n = 0;
    for (span_t *s = buckets[k].head; s != NULL && n < LARGE_ALIGN_SCAN && nc < LARGE_GATHER_SCAN; s = s->next, n++) {
      if (s->dirty == 0) continue;
      unsigned i = nc++; /* sorted by dirty extent, largest first */
      for (; i > 0 && cand[i - 1]->dirty < s->dirty; i--) cand[i] = cand[i - 1];
      cand[i] = s;
    }
  }
  span_t *pick[LARGE_GATHER_MAX];
  unsigned np = 0;
  size_t sum = 0;
  for (unsigned i = 0; i < nc && np < LARGE_GATHER_MAX && sum < len; i++)
    if (sum + cand[i]->len <= len) {
      pick[np++] = cand[i];
      sum += cand[i]->len;
    }
#ifdef HAKMEM_SECURE
  if (np > 1) np = 1; /* (a cached span keeps its guard page: none may end up inside a span) */
#endif
  for (unsigned i = 0; i < np; i++) {
    span_t *s = pick[i];
    cache_unlink(s);
    s->purged_ns = 0; /* (its dirty extent says what is left) */
    if (np == 1) {
      s->state = SPAN_USED;
      *one = s;
      break;
    }
    pieces[i] = (piece_t){s->base, s->len, s->dirty};
    s->state = SPAN_NONE;
    reg_unmark(s);
    tsan_release(s); /* (once moved away, the slot may be reused: see unmap_list) */
  }
  return np;
}

/* A miss for a short span maps an eighth of what the lane holds, 16 to 64
 * MiB (span_take). */
static size_t refill_len(void) {
  size_t refill = atomic_load_explicit(&mapped_bytes, memory_order_relaxed) / 8;
  refill = refill < LARGE_REFILL_MIN ? LARGE_REFILL_MIN : refill > LARGE_REFILL_MAX ? LARGE_REFILL_MAX : refill;
  return refill & ~(size_t)SS_MASK;
}

/* Put back a piece that could not be moved. Lock held. */
static void piece_return(const piece_t *pc, uint64_t now, span_t **list) {
  span_t *s = span_record(pc->base, pc->len, SPAN_USED);
  s->dirty = pc->dirty;
  cache_put(s, now, true, list);
}

/* A block of n bytes (a span of len) made of the np pieces: a new mapping
 * of len bytes, over whose start their pages are moved one after another
 * (mremap, nothing copied). NULL if the OS refused the mapping; the
 * pieces that could not be moved go back to the cache. */
static char *gather(piece_t *pieces, unsigned np, size_t n, size_t len) {
  leaves_t l;
  char *p = NULL;
  size_t off = 0, dirty = 0;
  if (leaves_claim(&l, leaves_for(len)) && (p = map_span(len, HM_PAGE_SIZE)) != NULL) {
    atomic_fetch_add_explicit(&mapped_bytes, len, memory_order_relaxed);
    for (unsigned i = 0; i < np; i++) {
      if (!hm_os_move_over(pieces[i].base, pieces[i].len, p + off)) continue; /* (two mappings: EFAULT) */
      atomic_fetch_sub_explicit(&mapped_bytes, pieces[i].len, memory_order_relaxed);
      dirty = max_sz(dirty, off + pieces[i].dirty);
      off += pieces[i].len;
      pieces[i].len = 0; /* moved */
    }
  }
  span_t *list = NULL;
  uint64_t now = hm_now_ns();
  hm_mutex_lock(&large_lock);
  leaves_install(p, len, &l);
  if (p != NULL) span_record(p, len, SPAN_USED)->dirty = max_sz(dirty, page_round(n + HM_GUARD_SIZE));
  for (unsigned i = 0; i < np; i++)
    if (pieces[i].len != 0) piece_return(&pieces[i], now, &list);
  hm_mutex_unlock(&large_lock);
  unmap_list(list);
  return p;
}

static void *large_grow(span_t *s, size_t n, size_t len, bool keep);
static void large_free(void *p);

static void *span_take(size_t n, size_t asked_align, bool *fresh) {
  size_t align = asked_align < HM_PAGE_SIZE ? HM_PAGE_SIZE : asked_align; /* every span is page aligned */
  if (align >= LARGE_LIMIT || n > LARGE_LIMIT - align) return fail("Threshold", n, asked_align, ENOMEM);
  size_t len = span_len_for(n + HM_GUARD_SIZE);
  span_t *list = NULL, *s = NULL;
  uint64_t now = hm_now_ns();
  hm_mutex_lock(&large_lock);
  size_t need = page_round(n + HM_GUARD_SIZE);
  last_alloc_ns = now;
  if (align <= SS_SIZE) s = cache_take(len, need, align, now, &list);
  bool had_cache = cache_bytes != 0;
  /* A short span is refilled with an eighth of what the lane holds (16 to
   * 64 MiB), the rest cached (clean memory): the next misses, and growing
   * the block in place, need no system call, and a working set that
   * fluctuates finds its peaks provided for. */
  size_t map = len, refill = refill_len();
  if (len <= refill / 2 && align <= SS_SIZE && cache_bytes + refill - len <= max_cached()) map = refill;
  /* Above 4 MiB, cached spans shorter than the request make it up first:
   * the faults of a fresh span outweigh the calls (one or more for each
   * such miss, where a refill makes one for many short ones) */
  piece_t pieces[LARGE_GATHER_MAX];
  unsigned np = 0;
  if (s == NULL && align == HM_PAGE_SIZE && len > LARGE_PIECES_MIN) np = cache_take_pieces(len, &s, pieces);
  hm_mutex_unlock(&large_lock);
  unmap_list(list);
  list = NULL;
  if (np > 1) {
    char *q = gather(pieces, np, n, len);
    if (q != NULL) {
      *fresh = false;
      return q;
    }
  }
  if (s != NULL && s->len < len) { /* one piece: grow it */
    char *old = s->base, *q = large_grow(s, n, len, false);
    if (q != NULL) {
      guard_on(span_at(q, SPAN_USED));
      *fresh = false;
      return q;
    }
    large_free(old); /* back to the cache; map instead */
    s = NULL;
  }
  if (s != NULL) {
    guard_on(s);
    *fresh = false;
    return s->base;
  }
  leaves_t l;
  if (!leaves_claim(&l, leaves_for(map))) return fail_refused(had_cache, n, asked_align, ENOMEM);
  char *p = map_span(map, align);
  if (p == NULL && map != len) p = map_span(map = len, align);
  int err = errno;
  if (p != NULL && (uintptr_t)p + map > LARGE_LIMIT) { /* beyond the registry */
    hm_os_unmap(p, map);
    p = NULL;
    err = ENOMEM;
  }
  if (p != NULL) atomic_fetch_add_explicit(&mapped_bytes, map, memory_order_relaxed);
  hm_mutex_lock(&large_lock);
  leaves_install(p, map, &l);
  if (p != NULL) {
    s = span_record(p, map, SPAN_USED); /* (the rest of a refill is clean: dirty 0) */
    if (map > len) span_split(s, len, hm_now_ns(), &list);
    s->dirty = need;
  }
  hm_mutex_unlock(&large_lock);
  unmap_list(list);
  if (p == NULL) return fail_refused(had_cache, n, asked_align, err);
  guard_on(s);
  *fresh = true;
  return p;
}

static bool packed(const void *p) { return hm_reg_kind((uintptr_t)p) == REG_LARGE_PACK; }

/* Statistics of a large block handed out (sign +1) or taken back (-1):
 * a block's usable and mapped bytes are its span's length (a packed
 * block's: its pages). */
static void count_block(int sign, const void *p) {
  if (packed(p)) {
    size_t u = hm_pack_usable(p);
    if (u != 0) hm_stats_large(sign, u, u);
    return;
  }
  span_t *s = span_at(p, SPAN_USED);
  if (s != NULL) hm_stats_large(sign, s->len, s->len);
}

/* Packs or spans for blocks up to HM_PACK_MAX, by what the program does
 * with them. A packed block that realloc grows past the free pages after
 * it must move (pack_realloc), a span's block grows in place; blocks that
 * keep their size pack well. Every PACK_WINDOW large allocations up to
 * HM_PACK_MAX, the next window takes spans if there were more than one
 * realloc for PACK_GROW_RATIO of them that kept a block of up to 2 MiB in
 * the lane (docs/DESIGN.md, "Large lane"). */
#define PACK_WINDOW 256u
#define PACK_GROW_RATIO 8u
static _Atomic uint32_t window_allocs, window_grows;
static _Atomic bool window_spans;

static void pack_window_count(bool grow) {
  /* (loads and stores, no read-modify-write: a lost count is harmless) */
  if (grow) {
    atomic_store_explicit(&window_grows, atomic_load_explicit(&window_grows, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    return;
  }
  uint32_t a = atomic_load_explicit(&window_allocs, memory_order_relaxed) + 1;
  atomic_store_explicit(&window_allocs, a, memory_order_relaxed);
  if (a < PACK_WINDOW) return;
  uint32_t g = atomic_load_explicit(&window_grows, memory_order_relaxed);
  atomic_store_explicit(&window_grows, 0, memory_order_relaxed);
  atomic_store_explicit(&window_allocs, 0, memory_order_relaxed);
  atomic_store_explicit(&window_spans, g * PACK_GROW_RATIO > PACK_WINDOW, memory_order_relaxed);
}

/* A block of n bytes from a pack (NULL: it takes a span). */
static void *pack_alloc(size_t n, size_t align, bool zero) {
  if (align > HM_PAGE_SIZE || n > HM_PACK_MAX || !hm_pack_enabled()) return NULL;
  pack_window_count(false);
  if (atomic_load_explicit(&window_spans, memory_order_relaxed)) return NULL;
  return hm_pack_alloc(n, zero);
}

/* While the lane's blocks grow (the window takes spans), pool sizes take
 * slabs, as they did before they were packed: a packed block that grows
 * must be copied or moved out, a pool block moved by realloc past 64 KiB
 * takes a span then, which grows in place. */
HM_INLINE bool packs_pool_size(size_t n) {
  hm_ensure_init(); /* (the options) */
  return n > (size_t)hm_opt[HM_OPT_PACK_MIN_KB] << 10 && n <= POOL_MAX && hm_pack_enabled() && !hm_force_libc &&
         !atomic_load_explicit(&window_spans, memory_order_relaxed);
}

bool hm_packs_pool_size(size_t n) { return packs_pool_size(n); }

/* Pool sizes above HAKMEM_PACK_MIN_KB take pages from the packs, where
 * each free page can go back on its own (docs/DESIGN.md, "Packed pool
 * sizes"); the others up to POOL_MAX take slabs. (Not counted in the
 * window, which is about the lane's own blocks.) */
void *hm_alloc_above(size_t n, bool zero) {
  if (n > POOL_MAX) return zero ? hm_large_calloc(n) : hm_large_alloc(n, 0);
  if (packs_pool_size(n)) {
    if (unlikely(hm_sample_any)) { /* charged per call, as large blocks are */
      unsigned fired = hm_sample_one(n);
      if (fired != 0) {
        void *p = hm_sample_serve(fired, n, 0, n);
        if (p != NULL && zero) memset(p, 0, n);
        return p;
      }
    }
    hm_purge_tick();
    void *p = hm_pack_alloc(n, zero);
    if (p != NULL) {
      hm_stats_large(1, page_round(n), page_round(n));
      return p;
    }
  }
  void *p = hm_malloc_small(n);
  if (p != NULL && zero) memset(p, 0, n);
  return p;
}

void *hm_large_alloc(size_t n, size_t align) {
  hm_ensure_init(); /* (before the sampling flags: start-up sets them) */
  if (unlikely(hm_sample_any)) {
    unsigned fired = hm_sample_one(n);
    if (fired != 0) return hm_sample_serve(fired, n, align, n);
  }
  return hm_large_alloc_unsampled(n, align);
}

void *hm_large_alloc_unsampled(size_t n, size_t align) {
  hm_ensure_init();
  if (hm_force_libc) return align > 16 ? __libc_memalign(align, n) : __libc_malloc(n);
  hm_purge_tick(); /* (a limit near: before this takes more memory) */
  bool fresh;
  void *p = pack_alloc(n, align, false);
  if (p != NULL) {
    hm_stats_large(1, page_round(n), page_round(n)); /* (a packed block's usable size) */
    return p;
  }
  p = span_take(n, align, &fresh);
  if (p != NULL) count_block(1, p);
  return p;
}

void *hm_large_calloc(size_t n) {
  hm_ensure_init(); /* (before the sampling flags: start-up sets them) */
  if (unlikely(hm_sample_any)) {
    unsigned fired = hm_sample_one(n);
    if (fired != 0) {
      void *p = hm_sample_serve(fired, n, 0, n);
      if (p != NULL) memset(p, 0, n);
      return p;
    }
  }
  hm_ensure_init();
  if (hm_force_libc) return __libc_calloc(1, n);
  hm_purge_tick();
  bool fresh;
  void *p = pack_alloc(n, 0, true);
  if (p == NULL) {
    p = span_take(n, 0, &fresh);
    if (p != NULL && !fresh) memset(p, 0, n); /* fresh mappings are zero */
  }
  if (p != NULL) count_block(1, p);
  return p;
}

static void large_free(void *p);

void hm_large_free(void *p) {
  if (packed(p)) {
    size_t u = hm_pack_free(p);
    if (u != 0) {
      hm_stats_large(-1, u, u);
      return;
    }
    if (hm_pack_is_freed(p))
      hm_report_double(p, HM_OP_FREE, "large block already freed");
    else
      hm_report_invalid(p, HM_OP_FREE, "inside a large block, not its start");
    return; /* HAKMEM_ON_ERROR=warn: left alone */
  }
  count_block(-1, p);
  large_free(p);
}

void *hm_large_chunk_take(bool *fresh) {
  return span_take(SS_SIZE, SS_SIZE, fresh);
}

void hm_large_chunk_give(void *chunk) {
  hm_mutex_lock(&large_lock);
  hm_reg_set((uintptr_t)chunk, REG_LARGE_HEAD); /* a span again */
  hm_mutex_unlock(&large_lock);
  large_free(chunk);
}

static void large_free(void *p) {
  span_t *list = NULL;
  uint64_t now = hm_now_ns();
  hm_mutex_lock(&large_lock);
  span_t *s = span_at(p, SPAN_USED);
  if (s == NULL) {
    bool twice = span_at(p, SPAN_CACHED) != NULL || span_at(p, SPAN_PURGING) != NULL;
    hm_mutex_unlock(&large_lock);
    if (twice)
      hm_report_double(p, HM_OP_FREE, "large block already freed");
    else
      hm_report_invalid(p, HM_OP_FREE, "inside a large block, not its start");
    return; /* HAKMEM_ON_ERROR=warn: left alone */
  }
  cache_decay(now);
  cache_put(s, now, false, &list);
  hm_mutex_unlock(&large_lock);
  unmap_list(list);
  hm_purge_note_idle(now); /* a purge step gives back the pages of spans left idle (hm_large_purge) */
}

size_t hm_large_usable(const void *p) {
  if (packed(p)) return hm_pack_usable(p);
  span_t *s = span_at(p, SPAN_USED);
  return s != NULL ? s->len - HM_GUARD_SIZE : 0;
}

/* malloc_usable_size's fast path (usable.h): no lock. A live block's
 * descriptor (or pack page) changes only by its owner's calls. */
size_t hm_large_usable_live(const void *p, unsigned kind) {
  if (kind == REG_LARGE_PACK) return hm_pack_usable_live(p);
  span_t *s = kind == REG_LARGE_HEAD ? slot(chunk_of(p)) : NULL;
  return s != NULL && s->state == SPAN_USED && s->base == p ? s->len - HM_GUARD_SIZE : 0;
}

bool hm_large_is_freed(const void *p) {
  if (packed(p)) return hm_pack_is_freed(p);
  hm_mutex_lock(&large_lock);
  bool freed = span_at(p, SPAN_CACHED) != NULL || span_at(p, SPAN_PURGING) != NULL;
  hm_mutex_unlock(&large_lock);
  return freed;
}

size_t hm_large_release(uint64_t min_idle_ns) {
  /* all at once: the packs' free pages, and empty packs into the cache */
  size_t packed_bytes = min_idle_ns == 0 ? hm_pack_release() : 0;
  span_t *list = NULL;
  uint64_t now = hm_now_ns();
  hm_mutex_lock(&large_lock);
  for (unsigned k = 1; k <= LARGE_BUCKETS; k++) {
    /* oldest first; an idle release leaves clean spans (the never used
     * rest of a refill, or given back by a purge step): unmapping them
     * gives back no memory */
    span_t *s = buckets[k].tail, *newer;
    for (; s != NULL && (min_idle_ns == 0 || now - s->freed_ns >= min_idle_ns); s = newer) {
      newer = s->prev;
      if (min_idle_ns == 0 || s->dirty != 0) doom(s, &list);
    }
  }
  hm_mutex_unlock(&large_lock);
  return packed_bytes + unmap_list(list);
}

void hm_large_resident(size_t res[3]) {
  hm_mutex_lock(&large_lock);
  for (size_t d = 0; d < DIR_SIZE; d++) {
    span_t *leaf = atomic_load_explicit(&dir[d], memory_order_acquire);
    for (size_t i = 0; leaf != NULL && i <= LEAF_MASK; i++)
      if (leaf[i].state != SPAN_NONE && !packed(leaf[i].base))
        res[leaf[i].state == SPAN_CACHED] += hm_os_resident(leaf[i].base, leaf[i].len);
  }
  hm_mutex_unlock(&large_lock);
  hm_pack_resident(&res[2]);
}

/* Cached spans' bytes that may be resident (the background purger's trigger). */
size_t hm_large_cached_dirty(void) {
  size_t all = atomic_load_explicit(&cache_bytes_pub, memory_order_relaxed);
  size_t clean = atomic_load_explicit(&cache_clean, memory_order_relaxed);
  return (all > clean ? all - clean : 0) + hm_pack_free_dirty();
}

void hm_large_explain(int fd, size_t res[5]) {
  hm_mutex_lock(&large_lock);
  for (size_t d = 0; d < DIR_SIZE; d++) {
    span_t *leaf = atomic_load_explicit(&dir[d], memory_order_acquire);
    for (size_t i = 0; leaf != NULL && i <= LEAF_MASK; i++)
      if (leaf[i].state != SPAN_NONE && !packed(leaf[i].base))
        res[leaf[i].state == SPAN_USED ? 0 : 1] += hm_os_resident_fd(fd, leaf[i].base, leaf[i].len);
  }
  hm_mutex_unlock(&large_lock);
  hm_pack_explain(fd, &res[2]);
}

size_t hm_large_cached_clean(void) { return atomic_load_explicit(&cache_clean, memory_order_relaxed) + hm_pack_clean(); }

size_t hm_large_purge(uint64_t now, uint64_t min_idle_ns, size_t budget, uint64_t *next_due) {
  span_t *list = NULL;
  size_t bytes = 0;
  hm_mutex_lock(&large_lock);
  /* An idle purge waits until the lane itself has been idle that long:
   * a working set of large blocks that swings leaves the spans of its
   * deepest troughs unused for seconds between its peaks, and they are
   * wanted again (the syscall budget with blocks up to 1 and 4 MiB). */
  if (min_idle_ns != 0 && last_alloc_ns + min_idle_ns > now) {
    if (last_alloc_ns + min_idle_ns < *next_due && cache_bytes != 0) *next_due = last_alloc_ns + min_idle_ns;
    hm_mutex_unlock(&large_lock);
    return 0;
  }
  /* Oldest first, mostly (a purged span goes to the end of its list, a
   * reused one may come from the middle): every span is looked at. */
  for (unsigned k = 1; k <= LARGE_BUCKETS; k++) {
    span_t *s = buckets[k].tail, *newer;
    for (; s != NULL; s = newer) {
      newer = s->prev;
      if (s->dirty == 0) continue;
      if (s->freed_ns + min_idle_ns > now) {
        if (s->freed_ns + min_idle_ns < *next_due) *next_due = s->freed_ns + min_idle_ns;
        continue;
      }
      if (bytes >= budget) {
        *next_due = now; /* the step's budget ran out: the next comes at once */
        continue;
      }
      cache_unlink(s);
      s->state = SPAN_PURGING; /* nobody reuses, merges or unmaps it meanwhile */
      bytes += s->dirty;
      s->next = list;
      list = s;
    }
  }
  hm_mutex_unlock(&large_lock);
  for (span_t *s = list; s != NULL; s = s->next) hm_os_purge(s->base, s->dirty);
  hm_mutex_lock(&large_lock);
  while (list != NULL) {
    span_t *s = list;
    list = s->next;
    s->dirty = 0;
    s->purged_ns = now;
    cache_push_oldest(s);
  }
  cache_check();
  hm_mutex_unlock(&large_lock);
  return bytes;
}

/* ---- realloc ----------------------------------------------------------------- */

/* Does a live span start exactly at p? Lock held. */
static bool span_starts(const char *p) {
  return span_at(p, SPAN_USED) != NULL || span_at(p, SPAN_CACHED) != NULL || span_at(p, SPAN_PURGING) != NULL;
}

/* Grow s to len bytes by taking the cached spans that follow it, if they
 * reach far enough. Lock held. */
static bool grow_into_neighbours(span_t *s, size_t len, uint64_t now, span_t **list) {
  size_t have = run_length(s, len);
  if (have < len) return false;
  absorb_run(s, have);
  if (have > len) span_split(s, len, now, list);
  return true;
}

/* mremap, once more after giving back cached memory if the OS refused. */
static void *remap(char *p, size_t old, size_t len, bool may_move) {
  void *q = hm_os_remap(p, old, len, may_move);
  if (q == NULL && errno == ENOMEM && hm_large_release(0) + hm_backend_release_cached() != 0)
    q = hm_os_remap(p, old, len, may_move);
  return q;
}

/* Grow the block of s to n bytes (a span of len): into cached neighbours,
 * else in place with mremap, else moved by mremap. Unless `keep` (a span
 * taken from the cache for a new block: span_take), a failure returns NULL
 * quietly with s as it was, and nothing is ever copied. */
static void *large_grow(span_t *s, size_t n, size_t len, bool keep) {
  char *p = s->base;
  size_t old = s->len, need = page_round(n + HM_GUARD_SIZE);
  span_t *list = NULL;
  hm_mutex_lock(&large_lock);
  bool done = grow_into_neighbours(s, len, hm_now_ns(), &list);
  if (done) s->dirty = max_sz(s->dirty, need);
  bool had_cache = cache_bytes != 0;
  /* in place only where nothing of ours follows */
  uintptr_t end = (uintptr_t)(p + old);
  bool next_free = (end & SS_MASK) != 0 ? !span_starts(p + old) : hm_reg_kind(end) == REG_NONE;
  hm_mutex_unlock(&large_lock);
  unmap_list(list);
  if (done) return p; /* (absorb_run lifted the guard page) */
  /* (leaves claimed for the range in hand first: an allocation of leaves
   * could take the free range after the span) */
  leaves_t l;
  if (!leaves_claim(&l, leaves_missing(p, len))) return keep ? fail_refused(had_cache, n, 0, ENOMEM) : NULL;
  guard_lift(s); /* its end moves; and mremap takes only a range of one mapping */
  if (next_free && hm_os_remap(p, old, len, false) != NULL) {
    atomic_fetch_add_explicit(&mapped_bytes, len - old, memory_order_relaxed);
    hm_mutex_lock(&large_lock);
    leaves_install(p, len, &l);
    s->len = len;
    s->dirty = max_sz(s->dirty, need);
    reg_mark(s);
    hm_mutex_unlock(&large_lock);
    return p;
  }
  /* Move: the OS moves the pages, nothing is copied. The span leaves the
   * registry first, so that nothing of ours claims the range it vacates. */
  hm_mutex_lock(&large_lock);
  leaves_install(NULL, 0, &l);
  hm_mutex_unlock(&large_lock);
  if (!leaves_claim(&l, leaves_for(len))) return keep ? fail_refused(had_cache, n, 0, ENOMEM) : NULL;
  hm_mutex_lock(&large_lock);
  size_t dirty = s->dirty;
  s->state = SPAN_NONE;
  reg_unmark(s);
  hm_mutex_unlock(&large_lock);
  char *q = keep ? remap(p, old, len, true) : hm_os_remap(p, old, len, true);
  int err = errno;
  if (q != NULL) atomic_fetch_add_explicit(&mapped_bytes, len - old, memory_order_relaxed);
  if (q != NULL && (uintptr_t)q + len > LARGE_LIMIT) hm_fatal("realloc", q, "mremap moved a block beyond the registry");
  hm_mutex_lock(&large_lock);
  leaves_install(q, len, &l);
  if (q != NULL)
    span_record(q, len, SPAN_USED)->dirty = max_sz(dirty, need);
  else
    span_record(p, old, SPAN_USED)->dirty = dirty;
  hm_mutex_unlock(&large_lock);
  if (q != NULL) return q;
  if (!keep) return NULL;
  if (err == ENOMEM) return fail_refused(had_cache, n, 0, err);
  /* EFAULT: the span is made of two mappings (it grew into a neighbour),
   * which mremap cannot move as one: copy instead. */
  bool fresh;
  void *r = span_take(n, 0, &fresh);
  if (r == NULL) return NULL;
  memcpy(r, p, old);
  large_free(p);
  return r;
}

static void *large_realloc(void *p, size_t n);

/* Far below the lane: move to the pool (at most LARGE_SHRINK_MOVE bytes
 * copied) and free the large block; keep it in place if the pool has no
 * memory. */
static void *shrink_to_pool(void *p, size_t n) {
  int saved = errno;
  void *q = hm_malloc_small(n);
  if (q == NULL) {
    errno = saved;
    return p;
  }
  size_t old = hm_large_usable(p); /* (a sampled small block, served here, may be shorter) */
  memcpy(q, p, n < old ? n : old);
  hm_large_free(p);
  return q;
}

/* Move the packed block p (old bytes) into a span of its own for n bytes
 * without copying: its pages move to a new mapping (the pack's range stays
 * mapped, empty), which then grows to the span's length. NULL if the OS
 * refused (nothing changed then). */
static void *pack_move_out(void *p, size_t old, size_t n) {
  size_t len = span_len_for(n);
  leaves_t l;
  if (!leaves_claim(&l, leaves_for(len))) return NULL;
  char *q = hm_os_move_pages(p, old), *r = NULL;
  if (q != NULL && (r = hm_os_remap(q, old, len, true)) == NULL) {
    memcpy(p, q, old); /* (could not grow it: back into the pack, as it was) */
    hm_os_unmap(q, old);
  }
  if (r != NULL && (uintptr_t)r + len > LARGE_LIMIT) hm_fatal("realloc", r, "mremap moved a block beyond the registry");
  if (r != NULL) atomic_fetch_add_explicit(&mapped_bytes, len, memory_order_relaxed);
  hm_mutex_lock(&large_lock);
  leaves_install(r, len, &l);
  if (r != NULL) span_record(r, len, SPAN_USED)->dirty = page_round(n);
  hm_mutex_unlock(&large_lock);
  if (r == NULL) return NULL;
  count_block(-1, p);
  hm_pack_free_moved(p);
  count_block(1, r);
  return r;
}

/* A packed block: resized in place within its pack (shrinking frees the
 * tail pages; growing takes the free pages after it), else moved (copied:
 * at most HM_PACK_MAX bytes) to another pack, or, while the lane's blocks
 * are resized often (the window above), to a span of its own, where it
 * can grow again without a copy (in place, into cached neighbours, or by
 * mremap); its pages are moved, not copied, where the OS can
 * (pack_move_out): copies from pack to pack cost programs that grow their
 * blocks most of their time (docs/DESIGN.md, "Large lane"). */
static void *pack_realloc(void *p, size_t n) {
  size_t old = hm_pack_usable(p);
  if (old == 0) hm_fatal("invalid realloc", p, "not the start of a large block");
  if (n <= LARGE_SHRINK_MOVE && !hm_packs_pool_size(n)) return shrink_to_pool(p, n);
  if (n <= HM_PACK_MAX) {
    count_block(-1, p);
    bool done = hm_pack_resize(p, n);
    count_block(1, p);
    if (done) return p;
  }
  if (n > LARGE_LIMIT - HM_PAGE_SIZE) return fail("Threshold", n, 0, ENOMEM);
  /* While blocks are packed (few reallocs in the lane), another pack: a
   * span reused for blocks of many sizes keeps the pages of the largest. */
  void *q = NULL;
  if (n <= HM_PACK_MAX && !atomic_load_explicit(&window_spans, memory_order_relaxed) &&
      (q = hm_pack_alloc(n, false)) != NULL)
    hm_stats_large(1, page_round(n), page_round(n));
  if (q == NULL && (q = pack_move_out(p, old, n)) != NULL) return q;
  if (q == NULL) {
    bool fresh;
    if ((q = span_take(n, 0, &fresh)) == NULL) return NULL;
    count_block(1, q);
  }
  memcpy(q, p, old < n ? old : n);
  hm_large_free(p);
  return q;
}

void *hm_large_realloc(void *p, size_t n) {
  size_t u = hm_large_usable(p);
  /* a block of the packs' sizes resized within the lane (a span's block
   * grows within its span unseen, so any resize counts) */
  if (n > POOL_MAX && u <= SS_SIZE && hm_pack_enabled()) pack_window_count(true);
  if (packed(p)) return pack_realloc(p, n);
  void *q = large_realloc(p, n);
#ifdef HAKMEM_SECURE
  /* a span cut, grown or moved has no guard page yet (q may be in the pool) */
  span_t *s = span_at(q != NULL ? q : p, SPAN_USED);
  if (s != NULL) guard_on(s);
#endif
  return q;
}

static void *large_realloc(void *p, size_t n) {
  span_t *s = span_at(p, SPAN_USED);
  if (s == NULL) hm_fatal("invalid realloc", p, "not the start of a large block");
  /* Down to LARGE_SHRINK_MOVE, a block stays in (the first chunk of) its
   * span: its pages are resident already, where a copy would touch as many
   * again in a pool block that stays resident in its slab. */
  if (n <= LARGE_SHRINK_MOVE) return shrink_to_pool(p, n);
  if (n > LARGE_LIMIT - HM_PAGE_SIZE - HM_GUARD_SIZE) return fail("Threshold", n, 0, ENOMEM);
  size_t len = span_len_for(n + HM_GUARD_SIZE);
  if (len != s->len) count_block(-1, p); /* (a resize counts as a free and an allocation) */
  if (len > s->len) {
    void *q = large_grow(s, n, len, true);
    count_block(1, q != NULL ? q : p);
    return q;
  }
  if (len < s->len) { /* shrink in place: the whole chunks past the end go to the cache */
    span_t *list = NULL;
    hm_mutex_lock(&large_lock);
    span_split(s, len, hm_now_ns(), &list);
    hm_mutex_unlock(&large_lock);
    unmap_list(list);
    count_block(1, p);
  } else if (s->dirty < page_round(n + HM_GUARD_SIZE)) {
    /* grown within its span: the pages it may touch reach further (a
     * purge gives back the dirty extent only, and bucket_find reads it) */
    hm_mutex_lock(&large_lock);
    s->dirty = max_sz(s->dirty, page_round(n + HM_GUARD_SIZE));
    hm_mutex_unlock(&large_lock);
  }
  return p;
}

void hm_large_fork_prepare(void) {
  hm_pack_fork_prepare();
  pthread_mutex_lock(&large_lock);
}
void hm_large_fork_parent(void) {
  pthread_mutex_unlock(&large_lock);
  hm_pack_fork_parent();
}
void hm_large_fork_child(void) {
  pthread_mutex_init(&large_lock, NULL);
  hm_pack_fork_child();
}
