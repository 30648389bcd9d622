/* free tells a block's owner by the thread pointer (docs/DESIGN.md,
 * "Threads"), which libc gives again to a new thread once the old one is
 * gone (the descriptor lies in the thread's stack, which libc reuses). A
 * heap left owning SuperSlabs by a thread whose pointer another thread may
 * get must not be taken for that thread's: its frees of those blocks are
 * other threads' frees, not pushes on slabs it would then take for its own
 * heap. Checked by hakmem's counters (built with HAKMEM_FAST_COUNTERS): no
 * owner's free among them. Skipped (77) when the new thread got another
 * pointer.
 *
 *   fork: thread T allocates and is still running at a fork; in the child,
 *         a new thread frees T's blocks (T's heap keeps its SuperSlabs).
 *   late: thread T allocates in the last round of its pthread key
 *         destructors, after hakmem's has given its heap up: no round is
 *         left for a heap made then; a thread started after T's exit frees
 *         those blocks.
 */
#define _GNU_SOURCE
#include "test_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "hakmem.h"

#define N 200

static void *blocks[N];
static pthread_t t_self;
static _Atomic int t_ready, t_stop;

static void *t_main(void *arg) {
  (void)arg;
  t_self = pthread_self();
  for (int i = 0; i < N; i++)
    if ((blocks[i] = malloc(48)) == NULL) FAILF("malloc");
  atomic_store(&t_ready, 1);
  while (!atomic_load(&t_stop)) {
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
  }
  return NULL;
}

static void frees_counted(size_t *local, size_t *remote) {
  static struct hak_stats st; /* (large: not on the stack) */
  hak_stats_get(&st);
  if (!st.counters) FAILF("built without HAKMEM_FAST_COUNTERS");
  *local = *remote = 0;
  for (int c = 0; c < HAK_STATS_CLASSES; c++) *local += st.cls[c].frees_local, *remote += st.cls[c].frees_remote;
}

static void *x_main(void *arg) {
  (void)arg;
  if (!pthread_equal(pthread_self(), t_self)) return (void *)77;
  free(malloc(100)); /* (a heap of its own, whose counters count its frees) */
  size_t l0, r0, l1, r1;
  frees_counted(&l0, &r0);
  for (int i = 0; i < N; i++) free(blocks[i]);
  frees_counted(&l1, &r1);
  if (l1 != l0) {
    fprintf(stderr, "owner_tag: %zu of T's %d blocks freed as the new thread's own (%zu as others')\n", l1 - l0, N,
            r1 - r0);
    return (void *)1;
  }
  /* the heap still serves the size */
  for (int i = 0; i < 4 * N; i++) {
    void *p = malloc(48);
    if (p == NULL) return (void *)1;
    memset(p, 0x5a, 48);
    free(p);
  }
  return (void *)0;
}

/* ---- fork ---- */
static int run_fork(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, t_main, NULL)) FAILF("pthread_create");
  while (!atomic_load(&t_ready)) sched_yield();
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) FAILF("fork: %s", strerror(errno));
  if (pid == 0) {
    pthread_t x;
    void *rc;
    if (pthread_create(&x, NULL, x_main, NULL) || pthread_join(x, &rc)) _exit(2);
    _exit((int)(intptr_t)rc);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) FAILF("waitpid: %s", strerror(errno));
  atomic_store(&t_stop, 1);
  pthread_join(t, NULL);
  for (int i = 0; i < N; i++) free(blocks[i]);
  if (WIFSIGNALED(status)) FAILF("child killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 77) FAILF("child exited with status %d", WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

/* ---- late: a heap made in the last destructor round ---- */
static pthread_key_t late_key;

/* Set again until its fourth call, the last round libc runs (hakmem's
 * destructor ran in the first); then it allocates. */
static void late_dtor(void *v) {
  uintptr_t call = (uintptr_t)v;
  if (call < 4) {
    pthread_setspecific(late_key, (void *)(call + 1));
    return;
  }
  for (int i = 0; i < N; i++)
    if ((blocks[i] = malloc(48)) == NULL) abort();
}

static void *late_main(void *arg) {
  (void)arg;
  t_self = pthread_self();
  free(malloc(100));
  pthread_setspecific(late_key, (void *)1);
  return NULL;
}

static int run_late(void) {
  /* (hakmem's key first, made by its start-up: libc runs each round's
   * destructors in key order, so hakmem's does not run after the last
   * round's allocation) */
  free(malloc(1));
  if (pthread_key_create(&late_key, late_dtor)) FAILF("pthread_key_create");
  pthread_t t, x;
  void *rc;
  if (pthread_create(&t, NULL, late_main, NULL) || pthread_join(t, NULL)) FAILF("pthread_create");
  if (blocks[N - 1] == NULL) FAILF("the destructor's fourth round did not run");
  if (pthread_create(&x, NULL, x_main, NULL) || pthread_join(x, &rc)) FAILF("pthread_create");
  return (int)(intptr_t)rc;
}

int main(int argc, char **argv) {
  tc_test_name = "owner_tag";
  const char *mode = argc > 1 ? argv[1] : "";
  int rc;
  if (strcmp(mode, "fork") == 0)
    rc = run_fork();
  else if (strcmp(mode, "late") == 0)
    rc = run_late();
  else
    FAILF("usage: test_owner_tag fork|late");
  if (rc == 77) {
    printf("owner_tag %s: skipped: the new thread got another thread pointer\n", mode);
    return 77;
  }
  if (rc != 0) FAILF("%s: the new thread took T's blocks for its own", mode);
  printf("owner_tag %s: a new thread with T's thread pointer freed T's %d blocks as another thread's\n", mode, N);
  return 0;
}
