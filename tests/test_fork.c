/* fork() in a multi-threaded program leaves a usable heap in the child.
 *
 * Two background threads allocate and free continuously (mixed sizes, some
 * cross-thread frees) while the main thread forks repeatedly.  Each child:
 *   - verifies and frees blocks the parent (and a now-absent thread) allocated
 *     before the fork,
 *   - mallocs/frees many blocks with content checks (all lanes),
 *   - starts two threads of its own that allocate,
 *   - exits 0 through exit() (stdio flush, atexit).
 * The parent waits for each child and checks its status; a child that does
 * not finish within 60 s is reported as deadlocked. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

#define STABLE 2000
static void *stable_main[STABLE], *stable_bg[STABLE];
static size_t stable_sz(int i) { return (size_t)(i * 37 % 3000) + 1 + (i % 97 == 0 ? 300000 : 0); }

static _Atomic int stop;
static _Atomic int bg_ready;
static void *_Atomic mailbox[256]; /* blocks passed between the two bg threads */

static void *bg_thread(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  if (id == 0) {
    for (int i = 0; i < STABLE; i++) {
      stable_bg[i] = malloc(stable_sz(i));
      if (!stable_bg[i]) FAILF("malloc");
      tc_fill(stable_bg[i], stable_sz(i), 1000000u + (unsigned)i);
    }
  }
  atomic_fetch_add(&bg_ready, 1);
  tc_rng r = {id + 5};
  void *local[128] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    unsigned k = (unsigned)tc_below(&r, 128);
    if (local[k]) {
      free(local[k]);
      local[k] = NULL;
    } else {
      uint64_t c = tc_below(&r, 1000);
      size_t n = c < 900 ? tc_below(&r, 1025) : c < 995 ? 1025 + tc_below(&r, 100000) : 400000 + tc_below(&r, 1u << 20);
      local[k] = (c % 10 == 0) ? memalign(64, n) : malloc(n);
      if (!local[k]) FAILF("bg malloc(%zu) failed", n);
      memset(local[k], 0x11, n < 512 ? n : 512);
    }
    /* cross-thread traffic */
    unsigned m = (unsigned)tc_below(&r, 256);
    void *mine = malloc(64 + m);
    if (!mine) FAILF("malloc");
    void *theirs = atomic_exchange(&mailbox[m], mine);
    free(theirs);
  }
  for (int k = 0; k < 128; k++) free(local[k]);
  return NULL;
}

struct cthread_arg {
  unsigned id;
};
static void *child_thread(void *arg) {
  unsigned id = ((struct cthread_arg *)arg)->id;
  void *v[64];
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < 64; i++) {
      size_t n = (size_t)((i * 131 + round) % 2000) + 1;
      v[i] = malloc(n);
      if (!v[i]) FAILF("child thread malloc failed");
      tc_fill(v[i], n, id * 1000003u + (unsigned)(round * 64 + i));
    }
    for (int i = 0; i < 64; i++) {
      size_t n = (size_t)((i * 131 + round) % 2000) + 1;
      if (tc_verify(v[i], n, id * 1000003u + (unsigned)(round * 64 + i)) != (size_t)-1)
        FAILF("child thread: block corrupted");
      free(v[i]);
    }
  }
  return NULL;
}

