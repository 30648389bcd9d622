/* Giving unused memory back to the OS (docs/DESIGN.md, "Memory given back").
 *
 * Unused memory comes in two forms: empty SuperSlabs in the backend's cache
 * (backend.c), and unused slabs inside SuperSlabs still in use (bits in
 * ss->dirty, with the time each became unused in ss->idle_ms). With
 * HAKMEM_PURGE=lazy (the default), memory left unused for
 * HAKMEM_PURGE_DELAY_MS is given back with madvise by a purge step, oldest
 * first, whole ranges at a time, at most STEP_BUDGET bytes per step; memory
 * reused before the delay is never touched, so a steady workload makes no
 * system call. Steps run on slow paths (hm_purge_tick: a coarse-clock read
 * against hm_purge_due_ns, the earliest time anything becomes due) and on a
 * background thread, started the first time unused memory exceeds the
 * reserve (HAKMEM_BG_PURGE=auto) so that memory goes back while the program
 * does not call the allocator; `on` starts it at once, `off` never.
 *
 * Any thread may purge any SuperSlab's unused slabs. It claims them first:
 * it sets their bits in `purging` (only bits nobody else holds), then clears
 * them in `dirty`; the bits still set there are its own. The owner taking a
 * slab back clears its `dirty` bit; if it was already clear, the slab is
 * given back or being given back, and the owner waits for `purging` to drop.
 * A SuperSlab goes to the backend only after its bits are taken back
 * (hm_purge_ss_leave), so one being purged is never unmapped or reused. */
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <time.h>

#include "internal.h"

#define STEP_BUDGET ((size_t)64 << 20) /* bytes per step: ~2 ms of madvise */
#define RESERVE_MIN ((size_t)4 << 20)  /* unused memory kept for reuse, at least */
#define SLAB_BATCH 64                  /* SuperSlabs claimed per step at most */

int hm_purge_mode;
uint64_t hm_purge_delay_ns;
size_t hm_rss_limit;
_Atomic uint64_t hm_purge_due_ns; /* 0 at start: the first tick sets it */

static pthread_mutex_t purge_lock = PTHREAD_MUTEX_INITIALIZER; /* one purger at a time */
static _Atomic size_t n_disabled;     /* purges skipped: HAKMEM_PURGE=off */
static _Atomic int bg_state;          /* background purger: 0 none, 1 started, 2 failed */
static pthread_t bg_thread;           /* (valid once bg_known is set, while bg_state is 1) */
static _Atomic int bg_known;
enum { BG_AUTO, BG_ON, BG_OFF };      /* HAKMEM_BG_PURGE */
/* bytes given back, by path (the stats report; hm_purge_given) */
static _Atomic size_t given[HM_GIVE_PATHS];
static _Atomic size_t dirty_bytes;    /* unused slabs still resident, all SuperSlabs */

/* Regret: memory given back and reused within 16 delays was given back too
 * early (a working set that breathes). Then the delay doubles (once per
 * delay at most), up to 2^BACKOFF_MAX times the option; it halves again
 * after 64 delays without regret.
 * So a steady workload stops making system calls even when its slabs sit
 * unused now and then for longer than the delay. */
#define BACKOFF_MAX 6
static _Atomic unsigned backoff;
static _Atomic uint64_t last_regret_ns;

static uint64_t delay_now(void) {
  return hm_purge_delay_ns << atomic_load_explicit(&backoff, memory_order_relaxed);
}

void hm_purge_regret(uint64_t purged_at, uint64_t now) {
  uint64_t d = delay_now();
  if (hm_purge_mode != PURGE_LAZY || now - purged_at >= 16 * d) return;
  /* one doubling per delay at most: a burst of reuse is one regret */
  uint64_t last = atomic_load_explicit(&last_regret_ns, memory_order_relaxed);
  if (last != 0 && now - last < d) return;
  if (!atomic_compare_exchange_strong(&last_regret_ns, &last, now)) return;
  unsigned b = atomic_load_explicit(&backoff, memory_order_relaxed);
  if (b < BACKOFF_MAX) atomic_store_explicit(&backoff, b + 1, memory_order_relaxed);
}

