/* Statistics: the counters every build keeps (slow paths only), the merge
 * of the fast-path counters of -DHAKMEM_STATS builds, the report
 * (hak_stats_print, and HAKMEM_STATS=1 at exit), and glibc's
 * malloc_stats / mallinfo2 / mallinfo answered from the same figures.
 *
 * The report is formatted by hand into a stack buffer and written with
 * write(2) at exit: it must not allocate (the heap may be in use by threads
 * still running, and stdio may already be shut down). */
#include <malloc.h>
#include <unistd.h>

#include "internal.h"

_Static_assert(NUM_CLASSES == HAK_STATS_CLASSES, "hakmem.h's class count matches");
_Static_assert((int)HM_LANES == (int)HAK_LANES && (int)HM_LANE_LARGE == (int)HAK_LANE_LARGE, "lane numbering matches");
#ifdef HAKMEM_STATS
_Static_assert((int)HM_REFILL_COUNT == (int)HAK_REFILL_SOURCES && (int)HM_REFILL_NEW_SS == (int)HAK_REFILL_NEW_SS,
               "refill sources match");
#endif

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

static unsigned class_lane(unsigned cls) { return hm_class_size[cls] <= TINY_MAX ? HM_LANE_TINY : HM_LANE_MID; }

/* allocated grew to a: the lane's current figure may be a new peak */
static void lane_grew(lane_counters_t *l, size_t a) {
  size_t f = atomic_load_explicit(&l->freed, memory_order_relaxed);
  if (a > f) raise_peak(&l->peak, a - f);
}

void hm_stats_carved(unsigned cls, size_t blocks) {
  lane_counters_t *l = &lanes[class_lane(cls)];
  size_t bytes = blocks * hm_class_size[cls];
  lane_grew(l, atomic_fetch_add_explicit(&l->allocated, bytes, memory_order_relaxed) + bytes);
}

void hm_stats_released(unsigned cls, size_t blocks) {
  atomic_fetch_add_explicit(&lanes[class_lane(cls)].freed, blocks * hm_class_size[cls], memory_order_relaxed);
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

#ifdef HAKMEM_STATS
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
    struct hak_lane_stats *l = &out->lane[class_lane(c)];
    l->allocs += out->cls[c].allocs;
    l->frees += out->cls[c].frees_local + out->cls[c].frees_remote;
  }
}
#endif

static void add_in_use(superslab_t *ss, void *arg) { hm_ss_in_use(ss, arg); }
static void add_resident(superslab_t *ss, void *arg) { hm_ss_resident(ss, arg); }

void hak_stats_get(struct hak_stats *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  out->counters = HM_STATS_BUILD;
  for (unsigned c = 0; c < NUM_CLASSES; c++) out->cls[c].size = hm_class_size[c];
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
  size_t in_use[2] = {0, 0};
  hm_backend_walk_ss(add_in_use, in_use);
  out->lane[HM_LANE_TINY].in_use = in_use[HM_LANE_TINY];
  out->lane[HM_LANE_MID].in_use = in_use[HM_LANE_MID];
  hak_os_stats_get(&out->os);
  out->committed_bytes = out->os.committed_bytes;
  out->cached_bytes = hm_backend_cached_bytes();
  out->purged_bytes = hm_os_purged_bytes();
#ifdef HAKMEM_STATS
  merge_heaps(out);
#endif
}

/* ---- the report --------------------------------------------------------- */

/* Text goes through a small buffer to a FILE (hak_stats_print,
 * malloc_stats) or straight to a descriptor (the report at exit). */
struct sink {
  FILE *f;
  int fd;
  size_t n;
  char buf[512];
};

static void flush(struct sink *o) {
  if (o->n == 0) return;
  if (o->f != NULL) {
    fwrite(o->buf, 1, o->n, o->f);
  } else {
    o->buf[o->n] = '\0';
    hm_write_fd(o->fd, o->buf);
  }
  o->n = 0;
}

static void put(struct sink *o, const char *s) {
  for (; *s != '\0'; s++) {
    if (o->n + 1 >= sizeof o->buf) flush(o);
    o->buf[o->n++] = *s;
  }
}

/* s left-aligned in width columns */
static void put_left(struct sink *o, const char *s, size_t width) {
  put(o, s);
  for (size_t n = strlen(s); n < width; n++) put(o, " ");
}

/* v right-aligned in width columns */
static void put_num(struct sink *o, uint64_t v, size_t width) {
  char t[24];
  size_t n = sizeof t - 1;
  t[n] = '\0';
  do {
    t[--n] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t w = sizeof t - 1 - n; w < width; w++) put(o, " ");
  put(o, t + n);
}

#define COL 15

static const char *const lane_names[HM_LANES] = {"tiny (<=1 KiB)", "mid (<=256 KiB)", "large"};

static void put_mib(struct sink *o, const char *label, size_t bytes) {
  put(o, label);
  put_num(o, (bytes + (1u << 19)) >> 20, 0);
  put(o, " MiB");
}

