/* Workloads for the heap profiler's tests (test_prof.py), run with
 * libhakmem.so preloaded: allocations at known, exported call sites (built
 * with -rdynamic so that the profile names them), in known amounts.
 *   prof_workload sites | leak | fork | threads | signal PATH | dump PATH | labels | trade | kept [realloc]
 * Prints "expect SITE alloc_bytes inuse_bytes" lines for the checker. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, used))

static void *volatile sink;

NOINLINE void *site_small(size_t n) { return malloc(n); }
NOINLINE void *site_mid(size_t n) { return malloc(n); }
NOINLINE void *site_big(size_t n) { return malloc(n); }
NOINLINE void *site_calloc(size_t n) { return calloc(1, n); }
NOINLINE void *site_realloc(void *p, size_t n) { return realloc(p, n); }
NOINLINE void *leak_site(size_t n) { return malloc(n); }
NOINLINE void *parent_site(size_t n) { return malloc(n); }
NOINLINE void *child_site(size_t n) { return malloc(n); }
NOINLINE void *thread_site(size_t n) { return malloc(n); }
NOINLINE void *two_sizes_site(size_t n) { return malloc(n); }
NOINLINE void *early_site(size_t n) { return malloc(n); }
NOINLINE void *late_site(size_t n) { return malloc(n); }
NOINLINE void *trade_site(size_t n) { return malloc(n); }
NOINLINE void *kept_site(size_t n) { return malloc(n); }

static void expect(const char *site, double alloc, double inuse) {
  printf("expect %s %.0f %.0f\n", site, alloc, inuse);
}

static void touch(void *p, size_t n) {
  if (p == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  memset(p, 0x5a, n < 64 ? n : 64);
  sink = p;
}

/* Small blocks freed at once, mid and big ones kept, calloc, realloc. */
static int run_sites(void) {
  enum { SMALL = 400000, MID = 4000, BIG = 200 };
  for (int i = 0; i < SMALL; i++) {
    void *p = site_small(40);
    touch(p, 40);
    free(p);
  }
  static void *keep[MID + BIG + MID];
  for (int i = 0; i < MID; i++) touch(keep[i] = site_mid(3000), 3000);
  for (int i = 0; i < BIG; i++) touch(keep[MID + i] = site_big(300000), 300000);
  for (int i = 0; i < MID; i++) touch(keep[MID + BIG + i] = site_calloc(2000), 2000);
  expect("site_small", 40.0 * SMALL, 0);
  expect("site_mid", 3000.0 * MID, 3000.0 * MID);
  expect("site_big", 300000.0 * BIG, 300000.0 * BIG);
  expect("site_calloc", 2000.0 * MID, 2000.0 * MID);
  fflush(stdout);
  /* keep them to the end: the profile is written at exit */
  return 0;
}

static int run_leak(void) {
  for (int i = 0; i < 20000; i++) {
    void *p = site_small(100);
    touch(p, 100);
    free(p);
  }
  for (int i = 0; i < 5000; i++) touch(leak_site(1000), 1000); /* never freed */
  expect("leak_site", 1000.0 * 5000, 1000.0 * 5000);
  usleep(300 * 1000); /* the leak report: the oldest at least 300 ms old */
  return 0;
}

static int run_fork(void) {
  for (int i = 0; i < 3000; i++) touch(parent_site(2000), 2000);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    for (int i = 0; i < 3000; i++) touch(child_site(2000), 2000);
    printf("child %d\n", (int)getpid());
    exit(0); /* the destructors run: the child writes its own profile */
  }
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
  printf("parent %d\n", (int)getpid());
  expect("parent_site", 2000.0 * 3000, 2000.0 * 3000);
  return 0;
}

/* Threads allocate; the blocks of each go to the next thread, which frees
 * them (frees from other threads than the allocating one). */
enum { THREADS = 4, PER_THREAD = 60000 };
static void *slots[THREADS][PER_THREAD];
static pthread_barrier_t barrier;

static void *thread_main(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < PER_THREAD; i++) touch(slots[t][i] = thread_site(256), 256);
  pthread_barrier_wait(&barrier);
  long other = (t + 1) % THREADS;
  for (int i = 0; i < PER_THREAD; i++) free(slots[other][i]);
  return NULL;
}

static int run_threads(void) {
  pthread_t th[THREADS];
  pthread_barrier_init(&barrier, NULL, THREADS);
  for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, thread_main, (void *)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  expect("thread_site", 256.0 * THREADS * PER_THREAD, 0);
  return 0;
}

/* SIGUSR2 writes the profile at once; renamed so that the exit's does not
 * overwrite it. */
static int run_signal(const char *path) {
  for (int i = 0; i < 4000; i++) touch(site_mid(3000), 3000);
  raise(SIGUSR2);
  char moved[4096];
  snprintf(moved, sizeof moved, "%s.sig", path);
  if (rename(path, moved) != 0) {
    perror("rename (no profile written on SIGUSR2)");
    return 1;
  }
  expect("site_mid", 3000.0 * 4000, 3000.0 * 4000);
  return 0;
}

