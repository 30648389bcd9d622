/* Purge steps (docs/DESIGN.md, "Memory given back"): what has stayed unused
 * for the policy's delay (policy.c) is given back with madvise, oldest
 * first, whole ranges at a time, at most STEP_BUDGET bytes per step: empty
 * SuperSlabs in the backend's cache (backend.c), unused slabs of
 * SuperSlabs in use (slabpurge.c), the large lane's cached spans and packed
 * pages. Memory reused before the delay is never touched, so a steady
 * workload makes no system call. Steps run on slow paths (policy.c's tick
 * calls tick_step, registered by hm_purge_start) and on a background
 * thread, started the first time unused memory exceeds the reserve
 * (HAKMEM_BG_PURGE=auto), so that memory goes back while the program does
 * not call the allocator. Also: the RSS limit, and collect (malloc_trim,
 * hak_collect). */
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <time.h>

#include "internal.h"

#define STEP_BUDGET ((size_t)64 << 20) /* bytes per step: ~2 ms of madvise */
#define RESERVE_MIN ((size_t)4 << 20)  /* unused memory kept for reuse, at least */
#define SLAB_BATCH 64                  /* SuperSlabs claimed per step at most */

static pthread_mutex_t purge_lock = PTHREAD_MUTEX_INITIALIZER; /* one purger at a time */
static pthread_t bg_thread; /* (valid once bg_known is set, while hm_purge_bg_state is 1) */
static _Atomic int bg_known;
enum { BG_AUTO, BG_ON, BG_OFF }; /* HAKMEM_BG_PURGE */
static _Atomic size_t given[HM_GIVE_PATHS]; /* bytes given back, by path (hm_purge_given) */

/* Lazy steps keep this much unused memory resident: a working set that
 * breathes a little reuses it without a system call or a page fault. */
static size_t reserve(void) {
  size_t unused = hm_purge_unused_resident(), est = hm_backend_resident_estimate();
  size_t in_use = est > unused ? est - unused : 0;
  return in_use / 32 > RESERVE_MIN ? in_use / 32 : RESERVE_MIN;
}

size_t hm_purge_unused_resident(void) {
  return hm_backend_cached_resident() + hm_purge_dirty_bytes();
}

/* A step over every SuperSlab in use: claim idle slabs (backend lock held,
 * so no SuperSlab goes away), give them back after (lock dropped). */
typedef struct {
  uint32_t now_ms, delay_ms;
  size_t budget, claimed;
  uint64_t next_due;
  size_t n;
  struct {
    superslab_t *ss;
    uint32_t bits;
  } batch[SLAB_BATCH];
} slab_scan_t;

static bool scan_one(superslab_t *ss, void *arg) {
  slab_scan_t *sc = arg;
  if (atomic_load_explicit(&ss->dirty, memory_order_relaxed) == 0) return true;
  uint32_t want = hm_purge_idle_slabs(ss, sc->now_ms, sc->delay_ms, &sc->next_due);
  if (want == 0) return true;
  if (sc->n == SLAB_BATCH || sc->claimed >= sc->budget) {
    sc->next_due = 0; /* more is due: come back at once */
    return false;
  }
  uint32_t got = hm_purge_claim(ss, want);
  if (got != 0) {
    sc->batch[sc->n].ss = ss;
    sc->batch[sc->n++].bits = got;
    sc->claimed += hm_purge_claimed_bytes(ss, got);
  }
  return true;
}

static size_t purge_slabs(uint64_t now, uint64_t delay_ns, size_t budget, uint64_t *next_due) {
  slab_scan_t sc;
  sc.now_ms = (uint32_t)(now / 1000000u);
  sc.delay_ms = (uint32_t)(delay_ns / 1000000u);
  sc.budget = budget;
  sc.claimed = 0;
  sc.next_due = UINT64_MAX;
  sc.n = 0;
  hm_backend_for_each_ss(scan_one, &sc);
  size_t bytes = 0;
  for (size_t k = 0; k < sc.n; k++) bytes += hm_purge_claimed(sc.batch[k].ss, sc.batch[k].bits);
  if (sc.next_due < *next_due) *next_due = sc.next_due;
  return bytes;
}

/* ---- the time budget of calls ------------------------------------------------ */

/* Giving back idle pages of what is still in use (packs' free pages while
 * the lane is busy) costs one madvise per run, and a working set that
 * breathes may want them again: at most HAKMEM_IDLE_CALLS_PER_S calls a
 * second on average, a token bucket holding one second's worth
 * (purge_lock). */
