/* The classes of big slabs (blocks above 64 KiB, one 2 MiB slab per
 * SuperSlab, at most 28 blocks a slab): the lowest free block first, and
 * the top of a slab left idle given back.
 *
 * Lowest first: malloc puts the frees since its last call into the free
 * list in address order before it pops. Taking the lists by turns, as the
 * other classes do, cycled every block a class ever carved, and each page
 * any of them was ever written on stayed resident. With the lowest block
 * first, the blocks a class needed only at a peak stay free until the next
 * peak: they are the top of the slab's carved blocks.
 *
 * Idle tops: those blocks still keep the pages they were written on. The
 * owner looks at its big classes' current slabs every second (or every ten
 * purge delays, if longer), from its big mallocs (the coarse clock read
 * every 32nd): a free block gets a stamp (the look's number, in its first
 * page, beyond the words the free list and the checks use), and malloc
 * wipes the stamp of a block it hands out. A block that still holds an
 * earlier look's stamp was not handed out for a whole period. When the
 * carved blocks from some index up are all free and idle, they are
 * uncarved (off the free list; carving makes them again when the class
 * needs them) and given back in one madvise: the largest such top among
 * the heap's classes, and at most one call per HAKMEM_BIG_IDLE_SPACING_MS
 * (20 s; 0: never) in the whole process. That bound keeps the syscall
 * budget for a working set whose rare peaks keep coming back (docs/DESIGN.md,
 * "Memory given back"). HAKMEM_PURGE=off never
 * looks either; a thread that stops allocating big blocks stops looking.
 *
 * hak_collect and malloc_trim give back the pages of every free block of
 * the calling thread's big slabs but its first (hm_big_collect). */
#include "heap.h"

#define BIG_TICK_EVERY 32
#define BIG_STAMP_OFF 64 /* bytes: past the list link, the free tag, secure mode's pattern */
#ifdef HAKMEM_SECURE
_Static_assert(BIG_STAMP_OFF >= HM_FILL_BYTES, "the stamp lies beyond the fill pattern");
#endif

static uint64_t stamp_key; /* random: a program's data passes for a stamp with odds 2^-32 */
static uint64_t period_ns;
static uint64_t spacing_ns; /* HAKMEM_BIG_IDLE_SPACING_MS; 0: never */
static _Atomic uint64_t last_give_ns; /* the last give-back (or the first look) */

void hm_big_init(void) {
  /* hm_malloc routes the sizes above MEDIUM_MAX here: the big slabs' classes */
  HM_ASSERT(hm_class_kind[hm_size_class(MEDIUM_MAX)] != KIND_BIG &&
            hm_class_kind[hm_size_class(MEDIUM_MAX + 1)] == KIND_BIG);
  stamp_key = hm_random_u64();
  period_ns = hm_purge_delay_ns * 10;
  if (period_ns < 1000000000u) period_ns = 1000000000u;
  spacing_ns = (uint64_t)hm_opt[HM_OPT_BIG_IDLE_SPACING_MS] * 1000000u;
}

void hm_big_reset(heap_t *h) {
  h->big_countdown = BIG_TICK_EVERY;
  h->big_looks = 0;
  h->big_due_ns = 0;
}

/* The stamp of a free block whose pages past the first hak_collect gave
 * back (no look reaches that number). */
#define STAMP_COLLECTED UINT32_MAX

/* A free block's stamp: the look that wrote it, STAMP_COLLECTED, or 0
 * (none: the program's data, or wiped). */
static uint64_t *stamp_of(block_t *b) { return (uint64_t *)((char *)b + BIG_STAMP_OFF); }
static uint32_t stamp_get(block_t *b) {
  uint64_t v = *stamp_of(b) ^ stamp_key;
  return v < ((uint64_t)1 << 32) ? (uint32_t)v : 0;
}

/* Stamp slab s's free blocks at look `look`; returns how many carved blocks
 * at its top are free, were so at an earlier look and end its free list
 * (*lowest: the lowest of them; *before: its predecessor on the list, NULL
 * if it is the head). */
static unsigned idle_top(slab_t *s, uint32_t look, block_t **lowest, block_t **before) {
  if (s->carved == 0) return 0;
  uint32_t bs = hm_slab_bs(s);
  char *top = hm_slab_start(s) + (size_t)(s->carved - 1) * bs;
  unsigned run = 0;
  block_t *prev = NULL;
  for (block_t *b = s->free; b != NULL; prev = b, b = hm_next_get(s, b)) {
    uint32_t st = stamp_get(b);
    bool idle = st != 0 && (st < look || st == STAMP_COLLECTED);
    if (st == 0) *stamp_of(b) = stamp_key ^ look;
    /* a run of idle blocks, each the next by address, up to the top */
    if (idle && run > 0 && (char *)b == (char *)*lowest + (size_t)run * bs) {
      run++;
    } else if (idle) {
      run = 1;
      *lowest = b;
      *before = prev;
    } else {
      run = 0;
    }
    if ((char *)b == top) return hm_next_get(s, b) == NULL ? run : 0;
  }
  return 0; /* the top block is not on the free list */
}

/* Look at every big class's current slab; give back the largest idle top
 * if the process has not given one back for spacing_ns. */
