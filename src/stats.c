/* Statistics: hak_stats_get (counters.c's counters, walks of the
 * SuperSlabs, the OS counters), the report (hak_stats_print, and
 * HAKMEM_STATS=1 at exit), the [SS_OS_STATS] line (HAKMEM_SS_OS_STATS=1 at
 * exit), and glibc's malloc_stats / mallinfo2 / mallinfo answered from the
 * same figures.
 *
 * Text goes through the line writer (line.h): at exit it must not allocate
 * (the heap may be in use by threads still running, and stdio may already
 * be shut down). */
#include <malloc.h>
#include <unistd.h>

#include "internal.h"

_Static_assert(NUM_CLASSES == HAK_STATS_CLASSES, "hakmem.h's class count matches");
_Static_assert((int)HM_LANES == (int)HAK_LANES && (int)HM_LANE_LARGE == (int)HAK_LANE_LARGE, "lane numbering matches");
#if HM_FAST_COUNTERS
_Static_assert((int)HM_REFILL_COUNT == (int)HAK_REFILL_SOURCES && (int)HM_REFILL_NEW_SS == (int)HAK_REFILL_NEW_SS,
               "refill sources match");
#endif

static void add_in_use(superslab_t *ss, void *arg) { hm_ss_in_use(ss, arg); }
static void add_resident(superslab_t *ss, void *arg) { hm_ss_resident(ss, arg); }

void hak_stats_get(struct hak_stats *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  out->counters = HM_FAST_COUNTERS;
  for (unsigned c = 0; c < NUM_CLASSES; c++) out->cls[c].size = hm_class_size[c];
  hm_counters_get(out);
  size_t in_use[2] = {0, 0};
  hm_backend_walk_ss(add_in_use, in_use);
  /* the foreign caches' blocks count as used in their slabs, but are free */
  size_t cached[2] = {0, 0}, heaps;
  hm_heap_foreign_bytes(&heaps, cached);
  for (unsigned l = 0; l < 2; l++) in_use[l] = in_use[l] > cached[l] ? in_use[l] - cached[l] : 0;
  out->lane[HM_LANE_DIRECT].in_use = in_use[HM_LANE_DIRECT];
  out->lane[HM_LANE_POOL].in_use = in_use[HM_LANE_POOL];
  hak_os_stats_get(&out->os);
  out->committed_bytes = out->os.committed_bytes;
  out->cached_bytes = hm_backend_cached_bytes();
  out->purged_bytes = hm_os_purged_bytes();
}

/* ---- the report --------------------------------------------------------- */

/* s left-aligned in width columns */
static void put_left(hm_line_t *o, const char *s, size_t width) {
  hm_line_put(o, s);
  for (size_t n = strlen(s); n < width; n++) hm_line_put(o, " ");
}

#define COL 15

/* The row labels predate the glossary's names (direct sizes, the rest of
 * the pool); programs parse them, so they stay. */
static const char *const lane_names[HM_LANES] = {"direct (<=1 KiB)", "pool (<=256 KiB)", "large"};

static void put_mib(hm_line_t *o, const char *label, size_t bytes) {
  hm_line_put(o, label);
  hm_line_dec(o, (bytes + (1u << 19)) >> 20, 0);
  hm_line_put(o, " MiB");
}