static uint64_t tb_ns;
static int64_t tb_milli; /* (a debt after a thread exit's purge) */

static unsigned calls_allowed(uint64_t now) {
  int64_t rate = (int64_t)hm_opt[HM_OPT_IDLE_CALLS_PER_S], cap = rate * 1000;
  if (tb_ns == 0) tb_milli = cap;
  else if (now > tb_ns) tb_milli += (int64_t)((now - tb_ns) / 1000000u) * rate;
  if (tb_milli > cap) tb_milli = cap;
  tb_ns = now;
  return tb_milli > 0 ? (unsigned)(tb_milli / 1000) : 0;
}

static size_t purge_in_use(uint64_t now, uint64_t delay_ns, uint64_t *next) {
  unsigned calls, allowed = calls_allowed(now);
  if (allowed == 0) {
    uint64_t rate = (uint64_t)hm_opt[HM_OPT_IDLE_CALLS_PER_S];
    if (rate != 0 && now + 1000000000u / rate < *next) *next = now + 1000000000u / rate;
    return 0;
  }
  size_t bytes = hm_pack_purge_idle(now, delay_ns, allowed, &calls, next);
  tb_milli -= (int64_t)calls * 1000;
  return bytes;
}

/* ---- steps --------------------------------------------------------------- */

/* Least idle time of a cached large span before a lazy purge gives it back. */
#define LARGE_IDLE_NS 1000000000ull

/* One bounded step: what has been unused for delay_ns, oldest first, up to
 * budget bytes. Sets hm_purge_due_ns to when the next step is due. Returns
 * the bytes given back. purge_lock held. */
static size_t purge_step(uint64_t now, uint64_t delay_ns, size_t budget) {
  /* Cleared first: whatever becomes unused while we look lowers it again. */
  atomic_store(&hm_purge_due_ns, UINT64_MAX);
  atomic_fetch_add_explicit(&hm_purge_step_epoch, 1, memory_order_relaxed);
  hm_purge_backoff_decay(now);
  uint64_t next = UINT64_MAX;
  size_t bytes = 0;
  if (hm_purge_mode == PURGE_LAZY) {
    /* Only once unused memory exceeds twice the reserve, and then down to
     * the reserve, over as many steps as that takes (draining): the pool's
     * empty SuperSlabs come and go by a few MiB in steady state, which a
     * bound of one reserve turned into madvise calls now and then. */
    static bool draining;       /* (purge_lock) */
    static uint64_t drained_ns; /* when the last drain reached the reserve */
    size_t unused = hm_purge_unused_resident(), keep = reserve();
    /* Threads release their empty current slabs on their first look after
     * a step (policy.c's tick), so just after a drain: those go too. */
    if (unused > 2 * keep || (unused > keep && drained_ns != 0 && now - drained_ns < 4 * delay_ns)) draining = true;
    if (unused <= keep) {
      if (draining) drained_ns = now;
      draining = false;
    }
    budget = draining ? (unused - keep < budget ? unused - keep : budget) : 0;
  }
  if (budget != 0) {
    bytes = hm_backend_purge_cached(now, delay_ns, budget, &next);
    if (bytes < budget) bytes += purge_slabs(now, delay_ns, budget - bytes, &next);
  }
  /* The large lane's cached spans keep their mappings (reusing one costs
   * page faults, not an mmap). In lazy mode they are given back after at
   * least LARGE_IDLE_NS, outside the reserve, and only once the lane has
   * served no request for as long (hm_large_purge). */
  uint64_t large_idle = hm_purge_mode == PURGE_LAZY && delay_ns < LARGE_IDLE_NS ? LARGE_IDLE_NS : delay_ns;
  bytes += hm_large_purge(now, large_idle, STEP_BUDGET, &next);
  /* Packed large blocks' free pages: after the same least idle time, but
   * while the lane is busy too (the pack crowds busy blocks into its low
   * chunks, so what idles is what the working set's peaks left behind). */
  bytes += hm_pack_purge(now, large_idle, STEP_BUDGET, &next);
  if (hm_purge_mode == PURGE_LAZY) bytes += purge_in_use(now, delay_ns, &next);
  uint64_t cur = atomic_load(&hm_purge_due_ns);
  while (next < cur && !atomic_compare_exchange_weak(&hm_purge_due_ns, &cur, next)) {
  }
  return bytes;
}

