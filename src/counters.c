/* The statistics counters every build keeps, on slow paths only (the lanes
 * bump them; stats.c reports them): bytes carved into blocks and given
 * back with emptied slabs per pool row, the large lane's blocks; and with
 * -DHAKMEM_FAST_COUNTERS, every heap's fast-path counters. */
#include "internal.h"

typedef struct {
  _Atomic size_t allocated, freed, peak; /* bytes */
  _Atomic size_t allocs, frees;          /* blocks (large lane) */
} lane_counters_t;

static lane_counters_t lanes[HM_LANES];
static _Atomic size_t large_blocks_peak, large_mapped;

static void raise_peak(_Atomic size_t *peak, size_t v) {
  size_t p = atomic_load_explicit(peak, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak_explicit(peak, &p, v, memory_order_relaxed, memory_order_relaxed)) {
  }
}

unsigned hm_stats_row(unsigned cls) { return hm_class_size[cls] <= DIRECT_MAX ? HM_LANE_DIRECT : HM_LANE_POOL; }

/* allocated grew to a: the lane's current figure may be a new peak */
static void lane_grew(lane_counters_t *l, size_t a) {
  size_t f = atomic_load_explicit(&l->freed, memory_order_relaxed);
  if (a > f) raise_peak(&l->peak, a - f);
}

void hm_stats_carved(unsigned cls, size_t blocks) {
  lane_counters_t *l = &lanes[hm_stats_row(cls)];
  size_t bytes = blocks * hm_class_size[cls];
  lane_grew(l, atomic_fetch_add_explicit(&l->allocated, bytes, memory_order_relaxed) + bytes);
}

void hm_stats_released(unsigned cls, size_t blocks) {
  atomic_fetch_add_explicit(&lanes[hm_stats_row(cls)].freed, blocks * hm_class_size[cls], memory_order_relaxed);
}

void hm_stats_large(int sign, size_t usable, size_t mapped) {
  lane_counters_t *l = &lanes[HM_LANE_LARGE];
  if (sign > 0) {
    size_t n = atomic_fetch_add_explicit(&l->allocs, 1, memory_order_relaxed) + 1;
    /* (a resize counts its free first: frees may briefly exceed allocs) */
    size_t f = atomic_load_explicit(&l->frees, memory_order_relaxed);
    if (n > f) raise_peak(&large_blocks_peak, n - f);
    atomic_fetch_add_explicit(&large_mapped, mapped, memory_order_relaxed);
    lane_grew(l, atomic_fetch_add_explicit(&l->allocated, usable, memory_order_relaxed) + usable);
  } else {
    atomic_fetch_add_explicit(&l->frees, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&large_mapped, mapped, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->freed, usable, memory_order_relaxed);
  }
}

#if HM_FAST_COUNTERS
/* Every heap ever made (heaps are never unmapped, only reused), and the
 * remote frees of threads that never allocated. */
static _Atomic(heap_t *) all_heaps;
static _Atomic uint64_t frees_without_heap[NUM_CLASSES];

void hm_stats_heap_new(heap_t *h) {
  heap_t *head = atomic_load(&all_heaps);
  do {
    h->stats_next = head;
  } while (!atomic_compare_exchange_weak(&all_heaps, &head, h));
}

void hm_stats_free_without_heap(unsigned cls) {
  atomic_fetch_add_explicit(&frees_without_heap[cls], 1, memory_order_relaxed);
}

static uint64_t rd(const uint64_t *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

static void merge_heaps(struct hak_stats *out) {
  for (unsigned c = 0; c < NUM_CLASSES; c++)
    out->cls[c].frees_remote = atomic_load_explicit(&frees_without_heap[c], memory_order_relaxed);
  for (heap_t *h = atomic_load(&all_heaps); h != NULL; h = h->stats_next) {
    const hm_heap_stats_t *t = &h->stats;
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
      out->cls[c].allocs += rd(&t->alloc[c]);
      out->cls[c].frees_local += rd(&t->free_local[c]);
      out->cls[c].frees_remote += rd(&t->free_remote[c]);
    }
    for (unsigned r = 0; r < HM_REFILL_COUNT; r++) {
      out->refills[r] += rd(&t->refill[r]);
      out->refill_blocks[r] += rd(&t->refill_blocks[r]);
    }
  }
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    struct hak_lane_stats *l = &out->lane[hm_stats_row(c)];
    l->allocs += out->cls[c].allocs;
    l->frees += out->cls[c].frees_local + out->cls[c].frees_remote;
  }
}
#endif

/* The counters' part of hak_stats_get (out zeroed by the caller). */
void hm_counters_get(struct hak_stats *out) {
  for (unsigned i = 0; i < HM_LANES; i++) {
    lane_counters_t *l = &lanes[i];
    struct hak_lane_stats *o = &out->lane[i];
    /* freed first: a block counted as freed was counted as allocated before */
    o->freed = atomic_load_explicit(&l->freed, memory_order_relaxed);
    o->allocated = atomic_load_explicit(&l->allocated, memory_order_relaxed);
    o->current = o->allocated > o->freed ? o->allocated - o->freed : 0;
    o->peak = atomic_load_explicit(&l->peak, memory_order_relaxed);
    if (o->peak < o->current) o->peak = o->current;
    o->frees = atomic_load_explicit(&l->frees, memory_order_relaxed);
    o->allocs = atomic_load_explicit(&l->allocs, memory_order_relaxed);
  }
  struct hak_lane_stats *large = &out->lane[HM_LANE_LARGE];
  large->in_use = large->current;
  out->large_blocks = large->allocs > large->frees ? large->allocs - large->frees : 0;
  out->large_blocks_peak = atomic_load_explicit(&large_blocks_peak, memory_order_relaxed);
  if (out->large_blocks_peak < out->large_blocks) out->large_blocks_peak = out->large_blocks;
  out->large_mapped = atomic_load_explicit(&large_mapped, memory_order_relaxed);
#if HM_FAST_COUNTERS
  merge_heaps(out);
#endif
}