/* What went back to the OS by which path, the limit, the purger's CPU time. */
static void given_line(hm_line_t *o) {
  size_t g[HM_GIVE_PATHS];
  uint64_t cpu_ns;
  hm_purge_given(g, &cpu_ns);
  put_mib(o, "given back: idle purges ", g[HM_GIVE_IDLE_BG] + g[HM_GIVE_IDLE_TICK]);
  put_mib(o, " (background purger ", g[HM_GIVE_IDLE_BG]);
  put_mib(o, ", slow paths ", g[HM_GIVE_IDLE_TICK]);
  put_mib(o, "), RSS limit ", g[HM_GIVE_LIMIT]);
  put_mib(o, ", trim/collect ", g[HM_GIVE_TRIM]);
  put_mib(o, "; left unused by exiting threads ", g[HM_GIVE_EXIT]);
  hm_line_put(o, "\npurger: ");
  if (hm_purge_bg_running()) {
    hm_line_put(o, "running, CPU time ");
    hm_line_dec(o, cpu_ns / 1000000u, 0);
    hm_line_put(o, " ms");
  } else {
    hm_line_put(o, "not started");
  }
  hm_line_put(o, "; RSS limit ");
  if (hm_rss_limit == 0) {
    hm_line_put(o, "none");
  } else if (hm_option_is_set(HM_OPT_RSS_LIMIT_MB)) {
    put_mib(o, "", hm_rss_limit);
    hm_line_put(o, " (HAKMEM_RSS_LIMIT_MB)");
  } else {
    put_mib(o, "", hm_rss_limit);
    hm_line_put(o, " (");
    hm_line_put(o, hm_cgroup_source());
    hm_line_put(o, ")");
  }
  hm_line_put(o, "\n");
}

/* Where the resident memory is (pagemap; the report only). */
static void resident_line(hm_line_t *o) {
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
  hm_line_put(o, "\n");
}

/* Within "blocks handed out (pool P, large L": the split the profiler's
 * live samples give (explain.c), or why there is none. */
static void blocks_split(hm_line_t *o, const struct hm_explain *e) {
  if (e->live_samples == 0) {
    hm_line_put(o, e->profiling ? "; requested unknown: no live sample" : "; requested unknown: profiling off");
    return;
  }
  hm_line_put(o, "; requested ~");
  hm_line_dec(o, e->requested, 0);
  hm_line_put(o, " + rounding ~");
  hm_line_dec(o, e->rounding, 0);
  hm_line_put(o, " + sampled blocks ");
  hm_line_dec(o, e->sampled, 0);
  hm_line_put(o, ", from ");
  hm_line_dec(o, e->live_samples, 0);
  hm_line_put(o, " live samples");
}

/* The resident memory explained (explain.c), in bytes: the parts add up
 * to the total. */
static void explained_line(hm_line_t *o) {
  struct hm_explain e;
  hm_explain(&e);
  const char *const labels[] = {"resident explained: ", " bytes = blocks handed out ", " (pool ", ", large ",
                                ") + free in slabs in use ", " + thread caches ", " (foreign ", ", empty slabs ",
                                ") + unused ", " (slabs ", ", empty SuperSlabs ", ", reservation ", ", packs ",
                                ") + large cache ", " + guarded pool ", " + metadata ", " (SuperSlab headers ",
                                ", pack headers ", ", heaps and tables ", ", registry ", ")\n"};
  const size_t v[] = {e.total, e.blocks, e.blocks_pool, e.blocks_large, e.free_in_slabs, e.thread_caches,
                      e.foreign, e.empty_slabs, e.unused, e.unused_slabs, e.unused_superslabs, e.unused_reserve,
                      e.unused_packs, e.large_cache, e.guarded_pool, e.metadata, e.meta_headers, e.meta_packs,
                      e.meta_chunks, e.meta_registry};
  _Static_assert(sizeof labels / sizeof labels[0] == sizeof v / sizeof v[0] + 1, "a label before each figure");
  for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
    if (k == 4) blocks_split(o, &e);
    hm_line_put(o, labels[k]);
    hm_line_dec(o, v[k], 0);
  }
  hm_line_put(o, labels[sizeof v / sizeof v[0]]);
  size_t rss = hm_os_rss_anon();
  if (rss != 0) {
    hm_line_put(o, "process anonymous resident (RssAnon): ");
    hm_line_dec(o, rss, 0);
    hm_line_put(o, " bytes, hakmem's and the rest\n");
  }
}

