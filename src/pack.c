/* Packed large blocks: blocks above the pool limit up to PACK_MAX, several
 * to a 2 MiB chunk at page granularity, so that the large lane's resident
 * memory follows its live blocks instead of costing a 2 MiB span each
 * (docs/DESIGN.md, "Large lane").
 *
 * A pack is one 2 MiB-aligned chunk taken from the large lane's span cache
 * (large.c) and marked REG_LARGE_PACK in the registry. Its first page is the
 * header (below); blocks take runs of the other 511 pages. Allocation takes
 * the lowest pack with a long enough free run, and in it the shortest such
 * run (free runs coalesce by construction: they are the clear bits of
 * `used`), so the busy blocks crowd into the low packs and the pages of the
 * high ones, wanted only at the working set's peaks, stay free and idle.
 *
 * Each page knows whether it may be resident (`dirty`: a block was handed
 * out over it since the pack was mapped or purged). Once the packs have
 * handed out no block for the purge's idle time, a purge step
 * (hm_pack_purge, from purge.c) gives back their free dirty pages, a run
 * at a time; malloc_trim gives back every free page and the empty packs.
 * A block over pages that were given back recently counts as regret
 * (purge.c's backoff).
 *
 * Locking: one mutex, a leaf lock; packs are taken from and given back to
 * the span cache with it dropped, and madvise runs with it dropped over
 * runs marked used meanwhile (nobody allocates, frees or purges them).
 *
 * Secure mode keeps one block per span (guard pages at span ends): the
 * pack is not built there. */
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>

#include "internal.h"

#if HM_GUARD_SIZE == 0

#define PACK_PAGES (SS_SIZE / HM_PAGE_SIZE)   /* 512; page 0 is the header */
#define PACK_WORDS (PACK_PAGES / 64)
#define PACK_MAX_PAGES (HM_PACK_MAX / HM_PAGE_SIZE) /* 256: a block's pages at most */
#define PACK_SLOTS 4096                     /* packs at most (8 GiB); then spans */
#define PURGE_BATCH 64                      /* runs given back per step and lock hold */
#define EMPTY_IDLE_FACTOR 8                 /* an empty pack's idle time, in purge idle times */

typedef struct pack {
  uint64_t used[PACK_WORDS];   /* pages in blocks (page 0: the header), or being purged */
  uint64_t dirty[PACK_WORDS];  /* pages that may be resident */
  uint64_t start[PACK_WORDS];  /* first pages of live blocks */
  uint64_t freed[PACK_WORDS];  /* first pages of blocks freed since (a second free is a double free) */
  uint64_t idle[PACK_WORDS];   /* free dirty pages at the last look, not taken since (hm_pack_purge_idle) */
  uint64_t purged_ns;          /* when a purge last gave pages of it back (regret) */
  uint64_t idle_purged_ns;     /* when hm_pack_purge_idle last did (its own regret) */
  uint64_t empty_ns;           /* since when it holds no block (0: it holds one) */
  uint32_t free_pages;
  uint32_t slot;               /* its index in packs[] */
  uint16_t pages[PACK_PAGES];  /* a live block's length in pages, at its first page */
} pack_t;
_Static_assert(sizeof(pack_t) <= HM_PAGE_SIZE, "the header fits the pack's first page");

static pthread_mutex_t pack_lock = PTHREAD_MUTEX_INITIALIZER;
static pack_t *packs[PACK_SLOTS];       /* by address */
static unsigned npacks;
static uint16_t longest[PACK_SLOTS];    /* = the longest free run of packs[i] */
/* A max-tree over longest[]: tree[1] the root, tree[j] = max(tree[2j],
 * tree[2j+1]), pack i's leaf at tree[tleaves + i] (tleaves: a power of two
 * >= npacks; leaves past npacks are 0, which fits no block). */
static uint16_t tree[2 * PACK_SLOTS];
static unsigned tleaves = 1;
static _Atomic size_t free_bytes;       /* free pages, all packs (bytes) */
static _Atomic size_t clean_free;       /* free pages not resident (bytes; hakmem's estimate) */
static uint64_t last_alloc_ns;          /* the last block handed out (hm_pack_purge) */

/* ---- bitmaps of PACK_PAGES bits ----------------------------------------- */

static bool bit(const uint64_t *m, unsigned i) { return (m[i >> 6] >> (i & 63)) & 1u; }

/* Bits [s, s+n) of a map, n >= 1, word by word: words a..b, the first
 * word's bits from s on (*first), the last's up to s+n-1 (*last). */
static inline void span_words(unsigned s, unsigned n, unsigned *a, unsigned *b, uint64_t *first, uint64_t *last) {
  *a = s >> 6;
  *b = (s + n - 1) >> 6;
  *first = ~(uint64_t)0 << (s & 63);
  *last = ~(uint64_t)0 >> (63 - ((s + n - 1) & 63));
}

/* Set (v) or clear bits [s, s+n). */
static inline void bits_put(uint64_t *m, unsigned s, unsigned n, bool v) {
  if (n == 0) return;
  unsigned a, b;
  uint64_t first, last;
  span_words(s, n, &a, &b, &first, &last);
  if (a == b) first &= last;
  else {
    for (unsigned w = a + 1; w < b; w++) m[w] = v ? ~(uint64_t)0 : 0;
    m[b] = v ? m[b] | last : m[b] & ~last;
  }
  m[a] = v ? m[a] | first : m[a] & ~first;
}

/* Bits of x under mask, of which there are width (mostly all set or all
 * clear: no popcount, which is a library call without -mpopcnt). */
static inline unsigned count_word(uint64_t x, uint64_t mask, unsigned width) {
  x &= mask;
  return x == mask ? width : x == 0 ? 0 : (unsigned)__builtin_popcountll(x);
}

/* Bits set in [s, s+n). */
static inline unsigned bits_count(const uint64_t *m, unsigned s, unsigned n) {
  if (n == 0) return 0;
  unsigned a, b;
  uint64_t first, last;
  span_words(s, n, &a, &b, &first, &last);
  if (a == b) return count_word(m[a], first & last, n);
  unsigned c = count_word(m[a], first, 64 - (s & 63)) + count_word(m[b], last, ((s + n - 1) & 63) + 1);
  for (unsigned w = a + 1; w < b; w++) c += count_word(m[w], ~(uint64_t)0, 64);
  return c;
}

