/* A watchdog for tests whose failure mode is a hang (deadlocks): the
 * scenario runs in a child process, in a process group of its own, and the
 * test fails, killing the whole group, if it has not exited 0 in time. */
#ifndef HAKMEM_TEST_WATCHDOG_H
#define HAKMEM_TEST_WATCHDOG_H

#include "test_common.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

static double tc_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Run fn(arg) in a child (which must exit 0 for success) and wait at most
 * timeout_s seconds for it. Call it while the process is single-threaded. */
static void __attribute__((unused)) tc_bounded(const char *what, void (*fn)(void *), void *arg, double timeout_s) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) FAILF("%s: fork of the watched child failed: %s", what, strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    fn(arg);
    _exit(0);
  }
  setpgid(pid, pid); /* (both sides, whichever runs first) */
  double t0 = tc_now();
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) FAILF("%s: waitpid: %s", what, strerror(errno));
    if (tc_now() - t0 > timeout_s) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAILF("%s: did not finish within %.0f s: deadlock (watchdog killed it)", what, timeout_s);
    }
    struct timespec d = {0, 10 * 1000 * 1000};
    nanosleep(&d, NULL);
  }
  kill(-pid, SIGKILL); /* any of its own children left behind */
  if (WIFSIGNALED(status)) FAILF("%s: killed by signal %d (%s)", what, WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAILF("%s: exited with status %d", what, WEXITSTATUS(status));
}

#endif
