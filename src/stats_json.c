/* The statistics report as one JSON object (hak_stats_json,
 * HAKMEM_STATS=json at exit): every figure of the text report, in bytes
 * and counts (integers), and the resident memory explained (explain.c).
 * Written with the line writer, so that it never allocates; the fields
 * are listed in docs/USING.md, "Statistics". */
#include <unistd.h>

#include "internal.h"

typedef struct {
  hm_line_t o;
  bool first; /* no member yet in the innermost object */
} json_t;

static void str(json_t *j, const char *s) {
  static const char hex[] = "0123456789abcdef";
  hm_line_put(&j->o, "\"");
  for (; *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    char t[7] = {(char)c, 0};
    if (c == '"' || c == '\\') {
      t[0] = '\\';
      t[1] = (char)c;
      t[2] = 0;
    } else if (c < 0x20) {
      t[0] = '\\', t[1] = 'u', t[2] = '0', t[3] = '0', t[4] = hex[c >> 4], t[5] = hex[c & 15], t[6] = 0;
    }
    hm_line_put(&j->o, t);
  }
  hm_line_put(&j->o, "\"");
}

static void key(json_t *j, const char *k) {
  if (!j->first) hm_line_put(&j->o, ",");
  j->first = false;
  str(j, k);
  hm_line_put(&j->o, ":");
}

static void num(json_t *j, const char *k, uint64_t v) {
  key(j, k);
  hm_line_dec(&j->o, v, 0);
}

static void boolean(json_t *j, const char *k, bool v) {
  key(j, k);
  hm_line_put(&j->o, v ? "true" : "false");
}

static void null(json_t *j, const char *k) {
  key(j, k);
  hm_line_put(&j->o, "null");
}

static void open_obj(json_t *j, const char *k) {
  if (k != NULL)
    key(j, k);
  else if (!j->first)
    hm_line_put(&j->o, ",");
  hm_line_put(&j->o, "{");
  j->first = true;
}

static void close_obj(json_t *j) {
  hm_line_put(&j->o, "}");
  j->first = false;
}

static void add_resident(superslab_t *ss, void *arg) { hm_ss_resident(ss, arg); }

static void lanes(json_t *j, const struct hak_stats *st) {
  static const char *const keys[HM_LANES] = {"direct", "pool", "large"};
  static const char *const labels[HM_LANES] = {"direct (<=1 KiB)", "pool (<=256 KiB)", "large"}; /* the text rows */
  size_t total[5] = {0};
  open_obj(j, "lanes");
  for (unsigned i = 0; i < HM_LANES; i++) {
    const struct hak_lane_stats *l = &st->lane[i];
    open_obj(j, keys[i]);
    key(j, "label");
    str(j, labels[i]);
    num(j, "allocated", l->allocated);
    num(j, "freed", l->freed);
    num(j, "current", l->current);
    num(j, "peak", l->peak);
    num(j, "in_use", l->in_use);
    close_obj(j);
    const size_t v[5] = {l->allocated, l->freed, l->current, l->peak, l->in_use};
    for (unsigned k = 0; k < 5; k++) total[k] += v[k];
  }
  open_obj(j, "total"); /* no peak: the lanes peaked at different times */
  num(j, "allocated", total[0]);
  num(j, "freed", total[1]);
  num(j, "current", total[2]);
  num(j, "in_use", total[4]);
  close_obj(j);
  close_obj(j);
}