/* The first bit at or after i that equals v (PACK_PAGES if none). */
static unsigned bits_next(const uint64_t *m, unsigned i, bool v) {
  while (i < PACK_PAGES) {
    uint64_t w = (v ? m[i >> 6] : ~m[i >> 6]) >> (i & 63);
    if (w != 0) return i + (unsigned)__builtin_ctzll(w);
    i = (i | 63) + 1;
  }
  return PACK_PAGES;
}

/* The last bit before i that is set (page 0, the header, always is). */
static unsigned bits_prev_set(const uint64_t *m, unsigned i) {
  while (i != 0) {
    unsigned w = (i - 1) >> 6, o = (i - 1) & 63;
    uint64_t x = m[w] & (o == 63 ? ~(uint64_t)0 : (((uint64_t)2 << o) - 1));
    if (x != 0) return (w << 6) + 63 - (unsigned)__builtin_clzll(x);
    i = w << 6;
  }
  return 0;
}

/* ---- one pack (lock held) ---------------------------------------------------- */

static char *page_addr(pack_t *p, unsigned i) { return (char *)p + ((size_t)i * HM_PAGE_SIZE); }

static unsigned longest_run(const pack_t *p) {
  unsigned best = 0;
  for (unsigned r = bits_next(p->used, 1, false); r < PACK_PAGES;) {
    unsigned e = bits_next(p->used, r, true);
    if (e - r > best) best = e - r;
    r = bits_next(p->used, e, false);
  }
  return best;
}

/* The first page of the shortest free run of p of at least k pages (0 if
 * none), and in *left p's longest free run once k pages at its start are
 * taken: the walk that finds the run also sees all the others, unless it
 * stops at an exact fit shorter than the longest (which then stays). */
static unsigned best_fit(const pack_t *p, unsigned k, unsigned *left) {
  unsigned at = 0, len = PACK_PAGES, other = 0, lim = longest[p->slot];
  for (unsigned r = bits_next(p->used, 1, false); r < PACK_PAGES;) {
    unsigned e = bits_next(p->used, r, true), n = e - r;
    if (n >= k && n < len) {
      if (at != 0 && len > other) other = len; /* the run it had */
      at = r;
      len = n;
      if (len == k && len < lim) break;
    } else if (n > other) {
      other = n;
    }
    r = bits_next(p->used, e, false);
  }
  *left = len < lim ? lim : len - k > other ? len - k : other;
  return at;
}

/* What becomes of pages that leave the free pages or join them. */
enum span_op { TAKE_BLOCK, TAKE_RUN, GIVE };

/* Word w of a span of pages of p, under mask m: they are marked used
 * (TAKE_*: a block's also dirty, and none of them is a freed start any
 * more) or free (GIVE). Returns how many of them were clean. */
HM_INLINE unsigned span_word(pack_t *p, unsigned w, uint64_t m, enum span_op op) {
  uint64_t c = ~p->dirty[w] & m;
  if (op == GIVE) p->used[w] &= ~m;
  else p->used[w] |= m;
  if (op == TAKE_BLOCK) {
    p->dirty[w] |= m;
    p->freed[w] &= ~m;
    p->idle[w] &= ~m;
  }
  return c == 0 ? 0 : (unsigned)__builtin_popcountll(c); /* (mostly all dirty) */
}

/* span_word over pages [s, s+k), k >= 1, in one pass; their clean pages. */
HM_INLINE unsigned span_apply(pack_t *p, unsigned s, unsigned k, enum span_op op) {
  unsigned a, b;
  uint64_t first, last, all = ~(uint64_t)0;
  span_words(s, k, &a, &b, &first, &last);
  if (a == b) return span_word(p, a, first & last, op);
  unsigned clean = span_word(p, a, first, op) + span_word(p, b, last, op);
  /* (a mask the compiler cannot see through: else the stores of the middle
   * words, a few at most, become memset calls) */
  __asm__("" : "+r"(all));
  for (unsigned w = a + 1; w < b; w++) clean += span_word(p, w, all, op);
  return clean;
}

/* Pages [s, s+k) of p leave the free pages: a block's (block), or a run to
 * purge. Returns how many of them may have been resident. */
HM_INLINE unsigned take_pages(pack_t *p, unsigned s, unsigned k, bool block) {
  unsigned clean = span_apply(p, s, k, block ? TAKE_BLOCK : TAKE_RUN);
  if (clean != 0) atomic_fetch_sub_explicit(&clean_free, (size_t)clean * HM_PAGE_SIZE, memory_order_relaxed);
  p->free_pages -= k;
  atomic_fetch_sub_explicit(&free_bytes, (size_t)k * HM_PAGE_SIZE, memory_order_relaxed);
  return k - clean;
}

/* Pages [s, s+k) of p become free. */
static void give_pages(pack_t *p, unsigned s, unsigned k) {
  unsigned clean = span_apply(p, s, k, GIVE);
  if (clean != 0) atomic_fetch_add_explicit(&clean_free, (size_t)clean * HM_PAGE_SIZE, memory_order_relaxed);
  p->free_pages += k;
  atomic_fetch_add_explicit(&free_bytes, (size_t)k * HM_PAGE_SIZE, memory_order_relaxed);
  if (p->free_pages == PACK_PAGES - 1 && p->empty_ns == 0) p->empty_ns = hm_now_ns();
}