/* Over HAKMEM_RSS_LIMIT_MB with unused memory to give back? (Freeing does
 * not change the estimate; what can be given back does.) */
static bool over_limit(void) {
  return hm_rss_limit != 0 && hm_backend_resident_estimate() > hm_rss_limit &&
         hm_purge_unused_resident() + hm_large_cached_dirty() != 0;
}

/* Give back what is unused, oldest first, with no delay and no reserve,
 * until under the limit or nothing unused is left. */
static size_t purge_to_limit(uint64_t now) {
  if (hm_purge_mode == PURGE_OFF) /* no madvise: unmapping the caches is all there is */
    return hm_large_release(0) + hm_backend_release_cached();
  size_t est, total = 0;
  while ((est = hm_backend_resident_estimate()) > hm_rss_limit) {
    size_t want = est - hm_rss_limit;
    uint64_t next = UINT64_MAX;
    size_t got = hm_backend_purge_cached(now, 0, want, &next);
    if (got < want) got += purge_slabs(now, 0, want - got, &next);
    if (got < want) got += hm_large_purge(now, 0, want - got, &next);
    if (got < want) got += hm_pack_purge(now, 0, want - got, &next);
    if (got == 0) break;
    total += got;
  }
  return total;
}

/* A step, and the limit; from the purger (bg) or a slow path. Returns the
 * bytes given back. purge_lock held. */
static size_t run_due(uint64_t now, bool bg) {
  size_t lim = over_limit() ? purge_to_limit(now) : 0, idle = 0;
  if (lim != 0) atomic_fetch_add_explicit(&given[HM_GIVE_LIMIT], lim, memory_order_relaxed);
  if (hm_purge_mode == PURGE_OFF) {
    atomic_store(&hm_purge_due_ns, UINT64_MAX);
    return lim;
  }
  idle = purge_step(now, hm_purge_mode == PURGE_EAGER ? 0 : hm_purge_delay_now(), STEP_BUDGET);
  if (idle != 0) atomic_fetch_add_explicit(&given[bg ? HM_GIVE_IDLE_BG : HM_GIVE_IDLE_TICK], idle, memory_order_relaxed);
  return lim + idle;
}

/* Should the background purger run? on: always; auto: once unused memory
 * exceeds what a lazy step keeps (twice the reserve), or the limit is
 * passed. So a program that never leaves that much unused has no thread.
 * (policy.c's hook: hm_purge_note_idle asks.) */
static bool bg_wanted(void) {
  int o = (int)hm_opt[HM_OPT_BG_PURGE];
  if (o == BG_OFF || hm_purge_mode == PURGE_OFF) return false;
  if (o == BG_ON || over_limit()) return true;
  return hm_purge_unused_resident() + hm_large_cached_dirty() > 2 * reserve();
}

/* ---- background purger (HAKMEM_BG_PURGE) ---------------------------------- */

/* Sleeps until the next step is due, at most IDLE_SLEEP_NS: what becomes
 * unused while it sleeps lowers hm_purge_due_ns without waking it (no
 * system call on the slow paths), so memory goes back at most that long
 * after its delay. Detached, it never delays exit. */
#define IDLE_SLEEP_NS 1000000000ull
#define LIMIT_NAP_NS 10000000ull /* over the limit with nothing to give back */

static void nap(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  nanosleep(&ts, NULL);
}

static void *bg_main(void *arg) {
  (void)arg;
  for (;;) {
    uint64_t now = hm_now_ns(), due = atomic_load(&hm_purge_due_ns);
    bool limit = over_limit();
    if (due > now && !limit) {
      nap(due - now < IDLE_SLEEP_NS ? due - now : IDLE_SLEEP_NS);
      continue;
    }
    hm_mutex_lock(&purge_lock);
    size_t got = run_due(hm_now_ns(), true);
    hm_mutex_unlock(&purge_lock);
    if (got == 0 && limit) nap(LIMIT_NAP_NS);
    /* else straight on while a backlog remains: a yield on a loaded machine
     * let 1 GiB freed take 1.7 s to drain (purge_burst_1g) */
  }
  return NULL;
}

/* Started from a slow path with no lock held: pthread_create allocates, and
 * that comes back here only to find hm_purge_bg_state set. Signals stay blocked in
 * the purger so that the program's handlers never run on it. */