static void backoff_decay(uint64_t now) {
  unsigned b = atomic_load_explicit(&backoff, memory_order_relaxed);
  if (b != 0 && now - atomic_load_explicit(&last_regret_ns, memory_order_relaxed) > 64 * delay_now()) {
    atomic_store_explicit(&backoff, b - 1, memory_order_relaxed);
    atomic_store_explicit(&last_regret_ns, now, memory_order_relaxed);
  }
}

static uint32_t ms_of(uint64_t ns) { return (uint32_t)(ns / 1000000u); }

void hm_purge_init(void) {
  hm_purge_mode = hm_opt[HM_OPT_NO_MADVISE] ? PURGE_OFF : (int)hm_opt[HM_OPT_PURGE];
  hm_purge_delay_ns = (uint64_t)hm_opt[HM_OPT_PURGE_DELAY_MS] * 1000000u;
  hm_rss_limit = (size_t)hm_opt[HM_OPT_RSS_LIMIT_MB] << 20;
}

/* Lazy steps keep this much unused memory resident: a working set that
 * breathes a little reuses it without a system call or a page fault. */
static size_t reserve(void) {
  size_t unused = hm_purge_unused_resident(), est = hm_os_resident_estimate();
  size_t in_use = est > unused ? est - unused : 0;
  return in_use / 32 > RESERVE_MIN ? in_use / 32 : RESERVE_MIN;
}

size_t hm_purge_unused_resident(void) {
  return hm_backend_cached_resident() + atomic_load_explicit(&dirty_bytes, memory_order_relaxed);
}

void hm_purge_count_disabled(void) { atomic_fetch_add_explicit(&n_disabled, 1, memory_order_relaxed); }

static bool over_limit(void);

/* Should the background purger run? on: always; auto: once unused memory
 * exceeds what a lazy step keeps (twice the reserve), or the limit is
 * passed. So a program that never leaves that much unused has no thread. */
static bool bg_wanted(void) {
  int o = (int)hm_opt[HM_OPT_BG_PURGE];
  if (o == BG_OFF || hm_purge_mode == PURGE_OFF) return false;
  if (o == BG_ON || over_limit()) return true;
  return hm_purge_unused_resident() + hm_large_cached_dirty() > 2 * reserve();
}

void hm_purge_note_idle(uint64_t now) {
  uint64_t due = now + delay_now();
  /* With a background purger wanted but not yet running: this thread's next
   * slow path starts it (here a lock may be held; pthread_create allocates). */
  if (atomic_load_explicit(&bg_state, memory_order_relaxed) == 0 && bg_wanted()) {
    due = 0;
    hm_tick_countdown = 1;
  }
  uint64_t cur = atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed);
  while (due < cur && !atomic_compare_exchange_weak(&hm_purge_due_ns, &cur, due)) {
  }
}

/* ---- unused slabs inside SuperSlabs in use ------------------------------ */

static size_t slab_bytes(const superslab_t *ss, unsigned i) {
  return ((size_t)1 << ss->slab_shift) - (i == 0 ? SS_HEADER_SIZE : 0);
}

static size_t mask_bytes(const superslab_t *ss, uint32_t bits) {
  size_t n = (size_t)__builtin_popcount(bits) << ss->slab_shift;
  return (bits & 1u) ? n - SS_HEADER_SIZE : n;
}

/* Claim the unused, resident slabs of `want` for purging; returns those
 * claimed (their `purging` bits set, `dirty` bits cleared). */
static uint32_t claim(superslab_t *ss, uint32_t want) {
  uint32_t cur = atomic_load(&ss->purging), mine;
  do {
    mine = want & ~cur;
    if (mine == 0) return 0;
  } while (!atomic_compare_exchange_weak(&ss->purging, &cur, cur | mine));
  uint32_t got = atomic_fetch_and(&ss->dirty, ~mine) & mine;
  if (mine & ~got) atomic_fetch_and(&ss->purging, ~(mine & ~got));
  if (got != 0) atomic_fetch_sub_explicit(&dirty_bytes, mask_bytes(ss, got), memory_order_relaxed);
  return got;
}