static void child_main(int iter) {
  /* blocks from before the fork */
  for (int i = 0; i < STABLE; i++) {
    size_t bad = tc_verify(stable_main[i], stable_sz(i), (unsigned)i);
    if (bad != (size_t)-1) FAILF("child %d: parent's block %d corrupted at byte %zu", iter, i, bad);
    bad = tc_verify(stable_bg[i], stable_sz(i), 1000000u + (unsigned)i);
    if (bad != (size_t)-1) FAILF("child %d: background thread's block %d corrupted at byte %zu", iter, i, bad);
    free(stable_main[i]);
    free(stable_bg[i]);
  }
  /* the mailbox blocks belonged to threads that do not exist here */
  for (int m = 0; m < 256; m++) free(atomic_exchange(&mailbox[m], NULL));
  /* many allocations in every lane */
  enum { N = 4096 };
  void **v = malloc(N * sizeof *v);
  if (!v) FAILF("child %d: malloc of the pointer array failed", iter);
  for (int round = 0; round < 10; round++) {
    for (int i = 0; i < N; i++) {
      size_t n = (size_t)(i % 1024) + 1 + (i % 64 == 0 ? 70000 : 0) + (i % 1024 == 7 ? 2u << 20 : 0);
      v[i] = (i % 5 == 0) ? calloc(1, n) : malloc(n);
      if (!v[i]) FAILF("child %d: malloc(%zu) failed", iter, n);
      tc_fill(v[i], n < 300 ? n : 300, (uint64_t)i * 7 + (unsigned)round);
    }
    for (int i = 0; i < N; i++) {
      size_t n = (size_t)(i % 1024) + 1 + (i % 64 == 0 ? 70000 : 0) + (i % 1024 == 7 ? 2u << 20 : 0);
      if (tc_verify(v[i], n < 300 ? n : 300, (uint64_t)i * 7 + (unsigned)round) != (size_t)-1)
        FAILF("child %d: block corrupted", iter);
      if (i % 3 == 0) {
        v[i] = realloc(v[i], n * 2);
        if (!v[i]) FAILF("child realloc failed");
      }
      free(v[i]);
    }
  }
  free(v);
  pthread_t t[2];
  struct cthread_arg a[2] = {{1}, {2}};
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, child_thread, &a[i])) FAILF("child %d: pthread_create failed", iter);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  /* and the child can fork again (every other iteration) */
  if (iter % 2 == 0) {
    fflush(stdout);
    pid_t g = fork();
    if (g < 0) FAILF("child %d: fork of a grandchild failed", iter);
    if (g == 0) {
      for (int i = 0; i < 20000; i++) {
        void *p = malloc((size_t)(i % 5000) + 1);
        if (!p) _exit(2);
        memset(p, 1, (size_t)(i % 5000) + 1);
        free(p);
      }
      _exit(0);
    }
    int gst = 0;
    if (waitpid(g, &gst, 0) != g) FAILF("child %d: waitpid(grandchild)", iter);
    if (!WIFEXITED(gst) || WEXITSTATUS(gst) != 0) FAILF("child %d: grandchild failed (status %#x)", iter, gst);
  }
  /* stdio allocates too */
  char *s = NULL;
  if (asprintf(&s, "child %d done", iter) < 0 || !s) FAILF("asprintf in child");
  free(s);
  exit(0);
}

int main(int argc, char **argv) {
  tc_test_name = "fork";
  int iters = argc > 1 ? atoi(argv[1]) : (int)tc_scaled(40);
  for (int i = 0; i < STABLE; i++) {
    stable_main[i] = malloc(stable_sz(i));
    if (!stable_main[i]) FAILF("malloc");
    tc_fill(stable_main[i], stable_sz(i), (unsigned)i);
  }
  pthread_t bg[2];
  for (unsigned i = 0; i < 2; i++)
    if (pthread_create(&bg[i], NULL, bg_thread, (void *)(uintptr_t)i)) FAILF("pthread_create");
  while (atomic_load(&bg_ready) < 2) sched_yield();

  for (int it = 0; it < iters; it++) {
    /* let the background threads get going between forks */
    for (int k = 0; k < 2000; k++) free(malloc((size_t)k % 3000 + 1));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) FAILF("fork failed: %s", strerror(errno));
    if (pid == 0) child_main(it);
    int status = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
      pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) break;
      if (w < 0) FAILF("waitpid: %s", strerror(errno));
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec - t0.tv_sec > 60) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        FAILF("fork iteration %d: child did not finish within 60 s (deadlock in the child's heap after fork?)", it);
      }
      struct timespec d = {0, 2000000};
      nanosleep(&d, NULL);
    }
    if (WIFSIGNALED(status)) FAILF("fork iteration %d: child killed by signal %d (%s)", it, WTERMSIG(status),
                                   strsignal(WTERMSIG(status)));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      FAILF("fork iteration %d: child exited with status %d", it, WEXITSTATUS(status));
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(bg[i], NULL);
  for (int m = 0; m < 256; m++) free(atomic_exchange(&mailbox[m], NULL));
  /* the parent's heap is intact too */
  for (int i = 0; i < STABLE; i++) {
    size_t bad = tc_verify(stable_main[i], stable_sz(i), (unsigned)i);
    if (bad != (size_t)-1) FAILF("parent: block %d corrupted at byte %zu", i, bad);
    bad = tc_verify(stable_bg[i], stable_sz(i), 1000000u + (unsigned)i);
    if (bad != (size_t)-1) FAILF("parent: bg block %d corrupted at byte %zu", i, bad);
    free(stable_main[i]);
    free(stable_bg[i]);
  }
  printf("fork: %d forks with 2 allocating threads: all children exited 0\n", iters);
  return 0;
}
