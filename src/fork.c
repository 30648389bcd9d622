/* fork: which locks are held across it, and in which order against libc's
 * own fork-time locks (docs/DESIGN.md, "Fork"). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "internal.h"

#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define HM_SINGLE_THREADED() (__libc_single_threaded != 0)
#endif
#endif
#ifndef HM_SINGLE_THREADED
#define HM_SINGLE_THREADED() false
#endif

/* glibc's stdio list lock: recursive, exported (GLIBC_2.2.5) though no
 * longer declared in its headers. Weak: other C libraries lack it. */
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
extern void _IO_list_resetlock(void) __attribute__((weak));

/* Whether this fork's prepare handler took the locks. Forks of a
 * multi-threaded process are serialised by libc (its atfork lock, which
 * ThreadSanitizer does not see: hence an atomic); in a single-threaded one
 * a nested fork (from a signal handler) sets it false again, as the outer
 * one did. */
static _Atomic bool held;

static void fork_prepare(void) {
  /* Single-threaded: no other thread can hold a lock; this one may (a
   * signal handler forking inside malloc), so taking them could only
   * deadlock, and the child, a copy of this thread, releases what it holds
   * itself. The same when this thread holds or waits for one of hakmem's
   * locks (src/lock.h), whatever the other threads (the purger is one):
   * a handler's fork that interrupted it. */
  held = !HM_SINGLE_THREADED() && hm_tls_locks == 0;
  if (!held) return;
  /* glibc's fork takes its stdio list lock after this handler, and a
   * thread may allocate holding a FILE's lock (getdelim) while another
   * holding the list lock waits for that FILE: the list lock comes first,
   * as before glibc's own malloc locks (its fork takes it again: recursive). */
  if (_IO_list_lock) _IO_list_lock();
  hm_prof_fork_prepare(); /* (its lock is never held with another) */
  hm_purge_fork_prepare();
  hm_heap_fork_prepare();
  hm_backend_fork_prepare();
  hm_large_fork_prepare(); /* after the backend's: its OOM hook takes the lane's lock */
}

static void fork_parent(void) {
  if (!held) return;
  hm_large_fork_parent();
  hm_backend_fork_parent();
  hm_heap_fork_parent();
  hm_purge_fork_parent();
  hm_prof_fork_parent();
  if (_IO_list_unlock) _IO_list_unlock(); /* glibc has dropped its own count already */
}

static void fork_child(void) {
  if (!held) return;
  hm_large_fork_child();
  hm_backend_fork_child();
  hm_heap_fork_child();
  hm_purge_fork_child();
  hm_prof_fork_child();
  if (_IO_list_resetlock) _IO_list_resetlock(); /* (glibc has reset it before the handlers: idempotent) */
  hm_tls_locks = 0; /* (the profiler's lock, counted in prepare, is reset above) */
}

/* fork itself: the next definition's (libc's, or a sanitizer's), with the
 * asynchronous signals held back until it returns, so that no handler's
 * fork runs inside it (docs/DESIGN.md, "Fork"). Resolved at start-up:
 * dlsym is not async-signal-safe. */
typedef pid_t (*fork_fn)(void);
extern pid_t __fork(void) __attribute__((weak));
static _Atomic(fork_fn) next_fork; /* (a thread may fork while another starts hakmem up) */

__attribute__((visibility("default"))) pid_t fork(void) {
  fork_fn f = atomic_load_explicit(&next_fork, memory_order_acquire);
  if (f == NULL) f = __fork;
  if (f == NULL) {
    errno = ENOSYS;
    return -1;
  }
  sigset_t async, old;
  sigfillset(&async);
  /* (faults stay deliverable: blocked, the kernel would kill instead) */
  static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS};
  for (unsigned i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(&async, sync_signals[i]);
  pthread_sigmask(SIG_BLOCK, &async, &old);
  pid_t p = f();
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = e;
  return p;
}

void hm_fork_init(void) {
  fork_fn f = (fork_fn)dlsym(RTLD_NEXT, "fork");
  if (f != NULL && f != fork) atomic_store_explicit(&next_fork, f, memory_order_release);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}