static void start_bg(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&hm_purge_bg_state, &expected, 1)) return;
  pthread_attr_t attr;
  pthread_t t;
  sigset_t all, old;
  sigfillset(&all);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, (size_t)64 << 10);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&t, &attr, bg_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_store(&hm_purge_bg_state, 2); /* purging stays on the slow paths */
  } else {
    bg_thread = t;
    atomic_store_explicit(&bg_known, 1, memory_order_release);
  }
}

/* Start the purger if it is wanted; callers hold no lock. */
static void maybe_start_bg(void) {
  if (atomic_load_explicit(&hm_purge_bg_state, memory_order_relaxed) == 0 &&
      atomic_load_explicit(&hm_init_state, memory_order_acquire) == 2 && bg_wanted())
    start_bg();
}

static void purge_tick_slow(void) {
  int saved = errno; /* free and a successful malloc keep errno */
  maybe_start_bg();
  if (hm_mutex_trylock(&purge_lock) == 0) { /* else another thread is at it */
    run_due(hm_now_ns(), false);
    hm_mutex_unlock(&purge_lock);
  }
  errno = saved;
}

/* A thread that exits leaves its unused memory to nobody: what lies unused
 * above the reserve goes back at once, no delay: the empty SuperSlabs,
 * then the packs' longest free runs. Each exit may spend what the time
 * budget holds plus two seconds' worth, while the debt stays within four
 * seconds' worth: threads that end together each get their share, and the
 * debt holds back the next calls, so a program that churns threads stays
 * within the budget. Before, heap.c gave back the pages inside the free
 * blocks of the exiting thread's slabs (exit_calls says how many calls it
 * may make; they are charged here). Unused slabs wait for the steps (one
 * call per few slabs). */
#define EXIT_CALLS_S 2
#define EXIT_DEBT_S 4

/* The calls an exit may make now (purge_lock held). */
static int64_t exit_limit(uint64_t now) {
  calls_allowed(now);
  int64_t rate = (int64_t)hm_opt[HM_OPT_IDLE_CALLS_PER_S], held = tb_milli / 1000;
  int64_t limit = (held > 0 ? held : 0) + EXIT_CALLS_S * rate;
  return limit < held + EXIT_DEBT_S * rate ? limit : held + EXIT_DEBT_S * rate;
}

/* (policy.c's hook, from heap.c's thread exit, before it gives back the
 * pages inside its free blocks; concurrent exits may each be told the same,
 * and the debt they leave holds back the calls after them.) */
static unsigned exit_calls(void) {
  if (hm_purge_mode != PURGE_LAZY) return 0;
  hm_mutex_lock(&purge_lock);
  int64_t limit = exit_limit(hm_now_ns());
  hm_mutex_unlock(&purge_lock);
  return limit > 0 ? (unsigned)limit : 0;
}

static void exit_purge(size_t given_blocks, unsigned calls_blocks) {
  if (hm_purge_mode != PURGE_LAZY) return;
  hm_mutex_lock(&purge_lock);
  tb_milli -= (int64_t)calls_blocks * 1000;
  atomic_fetch_add_explicit(&given[HM_GIVE_IDLE_TICK], given_blocks, memory_order_relaxed);
  hm_mutex_unlock(&purge_lock);
  size_t unused = hm_purge_unused_resident() + hm_pack_free_dirty(), keep = reserve();
  if (unused <= keep) return;
  hm_mutex_lock(&purge_lock);
  uint64_t now = hm_now_ns(), next = UINT64_MAX;
  int64_t limit = exit_limit(now);
  if (limit > 0) {
    struct hak_os_stats a, b;
    unsigned calls = 0;
    hak_os_stats_get(&a);
    size_t got = hm_backend_purge_cached(now, 0, unused - keep, &next); /* a few calls: neighbours go together */
    hak_os_stats_get(&b);
    int64_t used = (int64_t)(b.madvise_calls - a.madvise_calls);
    if (got < unused - keep && used < limit) got += hm_pack_purge_longest((unsigned)(limit - used), &calls);
    tb_milli -= (used + calls) * 1000;
    atomic_fetch_add_explicit(&given[HM_GIVE_IDLE_TICK], got, memory_order_relaxed);
  }
  hm_mutex_unlock(&purge_lock);
}

/* A thread exited (policy.c's hook, from heap.c) and left unused what its
 * empty slabs and SuperSlabs held: counted, and the purger started if it
 * is wanted, in case nobody else calls. */