static unsigned slot_of(const pack_t *p) {
  unsigned lo = 0, hi = npacks;
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    if ((uintptr_t)packs[mid] < (uintptr_t)p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void idle_probe_arm(const pack_t *p, unsigned s, unsigned k, uint64_t now);
static void idle_regret(const pack_t *p, uint64_t now);

/* ---- the lowest pack that fits (lock held) ------------------------------------ */

/* longest[i] = v, and up the tree as far as a node changes (a larger
 * value rises while it beats the node). */
HM_INLINE void set_longest(unsigned i, unsigned v) {
  unsigned old = longest[i], j = tleaves + i;
  longest[i] = (uint16_t)v;
  tree[j] = (uint16_t)v;
  if (v > old) {
    for (j >>= 1; j != 0 && tree[j] < v; j >>= 1) tree[j] = (uint16_t)v;
    return;
  }
  for (j >>= 1; j != 0; j >>= 1) {
    uint16_t l = tree[2 * j], r = tree[2 * j + 1], m = l > r ? l : r;
    if (tree[j] == m) break;
    tree[j] = m;
  }
}

/* The tree afresh from longest[] (packs[] gained or lost one). */
static void tree_build(void) {
  tleaves = 1;
  while (tleaves < npacks) tleaves *= 2;
  memcpy(&tree[tleaves], longest, npacks * sizeof longest[0]);
  memset(&tree[tleaves + npacks], 0, (tleaves - npacks) * sizeof tree[0]);
  for (unsigned j = tleaves - 1; j != 0; j--) tree[j] = tree[2 * j] > tree[2 * j + 1] ? tree[2 * j] : tree[2 * j + 1];
}

/* The lowest i with longest[i] >= k (npacks if none), k >= 1. */
static unsigned lowest_fit(unsigned k) {
  if (tree[1] < k) return npacks;
  unsigned j = 1;
  while (j < tleaves) {
    j *= 2;
    if (tree[j] < k) j++; /* not in the left half: the right one has it */
  }
  return j - tleaves;
}

#ifdef HAKMEM_DEBUG
static unsigned lowest_fit_scan(unsigned k) {
  unsigned i = 0;
  while (i < npacks && longest[i] < k) i++;
  return i;
}
#endif

/* p's longest free run after a block left the run of free pages around
 * page s (only that run can have grown). */
static void refresh_freed(pack_t *p, unsigned s) {
  unsigned a = bits_prev_set(p->used, s) + 1, e = bits_next(p->used, s, true);
  if (e - a > longest[p->slot]) set_longest(p->slot, e - a);
}

/* p's longest free run after pages were taken from a run of len pages
 * (only if that was the longest can the longest have shrunk). */
static void refresh_taken(pack_t *p, unsigned len) {
  if (len >= longest[p->slot]) set_longest(p->slot, longest_run(p));
}

/* Number the packs from i on (after an insertion or removal). */
static void renumber(unsigned i) {
  for (; i < npacks; i++) packs[i]->slot = i;
}

/* A block of k pages at page s of p, after which p's longest free run is
 * left pages long. Returns whether its pages were all clean (read as
 * zeros). */
static bool place(pack_t *p, unsigned s, unsigned k, unsigned left, uint64_t now) {
  idle_probe_arm(p, s, k, now);
  unsigned dirty = take_pages(p, s, k, true);
  p->start[s >> 6] |= (uint64_t)1 << (s & 63);
  p->pages[s] = (uint16_t)k;
  p->empty_ns = 0;
  if (dirty < k) { /* faults again */
    if (p->purged_ns != 0) hm_purge_regret(p->purged_ns, now);
    idle_regret(p, now);
  }
  if (left != longest[p->slot]) set_longest(p->slot, left);
  HM_ASSERT(left == longest_run(p));
  return dirty == 0;
}

/* ---- the idle pages of packs in use: their own regret ------------------------- */

/* hm_pack_purge_idle's age is the purge delay times 2^idle_shift. Regret
 * is pages it gave back that a block took again within 16 ages and wrote:
 * it doubles the age (at most once per age, up to 64 times). Where the
 * kernel's process_madvise has worked (hm_os_ranges_work: no seccomp
 * filter), the first block since the last look to take PROBE_MIN such
 * pages or more is probed at the next look (mincore): regret if half of
 * them are resident; 8 ages without regret halve the age (a look sees one
 * block: a stray write must not hold it long). So a block written here and
 * there does not slow the return of the pages it leaves alone (DESIGN.md,
 * "Memory given back"). Elsewhere every block that takes such pages is
 * regret, and 64 ages halve it. Its own, not policy.c's back-off: a working
 * set that churns through the packs' free pages should not slow the idle
 * return of everything else. */
#define IDLE_SHIFT_MAX 6
static unsigned idle_shift;
static uint64_t idle_age_ns = 100000000u, idle_regret_ns; /* (lock held) */
#define PROBE_MIN 8
static struct {
  char *at;
  unsigned pages, count;               /* its pages; the clean ones */
  uint64_t clean[PACK_MAX_PAGES / 64]; /* which were clean */
} idle_probe; /* (lock held) */

static bool idle_recent(const pack_t *p, uint64_t now) {
  return p->idle_purged_ns != 0 && now - p->idle_purged_ns < 16 * idle_age_ns;
}

static void idle_regret_now(uint64_t now) {
  if (idle_regret_ns != 0 && now - idle_regret_ns < idle_age_ns) return;
  idle_regret_ns = now;
  if (idle_shift < IDLE_SHIFT_MAX) idle_shift++;
}

/* Pages [s, s+k) of p are about to be taken by a block: the probe, if none
 * yet and PROBE_MIN of them, not the first and last (a header and an end
 * say nothing), are clean. */
static void idle_probe_arm(const pack_t *p, unsigned s, unsigned k, uint64_t now) {
  if (idle_probe.at != NULL || k < PROBE_MIN + 2 || k > PACK_MAX_PAGES || !idle_recent(p, now) || !hm_os_ranges_work())
    return;
  unsigned clean = k - 2 - bits_count(p->dirty, s + 1, k - 2);
  if (clean < PROBE_MIN) return;
  memset(idle_probe.clean, 0, sizeof idle_probe.clean);
  for (unsigned j = 1; j + 1 < k; j++)
    if (!bit(p->dirty, s + j)) idle_probe.clean[j / 64] |= (uint64_t)1 << (j % 64);
  idle_probe.at = page_addr((pack_t *)p, s);
  idle_probe.pages = k;
  idle_probe.count = clean;
}

/* A block took clean pages of p. */
static void idle_regret(const pack_t *p, uint64_t now) {
  if (idle_recent(p, now) && !hm_os_ranges_work()) idle_regret_now(now);
}

/* At a look: were the probe's clean pages written (half of them or more)? */
static void idle_regret_look(uint64_t now) {
  if (idle_probe.at == NULL) return;
  uint64_t res[PACK_MAX_PAGES / 64] = {0};
  unsigned written = 0;
  hm_os_resident_bits(-1, idle_probe.at, idle_probe.pages, res); /* (mincore; none if it fails) */
  for (unsigned w = 0; w < PACK_MAX_PAGES / 64; w++) written += (unsigned)__builtin_popcountll(idle_probe.clean[w] & res[w]);
  if (2 * written >= idle_probe.count) idle_regret_now(now);
  idle_probe.at = NULL;
}

/* ---- packs from the span cache ------------------------------------------------ */

/* A new, empty pack (lock not held); NULL if the lane has no memory. */
static pack_t *pack_new(void) {
  bool fresh;
  pack_t *p = hm_large_chunk_take(&fresh);
  if (p == NULL) return NULL;
  memset(p, 0, sizeof *p);
  p->used[0] = 1; /* the header */
  p->free_pages = PACK_PAGES - 1;
  /* a chunk from the span cache may hold old contents anywhere: all its
   * pages count as dirty (calloc zeroes them; a purge gives them back) */
  bits_put(p->dirty, 0, fresh ? 1 : PACK_PAGES, true);
  return p;
}

/* Insert p (lock held); false if the table is full. */
static bool pack_insert(pack_t *p) {
  if (npacks == PACK_SLOTS) return false;
  unsigned i = slot_of(p);
  memmove(&packs[i + 1], &packs[i], (npacks - i) * sizeof packs[0]);
  memmove(&longest[i + 1], &longest[i], (npacks - i) * sizeof longest[0]);
  packs[i] = p;
  npacks++;
  renumber(i);
  size_t clean = PACK_PAGES - bits_count(p->dirty, 0, PACK_PAGES);
  atomic_fetch_add_explicit(&clean_free, clean * HM_PAGE_SIZE, memory_order_relaxed);
  atomic_fetch_add_explicit(&free_bytes, (size_t)p->free_pages * HM_PAGE_SIZE, memory_order_relaxed);
  longest[i] = (uint16_t)longest_run(p);
  tree_build();
  hm_reg_set((uintptr_t)p, REG_LARGE_PACK);
  return true;
}

/* ---- the cache of freed blocks ------------------------------------------------- */

/* A freed block of up to CACHE_PAGES pages waits, in lazy mode, in one of
 * CACHE_DEPTH slots for its length, for the next request of that length
 * (docs/DESIGN.md, "Packs"): no lock, no clock, two atomics a side. It
 * stays a block of its pack meanwhile, its length marked CACHED (a second
 * free, usable size and realloc see a freed block). A purge step marks
 * the blocks it finds cached (bit 0 of the slot) and puts those it finds
 * marked, cached since the step before, back into their packs; a thread's
 * exit purge, malloc_trim and the RSS limit put all back
 * (pack_cache_drain). The first free into the cache after a step makes
 * a step due; a block taken from it is a request of the lane's for the
 * idle purge (hm_pack_purge). At most CACHE_DEPTH * (1 + ... +
 * CACHE_PAGES) pages (1 MiB) wait. */
#define CACHE_PAGES 16
#define CACHE_DEPTH 2
#define CACHED 0x8000u /* in pages[]: the block waits in the cache */

static _Atomic(void *) cache[CACHE_PAGES + 1][CACHE_DEPTH];
static _Atomic bool cache_armed; /* a step is due since the last drain */
static _Atomic bool cache_taken; /* a block was taken since the last step (the lane is busy) */

static uint16_t pages_load(const pack_t *pk, unsigned s) { return __atomic_load_n(&pk->pages[s], __ATOMIC_RELAXED); }

/* A cached block of k pages (k <= CACHE_PAGES), live again; NULL if none. */
HM_INLINE void *cache_take(unsigned k) {
  for (unsigned d = 0; d < CACHE_DEPTH; d++) {
    if (atomic_load_explicit(&cache[k][d], memory_order_relaxed) == NULL) continue;
    char *b = (char *)((uintptr_t)atomic_exchange(&cache[k][d], NULL) & ~(uintptr_t)1); /* (marked or not) */
    if (b == NULL) continue;
    pack_t *pk = (pack_t *)hm_ss_of(b);
    __atomic_store_n(&pk->pages[((uintptr_t)b - (uintptr_t)pk) / HM_PAGE_SIZE], (uint16_t)k, __ATOMIC_RELAXED);
    if (!atomic_load_explicit(&cache_taken, memory_order_relaxed)) /* (no store, no line moved, while set) */
      atomic_store_explicit(&cache_taken, true, memory_order_relaxed);
    return b;
  }
  return NULL;
}

/* Cache the block at page s of pk (k pages, not yet marked): 1 if cached,
 * 0 if the slots are full, -1 if it is not live (a second free racing). */
HM_INLINE int cache_put(pack_t *pk, unsigned s, uint16_t k) {
  uint16_t want = k;
  if (!__atomic_compare_exchange_n(&pk->pages[s], &want, (uint16_t)(k | CACHED), false, __ATOMIC_RELAXED,
                                   __ATOMIC_RELAXED))
    return -1;
  for (unsigned d = 0; d < CACHE_DEPTH; d++) {
    void *none = NULL;
    if (atomic_load_explicit(&cache[k][d], memory_order_relaxed) == NULL &&
        atomic_compare_exchange_strong(&cache[k][d], &none, page_addr(pk, s))) {
      /* (after the slot: a drain that cleared the flag before this load
       * sees the block; one after it, the step made due here) */
      if (!atomic_load(&cache_armed)) {
        atomic_store(&cache_armed, true);
        hm_purge_note_idle(hm_now_ns());
      }
      return 1;
    }
  }
  __atomic_store_n(&pk->pages[s], k, __ATOMIC_RELAXED);
  return 0;
}

static unsigned release_block(pack_t *pk, unsigned s);

/* The cached blocks marked by the last call (all: every one) back into
 * their packs, free; the others marked (lock not held). Returns whether
 * some stay cached. */
static bool pack_cache_drain(bool all) {
  void *got[(CACHE_PAGES + 1) * CACHE_DEPTH];
  unsigned n = 0;
  bool left = false;
  atomic_store(&cache_armed, false);
  for (unsigned k = 1; k <= CACHE_PAGES; k++)
    for (unsigned d = 0; d < CACHE_DEPTH; d++) {
      uintptr_t v = (uintptr_t)atomic_load_explicit(&cache[k][d], memory_order_relaxed);
      if (v == 0) continue;
      if (all || (v & 1)) {
        if ((v = (uintptr_t)atomic_exchange(&cache[k][d], NULL)) != 0) got[n++] = (void *)(v & ~(uintptr_t)1);
      } else {
        void *expect = (void *)v;
        left |= atomic_compare_exchange_strong(&cache[k][d], &expect, (void *)(v | 1)); /* (else taken meanwhile) */
      }
    }
  if (n == 0) return left;
  hm_mutex_lock(&pack_lock);
  for (unsigned i = 0; i < n; i++) {
    pack_t *pk = (pack_t *)hm_ss_of(got[i]);
    unsigned s = (unsigned)(((uintptr_t)got[i] - (uintptr_t)pk) / HM_PAGE_SIZE);
    __atomic_store_n(&pk->pages[s], (uint16_t)(pk->pages[s] & ~CACHED), __ATOMIC_RELAXED);
    release_block(pk, s);
  }
  hm_mutex_unlock(&pack_lock);
  return left;
}

/* ---- the lane's entry points -------------------------------------------------- */

static HM_NOINLINE void *pack_alloc_locked(size_t n, unsigned k, bool zero);

void *hm_pack_alloc(size_t n, bool zero) {
  unsigned k = (unsigned)((n + HM_PAGE_SIZE - 1) / HM_PAGE_SIZE);
  if (k <= CACHE_PAGES && hm_purge_mode == PURGE_LAZY) {
    char *b = cache_take(k);
    if (b != NULL) { /* (its pages are dirty) */
      if (zero) memset(b, 0, n);
#ifndef HAKMEM_NO_CHECKS
      else ((uintptr_t *)b)[1] = 0; /* (as pack_alloc_locked) */
#endif
      return b;
    }
  }
  return pack_alloc_locked(n, k, zero);
}

static void *pack_alloc_locked(size_t n, unsigned k, bool zero) {
  uint64_t now = hm_now_ns();
  pack_t *fresh = NULL;
  for (;;) {
    hm_mutex_lock(&pack_lock);
    last_alloc_ns = now;
    if (fresh != NULL && !pack_insert(fresh)) {
      hm_mutex_unlock(&pack_lock);
      hm_large_chunk_give(fresh);
      return NULL; /* the caller maps a span */
    }
    unsigned i = lowest_fit(k);
    HM_ASSERT(i == lowest_fit_scan(k));
    if (i < npacks) {
      pack_t *p = packs[i];
      HM_ASSERT(longest[i] == longest_run(p));
      unsigned left, s = best_fit(p, k, &left);
      HM_ASSERT(s != 0);
      bool clean = place(p, s, k, left, now);
      hm_mutex_unlock(&pack_lock);
      char *b = page_addr(p, s);
      if (zero && !clean) memset(b, 0, n);
#ifndef HAKMEM_NO_CHECKS
      /* A block's second word is where pool blocks hold the free tag, and
       * the pages of a pack are reused at any page: stale contents (a
       * pool block copied here whole by realloc, tags of freed blocks
       * inside it) must not reach a pool block's second word when
       * realloc moves this one into the pool. Clean pages read zero. */
      else if (!clean) ((uintptr_t *)b)[1] = 0;
#endif
      return b;
    }
    hm_mutex_unlock(&pack_lock);
    if ((fresh = pack_new()) == NULL) return NULL;
  }
}

/* The block of p's pack that starts at p: its page, 0 if none. Lock held. */
static unsigned block_page(const pack_t *pk, const void *p) {
  uintptr_t off = (uintptr_t)p - (uintptr_t)pk;
  if ((off & (HM_PAGE_SIZE - 1)) != 0) return 0;
  unsigned s = (unsigned)(off / HM_PAGE_SIZE);
  return s != 0 && bit(pk->start, s) && !(pages_load(pk, s) & CACHED) ? s : 0;
}

static pack_t *pack_of(const void *p) { return (pack_t *)hm_ss_of(p); }

size_t hm_pack_usable(const void *p) {
  pack_t *pk = pack_of(p);
  hm_mutex_lock(&pack_lock);
  unsigned s = block_page(pk, p);
  size_t u = s != 0 ? (size_t)pk->pages[s] * HM_PAGE_SIZE : 0;
  hm_mutex_unlock(&pack_lock);
  return u;
}

/* The same without the lock, for malloc_usable_size (usable.h): a block's
 * length is kept at its first page while it lives, 0 elsewhere, and only
 * the block's own free or realloc changes it. */
size_t hm_pack_usable_live(const void *p) {
  pack_t *pk = pack_of(p);
  uintptr_t off = (uintptr_t)p - (uintptr_t)pk;
  if ((off & (HM_PAGE_SIZE - 1)) != 0 || off == 0) return 0;
  unsigned k = pages_load(pk, (unsigned)(off / HM_PAGE_SIZE));
  return k & CACHED ? 0 : (size_t)k * HM_PAGE_SIZE;
}

bool hm_pack_is_freed(const void *p) {
  pack_t *pk = pack_of(p);
  uintptr_t off = (uintptr_t)p - (uintptr_t)pk;
  hm_mutex_lock(&pack_lock);
  unsigned s = (unsigned)(off / HM_PAGE_SIZE);
  bool freed = (off & (HM_PAGE_SIZE - 1)) == 0 && (bit(pk->freed, s) || (bit(pk->start, s) && (pk->pages[s] & CACHED)));
  hm_mutex_unlock(&pack_lock);
  return freed;
}

/* Free the block at page s of pk (lock held). Returns its pages. */
static unsigned release_block(pack_t *pk, unsigned s) {
  unsigned k = pk->pages[s];
  bits_put(pk->start, s, 1, false);
  bits_put(pk->freed, s, 1, true);
  pk->pages[s] = 0;
  give_pages(pk, s, k);
  refresh_freed(pk, s);
  return k;
}

static HM_NOINLINE size_t pack_free_locked(pack_t *pk, void *p);

size_t hm_pack_free(void *p) {
  pack_t *pk = pack_of(p);
  uintptr_t off = (uintptr_t)p - (uintptr_t)pk;
  if (hm_purge_mode == PURGE_LAZY && (off & (HM_PAGE_SIZE - 1)) == 0 && off != 0) {
    uint16_t k = pages_load(pk, (unsigned)(off / HM_PAGE_SIZE));
    if (k != 0 && k <= CACHE_PAGES) { /* (a cached block's k has CACHED: the lock's path reports it) */
      int r = cache_put(pk, (unsigned)(off / HM_PAGE_SIZE), k);
      if (r != 0) return r > 0 ? (size_t)k * HM_PAGE_SIZE : 0;
    }
  }
  return pack_free_locked(pk, p);
}

static size_t pack_free_locked(pack_t *pk, void *p) {
  uint64_t now = hm_now_ns();
  hm_mutex_lock(&pack_lock);
  unsigned s = block_page(pk, p);
  if (s == 0) {
    hm_mutex_unlock(&pack_lock);
    return 0;
  }
  if (hm_purge_mode == PURGE_EAGER) {
    /* given back at once: the pages stay taken while madvise runs */
    unsigned k = pk->pages[s];
    bits_put(pk->start, s, 1, false);
    bits_put(pk->freed, s, 1, true);
    pk->pages[s] = 0;
    hm_mutex_unlock(&pack_lock);
    bool ok = hm_os_purge(page_addr(pk, s), (size_t)k * HM_PAGE_SIZE) == 0;
    hm_mutex_lock(&pack_lock);
    if (ok) bits_put(pk->dirty, s, k, false);
    give_pages(pk, s, k);
    refresh_freed(pk, s);
    hm_mutex_unlock(&pack_lock);
    return (size_t)k * HM_PAGE_SIZE;
  }
  unsigned k = release_block(pk, s);
  hm_mutex_unlock(&pack_lock);
  /* (not eager: counts a purge skipped, or schedules a step; at every
   * free, not once a step as the cache does: it also starts the background
   * purger once enough lies unused, test purge_exit_shared) */
  hm_purge_unused_now(now);
  return (size_t)k * HM_PAGE_SIZE;
}

void hm_pack_free_moved(void *p) {
  pack_t *pk = pack_of(p);
  hm_mutex_lock(&pack_lock);
  unsigned s = block_page(pk, p);
  if (s != 0) {
    bits_put(pk->dirty, s, pk->pages[s], false); /* its pages moved away: the range reads zeros */
    release_block(pk, s);
  }
  hm_mutex_unlock(&pack_lock);
}

bool hm_pack_resize(void *p, size_t n) {
  pack_t *pk = pack_of(p);
  unsigned k = (unsigned)((n + HM_PAGE_SIZE - 1) / HM_PAGE_SIZE);
  uint64_t now = hm_now_ns();
  hm_mutex_lock(&pack_lock);
  unsigned s = block_page(pk, p), old = pk->pages[s];
  bool done = true;
  if (k < old) { /* the tail becomes free */
    give_pages(pk, s + k, old - k);
    pk->pages[s] = (uint16_t)k;
    refresh_freed(pk, s + k);
  } else if (k > old) { /* into the free pages that follow */
    unsigned end = bits_next(pk->used, s + old, true);
    done = end >= s + k; /* (end <= PACK_PAGES) */
    if (done) {
      idle_probe_arm(pk, s + old, k - old, now);
      unsigned dirty = take_pages(pk, s + old, k - old, true);
      pk->pages[s] = (uint16_t)k;
      if (dirty < k - old) {
        if (pk->purged_ns != 0) hm_purge_regret(pk->purged_ns, now);
        idle_regret(pk, now);
      }
      refresh_taken(pk, end - (s + old));
    }
  }
  hm_mutex_unlock(&pack_lock);
  return done;
}

/* ---- giving memory back ---------------------------------------------------------- */

typedef struct run {
  pack_t *pk;
  uint16_t s, k;
} run_t;

/* Runs of free, dirty pages, at most budget bytes and PURGE_BATCH runs,
 * taken (marked used) into out; with empty_idle_ns, only in packs that
 * have held no block for that long. Lock held. */
static unsigned claim_runs(uint64_t now, uint64_t empty_idle_ns, size_t *budget, uint64_t *next_due, run_t *out) {
  unsigned n = 0;
  for (unsigned i = 0; i < npacks; i++) {
    pack_t *pk = packs[i];
    if (empty_idle_ns != 0) {
      if (pk->empty_ns == 0 || bits_count(pk->dirty, 1, PACK_PAGES - 1) == 0) continue;
      if (pk->empty_ns + empty_idle_ns > now) {
        if (pk->empty_ns + empty_idle_ns < *next_due) *next_due = pk->empty_ns + empty_idle_ns;
        continue;
      }
    }
    uint64_t cand[PACK_WORDS];
    bool any = false;
    for (unsigned w = 0; w < PACK_WORDS; w++) any |= (cand[w] = pk->dirty[w] & ~pk->used[w]) != 0;
    for (unsigned j = any ? bits_next(cand, 1, true) : PACK_PAGES; j < PACK_PAGES;) {
      if (*budget == 0 || n == PURGE_BATCH) {
        *next_due = now; /* more to do: the next step comes at once */
        return n;
      }
      unsigned e = bits_next(cand, j, false);
      size_t bytes = (size_t)(e - j) * HM_PAGE_SIZE;
      *budget = bytes >= *budget ? 0 : *budget - bytes;
      take_pages(pk, j, e - j, false);
      refresh_taken(pk, PACK_PAGES); /* (recomputed) */
      out[n++] = (run_t){pk, (uint16_t)j, (uint16_t)(e - j)};
      j = bits_next(cand, e, true);
    }
  }
  return n;
}

/* madvise the claimed runs (lock not held), then free them, clean. Where
 * the kernel can, all in one call (hm_os_purge_ranges), else one a run
 * (with one_by_one; else they stay dirty: the caller counts its calls).
 * Returns the bytes given back; *calls: the system calls made. */
enum { RUN_STEP, RUN_IDLE, RUN_EXIT }; /* whose regret a run's reuse is */

static size_t purge_runs(run_t *r, unsigned n, uint64_t now, int why, bool one_by_one, unsigned *calls) {
  size_t bytes = 0;
  bool ok[PURGE_BATCH], tried = false;
  unsigned c = 0;
  if (hm_os_purge_ranges_ok()) { /* (one range too: the kernel's support is then known, hm_os_ranges_work) */
    struct iovec v[PURGE_BATCH];
    for (unsigned i = 0; i < n; i++) v[i] = (struct iovec){page_addr(r[i].pk, r[i].s), (size_t)r[i].k * HM_PAGE_SIZE};
    long got = hm_os_purge_ranges(v, n);
    if (got >= 0) { /* (it stops at a range it cannot advise: those after it go one by one) */
      size_t upto = 0;
      for (unsigned i = 0; i < n; i++) ok[i] = (upto += v[i].iov_len) <= (size_t)got;
      tried = true;
      c = 1;
    }
  }
  for (unsigned i = 0; i < n; i++)
    if (!tried || !ok[i]) {
      ok[i] = (one_by_one || n == 1) && hm_os_purge(page_addr(r[i].pk, r[i].s), (size_t)r[i].k * HM_PAGE_SIZE) == 0;
      c += one_by_one || n == 1;
    }
  if (calls != NULL) *calls = c;
  hm_mutex_lock(&pack_lock);
  for (unsigned i = 0; i < n; i++) {
    if (ok[i]) {
      bits_put(r[i].pk->dirty, r[i].s, r[i].k, false);
      if (why == RUN_IDLE) r[i].pk->idle_purged_ns = now;
      else if (why == RUN_STEP) r[i].pk->purged_ns = now;
      bytes += (size_t)r[i].k * HM_PAGE_SIZE;
    }
    give_pages(r[i].pk, r[i].s, r[i].k);
    refresh_freed(r[i].pk, r[i].s);
  }
  hm_mutex_unlock(&pack_lock);
  return bytes;
}

size_t hm_pack_purge(uint64_t now, uint64_t min_idle_ns, size_t budget, uint64_t *next_due) {
  size_t bytes = 0;
  run_t runs[PURGE_BATCH];
  /* (a step: what was cached at the last one; the limit: all) */
  if (pack_cache_drain(min_idle_ns == 0)) {
    uint64_t again = now + hm_purge_delay_now();
    if (again < *next_due) *next_due = again;
  }
  bool taken = atomic_exchange_explicit(&cache_taken, false, memory_order_relaxed);
  for (;;) {
    hm_mutex_lock(&pack_lock);
    if (taken && now > last_alloc_ns) last_alloc_ns = now; /* (requests the cache served) */
    /* As for cached spans (hm_large_purge): an idle purge of all free
     * pages waits until no block was asked for that long either. A random
     * working set of large blocks leaves the free pages of its deepest
     * troughs idle for a second now and then, and wants them again (the
     * syscall budget with blocks up to 1 MiB: madvise calls in steady
     * state otherwise). Meanwhile only packs that have held no block for
     * EMPTY_IDLE_FACTOR times as long are given back (the syscall budget):
     * busy blocks crowd into the low packs, so the high ones empty out after
     * a peak of the working set (otherwise each new peak left a pack's
     * worth of pages resident for good). */
    uint64_t empty_idle = 0;
    if (min_idle_ns != 0 && last_alloc_ns + min_idle_ns > now) {
      if (last_alloc_ns + min_idle_ns < *next_due && npacks != 0) *next_due = last_alloc_ns + min_idle_ns;
      empty_idle = EMPTY_IDLE_FACTOR * min_idle_ns;
    }
    unsigned n = claim_runs(now, empty_idle, &budget, next_due, runs);
    hm_mutex_unlock(&pack_lock);
    if (n == 0) break;
    bytes += purge_runs(runs, n, now, RUN_STEP, true, NULL);
    if (n < PURGE_BATCH || budget == 0) break;
  }
  return bytes;
}

/* Free pages idle in packs in use (docs/DESIGN.md, "Memory given back"):
 * at each look, at least an age after the last (age_ns, the purge delay,
 * times the regret's factor above), the free dirty pages that
 * were free and dirty at the last look and taken by no block since are
 * due; the longest runs of them go back, at most max_calls of them and
 * none under IDLE_RUN_MIN pages (a call must be worth it). Then what is
 * free and dirty now is remembered for the next look. */
#define IDLE_RUN_MIN 4

static uint64_t last_look_ns; /* (the caller's purge_lock) */

static void keep_longest(run_t *best, unsigned *n, unsigned max, run_t r) {
  unsigned i = *n < max ? (*n)++ : max;
  if (i == max) {
    if (best[max - 1].k >= r.k) return;
    i = max - 1;
  }
  while (i > 0 && best[i - 1].k < r.k) {
    best[i] = best[i - 1];
    i--;
  }
  best[i] = r;
}

/* The longest runs of free dirty pages (with idle, only those free since
 * the last look), at most max, taken into best. Lock held. */
static unsigned claim_longest(bool idle, unsigned max, unsigned min_len, run_t *best) {
  unsigned n = 0;
  if (max > PURGE_BATCH) max = PURGE_BATCH;
  for (unsigned i = 0; i < npacks && max != 0; i++) {
    pack_t *pk = packs[i];
    uint64_t cand[PACK_WORDS];
    bool any = false;
    for (unsigned w = 0; w < PACK_WORDS; w++)
      any |= (cand[w] = (idle ? pk->idle[w] : ~(uint64_t)0) & pk->dirty[w] & ~pk->used[w]) != 0;
    for (unsigned j = any ? bits_next(cand, 1, true) : PACK_PAGES; j < PACK_PAGES;) {
      unsigned e = bits_next(cand, j, false);
      if (e - j >= min_len) keep_longest(best, &n, max, (run_t){pk, (uint16_t)j, (uint16_t)(e - j)});
      j = bits_next(cand, e, true);
    }
  }
  for (unsigned i = 0; i < n; i++) {
    take_pages(best[i].pk, best[i].s, best[i].k, false);
    refresh_taken(best[i].pk, PACK_PAGES);
  }
  return n;
}

size_t hm_pack_purge_idle(uint64_t now, uint64_t age_ns, unsigned max_calls, unsigned *calls, uint64_t *next_due) {
  *calls = 0;
  hm_mutex_lock(&pack_lock);
  if (idle_shift != 0 && now - idle_regret_ns > (hm_os_ranges_work() ? 8u : 64u) * idle_age_ns) {
    idle_shift--;
    idle_regret_ns = now;
  }
  idle_age_ns = age_ns << idle_shift;
  age_ns = idle_age_ns;
  if (last_look_ns != 0 && now - last_look_ns < age_ns) {
    hm_mutex_unlock(&pack_lock);
    if (last_look_ns + age_ns < *next_due) *next_due = last_look_ns + age_ns;
    return 0;
  }
  last_look_ns = now;
  idle_regret_look(now);
  run_t best[PURGE_BATCH];
  bool batch = hm_os_purge_ranges_ok();
  unsigned n = claim_longest(true, batch ? PURGE_BATCH : max_calls, batch ? 1 : IDLE_RUN_MIN, best);
  bool any_left = false;
  for (unsigned i = 0; i < npacks; i++) {
    pack_t *pk = packs[i];
    for (unsigned w = 0; w < PACK_WORDS; w++) any_left |= (pk->idle[w] = pk->dirty[w] & ~pk->used[w]) != 0;
  }
  hm_mutex_unlock(&pack_lock);
  if (any_left && now + age_ns < *next_due) *next_due = now + age_ns;
  return n != 0 ? purge_runs(best, n, now, RUN_IDLE, true, calls) : 0;
}

/* A thread's exit: the longest free runs, max_calls calls' worth: a run a
 * call, or PURGE_BATCH of them (of any length) where the kernel takes
 * them in one (hm_os_purge_ranges). */
size_t hm_pack_purge_longest(unsigned max_calls, unsigned *calls) {
  size_t bytes = 0;
  *calls = 0;
  pack_cache_drain(true);
  while (*calls < max_calls) {
    run_t best[PURGE_BATCH];
    bool batch = hm_os_purge_ranges_ok();
    unsigned want = batch ? PURGE_BATCH : max_calls - *calls, c;
    hm_mutex_lock(&pack_lock);
    unsigned n = claim_longest(false, want, batch ? 1 : IDLE_RUN_MIN, best);
    hm_mutex_unlock(&pack_lock);
    if (n == 0) break;
    bytes += purge_runs(best, n, hm_now_ns(), RUN_EXIT, !batch, &c);
    *calls += c;
    if (n < want) break;
  }
  return bytes;
}

size_t hm_pack_release(void) {
  uint64_t due = UINT64_MAX;
  pack_cache_drain(true);
  size_t bytes = hm_purge_mode == PURGE_OFF ? 0 : hm_pack_purge(hm_now_ns(), 0, SIZE_MAX, &due);
  /* empty packs go back to the span cache (which the caller then unmaps) */
  for (;;) {
    pack_t *empty = NULL;
    hm_mutex_lock(&pack_lock);
    for (unsigned i = 0; i < npacks && empty == NULL; i++) {
      if (packs[i]->free_pages != PACK_PAGES - 1) continue;
      empty = packs[i];
      if (idle_probe.at != NULL && hm_ss_of(idle_probe.at) == (void *)empty) idle_probe.at = NULL;
      memmove(&packs[i], &packs[i + 1], (npacks - i - 1) * sizeof packs[0]);
      memmove(&longest[i], &longest[i + 1], (npacks - i - 1) * sizeof longest[0]);
      npacks--;
      renumber(i);
      tree_build();
      size_t clean = PACK_PAGES - bits_count(empty->dirty, 0, PACK_PAGES);
      atomic_fetch_sub_explicit(&clean_free, clean * HM_PAGE_SIZE, memory_order_relaxed);
      atomic_fetch_sub_explicit(&free_bytes, (size_t)empty->free_pages * HM_PAGE_SIZE, memory_order_relaxed);
    }
    hm_mutex_unlock(&pack_lock);
    if (empty == NULL) break;
    hm_large_chunk_give(empty);
  }
  return bytes;
}

size_t hm_pack_clean(void) { return atomic_load_explicit(&clean_free, memory_order_relaxed); }
size_t hm_pack_free_dirty(void) {
  size_t f = atomic_load_explicit(&free_bytes, memory_order_relaxed), c = hm_pack_clean();
  return f > c ? f - c : 0;
}

void hm_pack_resident(size_t *res) {
  hm_mutex_lock(&pack_lock);
  for (unsigned i = 0; i < npacks; i++) *res += hm_os_resident(packs[i], SS_SIZE);
  hm_mutex_unlock(&pack_lock);
}

void hm_pack_explain(int fd, size_t res[3]) {
  hm_mutex_lock(&pack_lock);
  for (unsigned i = 0; i < npacks; i++) {
    uint64_t r[PACK_WORDS];
    hm_os_resident_bits(fd, packs[i], PACK_PAGES, r);
    res[2] += (r[0] & 1u) * HM_PAGE_SIZE;
    r[0] &= ~(uint64_t)1;
    for (unsigned w = 0; w < PACK_WORDS; w++) {
      res[0] += (size_t)__builtin_popcountll(r[w] & packs[i]->used[w]) * HM_PAGE_SIZE;
      res[1] += (size_t)__builtin_popcountll(r[w] & ~packs[i]->used[w]) * HM_PAGE_SIZE;
    }
  }
  hm_mutex_unlock(&pack_lock);
}

void hm_pack_fork_prepare(void) { pthread_mutex_lock(&pack_lock); }
void hm_pack_fork_parent(void) { pthread_mutex_unlock(&pack_lock); }
void hm_pack_fork_child(void) { pthread_mutex_init(&pack_lock, NULL); }

#else /* secure mode: one block per span */

void *hm_pack_alloc(size_t n, bool zero) { (void)n, (void)zero; return NULL; }
size_t hm_pack_usable(const void *p) { (void)p; return 0; }
size_t hm_pack_usable_live(const void *p) { (void)p; return 0; }
bool hm_pack_is_freed(const void *p) { (void)p; return false; }
size_t hm_pack_free(void *p) { (void)p; return 0; }
bool hm_pack_resize(void *p, size_t n) { (void)p, (void)n; return false; }
void hm_pack_free_moved(void *p) { (void)p; }
size_t hm_pack_purge(uint64_t now, uint64_t min_idle_ns, size_t budget, uint64_t *next_due) {
  (void)now, (void)min_idle_ns, (void)budget, (void)next_due;
  return 0;
}
size_t hm_pack_purge_idle(uint64_t now, uint64_t age_ns, unsigned max_calls, unsigned *calls, uint64_t *next_due) {
  (void)now, (void)age_ns, (void)max_calls, (void)next_due;
  *calls = 0;
  return 0;
}
size_t hm_pack_purge_longest(unsigned max_calls, unsigned *calls) {
  (void)max_calls;
  *calls = 0;
  return 0;
}
size_t hm_pack_release(void) { return 0; }
size_t hm_pack_clean(void) { return 0; }
size_t hm_pack_free_dirty(void) { return 0; }
void hm_pack_resident(size_t *res) { (void)res; }
void hm_pack_explain(int fd, size_t res[3]) { (void)fd, (void)res; }
void hm_pack_fork_prepare(void) {}
void hm_pack_fork_parent(void) {}
void hm_pack_fork_child(void) {}

#endif
