/* fork: which locks are held across it, and in which order against libc's
 * own fork-time locks (docs/DESIGN.md, "Fork"). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

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
   * signal handler forking inside malloc or inside this very handler), so
   * taking them could only deadlock, and the child, a copy of this thread,
   * releases what it holds itself. */
  held = !HM_SINGLE_THREADED();
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
}

void hm_fork_init(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }
