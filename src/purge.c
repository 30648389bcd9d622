/* Purge steps (docs/DESIGN.md, "Memory given back"): what has stayed unused
 * for the policy's delay (policy.c) is given back with madvise, oldest
 * first, whole ranges at a time, at most STEP_BUDGET bytes per step: empty
 * SuperSlabs in the backend's cache (backend.c), unused slabs of
 * SuperSlabs in use (slabpurge.c), the large lane's cached spans and packed
 * pages. Memory reused before the delay is never touched, so a steady
 * workload makes no system call. Steps run on slow paths (policy.c's tick
 * calls tick_step, registered by hm_purge_start) or on an optional
 * background thread (HAKMEM_BG_PURGE=1). Also: the RSS limit, and collect
 * (malloc_trim, hak_collect). */
#include <pthread.h>
#include <signal.h>
#include <sched.h>

#include "internal.h"

#define STEP_BUDGET ((size_t)64 << 20) /* bytes per step: ~2 ms of madvise */
#define RESERVE_MIN ((size_t)4 << 20)  /* unused memory kept for reuse, at least */
#define SLAB_BATCH 64                  /* SuperSlabs claimed per step at most */

static pthread_mutex_t purge_lock = PTHREAD_MUTEX_INITIALIZER; /* one purger at a time */

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

/* ---- steps --------------------------------------------------------------- */

/* Least idle time of a cached large span before a lazy purge gives it back. */
#define LARGE_IDLE_NS 1000000000ull

/* One bounded step: what has been unused for delay_ns, oldest first, up to
 * budget bytes. Sets hm_purge_due_ns to when the next step is due. Returns
 * the bytes given back. purge_lock held. */
static size_t purge_step(uint64_t now, uint64_t delay_ns, size_t budget) {
  /* Cleared first: whatever becomes unused while we look lowers it again. */
  atomic_store(&hm_purge_due_ns, UINT64_MAX);
  hm_purge_backoff_decay(now);
  uint64_t next = UINT64_MAX;
  size_t bytes = 0;
  if (hm_purge_mode == PURGE_LAZY) {
    /* Only once unused memory exceeds twice the reserve, and then down to
     * the reserve, over as many steps as that takes (draining): the pool's
     * empty SuperSlabs come and go by a few MiB in steady state, which a
     * bound of one reserve turned into madvise calls now and then. */
    static bool draining; /* (purge_lock) */
    size_t unused = hm_purge_unused_resident(), keep = reserve();
    if (unused > 2 * keep) draining = true;
    if (unused <= keep) draining = false;
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
  uint64_t cur = atomic_load(&hm_purge_due_ns);
  while (next < cur && !atomic_compare_exchange_weak(&hm_purge_due_ns, &cur, next)) {
  }
  return bytes;
}

/* Over HAKMEM_RSS_LIMIT_MB with unused memory to give back? (Freeing does
 * not change the estimate; what can be given back does.) */
static bool over_limit(void) {
  return hm_rss_limit != 0 && hm_backend_resident_estimate() > hm_rss_limit && hm_purge_unused_resident() != 0;
}

/* Give back what is unused, oldest first, with no delay and no reserve,
 * until under the limit or nothing unused is left. */
static void purge_to_limit(uint64_t now) {
  if (hm_purge_mode == PURGE_OFF) { /* no madvise: unmapping the caches is all there is */
    hm_large_release(0);
    hm_backend_release_cached();
    return;
  }
  size_t est;
  while ((est = hm_backend_resident_estimate()) > hm_rss_limit) {
    size_t want = est - hm_rss_limit;
    uint64_t next = UINT64_MAX;
    size_t got = hm_backend_purge_cached(now, 0, want, &next);
    if (got < want) got += purge_slabs(now, 0, want - got, &next);
    if (got < want) got += hm_large_purge(now, 0, want - got, &next);
    if (got < want) got += hm_pack_purge(now, 0, want - got, &next);
    if (got == 0) break;
  }
}

static void run_due(uint64_t now) {
  if (over_limit()) purge_to_limit(now);
  if (hm_purge_mode == PURGE_OFF) {
    atomic_store(&hm_purge_due_ns, UINT64_MAX);
    return;
  }
  purge_step(now, hm_purge_mode == PURGE_EAGER ? 0 : hm_purge_delay_now(), STEP_BUDGET);
}

/* ---- background purger (HAKMEM_BG_PURGE=1) ------------------------------- */

static void *bg_main(void *arg) {
  (void)arg;
  uint64_t period = hm_purge_delay_now() / 2;
  if (period < 10000000u) period = 10000000u;       /* 10 ms */
  if (period > 500000000u) period = 500000000u;     /* 0.5 s */
  for (;;) {
    uint64_t now = hm_now_ns(), due = atomic_load(&hm_purge_due_ns);
    uint64_t wait = due <= now ? 0 : (due - now < period ? due - now : period);
    if (wait != 0 && !over_limit()) {
      struct timespec ts = {(time_t)(wait / 1000000000u), (long)(wait % 1000000000u)};
      nanosleep(&ts, NULL);
      continue;
    }
    pthread_mutex_lock(&purge_lock);
    run_due(hm_now_ns());
    pthread_mutex_unlock(&purge_lock);
    sched_yield();
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
  if (rc != 0) atomic_store(&hm_purge_bg_state, 2); /* purging stays on the slow paths */
}

static void purge_tick_slow(void) {
  int saved = errno; /* free and a successful malloc keep errno */
  if (hm_opt[HM_OPT_BG_PURGE] && hm_purge_mode != PURGE_OFF &&
      atomic_load_explicit(&hm_purge_bg_state, memory_order_relaxed) == 0 &&
      atomic_load_explicit(&hm_init_state, memory_order_acquire) == 2)
    start_bg();
  if (hm_purge_mode == PURGE_LAZY) hm_heap_release_empty_cur(); /* (the caller's own heap) */
  if (pthread_mutex_trylock(&purge_lock) == 0) { /* else another thread is at it */
    run_due(hm_now_ns());
    pthread_mutex_unlock(&purge_lock);
  }
  errno = saved;
}

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
  pthread_mutex_lock(&purge_lock);
  if (all && hm_purge_mode != PURGE_OFF) {
    collect_t c = {0};
    hm_backend_for_each_ss(collect_one, &c);
    bytes += c.bytes;
  }
  bytes += hm_large_release(0);
  bytes += hm_backend_release_cached();
  pthread_mutex_unlock(&purge_lock);
  return bytes != 0 || hm_backend_resident_estimate() < before;
}

/* ---- fork ------------------------------------------------------------------ */

/* A step in progress holds purge_lock: the child never inherits claimed
 * bits nobody will release. The child has no background purger. */
void hm_purge_fork_prepare(void) { pthread_mutex_lock(&purge_lock); }
void hm_purge_fork_parent(void) { pthread_mutex_unlock(&purge_lock); }
void hm_purge_fork_child(void) {
  pthread_mutex_init(&purge_lock, NULL);
  if (atomic_load(&hm_purge_bg_state) == 1) atomic_store(&hm_purge_bg_state, 0);
}

/* policy.c's tick, when a step may be due (or an RSS limit is set). */
static void tick_step(uint64_t now) {
  if (now < atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed) && !over_limit()) return;
  purge_tick_slow();
}

void hm_purge_start(void) { hm_purge_set_step(tick_step); }