/* The text report's "given back" and "purger" lines, in bytes and ns. */
static void given_back(json_t *j) {
  size_t g[HM_GIVE_PATHS];
  uint64_t cpu_ns;
  hm_purge_given(g, &cpu_ns);
  open_obj(j, "given_back");
  num(j, "idle_background", g[HM_GIVE_IDLE_BG]);
  num(j, "idle_slow_paths", g[HM_GIVE_IDLE_TICK]);
  num(j, "rss_limit", g[HM_GIVE_LIMIT]);
  num(j, "trim_collect", g[HM_GIVE_TRIM]);
  num(j, "left_by_exiting_threads", g[HM_GIVE_EXIT]);
  close_obj(j);
  open_obj(j, "purger");
  boolean(j, "running", hm_purge_bg_running());
  if (hm_purge_bg_running())
    num(j, "cpu_ns", cpu_ns);
  else
    null(j, "cpu_ns");
  num(j, "rss_limit", hm_rss_limit); /* 0: none */
  key(j, "rss_limit_source");
  if (hm_rss_limit == 0)
    hm_line_put(&j->o, "null");
  else
    str(j, hm_option_is_set(HM_OPT_RSS_LIMIT_MB) ? "HAKMEM_RSS_LIMIT_MB" : hm_cgroup_source());
  close_obj(j);
}

/* The text report's "resident:" line, in bytes. */
static void resident_by_place(json_t *j) {
  size_t ss[NUM_KINDS + 1] = {0}, large[3] = {0};
  hm_backend_walk_ss(add_resident, ss);
  hm_large_resident(large);
  open_obj(j, "resident_by_place");
  num(j, "slabs_small", ss[KIND_SMALL]);
  num(j, "slabs_medium", ss[KIND_MEDIUM]);
  num(j, "slabs_big", ss[KIND_BIG]);
  num(j, "unused_slabs_and_headers", ss[NUM_KINDS]);
  num(j, "empty_superslabs", hm_backend_cached_resident_now());
  num(j, "large_spans_in_use", large[0]);
  num(j, "large_spans_cached", large[1]);
  num(j, "packs", large[2]);
  close_obj(j);
}

static void explained(json_t *j) {
  struct hm_explain e;
  hm_explain(&e);
  open_obj(j, "resident");
  num(j, "total", e.total);
  key(j, "measured_with");
  str(j, e.pagemap ? "pagemap" : "mincore");
  size_t rss = hm_os_rss_anon(); /* the whole process's, for comparison: hakmem's and the rest */
  if (rss != 0)
    num(j, "process_rss_anon", rss);
  else
    null(j, "process_rss_anon");
  open_obj(j, "blocks");
  num(j, "bytes", e.blocks);
  num(j, "pool", e.blocks_pool);
  num(j, "large", e.blocks_large);
  /* bytes = requested + rounding + sampling_overhead, estimated from the
   * profiler's live samples; null without them (requested_source says why) */
  const char *const keys[3] = {"requested", "rounding", "sampling_overhead"};
  const size_t v[3] = {e.requested, e.rounding, e.sampled};
  for (unsigned k = 0; k < 3; k++)
    if (e.live_samples != 0)
      num(j, keys[k], v[k]);
    else
      null(j, keys[k]);
  if (e.profiling)
    num(j, "live_samples", e.live_samples);
  else
    null(j, "live_samples");
  key(j, "requested_source");
  str(j, !e.profiling ? "profiling_off" : e.live_samples == 0 ? "no_live_samples" : "profile_samples");
  close_obj(j);
  num(j, "free_in_slabs", e.free_in_slabs);
  open_obj(j, "thread_caches");
  num(j, "bytes", e.thread_caches);
  num(j, "foreign", e.foreign);
  num(j, "empty_slabs", e.empty_slabs);
  close_obj(j);
  open_obj(j, "unused");
  num(j, "bytes", e.unused);
  num(j, "slabs", e.unused_slabs);
  num(j, "superslabs", e.unused_superslabs);
  num(j, "reservation", e.unused_reserve);
  num(j, "packs", e.unused_packs);
  close_obj(j);
  num(j, "large_cache", e.large_cache);
  num(j, "guarded_pool", e.guarded_pool);
  open_obj(j, "metadata");
  num(j, "bytes", e.metadata);
  num(j, "superslab_headers", e.meta_headers);
  num(j, "pack_headers", e.meta_packs);
  num(j, "heaps_and_tables", e.meta_chunks);
  num(j, "registry", e.meta_registry);
  num(j, "heaps", e.heaps);
  close_obj(j);
  close_obj(j);
}

