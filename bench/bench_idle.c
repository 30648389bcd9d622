/* bench_idle: does memory freed in a burst go back to the OS while the
 * program goes on doing (next to) nothing with the allocator?
 *
 *   bench_idle MODE [MIB] [SECONDS] [--check]
 *
 * A child process allocates about MIB MiB (default 400) of 16-1024 B blocks,
 * writes them, frees them all, then, for SECONDS (default 3):
 *   sleep    sleeps;
 *   io       blocks in read(2) on a pipe nobody writes to;
 *   lowrate  malloc(100)/free once every 10 ms beside a live malloc(100)
 *            (so that the pair stays on the allocator's fast path);
 *   exit     (the burst made and freed by 2 threads, which then exit; the
 *            main thread joined them and sleeps).
 * The parent reads the child's RSS from /proc/<pid>/statm every 10 ms (the
 * child itself makes no call for it) and prints one line:
 *   mode=... peak_mib=... rss_1s_mib=... t10_ms=... end_mib=...
 * t10_ms: time from the end of the frees until RSS is at most 10% of the
 * peak (-1: never within SECONDS). With --check the exit status is 1 unless
 * t10_ms <= 1500 (the target of issue 18: the purge delay plus one second).
 * Plain C: runs under any allocator via LD_PRELOAD (scripts/bench.py). */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define NTHREADS 2

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static size_t rss_of(pid_t pid) {
  char path[64], buf[128];
  snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  unsigned long size = 0, res = 0;
  if (sscanf(buf, "%lu %lu", &size, &res) != 2) return 0;
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

static void put(int fd, char c) {
  if (write(fd, &c, 1) != 1) _exit(3);
}
static char get(int fd) {
  char c = 0;
  if (read(fd, &c, 1) != 1) return 0;
  return c;
}

/* ---- the child ----------------------------------------------------------- */

typedef struct {
  void **v;
  size_t n;
  uint64_t seed;
} burst_t;

static void burst_alloc(burst_t *b, size_t bytes) {
  b->n = bytes / 520; /* the mean block */
  b->v = malloc(b->n * sizeof *b->v);
  if (b->v == NULL) _exit(4);
  uint64_t x = b->seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < b->n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t n = 16 + (size_t)(x % 1009);
    b->v[i] = malloc(n);
    if (b->v[i] == NULL) _exit(4);
    memset(b->v[i], 0x5a, n);
  }
}

static void burst_free(burst_t *b) {
  for (size_t i = 0; i < b->n; i++) free(b->v[i]);
  free(b->v);
}

static int to_parent, from_parent;
static pthread_barrier_t made, go;

static void *worker(void *arg) {
  burst_t *b = arg;
  burst_alloc(b, b->n);
  pthread_barrier_wait(&made);
  pthread_barrier_wait(&go);
  burst_free(b);
  return NULL;
}

static void child(const char *mode, size_t bytes, double secs) {
  if (strcmp(mode, "exit") == 0) {
    pthread_t t[NTHREADS];
    burst_t b[NTHREADS];
    pthread_barrier_init(&made, NULL, NTHREADS + 1);
    pthread_barrier_init(&go, NULL, NTHREADS + 1);
    for (int i = 0; i < NTHREADS; i++) {
      b[i].n = bytes / NTHREADS; /* (the bytes, until the worker counts blocks) */
      b[i].seed = (uint64_t)i + 1;
      if (pthread_create(&t[i], NULL, worker, &b[i]) != 0) _exit(5);
    }
    pthread_barrier_wait(&made);
    put(to_parent, 'p'); /* at the peak */
    get(from_parent);
    pthread_barrier_wait(&go);
    for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
    put(to_parent, 'f'); /* freed, and the threads that freed it are gone */
    sleep_s(secs);
    return;
  }
  burst_t b = {NULL, 0, 7};
  burst_alloc(&b, bytes);
  put(to_parent, 'p');
  get(from_parent);
  burst_free(&b);
  put(to_parent, 'f');
  if (strcmp(mode, "sleep") == 0) {
    sleep_s(secs);
  } else if (strcmp(mode, "io") == 0) {
    get(from_parent); /* the parent writes nothing: blocked until it closes the pipe */
  } else { /* lowrate: a block of the class stays live, so its slab never empties */
    volatile char *keep = malloc(100);
    if (keep == NULL) _exit(4);
    keep[0] = 1;
    double end = now_s() + secs;
    while (now_s() < end) {
      volatile char *p = malloc(100);
      if (p == NULL) _exit(4);
      p[0] = 1;
      free((void *)p);
      sleep_s(0.01);
    }
  }
}

/* ---- the parent ---------------------------------------------------------- */

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "sleep";
  int check = 0, pos = 0;
  size_t mib = 400;
  double secs = 3.0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--check") == 0)
      check = 1;
    else if (pos++ == 0)
      mib = (size_t)atol(argv[i]);
    else
      secs = atof(argv[i]);
  }
  if (strcmp(mode, "sleep") && strcmp(mode, "io") && strcmp(mode, "lowrate") && strcmp(mode, "exit")) {
    fprintf(stderr, "usage: bench_idle sleep|io|lowrate|exit [MIB] [SECONDS] [--check]\n");
    return 2;
  }
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return 2;
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    to_parent = up[1];
    from_parent = down[0];
    child(mode, mib * MiB, secs + 1); /* (outlives the parent's last look, which kills it) */
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  if (get(up[0]) != 'p') {
    fprintf(stderr, "bench_idle: the child failed before its peak\n");
    return 2;
  }
  size_t peak = rss_of(pid);
  put(down[1], 'g');
  if (get(up[0]) != 'f') {
    fprintf(stderr, "bench_idle: the child failed while freeing\n");
    return 2;
  }
  double t0 = now_s(), t10 = -1, t;
  size_t at1 = 0, rss = 0;
  while ((t = now_s() - t0) < secs) {
    rss = rss_of(pid);
    if (t10 < 0 && rss <= peak / 10) t10 = t;
    if (at1 == 0 && t >= 1.0) at1 = rss;
    sleep_s(0.01);
  }
  close(down[1]); /* (io: the child's read returns) */
  int st = 0;
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  printf("bench_idle mode=%s peak_mib=%.1f rss_1s_mib=%.1f t10_ms=%.0f end_mib=%.1f\n", mode,
         (double)peak / MiB, (double)at1 / MiB, t10 < 0 ? -1.0 : t10 * 1e3, (double)rss / MiB);
  if (check && (t10 < 0 || t10 > 1.5)) {
    fprintf(stderr, "bench_idle %s: RSS did not reach 10%% of the %.1f MiB peak within 1.5 s\n", mode,
            (double)peak / MiB);
    return 1;
  }
  return 0;
}
