/* The functions and variables shared between hakmem's files: one block
 * per file, in layer order, lowest first (docs/DESIGN.md, "Layers and
 * files"). A file calls only the blocks of its own layer and below; a call
 * that must go up goes through a hook ("Hooks"). The inline code is in
 * block.h (blocks), heap.h (slab pop and push) and fastpath.h (malloc and
 * free), above this header. */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include "types.h"
#include "line.h"
#include "lock.h"
#include "sample.h"

/* glibc's allocator, for HAKMEM_FORCE_LIBC_ALLOC=1 */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* ==== 0 base ============================================================= */

/* error.c: prints "hakmem: error: what of 0x... (reason)" and aborts */
HM_HIDDEN HM_NORETURN void hm_fatal(const char *what, const void *p, const char *reason);
/* The same line without the abort. */
HM_HIDDEN void hm_write_error(const char *what, const void *p, const char *reason);
/* Misuse reports: prints "hakmem: error: what of 0x... (reason)"; aborts
 * unless HAKMEM_ON_ERROR=warn. op: HM_OP_* (block.h), which call it was. */
HM_HIDDEN void hm_misuse(const char *what, const void *p, const char *reason);
HM_HIDDEN void hm_report_invalid(const void *p, int op, const char *reason);
HM_HIDDEN void hm_report_double(const void *p, int op, const char *reason);

