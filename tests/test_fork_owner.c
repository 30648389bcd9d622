/* After fork, a thread the child starts may get the thread pointer of a
 * thread that ran in the parent (libc reuses the parent threads' stacks,
 * and the thread's descriptor lies in its stack). free tells its owner by
 * that pointer (docs/DESIGN.md, "Threads"), and the parent thread's heap
 * still owns its SuperSlabs in the child: the new thread's frees of those
 * blocks must be other threads' frees, not pushes on slabs it would then
 * take for its own heap.
 *
 * Thread T allocates blocks and is still running at the fork. In the child,
 * thread X is started; when it got T's thread pointer (the usual case with
 * glibc), it frees T's blocks, and hakmem's counters (built with
 * HAKMEM_FAST_COUNTERS) must show no owner's free among them. Skipped (77)
 * when X got another pointer. */
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
    fprintf(stderr, "fork_owner: %zu of T's %d blocks freed as the new thread's own (%zu as others')\n", l1 - l0, N,
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

int main(void) {
  tc_test_name = "fork_owner";
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
  if (WEXITSTATUS(status) == 77) {
    printf("fork_owner: skipped: the child's thread got another thread pointer\n");
    return 77;
  }
  if (WEXITSTATUS(status) != 0) FAILF("child exited with status %d", WEXITSTATUS(status));
  printf("fork_owner: the child's thread, with T's thread pointer, freed T's %d blocks as another thread's\n", N);
  return 0;
}