/* Give back the claimed slabs `bits` of ss, adjacent ones in one call (the
 * header page before slab 0 stays), then let the owner have them again. */
static size_t purge_claimed(superslab_t *ss, uint32_t bits) {
  if (bits == 0) return 0;
  unsigned shift = ss->slab_shift;
  uint32_t rest = bits;
  while (rest != 0) {
    unsigned i = (unsigned)__builtin_ctz(rest);
    unsigned j = i;
    while (j + 1 < 32 && (rest & (1u << (j + 1)))) j++;
    char *a = (char *)ss + ((size_t)i << shift) + (i == 0 ? SS_HEADER_SIZE : 0);
    char *b = (char *)ss + ((size_t)(j + 1) << shift);
    hm_os_purge(a, (size_t)(b - a));
    rest &= ~(uint32_t)(((uint64_t)2 << j) - ((uint64_t)1 << i));
  }
  size_t bytes = mask_bytes(ss, bits);
  uint32_t now_ms = ms_of(hm_now_ns()); /* while purged, idle_ms says since when */
  for (uint32_t b = bits; b != 0; b &= b - 1)
    atomic_store_explicit(&ss->idle_ms[__builtin_ctz(b)], now_ms, memory_order_relaxed);
  atomic_fetch_or(&ss->purged, bits);
  hm_os_purged_add(bytes);
  atomic_fetch_and(&ss->purging, ~bits);
  return bytes;
}

void hm_purge_slab_unused(superslab_t *ss, unsigned i) {
  if (hm_purge_mode == PURGE_OFF) {
    hm_purge_count_disabled();
    return;
  }
  uint64_t now = hm_now_ns();
  uint32_t bit = 1u << i;
  atomic_store_explicit(&ss->idle_ms[i], ms_of(now), memory_order_relaxed);
  atomic_fetch_add_explicit(&dirty_bytes, slab_bytes(ss, i), memory_order_relaxed);
  atomic_fetch_or(&ss->dirty, bit); /* after idle_ms: a purger reads both */
  if (hm_purge_mode == PURGE_EAGER)
    purge_claimed(ss, claim(ss, bit));
  else
    hm_purge_note_idle(now);
}

