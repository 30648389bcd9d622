/* Process start-up: options, the thread-exit key, fork handlers (src/fork.c).
 *
 * Runs on the first allocation (which under LD_PRELOAD may come from the
 * loader or libc before main), so it must not allocate before it marks the
 * process ready; pthread_atfork, which may allocate, comes after. And at
 * load time, so that a program calling hak_* beside another malloc does not
 * start hakmem later in a thread holding a FILE's lock (docs/DESIGN.md,
 * "Start-up, fork, options and statistics"). */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "guard.h"
#include "internal.h"

_Atomic int hm_init_state;

void hm_init_slow(void) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&hm_init_state, &expected, 1)) {
    hm_options_init();
    if (hm_opt[HM_OPT_VERBOSE]) hm_options_print_config();
    hm_force_libc = (int)hm_opt[HM_OPT_FORCE_LIBC_ALLOC];
    hm_secure_init();
    hm_unit_map_init();
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
    hm_guard_fork_init(); /* (first: its lock is taken last, guard.c) */
    hm_fork_init();       /* pthread_atfork: src/fork.c */
    return;
  }
  while (atomic_load_explicit(&hm_init_state, memory_order_acquire) != 2) sched_yield();
}

__attribute__((constructor)) static void init_at_load(void) { hm_ensure_init(); }

int hak_debug_build(void) {
#ifdef HAKMEM_DEBUG
  return 1;
#else
  return 0;
#endif
}
