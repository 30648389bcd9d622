/* hakmem's mutexes, counted per thread: a fork from a signal handler that
 * interrupted this thread inside one must not wait for it (docs/DESIGN.md,
 * "Fork"). Slow paths only: the fast paths take no lock. */
#ifndef HM_LOCK_H
#define HM_LOCK_H

#include <pthread.h>
#include <stdatomic.h>

/* Locks this thread holds or is waiting for. Raised before the lock is
 * asked for and lowered after it is given back, so that a handler never
 * sees 0 while the thread is anywhere inside. */
extern __attribute__((visibility("hidden"))) __thread unsigned hm_tls_locks
    __attribute__((tls_model("initial-exec")));

static inline void hm_mutex_lock(pthread_mutex_t *m) {
  hm_tls_locks++;
  atomic_signal_fence(memory_order_seq_cst);
  pthread_mutex_lock(m);
}
static inline int hm_mutex_trylock(pthread_mutex_t *m) {
  hm_tls_locks++;
  atomic_signal_fence(memory_order_seq_cst);
  int rc = pthread_mutex_trylock(m);
  atomic_signal_fence(memory_order_seq_cst);
  if (rc != 0) hm_tls_locks--;
  return rc;
}
static inline void hm_mutex_unlock(pthread_mutex_t *m) {
  pthread_mutex_unlock(m);
  atomic_signal_fence(memory_order_seq_cst);
  hm_tls_locks--;
}

#endif
