/* A program inside a 256 MiB memory cgroup (v1) whose live bytes never
 * exceed 60% of the limit, but which churns bursts of one size class after
 * another (each freed before the next), must complete (issue 18, item 3).
 *
 *   test_cgroup LIB [LIMIT_MIB]   makes a memory cgroup, runs itself in it as
 *                                 a child with LD_PRELOAD=LIB (none: "-"),
 *                                 prints the outcome, removes the cgroup
 *   test_cgroup --child MIB       the churn (what runs in the cgroup)
 *
 * Exit status 0: the child completed; 1: it was killed (the OOM killer) or
 * failed; 77 (ctest's skip): no writable cgroup v1 memory hierarchy here.
 * Plain C without hakmem's API, so that the same binary measures the other
 * allocators (docs/PERFORMANCE.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define CG_ROOT "/sys/fs/cgroup/memory"

/* Sizes of the bursts, one class after another: small, medium and big slab
 * classes, packed and spanned large blocks, and back. */
static const size_t sizes[] = {64, 1000, 6000, 40000, 200000, 700000, 3u << 20, 112, 12000, 120000, 400000, 80};
#define MIN_SIZE 64

static long rss_mib(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  long size = 0, res = 0;
  if (sscanf(buf, "%ld %ld", &size, &res) != 2) return -1;
  return res * sysconf(_SC_PAGESIZE) / (long)MiB;
}

static int child(size_t limit_mib) {
  int verbose = getenv("CHURN_VERBOSE") != NULL;
  /* 60% of the limit: the blocks, the array of their pointers (one per
   * MIN_SIZE bytes) and the program's own 8 MiB */
  size_t live = (limit_mib * MiB * 6 / 10 - 8 * MiB) / (MIN_SIZE + sizeof(void *)) * MIN_SIZE;
  size_t max_n = live / MIN_SIZE;
  void **v = malloc(max_n * sizeof *v);
  if (v == NULL) return 4;
  for (int round = 0; round < 2; round++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t sz = sizes[k], n = live / sz;
      if (n > max_n) n = max_n;
      for (size_t i = 0; i < n; i++) {
        v[i] = malloc(sz);
        if (v[i] == NULL) {
          fprintf(stderr, "churn: malloc(%zu) failed\n", sz);
          return 4;
        }
        memset(v[i], (int)(i & 0xff), sz); /* every page touched */
      }
      if (verbose) fprintf(stderr, "churn: burst %d.%zu of %zu B: RSS %ld MiB at the peak\n", round, k, sz, rss_mib());
      for (size_t i = 0; i < n; i++) free(v[i]);
      if (verbose) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(stderr, "churn: burst %d.%zu freed: RSS %ld MiB (max %ld)\n", round, k, rss_mib(), ru.ru_maxrss / 1024);
      }
    }
  free(v);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("churn: completed, 2 x %zu bursts of %zu MiB live, max RSS %ld MiB\n", sizeof sizes / sizeof sizes[0],
         live / MiB, ru.ru_maxrss / 1024);
  return 0;
}

static int write_file(const char *path, const char *s) {
  int fd = open(path, O_WRONLY);
  if (fd < 0) return -1;
  ssize_t n = write(fd, s, strlen(s));
  close(fd);
  return n == (ssize_t)strlen(s) ? 0 : -1;
}

static long read_num(const char *path) {
  char buf[64];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return atol(buf);
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--child") == 0) return child((size_t)atol(argv[2]));
  const char *lib = argc > 1 ? argv[1] : "-";
  size_t limit_mib = argc > 2 ? (size_t)atol(argv[2]) : 256;
  char dir[256], path[320], num[32];
  snprintf(dir, sizeof dir, CG_ROOT "/hakmem-test-%d", (int)getpid());
  if (mkdir(dir, 0755) != 0) {
    printf("SKIP: cannot make a cgroup v1 memory cgroup (%s: %s)\n", dir, strerror(errno));
    return 77;
  }
  snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
  snprintf(num, sizeof num, "%zu", limit_mib * MiB);
  if (write_file(path, num) != 0) {
    printf("SKIP: cannot set %s (%s)\n", path, strerror(errno));
    rmdir(dir);
    return 77;
  }
  int sync[2];
  if (pipe(sync) != 0) return 2;
  pid_t pid = fork();
  if (pid == 0) {
    char c;
    close(sync[1]);
    if (read(sync[0], &c, 1) != 1) _exit(3); /* moved into the cgroup by the parent */
    char mib[32];
    snprintf(mib, sizeof mib, "%zu", limit_mib);
    if (strcmp(lib, "-") != 0) setenv("LD_PRELOAD", lib, 1);
    execl("/proc/self/exe", argv[0], "--child", mib, (char *)NULL);
    _exit(3);
  }
  close(sync[0]);
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  snprintf(num, sizeof num, "%d", (int)pid);
  int moved = write_file(path, num);
  if (write(sync[1], "g", 1) != 1) return 2;
  close(sync[1]);
  int st = 0;
  waitpid(pid, &st, 0);
  snprintf(path, sizeof path, "%s/memory.max_usage_in_bytes", dir);
  long max_usage = read_num(path);
  snprintf(path, sizeof path, "%s/memory.failcnt", dir);
  long failcnt = read_num(path);
  rmdir(dir);
  if (moved != 0) {
    printf("SKIP: cannot move a process into %s\n", dir);
    return 77;
  }
  printf("cgroup %zu MiB, LD_PRELOAD=%s: %s (cgroup max usage %ld MiB, failcnt %ld)\n", limit_mib, lib,
         WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "completed"
         : WIFSIGNALED(st)                     ? (WTERMSIG(st) == SIGKILL ? "KILLED (SIGKILL: OOM)" : "killed by a signal")
                                               : "failed",
         max_usage / (long)MiB, failcnt);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