static void report(hm_line_t *o) {
  struct hak_stats st;
  hak_stats_get(&st);
  hm_line_put(o, "hakmem statistics (pid ");
  hm_line_dec(o, (uint64_t)getpid(), 0);
  hm_line_put(o, st.counters ? "; built with HAKMEM_FAST_COUNTERS: every call counted"
                     : "; default build: pool bytes at slab granularity");
  hm_line_put(o, hm_force_libc ? "; HAKMEM_FORCE_LIBC_ALLOC=1: glibc served every call)\n" : ")\n");
  static const char *const heads[] = {"allocated", "freed", "current", "peak", "in use"};
  put_left(o, "lane", 16);
  for (unsigned k = 0; k < 5; k++) {
    for (size_t w = strlen(heads[k]); w < COL; w++) hm_line_put(o, " ");
    hm_line_put(o, heads[k]);
  }
  hm_line_put(o, "\n");
  size_t total[5] = {0};
  for (unsigned i = 0; i < HM_LANES; i++) {
    const struct hak_lane_stats *l = &st.lane[i];
    const size_t v[5] = {l->allocated, l->freed, l->current, l->peak, l->in_use};
    put_left(o, lane_names[i], 16);
    for (unsigned k = 0; k < 5; k++) {
      hm_line_dec(o, v[k], COL);
      total[k] += v[k];
    }
    hm_line_put(o, "\n");
  }
  put_left(o, "total", 16);
  for (unsigned k = 0; k < 5; k++) {
    if (k == 3) { /* the lanes peaked at different times: no total peak */
      put_left(o, "", COL - 1);
      hm_line_put(o, "-");
    } else {
      hm_line_dec(o, total[k], COL);
    }
  }
  hm_line_put(o, "\nlarge blocks: ");
  hm_line_dec(o, st.large_blocks, 0);
  hm_line_put(o, " live (peak ");
  hm_line_dec(o, st.large_blocks_peak, 0);
  hm_line_put(o, "), ");
  hm_line_dec(o, st.large_mapped, 0);
  hm_line_put(o, " bytes mapped for them\nmemory: ");
  hm_line_dec(o, st.committed_bytes, 0);
  hm_line_put(o, " bytes committed, ");
  hm_line_dec(o, st.cached_bytes, 0);
  hm_line_put(o, " cached for reuse, ");
  hm_line_dec(o, st.purged_bytes, 0);
  hm_line_put(o, " purged (madvise, cumulative)\nos calls: mmap ");
  hm_line_dec(o, st.os.mmap_calls, 0);
  hm_line_put(o, ", munmap ");
  hm_line_dec(o, st.os.munmap_calls, 0);
  hm_line_put(o, ", madvise ");
  hm_line_dec(o, st.os.madvise_calls, 0);
  hm_line_put(o, ", mremap ");
  hm_line_dec(o, st.os.mremap_calls, 0);
  hm_line_put(o, ", mmap failures ");
  hm_line_dec(o, st.os.mmap_failures, 0);
  hm_line_put(o, "\n");
  given_line(o);
  resident_line(o);
  explained_line(o);
  if (st.counters) {
    static const char *const src[HAK_REFILL_SOURCES] = {"carve", "local_free swap", "remote drain", "listed slab",
                                                        "unused slab", "adopted SuperSlab", "new SuperSlab"};
    size_t local = 0, remote = 0;
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
      local += st.cls[c].frees_local;
      remote += st.cls[c].frees_remote;
    }
    hm_line_put(o, "frees (pool): ");
    hm_line_dec(o, local, 0);
    hm_line_put(o, " by the owning thread, ");
    hm_line_dec(o, remote, 0);
    hm_line_put(o, " from other threads\nrefills:");
    for (unsigned r = 0; r < HAK_REFILL_SOURCES; r++) {
      hm_line_put(o, r == 0 ? " " : ", ");
      hm_line_put(o, src[r]);
      hm_line_put(o, " ");
      hm_line_dec(o, st.refills[r], 0);
      if (r <= HAK_REFILL_REMOTE) {
        hm_line_put(o, " (");
        hm_line_dec(o, st.refill_blocks[r], 0);
        hm_line_put(o, " blocks)");
      }
    }
    hm_line_put(o, "\nclass   size        mallocs    local frees   remote frees    live blocks\n");
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
      const struct hak_class_stats *k = &st.cls[c];
      if (k->allocs == 0 && k->frees_local == 0 && k->frees_remote == 0) continue;
      size_t freed = k->frees_local + k->frees_remote;
      hm_line_dec(o, c, 5);
      hm_line_dec(o, k->size, 7);
      hm_line_dec(o, k->allocs, COL);
      hm_line_dec(o, k->frees_local, COL);
      hm_line_dec(o, k->frees_remote, COL);
      hm_line_dec(o, k->allocs > freed ? k->allocs - freed : 0, COL);
      hm_line_put(o, "\n");
    }
  }
  hm_line_flush(o);
}