bool hm_purge_slab_take(superslab_t *ss, unsigned i) {
  uint32_t bit = 1u << i;
  if (atomic_fetch_and(&ss->dirty, ~bit) & bit) { /* resident, and now ours */
    atomic_fetch_sub_explicit(&dirty_bytes, slab_bytes(ss, i), memory_order_relaxed);
    return true;
  }
  if (hm_purge_mode == PURGE_OFF) return true; /* (nothing is given back) */
  /* never used since the SuperSlab was set up, given back, or being given back */
  for (unsigned spins = 0; atomic_load(&ss->purging) & bit; spins++) {
    if (spins < 64)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  if (atomic_load(&ss->purged) & bit) {
    atomic_fetch_and(&ss->purged, ~bit);
    uint64_t now = hm_now_ns();
    uint32_t ago_ms = ms_of(now) - atomic_load_explicit(&ss->idle_ms[i], memory_order_relaxed);
    hm_purge_regret(now - (uint64_t)ago_ms * 1000000u, now);
    hm_os_purged_sub(slab_bytes(ss, i)); /* it reads as zeros; resident again as it is used */
  }
  return false;
}

size_t hm_purge_ss_leave(superslab_t *ss) {
  uint32_t d = atomic_exchange(&ss->dirty, 0);
  if (d != 0) atomic_fetch_sub_explicit(&dirty_bytes, mask_bytes(ss, d), memory_order_relaxed);
  for (unsigned spins = 0; atomic_load(&ss->purging) != 0; spins++) {
    if (spins < 64)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  uint32_t p = atomic_exchange(&ss->purged, 0);
  return p ? mask_bytes(ss, p) : 0;
}

/* Unused slabs of ss idle for at least delay_ms (all of them with 0). */
static uint32_t idle_slabs(superslab_t *ss, uint32_t now_ms, uint32_t delay_ms, uint64_t *next_due) {
  uint32_t d = atomic_load(&ss->dirty), want = 0;
  while (d != 0) {
    unsigned i = (unsigned)__builtin_ctz(d);
    d &= d - 1;
    uint32_t age = now_ms - atomic_load_explicit(&ss->idle_ms[i], memory_order_relaxed);
    if (age > 0x80000000u) age = 0; /* its clock read came just after ours */
    if (age >= delay_ms) {
      want |= 1u << i;
    } else {
      uint64_t due = ((uint64_t)now_ms + (delay_ms - age)) * 1000000u;
      if (due < *next_due) *next_due = due;
    }
  }
  return want;
}

size_t hm_purge_ss_now(superslab_t *ss) {
  if (hm_purge_mode == PURGE_OFF) return 0;
  uint64_t ignore = UINT64_MAX;
  return purge_claimed(ss, claim(ss, idle_slabs(ss, 0, 0, &ignore)));
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
  uint32_t want = idle_slabs(ss, sc->now_ms, sc->delay_ms, &sc->next_due);
  if (want == 0) return true;
  if (sc->n == SLAB_BATCH || sc->claimed >= sc->budget) {
    sc->next_due = 0; /* more is due: come back at once */
    return false;
  }
  uint32_t got = claim(ss, want);
  if (got != 0) {
    sc->batch[sc->n].ss = ss;
    sc->batch[sc->n++].bits = got;
    sc->claimed += mask_bytes(ss, got);
  }
  return true;
}

static size_t purge_slabs(uint64_t now, uint64_t delay_ns, size_t budget, uint64_t *next_due) {
  slab_scan_t sc;
  sc.now_ms = ms_of(now);
  sc.delay_ms = (uint32_t)(delay_ns / 1000000u);
  sc.budget = budget;
  sc.claimed = 0;
  sc.next_due = UINT64_MAX;
  sc.n = 0;
  hm_backend_for_each_ss(scan_one, &sc);
  size_t bytes = 0;
  for (size_t k = 0; k < sc.n; k++) bytes += purge_claimed(sc.batch[k].ss, sc.batch[k].bits);
  if (sc.next_due < *next_due) *next_due = sc.next_due;
  return bytes;
}

/* ---- steps --------------------------------------------------------------- */

/* Least idle time of a cached large span before a lazy purge gives it back. */
#define LARGE_IDLE_NS 1000000000ull

static _Atomic uint32_t step_epoch; /* steps run so far (hm_purge_tick_clock) */

/* One bounded step: what has been unused for delay_ns, oldest first, up to
 * budget bytes. Sets hm_purge_due_ns to when the next step is due. Returns
 * the bytes given back. purge_lock held. */
static size_t purge_step(uint64_t now, uint64_t delay_ns, size_t budget) {
  /* Cleared first: whatever becomes unused while we look lowers it again. */
  atomic_store(&hm_purge_due_ns, UINT64_MAX);
  atomic_fetch_add_explicit(&step_epoch, 1, memory_order_relaxed);
  backoff_decay(now);
  uint64_t next = UINT64_MAX;
  size_t bytes = 0;
  if (hm_purge_mode == PURGE_LAZY) {
    /* Only once unused memory exceeds twice the reserve, and then down to
     * the reserve, over as many steps as that takes (draining): the Pool's
     * empty SuperSlabs come and go by a few MiB in steady state (the
     * syscall budget with blocks up to 1 MiB, packed: unused 7-8.4 MiB
     * against a reserve of 6.4), which a bound of one reserve turned into
     * madvise calls now and then. */
    static bool draining;       /* (purge_lock) */
    static uint64_t drained_ns; /* when the last drain reached the reserve */
    size_t unused = hm_purge_unused_resident(), keep = reserve();
    /* Threads release their empty current slabs on their first look after
     * a step (hm_purge_tick_clock), so just after a drain: those go too. */
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
  uint64_t cur = atomic_load(&hm_purge_due_ns);
  while (next < cur && !atomic_compare_exchange_weak(&hm_purge_due_ns, &cur, next)) {
  }
  return bytes;
}

/* Over HAKMEM_RSS_LIMIT_MB with unused memory to give back? (Freeing does
 * not change the estimate; what can be given back does.) */
static bool over_limit(void) {
  return hm_rss_limit != 0 && hm_os_resident_estimate() > hm_rss_limit &&
         hm_purge_unused_resident() + hm_large_cached_dirty() != 0;
}

/* Give back what is unused, oldest first, with no delay and no reserve,
 * until under the limit or nothing unused is left. */
static size_t purge_to_limit(uint64_t now) {
  if (hm_purge_mode == PURGE_OFF) /* no madvise: unmapping the caches is all there is */
    return hm_large_release(0) + hm_backend_release_cached();
  size_t est, total = 0;
  while ((est = hm_os_resident_estimate()) > hm_rss_limit) {
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
  idle = purge_step(now, hm_purge_mode == PURGE_EAGER ? 0 : delay_now(), STEP_BUDGET);
  if (idle != 0) atomic_fetch_add_explicit(&given[bg ? HM_GIVE_IDLE_BG : HM_GIVE_IDLE_TICK], idle, memory_order_relaxed);
  return lim + idle;
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
    pthread_mutex_lock(&purge_lock);
    size_t got = run_due(hm_now_ns(), true);
    pthread_mutex_unlock(&purge_lock);
    if (got == 0 && limit) nap(LIMIT_NAP_NS);
    /* else straight on while a backlog remains: a yield on a loaded machine
     * let 1 GiB freed take 1.7 s to drain (purge_burst_1g) */
  }
  return NULL;
}

/* Started from a slow path with no lock held: pthread_create allocates, and
 * that comes back here only to find bg_state set. Signals stay blocked in
 * the purger so that the program's handlers never run on it. */
static void start_bg(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&bg_state, &expected, 1)) return;
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
  if (rc != 0) atomic_store(&bg_state, 2); /* purging stays on the slow paths */
  else {
    bg_thread = t;
    atomic_store_explicit(&bg_known, 1, memory_order_release);
  }
}

/* Start the purger if it is wanted; callers hold no lock. */
static void maybe_start_bg(void) {
  if (atomic_load_explicit(&bg_state, memory_order_relaxed) == 0 &&
      atomic_load_explicit(&hm_init_state, memory_order_acquire) == 2 && bg_wanted())
    start_bg();
}

static void purge_tick_slow(void) {
  int saved = errno; /* free and a successful malloc keep errno */
  maybe_start_bg();
  if (pthread_mutex_trylock(&purge_lock) == 0) { /* else another thread is at it */
    run_due(hm_now_ns(), false);
    pthread_mutex_unlock(&purge_lock);
  }
  errno = saved;
}

/* A thread exited and left `unused` bytes unused (its empty slabs and
 * SuperSlabs): the purger gives them back if nobody else calls. */
void hm_purge_thread_exited(size_t unused) {
  if (unused != 0) atomic_fetch_add_explicit(&given[HM_GIVE_EXIT], unused, memory_order_relaxed);
  int saved = errno;
  maybe_start_bg();
  errno = saved;
}

void hm_purge_given(size_t out[HM_GIVE_PATHS], uint64_t *bg_cpu_ns) {
  for (int i = 0; i < HM_GIVE_PATHS; i++) out[i] = atomic_load_explicit(&given[i], memory_order_relaxed);
  *bg_cpu_ns = 0;
  clockid_t clk;
  struct timespec ts;
  if (atomic_load(&bg_state) == 1 && atomic_load_explicit(&bg_known, memory_order_acquire) &&
      pthread_getcpuclockid(bg_thread, &clk) == 0 && clock_gettime(clk, &ts) == 0)
    *bg_cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool hm_purge_bg_running(void) { return atomic_load(&bg_state) == 1; }

__thread uint32_t hm_tick_countdown __attribute__((tls_model("initial-exec"))) = 1;

static __thread uint32_t seen_epoch __attribute__((tls_model("initial-exec")));

void hm_purge_tick_clock(void) {
  uint64_t now = hm_now_ns();
  hm_tick_countdown = HM_TICK_EVERY;
  /* A step ran since this thread last looked (the purger's or another
   * thread's): its own empty current slabs and spares, which only it may
   * release, go back to their SuperSlabs if they stayed idle between two
   * looks, for a later step to give back. */
  uint32_t epoch = atomic_load_explicit(&step_epoch, memory_order_relaxed);
  if (hm_purge_mode == PURGE_LAZY && epoch != seen_epoch) {
    int saved = errno;
    seen_epoch = epoch;
    hm_heap_release_empty_cur();
    errno = saved;
  }
  /* Within 1/8 of the limit, every slow path looks (a burst of large
   * blocks grows by 16 of them between two looks otherwise). */
  if (hm_rss_limit != 0 && hm_os_resident_estimate() > hm_rss_limit - hm_rss_limit / 8) hm_tick_countdown = 1;
  if (now < atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed) && !over_limit()) return;
  purge_tick_slow();
  /* more is due at once (the step ran out of budget): look every time */
  if (atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed) <= now) hm_tick_countdown = 1;
}