static void fast_counters(json_t *j, const struct hak_stats *st) {
  if (!st->counters) {
    null(j, "fast_counters");
    return;
  }
  static const char *const src[HAK_REFILL_SOURCES] = {"carve", "local_free_swap", "remote_drain", "listed_slab",
                                                      "unused_slab", "adopted_superslab", "new_superslab"};
  size_t local = 0, remote = 0;
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    local += st->cls[c].frees_local;
    remote += st->cls[c].frees_remote;
  }
  open_obj(j, "fast_counters");
  open_obj(j, "frees");
  num(j, "local", local);
  num(j, "remote", remote);
  close_obj(j);
  open_obj(j, "refills");
  for (unsigned r = 0; r < HAK_REFILL_SOURCES; r++) {
    open_obj(j, src[r]);
    num(j, "events", st->refills[r]);
    if (r <= HAK_REFILL_REMOTE) num(j, "blocks", st->refill_blocks[r]);
    close_obj(j);
  }
  close_obj(j);
  key(j, "classes");
  hm_line_put(&j->o, "[");
  j->first = true;
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    const struct hak_class_stats *k = &st->cls[c];
    if (k->allocs == 0 && k->frees_local == 0 && k->frees_remote == 0) continue;
    size_t freed = k->frees_local + k->frees_remote;
    open_obj(j, NULL);
    num(j, "class", c);
    num(j, "size", k->size);
    num(j, "mallocs", k->allocs);
    num(j, "local_frees", k->frees_local);
    num(j, "remote_frees", k->frees_remote);
    num(j, "live_blocks", k->allocs > freed ? k->allocs - freed : 0);
    close_obj(j);
  }
  hm_line_put(&j->o, "]");
  j->first = false;
  close_obj(j);
}

/* To fd, or with f != NULL through f (a FILE without a descriptor). */
static void write_json(FILE *f, int fd) {
  struct hak_stats st;
  hak_stats_get(&st);
  json_t j;
  hm_line_init(&j.o, f, fd);
  j.first = true;
  open_obj(&j, NULL);
  num(&j, "pid", (uint64_t)getpid());
  boolean(&j, "counters", st.counters != 0);
  boolean(&j, "force_libc", hm_force_libc != 0);
  boolean(&j, "secure", HM_GUARD_SIZE != 0); /* secure build: no foreign caches, no packs */
  lanes(&j, &st);
  open_obj(&j, "large_blocks");
  num(&j, "live", st.large_blocks);
  num(&j, "peak", st.large_blocks_peak);
  num(&j, "mapped", st.large_mapped);
  close_obj(&j);
  open_obj(&j, "memory");
  num(&j, "committed", st.committed_bytes);
  num(&j, "cached", st.cached_bytes);
  num(&j, "purged_cumulative", st.purged_bytes);
  num(&j, "purged_now", st.os.purged_bytes);
  close_obj(&j);
  open_obj(&j, "os_calls");
  num(&j, "mmap", st.os.mmap_calls);
  num(&j, "munmap", st.os.munmap_calls);
  num(&j, "madvise", st.os.madvise_calls);
  num(&j, "mremap", st.os.mremap_calls);
  num(&j, "mmap_failures", st.os.mmap_failures);
  close_obj(&j);
  given_back(&j);
  resident_by_place(&j);
  explained(&j);
  fast_counters(&j, &st);
  close_obj(&j);
  hm_line_put(&j.o, "\n");
  hm_line_flush(&j.o);
}

void hm_stats_json_fd(int fd) { write_json(NULL, fd); }

/* A FILE with no descriptor (fmemopen, open_memstream) is written through
 * stdio, which may allocate there. */
void hak_stats_json(FILE *f) {
  if (f == NULL) f = stderr;
  fflush(f);
  int fd = fileno(f);
  if (fd >= 0) {
    write_json(NULL, fd);
  } else {
    write_json(f, 0);
    fflush(f);
  }
}