void hak_stats_print(FILE *f) {
  hm_line_t o;
  hm_line_init(&o, f != NULL ? f : stderr, 0);
  report(&o);
  fflush(o.f);
}

/* HAKMEM_SS_OS_STATS=1: one line at exit, the seeds' format ("huge_alloc"
 * counts the large lane's mappings). */
__attribute__((destructor)) static void print_os_stats(void) {
  if (atomic_load(&hm_init_state) != 2 || !hm_opt[HM_OPT_SS_OS_STATS]) return;
  struct hak_os_stats os;
  struct hm_ss_counts ss;
  hak_os_stats_get(&os);
  hm_backend_ss_counts(&ss);
  const char *names[] = {"[SS_OS_STATS] alloc=", " free=", " madvise=", " madvise_disabled=",
                         " mmap_total=", " fallback_mmap=", " huge_alloc="};
  size_t vals[] = {ss.ss_alloc, ss.ss_free, os.madvise_calls, hm_purge_disabled_count(),
                   os.mmap_calls, ss.fallback_mmap, ss.large_maps};
  hm_line_t o;
  hm_line_init(&o, NULL, 2);
  for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
    hm_line_put(&o, names[k]);
    hm_line_dec(&o, vals[k], 0);
  }
  hm_line_put(&o, "\n");
  hm_line_flush(&o);
}

/* HAKMEM_STATS=1: the report at exit, after the program's atexit handlers
 * and destructors (ours is a destructor of the library, run late);
 * HAKMEM_STATS=json: the same as JSON (stats_json.c). */
__attribute__((destructor)) static void report_at_exit(void) {
  if (atomic_load_explicit(&hm_init_state, memory_order_acquire) != 2 || !hm_opt[HM_OPT_STATS]) return;
  if (hm_opt[HM_OPT_STATS] == HM_STATS_JSON) {
    hm_stats_json_fd(2);
    return;
  }
  hm_line_t o;
  hm_line_init(&o, NULL, 2);
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
  size_t in_use = st.lane[HM_LANE_DIRECT].in_use + st.lane[HM_LANE_POOL].in_use;
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

static void put_field(hm_line_t *o, const char *label, size_t v) {
  hm_line_put(o, label);
  hm_line_put(o, " = ");
  hm_line_dec(o, v, 10);
  hm_line_put(o, "\n");
}

/* glibc's layout (one arena), on stderr. */
void hm_malloc_stats(void) {
  struct hak_stats st;
  hak_stats_get(&st);
  struct mallinfo2 mi = hm_mallinfo2();
  hm_line_t o;
  hm_line_init(&o, stderr, 0);
  hm_line_put(&o, "Arena 0:\n");
  put_field(&o, "system bytes    ", mi.arena);
  put_field(&o, "in use bytes    ", mi.uordblks);
  hm_line_put(&o, "Total (incl. mmap):\n");
  put_field(&o, "system bytes    ", mi.arena + mi.hblkhd);
  put_field(&o, "in use bytes    ", mi.uordblks + st.lane[HM_LANE_LARGE].in_use);
  put_field(&o, "max mmap regions", st.large_blocks_peak);
  put_field(&o, "max mmap bytes  ", st.lane[HM_LANE_LARGE].peak);
  hm_line_flush(&o);
  fflush(stderr);
}