/* Where the resident memory is (pagemap; the report only). */
static void resident_line(struct sink *o) {
  size_t ss[NUM_KINDS + 1] = {0}, large[3] = {0};
  hm_backend_walk_ss(add_resident, ss);
  hm_large_resident(large);
  put_mib(o, "resident: slabs in use: small ", ss[KIND_SMALL]);
  put_mib(o, ", medium ", ss[KIND_MEDIUM]);
  put_mib(o, ", big ", ss[KIND_BIG]);
  put_mib(o, "; unused slabs and headers ", ss[NUM_KINDS]);
  put_mib(o, "; empty SuperSlabs ", hm_backend_cached_resident_now());
  put_mib(o, "; large spans in use ", large[0]);
  put_mib(o, ", cached ", large[1]);
  put_mib(o, ", packs ", large[2]);
  put(o, "\n");
}

/* What went back to the OS by which path, the limit, the purger's CPU time. */
static void given_line(struct sink *o) {
  size_t g[HM_GIVE_PATHS];
  uint64_t cpu_ns;
  hm_purge_given(g, &cpu_ns);
  put_mib(o, "given back: idle purges ", g[HM_GIVE_IDLE_BG] + g[HM_GIVE_IDLE_TICK]);
  put_mib(o, " (background purger ", g[HM_GIVE_IDLE_BG]);
  put_mib(o, ", slow paths ", g[HM_GIVE_IDLE_TICK]);
  put_mib(o, "), RSS limit ", g[HM_GIVE_LIMIT]);
  put_mib(o, ", trim/collect ", g[HM_GIVE_TRIM]);
  put_mib(o, "; left unused by exiting threads ", g[HM_GIVE_EXIT]);
  put(o, "\npurger: ");
  if (hm_purge_bg_running()) {
    put(o, "running, CPU time ");
    put_num(o, cpu_ns / 1000000u, 0);
    put(o, " ms");
  } else {
    put(o, "not started");
  }
  put(o, "; RSS limit ");
  if (hm_rss_limit == 0) {
    put(o, "none");
  } else {
    put_mib(o, "", hm_rss_limit);
    put(o, hm_option_is_set(HM_OPT_RSS_LIMIT_MB) ? " (HAKMEM_RSS_LIMIT_MB)" : " (");
    if (!hm_option_is_set(HM_OPT_RSS_LIMIT_MB)) {
      put(o, hm_cgroup_source());
      put(o, ")");
    }
  }
  put(o, "\n");
}

static void report(struct sink *o) {
  struct hak_stats st;
  hak_stats_get(&st);
  put(o, "hakmem statistics (pid ");
  put_num(o, (uint64_t)getpid(), 0);
  put(o, st.counters ? "; built with HAKMEM_STATS: every call counted"
                     : "; default build: tiny/mid bytes at slab granularity");
  put(o, hm_force_libc ? "; HAKMEM_FORCE_LIBC_ALLOC=1: glibc served every call)\n" : ")\n");
  static const char *const heads[] = {"allocated", "freed", "current", "peak", "in use"};
  put_left(o, "lane", 16);
  for (unsigned k = 0; k < 5; k++) {
    for (size_t w = strlen(heads[k]); w < COL; w++) put(o, " ");
    put(o, heads[k]);
  }
  put(o, "\n");
  size_t total[5] = {0};
  for (unsigned i = 0; i < HM_LANES; i++) {
    const struct hak_lane_stats *l = &st.lane[i];
    const size_t v[5] = {l->allocated, l->freed, l->current, l->peak, l->in_use};
    put_left(o, lane_names[i], 16);
    for (unsigned k = 0; k < 5; k++) {
      put_num(o, v[k], COL);
      total[k] += v[k];
    }
    put(o, "\n");
  }
  put_left(o, "total", 16);
  for (unsigned k = 0; k < 5; k++) {
    if (k == 3) { /* the lanes peaked at different times: no total peak */
      put_left(o, "", COL - 1);
      put(o, "-");
    } else {
      put_num(o, total[k], COL);
    }
  }
  put(o, "\nlarge blocks: ");
  put_num(o, st.large_blocks, 0);
  put(o, " live (peak ");
  put_num(o, st.large_blocks_peak, 0);
  put(o, "), ");
  put_num(o, st.large_mapped, 0);
  put(o, " bytes mapped for them\nmemory: ");
  put_num(o, st.committed_bytes, 0);
  put(o, " bytes committed, ");
  put_num(o, st.cached_bytes, 0);
  put(o, " cached for reuse, ");
  put_num(o, st.purged_bytes, 0);
  put(o, " purged (madvise, cumulative)\nos calls: mmap ");
  put_num(o, st.os.mmap_calls, 0);
  put(o, ", munmap ");
  put_num(o, st.os.munmap_calls, 0);
  put(o, ", madvise ");
  put_num(o, st.os.madvise_calls, 0);
  put(o, ", mremap ");
  put_num(o, st.os.mremap_calls, 0);
  put(o, ", mmap failures ");
  put_num(o, st.os.mmap_failures, 0);
  put(o, "\n");
  given_line(o);
  resident_line(o);
  if (st.counters) {
    static const char *const src[HAK_REFILL_SOURCES] = {"carve", "local_free swap", "remote drain", "listed slab",
                                                        "unused slab", "adopted SuperSlab", "new SuperSlab"};
    size_t local = 0, remote = 0;
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
      local += st.cls[c].frees_local;
      remote += st.cls[c].frees_remote;
    }
    put(o, "frees (tiny+mid): ");
    put_num(o, local, 0);
    put(o, " by the owning thread, ");
    put_num(o, remote, 0);
    put(o, " from other threads\nrefills:");
    for (unsigned r = 0; r < HAK_REFILL_SOURCES; r++) {
      put(o, r == 0 ? " " : ", ");
      put(o, src[r]);
      put(o, " ");
      put_num(o, st.refills[r], 0);
      if (r <= HAK_REFILL_REMOTE) {
        put(o, " (");
        put_num(o, st.refill_blocks[r], 0);
        put(o, " blocks)");
      }
    }
    put(o, "\nclass   size        mallocs    local frees   remote frees    live blocks\n");
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
      const struct hak_class_stats *k = &st.cls[c];
      if (k->allocs == 0 && k->frees_local == 0 && k->frees_remote == 0) continue;
      size_t freed = k->frees_local + k->frees_remote;
      put_num(o, c, 5);
      put_num(o, k->size, 7);
      put_num(o, k->allocs, COL);
      put_num(o, k->frees_local, COL);
      put_num(o, k->frees_remote, COL);
      put_num(o, k->allocs > freed ? k->allocs - freed : 0, COL);
      put(o, "\n");
    }
  }
  flush(o);
}