static void big_look(heap_t *h, uint64_t now) {
  uint32_t look = ++h->big_looks;
  slab_t *best = NULL;
  block_t *best_low = NULL, *best_before = NULL;
  size_t best_bytes = 0;
  unsigned best_n = 0;
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    slab_t *s = h->cur[c];
    if (hm_class_kind[c] != KIND_BIG || s == &hm_empty_slab || s->in_use != SLAB_ACTIVE) continue;
    block_t *low = NULL, *before = NULL;
    unsigned n = idle_top(s, look, &low, &before);
    if (n > 0 && (size_t)n * hm_slab_bs(s) > best_bytes) {
      best = s, best_low = low, best_before = before, best_n = n;
      best_bytes = (size_t)n * hm_slab_bs(s);
    }
  }
  uint64_t last = atomic_load_explicit(&last_give_ns, memory_order_relaxed);
  if (last == 0) { /* the first look of the process starts the clock */
    atomic_compare_exchange_strong(&last_give_ns, &last, now);
    return;
  }
  if (best == NULL || now - last < spacing_ns) return;
  if (!atomic_compare_exchange_strong(&last_give_ns, &last, now)) return;
  /* uncarve the top: off the free list (it ends there), then given back */
  if (best_before != NULL)
    hm_next_set(best, best_before, NULL);
  else
    best->free = NULL;
  hm_slab_set_carved(best, best->carved - best_n);
  hm_stats_released(best->cls, best_n);
  hm_os_purge(best_low, best_bytes);
}

/* hak_collect and malloc_trim: the free blocks of h's big slabs give back
 * their pages past the first (which holds the list link, the checks' tag
 * and the stamp), one madvise each, and are stamped so that the next
 * collect skips them; malloc wipes the stamp. Blocks in use between them
 * keep a slab's free blocks from being uncarved (big_look), and each can
 * hold up to a megabyte. Returns the bytes given back. */
size_t hm_big_collect(heap_t *h) {
  size_t bytes = 0;
  if (hm_purge_mode == PURGE_OFF) return 0;
  for (superslab_t *ss = h->all; ss != NULL; ss = ss->all_next) {
    if (ss->kind != KIND_BIG) continue;
    slab_t *s = &ss->slabs[0];
    if (s->in_use == SLAB_UNUSED) continue;
    block_t *lists[2] = {s->free, s->local_free};
    for (unsigned k = 0; k < 2; k++)
      for (block_t *b = lists[k]; b != NULL; b = hm_next_get(s, b)) {
        if (stamp_get(b) == STAMP_COLLECTED) continue;
        uintptr_t from = ((uintptr_t)b + BIG_STAMP_OFF + sizeof(uint64_t) + HM_PAGE_SIZE - 1) & ~(uintptr_t)(HM_PAGE_SIZE - 1);
        uintptr_t to = ((uintptr_t)b + hm_slab_bs(s)) & ~(uintptr_t)(HM_PAGE_SIZE - 1);
        if (to > from) {
          if (hm_os_purge((void *)from, to - from) != 0) continue; /* (the next collect tries again) */
          bytes += to - from;
        }
        *stamp_of(b) = stamp_key ^ STAMP_COLLECTED;
      }
  }
  return bytes;
}

/* Every BIG_TICK_EVERY-th big malloc of a heap: a look when one is due. */
static void big_tick(heap_t *h) {
  h->big_countdown = BIG_TICK_EVERY;
  if (hm_purge_mode == PURGE_OFF || spacing_ns == 0) return;
  uint64_t now = hm_now_ns();
  if (h->big_due_ns != 0 && now >= h->big_due_ns) big_look(h, now);
  if (h->big_due_ns == 0 || now >= h->big_due_ns) h->big_due_ns = now + period_ns;
}

/* The blocks of chain into s's sorted free list at head, each in address
 * order (before the first higher block); returns the new head. */
static block_t *insert_by_address(slab_t *s, block_t *head, block_t *chain) {
  for (block_t *l = chain, *next; l != NULL; l = next) {
    next = hm_next_get(s, l);
    block_t *prev = NULL, *at = head;
    while (at != NULL && at < l) {
      prev = at;
      at = hm_next_get(s, at);
    }
    hm_next_set(s, l, at);
    if (prev == NULL)
      head = l;
    else
      hm_next_set(s, prev, l);
  }
  return head;
}

void *hm_malloc_big(size_t n) {
  hm_ensure_init(); /* (before the sampling flags: start-up sets them) */
  if (unlikely(hm_sample_any)) { /* charged per malloc (sample.h) */
    uint32_t bs = hm_class_size[hm_size_class(n)];
    unsigned fired = hm_sample_one(bs);
    if (fired != 0) return hm_sample_serve(fired, n, 0, bs);
  }
  heap_t *h = hm_tls_heap;
  slab_t *s = h->cur[hm_size_class(n)];
  /* The free list in address order. Blocks pushed on it since the last
   * malloc (the owner's and a trading thread's frees) or taken from the
   * remote list stand before its sorted rest: the blocks up to its last
   * descent go into the rest one by one; so do those on local_free. One
   * walk when nothing changed (at most 28 blocks). */
  block_t *head = s->free, *cut = NULL, *next;
  for (block_t *b = head; b != NULL && (next = hm_next_get(s, b)) != NULL; b = next)
    if (next < b) cut = b;
  block_t *l = s->local_free;
  if (cut != NULL || l != NULL) {
    if (cut != NULL) {
      block_t *prefix = head;
      head = hm_next_get(s, cut);
      hm_next_set(s, cut, NULL);
      head = insert_by_address(s, head, prefix);
    }
    s->local_free = NULL;
    s->free = insert_by_address(s, head, l);
  }
  block_t *b = hm_slab_pop(s, n);
  if (b != NULL) {
    if (stamp_get(b) != 0) *stamp_of(b) = 0; /* (a slab taken again keeps its old stamps) */
    h = hm_tls_heap;                          /* (the slow path may have made the thread's heap) */
    if (h != &hm_empty_heap && unlikely(--h->big_countdown == 0)) big_tick(h);
  }
  return b;
}