static int run_dump(const char *path) {
  int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "hak_profile_dump");
  if (dump == NULL) {
    fprintf(stderr, "hak_profile_dump not found (hakmem not preloaded?)\n");
    return 1;
  }
  void *keep[4000];
  for (int i = 0; i < 4000; i++) touch(keep[i] = site_mid(3000), 3000);
  for (int i = 0; i < 2000; i++) free(keep[i]);
  for (int i = 0; i < 200; i++) { /* realloc moves sampled blocks: their free is seen */
    void *p = site_realloc(NULL, 100);
    touch(p, 100);
    p = site_realloc(p, 500000);
    touch(p, 500000);
    free(p);
  }
  if (dump(path) != 0) {
    perror("hak_profile_dump");
    return 1;
  }
  expect("site_mid", 3000.0 * 4000, 3000.0 * 2000);
  expect("site_realloc", 100.0 * 200 + 500000.0 * 200, 0);
  return 0;
}

/* One site, two sizes (the `bytes` label); live blocks 300 ms apart
 * (alloc_time_ms). All kept to the end. */
static int run_labels(void) {
  enum { N = 3000 };
  static void *keep[6 * N];
  for (int i = 0; i < N; i++) touch(keep[i] = early_site(2000), 2000);
  /* (about as many samples of each size; not interleaved: sample.c
   * charges a slab's free list when it is installed, so a mix of lanes
   * would shift samples between the sizes, not between sites) */
  for (int i = 0; i < N; i++) touch(keep[N + i] = two_sizes_site(5000), 5000);
  for (int i = 0; i < 3 * N; i++) touch(keep[2 * N + i] = two_sizes_site(1000), 1000);
  usleep(300 * 1000);
  for (int i = 0; i < N; i++) touch(keep[5 * N + i] = late_site(2000), 2000);
  expect("two_sizes_site", 8000.0 * N, 8000.0 * N);
  expect("early_site", 2000.0 * N, 2000.0 * N);
  expect("late_site", 2000.0 * N, 2000.0 * N);
  return 0;
}

/* Two threads trade blocks (each frees the other's and its own, then
 * mallocs again: hakmem's trading frees, whose pushes the next mallocs
 * take), in sizes of many classes: every malloc must still be charged. */
enum { TRADE_SLOTS = 4096, TRADE_ITERS = 200000 };
static void *_Atomic trade_slots[TRADE_SLOTS];
static double trade_bytes[2];

static void *trade_main(void *arg) {
  long t = (long)arg;
  unsigned x = 12345u + (unsigned)t * 777u;
  double bytes = 0;
  for (int i = 0; i < TRADE_ITERS; i++) {
    x = x * 1103515245u + 12345u;
    size_t n = 16 + (x >> 8) % 1000, m = 16 + (x >> 20) % 200;
    void *q = trade_site(n);
    touch(q, n);
    free(atomic_exchange(&trade_slots[(x >> 4) % TRADE_SLOTS], q));
    void *r = trade_site(m); /* its own block, freed at once */
    touch(r, m);
    free(r);
    bytes += (double)(n + m);
  }
  trade_bytes[t] = bytes;
  return NULL;
}

static int run_trade(void) {
  pthread_t th[2];
  for (long t = 0; t < 2; t++) pthread_create(&th[t], NULL, trade_main, (void *)t);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  for (int i = 0; i < TRADE_SLOTS; i++) free(trade_slots[i]);
  expect("trade_site", trade_bytes[0] + trade_bytes[1], 0);
  return 0;
}

/* At HAKMEM_PROFILE_RATE=1 (every malloc sampled): a sampled block freed
 * twice (or realloc'd after it), which the profiler keeps after its first
 * free (prof.c, "kept"): the second is reported; with HAKMEM_ON_ERROR=warn,
 * no block is handed out twice after it. */
static int run_kept(bool by_realloc) {
  enum { K = 64 };
  void *a = kept_site(100);
  touch(a, 100);
  printf("PTR %p\n", a); /* (before: stdout's buffer would take a kept block) */
  fflush(stdout);
  free(a);
  if (by_realloc) /* (warn mode: a copy, the block back to the lane) */
    free(realloc(sink, 200));
  else
    free(sink); /* (a: gcc sees it freed) */
  static void *v[K];
  for (int i = 0; i < K; i++) {
    touch(v[i] = kept_site(100), 100);
    for (int j = 0; j < i; j++)
      if (v[j] == v[i]) {
        printf("block %p handed out twice\n", v[i]);
        return 1;
      }
  }
  for (int i = 0; i < K; i++) free(v[i]);
  printf("CONTINUED\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (strcmp(argv[1], "sites") == 0) return run_sites();
  if (strcmp(argv[1], "leak") == 0) return run_leak();
  if (strcmp(argv[1], "fork") == 0) return run_fork();
  if (strcmp(argv[1], "threads") == 0) return run_threads();
  if (strcmp(argv[1], "signal") == 0 && argc > 2) return run_signal(argv[2]);
  if (strcmp(argv[1], "dump") == 0 && argc > 2) return run_dump(argv[2]);
  if (strcmp(argv[1], "labels") == 0) return run_labels();
  if (strcmp(argv[1], "trade") == 0) return run_trade();
  if (strcmp(argv[1], "kept") == 0) return run_kept(argc > 2 && strcmp(argv[2], "realloc") == 0);
  return 2;
}
