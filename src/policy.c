/* The purge policy (docs/DESIGN.md, "Memory given back"): whether unused
 * memory goes back to the OS lazily (after HAKMEM_PURGE_DELAY_MS), eagerly
 * or never; the delay and its back-off when memory given back is soon
 * reused (regret); when the next purge step is due; and the tick on slow
 * paths that runs the step (through the hook purge.c registers). A leaf:
 * backend.c, slabpurge.c, pack.c, big.c and large.c read it, purge.c
 * drives the steps. */
#include "internal.h"

int hm_purge_mode;
uint64_t hm_purge_delay_ns;
size_t hm_rss_limit;
_Atomic uint64_t hm_purge_due_ns; /* 0 at start: the first tick sets it */
_Atomic int hm_purge_bg_state;    /* background purger: 0 none, 1 started, 2 failed */

static _Atomic size_t n_disabled;  /* purges skipped: HAKMEM_PURGE=off */
static hm_purge_hooks_t hooks;     /* purge.c's (hm_purge_set_hooks) */
_Atomic uint32_t hm_purge_step_epoch;

/* Regret: memory given back and reused within 16 delays was given back too
 * early (a working set that breathes). Then the delay doubles (once per
 * delay at most), up to 2^BACKOFF_MAX times the option; it halves again
 * after 64 delays without regret.
 * So a steady workload stops making system calls even when its slabs sit
 * unused now and then for longer than the delay. */
#define BACKOFF_MAX 6
static _Atomic unsigned backoff;
static _Atomic uint64_t last_regret_ns;

uint64_t hm_purge_delay_now(void) {
  return hm_purge_delay_ns << atomic_load_explicit(&backoff, memory_order_relaxed);
}

void hm_purge_regret(uint64_t purged_at, uint64_t now) {
  uint64_t d = hm_purge_delay_now();
  if (hm_purge_mode != PURGE_LAZY || now - purged_at >= 16 * d) return;
  /* one doubling per delay at most: a burst of reuse is one regret */
  uint64_t last = atomic_load_explicit(&last_regret_ns, memory_order_relaxed);
  if (last != 0 && now - last < d) return;
  if (!atomic_compare_exchange_strong(&last_regret_ns, &last, now)) return;
  unsigned b = atomic_load_explicit(&backoff, memory_order_relaxed);
  if (b < BACKOFF_MAX) atomic_store_explicit(&backoff, b + 1, memory_order_relaxed);
}

void hm_purge_backoff_decay(uint64_t now) {
  unsigned b = atomic_load_explicit(&backoff, memory_order_relaxed);
  if (b != 0 && now - atomic_load_explicit(&last_regret_ns, memory_order_relaxed) > 64 * hm_purge_delay_now()) {
    atomic_store_explicit(&backoff, b - 1, memory_order_relaxed);
    atomic_store_explicit(&last_regret_ns, now, memory_order_relaxed);
  }
}

void hm_purge_init(void) {
  hm_purge_mode = hm_opt[HM_OPT_NO_MADVISE] ? PURGE_OFF : (int)hm_opt[HM_OPT_PURGE];
  hm_purge_delay_ns = (uint64_t)hm_opt[HM_OPT_PURGE_DELAY_MS] * 1000000u;
  hm_rss_limit = (size_t)hm_opt[HM_OPT_RSS_LIMIT_MB] << 20;
}

void hm_purge_count_disabled(void) { atomic_fetch_add_explicit(&n_disabled, 1, memory_order_relaxed); }

void hm_purge_note_idle(uint64_t now) {
  uint64_t due = now + hm_purge_delay_now();
  /* With a background purger wanted but not yet running: this thread's next
   * slow path starts it (here a lock may be held; pthread_create allocates). */
  if (atomic_load_explicit(&hm_purge_bg_state, memory_order_relaxed) == 0 && hooks.bg_wanted != NULL &&
      hooks.bg_wanted()) {
    due = 0;
    hm_tick_countdown = 1;
  }
  uint64_t cur = atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed);
  while (due < cur && !atomic_compare_exchange_weak(&hm_purge_due_ns, &cur, due)) {
  }
}

size_t hm_purge_disabled_count(void) { return atomic_load(&n_disabled); }

bool hm_purge_unused_now(uint64_t now) {
  if (hm_purge_mode == PURGE_EAGER) return true;
  if (hm_purge_mode == PURGE_OFF)
    hm_purge_count_disabled();
  else
    hm_purge_note_idle(now);
  return false;
}

void hm_purge_set_hooks(const hm_purge_hooks_t *h) { hooks = *h; }

size_t hm_purge_exit_begin(void) { return hooks.unused != NULL ? hooks.unused() : 0; }
unsigned hm_purge_exit_calls(void) { return hooks.exit_calls != NULL ? hooks.exit_calls() : 0; }
void hm_purge_exit_end(size_t unused_before, size_t given, unsigned calls) {
  if (hooks.thread_exited != NULL) hooks.thread_exited(unused_before, given, calls);
}

static __thread uint32_t seen_epoch __attribute__((tls_model("initial-exec")));

__thread uint32_t hm_tick_countdown __attribute__((tls_model("initial-exec"))) = 1;

/* Not due, no RSS limit and no step since this thread last looked: nothing
 * to do (the step checks the limit). After a step (the background
 * purger's too) the thread looks at its own empty current slabs, which
 * only it may release. */
void hm_purge_tick_clock(void) {
  uint64_t now = hm_now_ns();
  hm_tick_countdown = HM_TICK_EVERY;
  uint32_t epoch = atomic_load_explicit(&hm_purge_step_epoch, memory_order_relaxed);
  bool look = epoch != seen_epoch && hm_purge_mode == PURGE_LAZY;
  seen_epoch = epoch;
  if (now < atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed) && hm_rss_limit == 0 && !look) return;
  if (hooks.step != NULL) hooks.step(now, look);
  /* more is due at once (the step ran out of budget): look every time */
  if (atomic_load_explicit(&hm_purge_due_ns, memory_order_relaxed) <= now) hm_tick_countdown = 1;
}