/* Invariant checks (make debug); hm_check_slab and hm_check_block are heap.c's. */
#ifdef HAKMEM_DEBUG
#define HM_ASSERT(c) \
  do { if (unlikely(!(c))) hm_fatal("internal check failed", NULL, #c " at " __FILE__); } while (0)
HM_HIDDEN void hm_check_slab(const slab_t *s);
HM_HIDDEN void hm_check_block(const slab_t *s, const void *p);
#else
#define HM_ASSERT(c) ((void)0)
#define hm_check_slab(s) ((void)0)
#define hm_check_block(s, p) ((void)0)
#endif

/* options.c: hm_opt[HM_OPT_NAME] holds the value of HAKMEM_NAME, set once
 * by hm_options_init before the allocator is ready */
HM_HIDDEN void hm_options_init(void);
HM_HIDDEN int hm_option_is_set(int id);
HM_HIDDEN const char *hm_option_path(int id); /* a PATH option: NULL when unset */
HM_HIDDEN void hm_options_write(int fd);
HM_HIDDEN void hm_options_print_config(void); /* HAKMEM_VERBOSE=1 */
extern HM_HIDDEN int hm_force_libc;    /* HAKMEM_FORCE_LIBC_ALLOC=1 (set by init.c) */

/* random.c: hm_random_u64 from the kernel (slow, any time); hm_random_fast
 * from a per-thread generator seeded by it */
HM_HIDDEN uint64_t hm_random_u64(void);
HM_HIDDEN uint64_t hm_random_fast(void);

/* cgroup.c: the process's cgroup memory limit in bytes (0: none), read at
 * start-up without allocating, and where it came from */
HM_HIDDEN size_t hm_cgroup_limit(void);
HM_HIDDEN const char *hm_cgroup_source(void);

/* ==== 1 OS =============================================================== */

/* os.c: every system call that maps or gives back memory, counted (slow
 * paths only; hak_os_stats_get). hm_os_map: NULL if the OS refused. */
HM_HIDDEN void *hm_os_map(size_t len);
HM_HIDDEN void hm_os_unmap(void *p, size_t len);
HM_HIDDEN int hm_os_purge(void *p, size_t len);
HM_HIDDEN void hm_os_hugepage(void *p, size_t len); /* MADV_HUGEPAGE */
/* Many ranges in one call (process_madvise on the calling process: Linux
 * 6.13); returns the bytes given back, -1 where the kernel cannot (then
 * never again: hm_os_purge_ranges_ok). At most HM_OS_RANGES_MAX ranges. */
#define HM_OS_RANGES_MAX 1024
struct iovec;
HM_HIDDEN long hm_os_purge_ranges(const struct iovec *v, unsigned n);
HM_HIDDEN bool hm_os_purge_ranges_ok(void);
HM_HIDDEN bool hm_os_ranges_work(void); /* it has worked: no seccomp filter, Linux 6.13 */
HM_HIDDEN void *hm_os_remap(void *p, size_t old_len, size_t new_len, bool may_move);
/* Move the pages of [p, p+len) to a new mapping, leaving [p, p+len) mapped
 * and empty (it reads zeros); NULL if the OS refused (MREMAP_DONTUNMAP,
 * Linux 5.7). */
HM_HIDDEN void *hm_os_move_pages(void *p, size_t len);
/* Move [p, p+len) over [dst, dst+len), replacing that mapping (MREMAP_FIXED). */
HM_HIDDEN bool hm_os_move_over(void *p, size_t len, void *dst);
/* Bytes given back with madvise and not yet reused (part of committed). */
HM_HIDDEN void hm_os_purged_add(size_t bytes);
HM_HIDDEN void hm_os_purged_sub(size_t bytes);
HM_HIDDEN size_t hm_os_purged_bytes(void);     /* cumulative bytes given back (the report) */
HM_HIDDEN size_t hm_os_committed(void);        /* mapped now */
HM_HIDDEN size_t hm_os_purged_now(void);       /* given back and not reused */
/* Bytes resident in [p, p+len) (pagemap, else mincore): the report's breakdown. */
HM_HIDDEN size_t hm_os_resident(const void *p, size_t len);
/* The same with /proc/self/pagemap opened once (fd < 0: mincore), for the
 * breakdown's thousands of ranges; and a bitmap of the resident pages of
 * [p, p + pages * HM_PAGE_SIZE), pages <= 512 (returns their count). */
HM_HIDDEN int hm_os_pagemap_open(void);
HM_HIDDEN size_t hm_os_rss_anon(void); /* the process's RssAnon, bytes; 0: unknown */
HM_HIDDEN size_t hm_os_resident_fd(int fd, const void *p, size_t len);
HM_HIDDEN size_t hm_os_resident_bits(int fd, const void *p, size_t pages, uint64_t *bits);

/* ==== 2 blocks =========================================================== */

/* secure.c (HAKMEM_SECURE): the free tag and fill pattern, what is
 * detected, guard pages, the random order of fresh blocks */
HM_HIDDEN void hm_secure_init(void);
#ifdef HAKMEM_SECURE
extern HM_HIDDEN uintptr_t hm_free_tag;   /* random per process, never 0 */
extern HM_HIDDEN __m128i hm_fill_lane;    /* the tag, twice */
HM_HIDDEN HM_NORETURN void hm_corrupt_list(const slab_t *s, const block_t *b);
HM_HIDDEN void *hm_handout_failed(const slab_t *s, const block_t *b);
HM_HIDDEN bool hm_secure_guard(void *page);
HM_HIDDEN void hm_secure_unguard(void *page);
HM_HIDDEN void hm_secure_shuffle(uint32_t *idx, uint32_t n);
#endif

/* ==== 3 policy =========================================================== */

/* policy.c: when unused memory goes back to the OS (docs/DESIGN.md,
 * "Memory given back"): the mode, the delay and its back-off on regret,
 * when the next purge step is due, and the tick that runs it */
enum { PURGE_LAZY = 0, PURGE_EAGER = 1, PURGE_OFF = 2 };
extern HM_HIDDEN int hm_purge_mode;
extern HM_HIDDEN uint64_t hm_purge_delay_ns;
extern HM_HIDDEN size_t hm_rss_limit;              /* bytes; 0: no limit */
extern HM_HIDDEN _Atomic uint64_t hm_purge_due_ns; /* when a purge step is due */
extern HM_HIDDEN _Atomic int hm_purge_bg_state;    /* background purger: 0 none, 1 started, 2 failed */
HM_HIDDEN void hm_purge_init(void);
/* The delay now: the option's, doubled for each regret still in force. */
HM_HIDDEN uint64_t hm_purge_delay_now(void);
HM_HIDDEN void hm_purge_backoff_decay(uint64_t now);
/* Memory given back at purged_at (ns) is reused at now. */
HM_HIDDEN void hm_purge_regret(uint64_t purged_at, uint64_t now);
/* Something became unused at `now` (ns): a step is due after the delay. */
HM_HIDDEN void hm_purge_note_idle(uint64_t now);
HM_HIDDEN void hm_purge_count_disabled(void);
HM_HIDDEN size_t hm_purge_disabled_count(void);
/* The one lazy/eager/off decision for memory that became unused at now:
 * true: give it back at once (eager); otherwise a purge skipped is
 * counted (off) or a step scheduled (lazy). */
HM_HIDDEN bool hm_purge_unused_now(uint64_t now);
/* The hooks purge.c registers at start-up: the step, run when one is due,
 * an RSS limit is set, or a step ran since this thread last looked (look:
 * then the thread releases its idle empty current slabs); whether the
 * background purger is wanted (docs/DESIGN.md, "The background purger");
 * the unused resident bytes, and a thread's exit having left some. */
typedef struct {
  void (*step)(uint64_t now, bool look);
  bool (*bg_wanted)(void);
  size_t (*unused)(void);
  void (*thread_exited)(size_t unused_before, size_t given, unsigned calls);
  unsigned (*exit_calls)(void);
} hm_purge_hooks_t;
HM_HIDDEN void hm_purge_set_hooks(const hm_purge_hooks_t *hooks);
extern HM_HIDDEN _Atomic uint32_t hm_purge_step_epoch; /* steps run so far */
/* heap.c's thread exit: before (returns the unused bytes), the calls it
 * may make to give back the pages inside its free blocks (0 unless lazy),
 * and after (what it gave back, with how many calls). */
HM_HIDDEN size_t hm_purge_exit_begin(void);
HM_HIDDEN unsigned hm_purge_exit_calls(void);
HM_HIDDEN void hm_purge_exit_end(size_t unused_before, size_t given, unsigned calls);
HM_HIDDEN void hm_purge_tick_clock(void);
extern HM_HIDDEN __thread uint32_t hm_tick_countdown __attribute__((tls_model("initial-exec")));
/* On slow paths: every HM_TICK_EVERY-th call reads the coarse clock (vDSO)
 * and runs a purge step if one is due. */
#define HM_TICK_EVERY 16
HM_INLINE void hm_purge_tick(void) {
  if (unlikely(--hm_tick_countdown == 0)) hm_purge_tick_clock();
}

/* counters.c: the statistics counters every build keeps, on slow paths:
 * bytes carved into blocks and given back with emptied slabs per pool row
 * of the report; the large lane's blocks. */
HM_HIDDEN void hm_stats_carved(unsigned cls, size_t blocks);
HM_HIDDEN void hm_stats_released(unsigned cls, size_t blocks);
/* A large block of `usable` bytes in a mapping of `mapped` bytes came
 * (sign +1) or went (sign -1). */
HM_HIDDEN void hm_stats_large(int sign, size_t usable, size_t mapped);
HM_HIDDEN unsigned hm_stats_row(unsigned cls); /* HM_LANE_DIRECT or HM_LANE_POOL */
/* The counters' part of hak_stats_get. */
HM_HIDDEN void hm_counters_get(struct hak_stats *out);
#if HM_FAST_COUNTERS
HM_HIDDEN void hm_stats_heap_new(heap_t *h);
HM_HIDDEN void hm_stats_free_without_heap(unsigned cls);
#endif

/* ==== 4 SuperSlabs ======================================================= */

/* slabpurge.c: unused slabs of SuperSlabs in use given back (bits in
 * ss->dirty, ss->purging, ss->purged) */
HM_HIDDEN void hm_purge_slab_unused(superslab_t *ss, unsigned i);
/* The owner takes unused slab i again; true if its memory is as it was
 * left (not given back to the OS meanwhile). */
HM_HIDDEN bool hm_purge_slab_take(superslab_t *ss, unsigned i);
HM_HIDDEN size_t hm_purge_ss_leave(superslab_t *ss);
HM_HIDDEN size_t hm_purge_ss_now(superslab_t *ss);
/* Unused slabs of ss idle for at least delay_ms (all of them with 0);
 * *next_due lowered to when the next becomes idle long enough. */
HM_HIDDEN uint32_t hm_purge_idle_slabs(superslab_t *ss, uint32_t now_ms, uint32_t delay_ms, uint64_t *next_due);
/* Claim the unused, resident slabs of `want` for purging; returns those
 * claimed. hm_purge_claimed gives them back; returns the bytes. A caller
 * that gives them back itself (many ranges a call) settles them after:
 * given, or put back as unused and resident. */
HM_HIDDEN uint32_t hm_purge_claim(superslab_t *ss, uint32_t want);
HM_HIDDEN size_t hm_purge_claimed(superslab_t *ss, uint32_t bits);
HM_HIDDEN size_t hm_purge_claimed_settle(superslab_t *ss, uint32_t bits, bool given); /* the bytes */
/* The ranges of claimed slabs `bits` (adjacent ones as one; the header page
 * before slab 0 left out) appended to v[*n..max); returns the bits taken. */
HM_HIDDEN uint32_t hm_purge_claimed_ranges(const superslab_t *ss, uint32_t bits, struct iovec *v, unsigned *n,
                                           unsigned max);
HM_HIDDEN size_t hm_purge_claimed_bytes(const superslab_t *ss, uint32_t bits);
HM_HIDDEN size_t hm_purge_dirty_bytes(void);   /* unused slabs still resident, all SuperSlabs */

/* backend.c: SuperSlabs from 2 MiB-aligned reservations, the cache of
 * empty ones, metadata; the large lane's mappings (with the OOM retry) */
HM_HIDDEN superslab_t *hm_backend_ss_alloc(void);
HM_HIDDEN void hm_backend_ss_free(superslab_t *ss);
HM_HIDDEN size_t hm_backend_release_cached(void);
/* A mapping for the large lane: counted, retried once after giving cached
 * memory back (the hook below) if the OS refuses. */
HM_HIDDEN void *hm_backend_map_span(size_t len);
/* Hooks (docs/DESIGN.md, "Hooks"), registered at start-up: what gives the
 * large lane's cached memory back when a mapping fails (argument: least
 * idle time, 0: all), and its cached bytes that are not resident. */
HM_HIDDEN void hm_backend_set_oom_release(size_t (*release)(uint64_t min_idle_ns));
HM_HIDDEN void hm_backend_set_untouched(size_t (*untouched)(void));
HM_HIDDEN void *hm_meta_alloc(size_t size);
/* hakmem's resident memory as it counts it: mapped, minus given back,
 * minus the untouched rest of the last reservation and of the large
 * lane's cache. An upper bound. */
HM_HIDDEN size_t hm_backend_resident_estimate(void);
HM_HIDDEN size_t hm_backend_cached_resident(void); /* cached empty SuperSlabs not given back */
/* Empty SuperSlabs idle for delay_ns are given back with madvise, oldest
 * first, at most `budget` bytes; *next_due is lowered to when the next one
 * becomes due (now if the budget ran out). Returns the bytes given back. */
HM_HIDDEN size_t hm_backend_purge_cached(uint64_t now, uint64_t delay_ns, size_t budget, uint64_t *next_due);
/* Calls fn on every SuperSlab in use (owned or abandoned) with the backend
 * lock held, so none is unmapped meanwhile; stops when fn returns false. */
HM_HIDDEN void hm_backend_for_each_ss(bool (*fn)(superslab_t *ss, void *arg), void *arg);
/* For the report: every carved SuperSlab that is still mapped, backend
 * lock held; the bytes kept for reuse (what malloc_trim returns); the
 * resident bytes of the cached empty SuperSlabs; the SuperSlab counts. */
HM_HIDDEN void hm_backend_walk_ss(void (*fn)(superslab_t *ss, void *arg), void *arg);
HM_HIDDEN size_t hm_backend_cached_bytes(void);
HM_HIDDEN size_t hm_backend_cached_resident_now(void);
struct hm_ss_counts { size_t ss_alloc, ss_free, fallback_mmap, large_maps; };
HM_HIDDEN void hm_backend_ss_counts(struct hm_ss_counts *out);
/* The resident breakdown (explain.c): metadata chunks (heaps, tables,
 * descriptor leaves), and the uncarved rest of the last reservation. */
HM_HIDDEN size_t hm_backend_meta_resident(int fd);
HM_HIDDEN size_t hm_backend_reserve_resident(int fd);
HM_HIDDEN void hm_backend_fork_prepare(void);
HM_HIDDEN void hm_backend_fork_parent(void);
HM_HIDDEN void hm_backend_fork_child(void);

/* ==== 5 lanes ============================================================ */

/* heap.c: thread heaps and their slabs (the pool) */
extern HM_HIDDEN heap_t hm_empty_heap;   /* every class points at hm_empty_slab */
extern HM_HIDDEN slab_t hm_empty_slab;
extern HM_HIDDEN __thread heap_t *hm_tls_heap __attribute__((tls_model("initial-exec")));
/* cur[] of the class of each 16-byte granule up to DIRECT_MAX, for the
 * thread's heap (hm_empty_slab while it has none): malloc of a direct size
 * indexes it without the class lookup, and in the TLS block itself, without
 * loading the heap's address first (docs/DESIGN.md, "Fast paths"). Only the
 * thread writes it (heap.c, heap_set_cur). */
#define HM_DIRECT_SINK (DIRECT_MAX / 16 + 1) /* (written, never read: heap.c, heap_set_cur) */
extern HM_HIDDEN __thread slab_t *hm_tls_direct[HM_DIRECT_SINK + 1] __attribute__((tls_model("initial-exec")));
/* The thread's heap as free compares it with a SuperSlab's owner, bit 0
 * set once the thread has cached another thread's block (it "trades":
 * hm_free_trading; set by hm_free_foreign, the profiler on or off), so
 * that the owner's free tests both with one compare. */
extern HM_HIDDEN __thread uintptr_t hm_tls_free_id __attribute__((tls_model("initial-exec")));
HM_HIDDEN void hm_heap_process_init(void);
HM_HIDDEN void *hm_alloc_slow(size_t n, slab_t *s); /* s: the current slab that ran dry */
HM_HIDDEN void *hm_sample_swap(heap_t *h, slab_t *s, size_t n); /* the swap, the class's sample_left spent */
HM_HIDDEN void *hm_alloc_class(unsigned cls);
HM_HIDDEN void hm_free_own_slow(block_t *b, slab_t *s); /* the credit ran out, or emptied or FULL */
/* slab_t.credit: the current slab's at most HM_CREDIT_MAX (charged to the
 * countdown ahead); above, none (a slab not current, or spent). */
#define HM_CREDIT_MAX 0x7fffu
#define HM_CREDIT_OFF 0xffffu
#define HM_CREDIT_TAKE 256
HM_HIDDEN void hm_free_foreign(heap_t *h, superslab_t *ss, block_t *b);
HM_HIDDEN void hm_free_push_slow(heap_t *h, superslab_t *ss, slab_t *t, block_t *b);
HM_HIDDEN void hm_heap_flush_foreign(heap_t *h);
HM_HIDDEN void hm_heap_thread_exit(heap_t *h);
HM_HIDDEN void hm_heap_reclaim_abandoned(void);
HM_HIDDEN size_t hm_heap_collect_own(void);
HM_HIDDEN void hm_heap_release_empty_cur(void);
HM_HIDDEN void hm_heap_fork_prepare(void);
HM_HIDDEN void hm_heap_fork_parent(void);
HM_HIDDEN void hm_heap_fork_child(void);
/* For the report: bytes in blocks handed out, per pool row; resident
 * bytes of a SuperSlab's slabs in use (by kind, res[kind]) and unused
 * (res[NUM_KINDS], header included). */
HM_HIDDEN void hm_ss_in_use(superslab_t *ss, size_t in_use[2]);
HM_HIDDEN void hm_ss_resident(superslab_t *ss, size_t res[NUM_KINDS + 1]);
/* The resident breakdown: bytes of the blocks in every thread's foreign
 * caches (counted as used in their slabs); *heaps: thread heaps made. */
HM_HIDDEN size_t hm_heap_foreign_bytes(size_t *heaps, size_t lanes[2]);
HM_HIDDEN size_t hm_slab_remote_count(const slab_t *s); /* blocks on s's remote list */

/* big.c: malloc of the classes of big slabs (above MEDIUM_MAX): the lowest
 * free block first, and free blocks left idle given back */
HM_HIDDEN void *hm_malloc_big(size_t n);
HM_HIDDEN void hm_big_init(void);
HM_HIDDEN void hm_big_reset(heap_t *h);
HM_HIDDEN size_t hm_big_collect(heap_t *h);

/* pack.c: large blocks up to HM_PACK_MAX packed at page granularity into
 * 2 MiB chunks (not in secure mode). The large lane calls these for
 * blocks in REG_LARGE_PACK chunks. */
#define HM_PACK_MAX ((size_t)1 << 20)
/* Pool sizes above HAKMEM_PACK_MIN_KB are packed too (docs/DESIGN.md,
 * "Packed pool sizes"); its least value, up to which malloc's inline path
 * takes slabs. */
#define HM_PACK_MIN ((size_t)32 << 10)
_Static_assert(HM_PACK_MIN > DIRECT_MAX && HM_PACK_MIN <= MEDIUM_MAX, "the inline path's classes");
/* Packs on? (Not in secure mode: one block per span there.) */
HM_INLINE bool hm_pack_enabled(void) {
  return HM_GUARD_SIZE == 0 && hm_opt[HM_OPT_LARGE_PACK] != 0 && hm_opt[HM_OPT_LARGE_CACHE_MB] != 0;
}
HM_HIDDEN void *hm_pack_alloc(size_t n, bool zero);     /* NULL: use a span */
HM_HIDDEN size_t hm_pack_usable(const void *p);          /* 0: not a live block's start */
HM_HIDDEN size_t hm_pack_usable_live(const void *p);     /* the same without the lock (usable.h) */
HM_HIDDEN bool hm_pack_is_freed(const void *p);
HM_HIDDEN size_t hm_pack_free(void *p);                  /* its bytes; 0: not a live block's start */
HM_HIDDEN bool hm_pack_resize(void *p, size_t n);        /* in place (n <= HM_PACK_MAX) */
HM_HIDDEN void hm_pack_free_moved(void *p);              /* free a block whose pages were moved away */
/* Free pages idle for min_idle_ns given back (madvise), at most about
 * budget bytes; *next_due lowered as hm_large_purge does. */
HM_HIDDEN size_t hm_pack_purge(uint64_t now, uint64_t min_idle_ns, size_t budget, uint64_t *next_due);
/* Free pages of packs idle for age_ns, in at most max_calls runs (*calls). */
HM_HIDDEN size_t hm_pack_purge_idle(uint64_t now, uint64_t age_ns, unsigned max_calls, unsigned *calls, uint64_t *next_due);
/* The longest runs of free pages, at most max_calls of them (*calls): a thread's exit. */
HM_HIDDEN size_t hm_pack_purge_longest(unsigned max_calls, unsigned *calls);
HM_HIDDEN size_t hm_pack_release(void);                  /* malloc_trim: all free pages, empty packs */
HM_HIDDEN size_t hm_pack_clean(void);                    /* free pages not resident, bytes */
HM_HIDDEN size_t hm_pack_free_dirty(void);               /* free pages that may be resident, bytes */
HM_HIDDEN void hm_pack_resident(size_t *res);            /* the report: packs' resident bytes */
/* The breakdown: resident pages of the packs in blocks (res[0]), free
 * (res[1]), headers (res[2]), in bytes. */
HM_HIDDEN void hm_pack_explain(int fd, size_t res[3]);
HM_HIDDEN void hm_pack_fork_prepare(void);
HM_HIDDEN void hm_pack_fork_parent(void);
HM_HIDDEN void hm_pack_fork_child(void);
/* A 2 MiB-aligned one-chunk span for a pack (*fresh: never used, reads
 * zero), or NULL; and one given back to the cache (large.c). */
HM_HIDDEN void *hm_large_chunk_take(bool *fresh);
HM_HIDDEN void hm_large_chunk_give(void *chunk);

/* large.c: the large lane (blocks above POOL_MAX) */
HM_HIDDEN void *hm_large_alloc(size_t n, size_t align);
HM_HIDDEN void *hm_alloc_above(size_t n, bool zero); /* above HM_PACK_MIN: packs, slabs or the lane */
HM_HIDDEN bool hm_packs_pool_size(size_t n);     /* n <= POOL_MAX is packed (HAKMEM_PACK_MIN_KB) */
HM_HIDDEN void *hm_large_alloc_unsampled(size_t n, size_t align); /* for a sampler's serve hook */
HM_HIDDEN void *hm_large_calloc(size_t n);
HM_HIDDEN void *hm_large_realloc(void *p, size_t n);
HM_HIDDEN void hm_large_free(void *p);
HM_HIDDEN size_t hm_large_usable(const void *p); /* 0: not the start of a large block */
HM_HIDDEN size_t hm_large_usable_live(const void *p, unsigned kind); /* the same without locks (usable.h) */
HM_HIDDEN bool hm_large_is_freed(const void *p); /* the start of a freed (cached) large block */
HM_HIDDEN void hm_large_fork_prepare(void);
HM_HIDDEN void hm_large_fork_parent(void);
HM_HIDDEN void hm_large_fork_child(void);
/* Give back the large lane's cached spans idle for at least min_idle_ns
 * (0: all of them); returns the bytes given back. */
HM_HIDDEN size_t hm_large_release(uint64_t min_idle_ns);
/* Give back (madvise) the pages of the cached spans idle for at least
 * min_idle_ns, oldest first, at most about `budget` bytes; they stay
 * mapped and cached. *next_due is lowered to when the next one becomes due
 * (now if the budget ran out). Returns the bytes given back. */
HM_HIDDEN size_t hm_large_purge(uint64_t now, uint64_t min_idle_ns, size_t budget, uint64_t *next_due);
/* Cached spans' bytes that are not resident (and the free pages of packs
 * that are not). */
HM_HIDDEN size_t hm_large_cached_clean(void);
HM_HIDDEN size_t hm_large_cached_dirty(void); /* cached spans and packs' free pages that may be resident */
/* The report: resident bytes of the spans in use (res[0]) and cached
 * (res[1]) and of the packs (res[2]). */
HM_HIDDEN void hm_large_resident(size_t res[3]);
/* The breakdown: resident bytes of spans in use (res[0]) and cached
 * (res[1]), then hm_pack_explain's three figures (res[2..4]). */
HM_HIDDEN void hm_large_explain(int fd, size_t res[5]);

/* ==== 6 services ========================================================= */

/* misuse.c: invalid and double frees found (HM_OP_* say which call) */
HM_HIDDEN void hm_free_suspect(void *p);
HM_HIDDEN size_t hm_usable_checked(void *p, int op);

/* purge.c: purge steps, the background purger, the RSS limit, collect */
HM_HIDDEN void hm_purge_start(void);
HM_HIDDEN size_t hm_purge_unused_resident(void);
HM_HIDDEN int hm_collect(bool all);
/* What was given back, by path (the stats report): idle purges by the
 * background purger and by slow paths, the RSS limit, hak_collect and
 * malloc_trim; and what exiting threads left unused (given back by those). */
enum { HM_GIVE_IDLE_BG, HM_GIVE_IDLE_TICK, HM_GIVE_LIMIT, HM_GIVE_TRIM, HM_GIVE_EXIT, HM_GIVE_PATHS };
HM_HIDDEN void hm_purge_given(size_t out[HM_GIVE_PATHS], uint64_t *bg_cpu_ns);
HM_HIDDEN bool hm_purge_bg_running(void);
HM_HIDDEN void hm_purge_fork_prepare(void);
HM_HIDDEN void hm_purge_fork_parent(void);
HM_HIDDEN void hm_purge_fork_child(void);

/* stats.c: glibc's statistics interfaces, exported by override.c */
struct mallinfo;
struct mallinfo2;
HM_HIDDEN struct mallinfo2 hm_mallinfo2(void);
HM_HIDDEN struct mallinfo hm_mallinfo(void);
HM_HIDDEN void hm_malloc_stats(void);

/* prof.c: the heap profiler, a consumer of the sampler (sample.h); its
 * serve hook is how the lanes call up into it */
HM_HIDDEN void hm_prof_init(void);
HM_HIDDEN bool hm_prof_freed(void *p); /* a large block freed: true if it was a sampled one */
/* free of a large block (region kind): true if the profiler keeps it (a
 * sampled block, for the next samples) or reported it (kept, freed again):
 * the caller leaves it alone. */
HM_HIDDEN bool hm_prof_free(void *p, unsigned kind);
HM_HIDDEN void hm_prof_fork_prepare(void);
HM_HIDDEN void hm_prof_fork_parent(void);
HM_HIDDEN void hm_prof_fork_child(void);
/* fn(block, requested bytes, weight) for each live sampled block (a large
 * block), under the profiler's lock (the first in the order of docs/DESIGN.md,
 * "Hooks"); false: profiling is off. */
HM_HIDDEN bool hm_prof_live_each(void (*fn)(const void *p, size_t n, double weight, void *arg), void *arg);

/* explain.c: hakmem's resident memory explained, every part read from
 * pagemap over the ranges hakmem maps, so that the parts add up to the
 * total (docs/USING.md, "Statistics"). */
struct hm_explain {
  size_t total;                          /* = the seven parts below */
  size_t blocks, free_in_slabs, thread_caches, unused, large_cache, guarded_pool, metadata;
  size_t blocks_pool, blocks_large;      /* blocks */
  size_t foreign, empty_slabs;           /* thread_caches */
  size_t unused_slabs, unused_superslabs, unused_reserve, unused_packs; /* unused */
  size_t meta_headers, meta_packs, meta_chunks, meta_registry;          /* metadata */
  size_t heaps;                          /* thread heaps made */
  /* of blocks, with profiling on and live samples (else 0): blocks =
   * requested + rounding + sampled (docs/USING.md, "Statistics") */
  size_t requested, rounding, sampled, live_samples;
  bool profiling;
  bool pagemap;                          /* false: mincore (shared zero pages count) */
};
HM_HIDDEN void hm_explain(struct hm_explain *e);

/* stats_json.c: the report as one JSON object, to fd (hak_stats_json,
 * HAKMEM_STATS=json at exit). */
HM_HIDDEN void hm_stats_json_fd(int fd);
enum { HM_STATS_OFF = 0, HM_STATS_TEXT = 1, HM_STATS_JSON = 2 }; /* HAKMEM_STATS choices */

/* ==== 8 API ============================================================== */

/* alloc.c */
HM_HIDDEN void hm_free_slow(void *p);

/* fork.c: the fork handlers (docs/DESIGN.md, "Fork") */
HM_HIDDEN void hm_fork_init(void);

/* init.c: start-up on the first allocation. hm_ensure_init is the one
 * call that goes up without a hook: the slow paths of every layer start
 * the process on first use (docs/DESIGN.md, "Start-up, fork, options and statistics"). */
extern HM_HIDDEN _Atomic int hm_init_state; /* 0 none, 1 running, 2 done */
HM_HIDDEN void hm_init_slow(void);
HM_INLINE void hm_ensure_init(void) {
  if (unlikely(atomic_load_explicit(&hm_init_state, memory_order_acquire) != 2)) hm_init_slow();
}

#endif /* HAKMEM_INTERNAL_H */
