/* Process start-up: options, the thread-exit key, fork handlers.
 *
 * Runs on the first allocation (which under LD_PRELOAD may come from the
 * loader or libc before main), so it must not allocate before it marks the
 * process ready; pthread_atfork, which may allocate, comes after. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "guard.h"
#include "internal.h"

_Atomic int hm_init_state;

static void fork_prepare(void) {
  hm_guard_fork_prepare(); /* (these two locks are never held with another) */
  hm_prof_fork_prepare();
  hm_purge_fork_prepare();
  hm_heap_fork_prepare();
  hm_backend_fork_prepare();
  hm_large_fork_prepare(); /* after the backend's: its OOM hook takes the lane's lock */
}
static void fork_parent(void) {
  hm_large_fork_parent();
  hm_backend_fork_parent();
  hm_heap_fork_parent();
  hm_purge_fork_parent();
  hm_prof_fork_parent();
  hm_guard_fork_parent();
}
static void fork_child(void) {
  hm_large_fork_child();
  hm_backend_fork_child();
  hm_heap_fork_child();
  hm_purge_fork_child();
  hm_prof_fork_child();
  hm_guard_fork_child();
}

void hm_init_slow(void) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&hm_init_state, &expected, 1)) {
    hm_options_init();
    if (hm_opt[HM_OPT_VERBOSE]) hm_options_print_config();
    hm_force_libc = (int)hm_opt[HM_OPT_FORCE_LIBC_ALLOC];
    hm_secure_init();
    hm_purge_init();
    /* the hooks (docs/DESIGN.md, "Hooks") */
    hm_backend_set_oom_release(hm_large_release);
    hm_backend_set_untouched(hm_large_cached_clean);
    hm_purge_start();
    hm_heap_process_init();
    hm_big_init();
    hm_prof_init();
    hm_guard_init();
    atomic_store_explicit(&hm_init_state, 2, memory_order_release);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    return;
  }
  while (atomic_load_explicit(&hm_init_state, memory_order_acquire) != 2) sched_yield();
}

int hak_debug_build(void) {
#ifdef HAKMEM_DEBUG
  return 1;
#else
  return 0;
#endif
}