static void thread_exited(size_t unused_before, size_t given_blocks, unsigned calls_blocks) {
  size_t after = hm_purge_unused_resident(); /* (other threads' changes too: an estimate) */
  if (after > unused_before) atomic_fetch_add_explicit(&given[HM_GIVE_EXIT], after - unused_before, memory_order_relaxed);
  int saved = errno;
  exit_purge(given_blocks, calls_blocks);
  maybe_start_bg();
  errno = saved;
}

void hm_purge_given(size_t out[HM_GIVE_PATHS], uint64_t *bg_cpu_ns) {
  for (int i = 0; i < HM_GIVE_PATHS; i++) out[i] = atomic_load_explicit(&given[i], memory_order_relaxed);
  *bg_cpu_ns = 0;
  clockid_t clk;
  struct timespec ts;
  if (atomic_load(&hm_purge_bg_state) == 1 && atomic_load_explicit(&bg_known, memory_order_acquire) &&
      pthread_getcpuclockid(bg_thread, &clk) == 0 && clock_gettime(clk, &ts) == 0)
    *bg_cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool hm_purge_bg_running(void) { return atomic_load(&hm_purge_bg_state) == 1; }

/* ---- all at once ---------------------------------------------------------- */

typedef struct {
  size_t bytes;
} collect_t;

static bool collect_one(superslab_t *ss, void *arg) {
  uint64_t ignore = UINT64_MAX;
  uint32_t got = hm_purge_claim(ss, hm_purge_idle_slabs(ss, 0, 0, &ignore));
  /* purge_claimed under the backend lock is fine: it takes no lock */
  ((collect_t *)arg)->bytes += hm_purge_claimed(ss, got);
  return true;
}

int hm_collect(bool all) {
  hm_ensure_init();
  size_t before = hm_backend_resident_estimate();
  hm_heap_flush_foreign(hm_tls_heap); /* other threads' blocks go back to their slabs */
  size_t bytes = hm_heap_collect_own();
  if (all) hm_heap_reclaim_abandoned();
  hm_mutex_lock(&purge_lock);
  if (all && hm_purge_mode != PURGE_OFF) {
    collect_t c = {0};
    hm_backend_for_each_ss(collect_one, &c);
    bytes += c.bytes;
  }
  bytes += hm_large_release(0);
  bytes += hm_backend_release_cached();
  hm_mutex_unlock(&purge_lock);
  atomic_fetch_add_explicit(&given[HM_GIVE_TRIM], bytes, memory_order_relaxed);
  return bytes != 0 || hm_backend_resident_estimate() < before;
}

/* ---- fork ------------------------------------------------------------------ */

/* A step in progress holds purge_lock: the child never inherits claimed
 * bits nobody will release. The child has no background purger: its
 * thread's next slow path starts one if it is wanted (maybe_start_bg). */
void hm_purge_fork_prepare(void) { pthread_mutex_lock(&purge_lock); }
void hm_purge_fork_parent(void) { pthread_mutex_unlock(&purge_lock); }
void hm_purge_fork_child(void) {
  pthread_mutex_init(&purge_lock, NULL);
  if (atomic_load(&hm_purge_bg_state) == 1) {
    atomic_store(&bg_known, 0);
    atomic_store(&hm_purge_bg_state, 0);
    atomic_store(&hm_purge_due_ns, 0);
    hm_tick_countdown = 1;
  }
}

/* policy.c's tick, when a step may be due, an RSS limit is set, or a step
 * ran since this thread last looked (look). */
static void tick_step(uint64_t now, bool look) {
  if (look) { /* the caller's own empty current slabs (policy.c) */
    int saved = errno;
    hm_heap_release_empty_cur();
    errno = saved;
  }
  /* Within 1/8 of the limit, every slow path looks (a burst of large
   * blocks grows by 16 of them between two looks otherwise). */
  if (hm_rss_limit != 0 && hm_backend_resident_estimate() > hm_rss_limit - hm_rss_limit / 8) hm_tick_countdown = 1;
  if (now < atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed) && !over_limit()) return;
  purge_tick_slow();
}

void hm_purge_start(void) {
  static const hm_purge_hooks_t hooks = {tick_step, bg_wanted, hm_purge_unused_resident, thread_exited, exit_calls};
  hm_purge_set_hooks(&hooks);
}