/* ---- all at once ---------------------------------------------------------- */

typedef struct {
  size_t bytes;
} collect_t;

static bool collect_one(superslab_t *ss, void *arg) {
  uint64_t ignore = UINT64_MAX;
  uint32_t got = claim(ss, idle_slabs(ss, 0, 0, &ignore));
  /* purge_claimed under the backend lock is fine: it takes no lock */
  ((collect_t *)arg)->bytes += purge_claimed(ss, got);
  return true;
}

int hm_collect(bool all) {
  hm_ensure_init();
  size_t before = hm_os_resident_estimate();
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
  atomic_fetch_add_explicit(&given[HM_GIVE_TRIM], bytes, memory_order_relaxed);
  return bytes != 0 || hm_os_resident_estimate() < before;
}

/* ---- fork ------------------------------------------------------------------ */

/* A step in progress holds purge_lock: the child never inherits claimed
 * bits nobody will release. The child has no background purger: its
 * thread's next slow path starts one if it is wanted (maybe_start_bg). */
void hm_purge_fork_prepare(void) { pthread_mutex_lock(&purge_lock); }
void hm_purge_fork_parent(void) { pthread_mutex_unlock(&purge_lock); }
void hm_purge_fork_child(void) {
  pthread_mutex_init(&purge_lock, NULL);
  if (atomic_load(&bg_state) == 1) {
    atomic_store(&bg_known, 0);
    atomic_store(&bg_state, 0);
    atomic_store(&hm_purge_due_ns, 0);
    hm_tick_countdown = 1;
  }
}

/* ---- HAKMEM_SS_OS_STATS=1 ------------------------------------------------- */

/* One line at exit, the seeds' format; no allocation (write(2) only). */
__attribute__((destructor)) static void print_os_stats(void) {
  if (atomic_load(&hm_init_state) != 2 || !hm_opt[HM_OPT_SS_OS_STATS]) return;
  struct hak_os_stats os;
  struct hm_ss_counts ss;
  hak_os_stats_get(&os);
  hm_backend_ss_counts(&ss);
  const char *names[] = {"[SS_OS_STATS] alloc=", " free=", " madvise=", " madvise_disabled=",
                         " mmap_total=", " fallback_mmap=", " huge_alloc="};
  size_t vals[] = {ss.ss_alloc, ss.ss_free, os.madvise_calls, atomic_load(&n_disabled),
                   os.mmap_calls, ss.fallback_mmap, ss.huge_alloc};
  char line[512], num[24];
  size_t len = 0;
  for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
    hm_format_dec(num, (long)vals[k]);
    for (const char *s = names[k]; *s != '\0';) line[len++] = *s++;
    for (const char *s = num; *s != '\0';) line[len++] = *s++;
  }
  line[len++] = '\n';
  line[len] = '\0';
  hm_write_fd(2, line);
}