void hak_stats_print(FILE *f) {
  struct sink o = {.f = f != NULL ? f : stderr};
  report(&o);
  fflush(o.f);
}

/* HAKMEM_STATS=1: the report at exit, after the program's atexit handlers
 * and destructors (ours is a destructor of the library, run late). */
__attribute__((destructor)) static void report_at_exit(void) {
  if (atomic_load_explicit(&hm_init_state, memory_order_acquire) != 2 || !hm_opt[HM_OPT_STATS]) return;
  struct sink o = {.fd = 2};
  report(&o);
}

/* ---- glibc's interfaces ------------------------------------------------- */

/* glibc's field meanings, hakmem's figures: arena = memory mapped for the
 * slab lanes (everything but large blocks), uordblks = bytes in slab blocks
 * handed out, fordblks = the rest of arena, hblks/hblkhd = large blocks and
 * their mappings, keepcost = what malloc_trim would give back. Free-list
 * counts (ordblks, smblks, fsmblks) have no equivalent: 0; usmblks is
 * always 0 in glibc too. */
struct mallinfo2 hm_mallinfo2(void) {
  struct hak_stats st;
  hak_stats_get(&st);
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  size_t in_use = st.lane[HM_LANE_TINY].in_use + st.lane[HM_LANE_MID].in_use;
  mi.arena = st.committed_bytes > st.large_mapped ? st.committed_bytes - st.large_mapped : 0;
  if (mi.arena < in_use) mi.arena = in_use;
  mi.uordblks = in_use;
  mi.fordblks = mi.arena - in_use;
  mi.hblks = st.large_blocks;
  mi.hblkhd = st.large_mapped;
  mi.keepcost = st.cached_bytes;
  return mi;
}

static int clamp_int(size_t v) { return v > (size_t)0x7fffffff ? 0x7fffffff : (int)v; }

struct mallinfo hm_mallinfo(void) {
  struct mallinfo2 m = hm_mallinfo2();
  struct mallinfo mi;
  memset(&mi, 0, sizeof mi);
  mi.arena = clamp_int(m.arena);
  mi.hblks = clamp_int(m.hblks);
  mi.hblkhd = clamp_int(m.hblkhd);
  mi.uordblks = clamp_int(m.uordblks);
  mi.fordblks = clamp_int(m.fordblks);
  mi.keepcost = clamp_int(m.keepcost);
  return mi;
}

static void put_field(struct sink *o, const char *label, size_t v) {
  put(o, label);
  put(o, " = ");
  put_num(o, v, 10);
  put(o, "\n");
}

/* glibc's layout (one arena), on stderr. */
void hm_malloc_stats(void) {
  struct hak_stats st;
  hak_stats_get(&st);
  struct mallinfo2 mi = hm_mallinfo2();
  struct sink o = {.f = stderr};
  put(&o, "Arena 0:\n");
  put_field(&o, "system bytes    ", mi.arena);
  put_field(&o, "in use bytes    ", mi.uordblks);
  put(&o, "Total (incl. mmap):\n");
  put_field(&o, "system bytes    ", mi.arena + mi.hblkhd);
  put_field(&o, "in use bytes    ", mi.uordblks + st.lane[HM_LANE_LARGE].in_use);
  put_field(&o, "max mmap regions", st.large_blocks_peak);
  put_field(&o, "max mmap bytes  ", st.lane[HM_LANE_LARGE].peak);
  flush(&o);
  fflush(stderr);
}
