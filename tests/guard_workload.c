/* The guarded pool's misuse cases, one per run (test_guard.py runs each in
 * a child with libhakmem.so preloaded and HAKMEM_GUARD_SAMPLE=1, and checks
 * its stderr and wait status). Built without hakmem.
 *   guard_workload CASE SIZE
 * Prints "reached" on stdout just before the misuse, so a test knows the
 * child got there (and did not die earlier). Exit 3: no guarded block of
 * the placement the case needs could be found. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile char sink;

static void reached(void) {
  fputs("reached\n", stdout);
  fflush(stdout);
}

/* A block of n bytes placed against the page after it (right) or before
 * it (left), by malloc, calloc or memalign (how). */
static char *placed(size_t n, int right, const char *how) {
  for (int i = 0; i < 8; i++) {
    char *p = strcmp(how, "calloc") == 0 ? calloc(1, n) : strcmp(how, "memalign") == 0 ? memalign(64, n) : malloc(n);
    uintptr_t a = (uintptr_t)p;
    size_t r16 = (n + 15) & ~(size_t)15;
    int is_right = ((a + r16) & 4095) == 0 || (((a + n) & 4095) == 0);
    int is_left = (a & 4095) == 0;
    if ((right && is_right && !is_left) || (!right && is_left && !is_right) || (is_left && is_right)) return p;
  }
  fprintf(stderr, "no %s-placed guarded block of %zu bytes\n", right ? "right" : "left", n);
  exit(3);
}

/* The guarded pool's mapping: its records' pages (152 KiB, read and
 * write, 2 MiB aligned) start it; 8 MiB. */
static uintptr_t pool_base(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  uintptr_t base = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    unsigned long lo, hi;
    char perm[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3 && hi - lo == 159744 && lo % (2 << 20) == 0 &&
        perm[0] == 'r' && perm[1] == 'w')
      base = lo;
  }
  if (f != NULL) fclose(f);
  return base;
}

/* rate: ITERS mallocs (a random working set of WS slots), each thread's
 * pointers recorded; how many landed in the pool. Producer/consumer: one
 * thread mallocs, another frees (the producer never reuses its own frees). */
#define RATE_ITERS 1000000
static long rate_iters = RATE_ITERS;
static uintptr_t *rate_rec;
static void *rate_pc_queue[64];
static volatile unsigned rate_head, rate_tail;
static void *consumer(void *arg) {
  (void)arg;
  for (long i = 0; i < rate_iters; i++) {
    while (rate_tail == rate_head) sched_yield();
    free(rate_pc_queue[rate_tail % 64]);
    __atomic_store_n(&rate_tail, rate_tail + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}
static long rate(size_t n, int pc, long iters) {
  rate_iters = iters;
  rate_rec = calloc(iters, sizeof *rate_rec);
  enum { WS = 1000 };
  static void *slots[WS];
  unsigned x = 1;
  pthread_t t;
  if (pc) pthread_create(&t, NULL, consumer, NULL);
  for (long i = 0; i < iters; i++) {
    x = x * 1103515245 + 12345;
    size_t m = n + (x >> 20) % 64;
    void *p = malloc(m);
    rate_rec[i] = (uintptr_t)p;
    if (pc) {
      while (rate_head - __atomic_load_n(&rate_tail, __ATOMIC_ACQUIRE) >= 64) sched_yield();
      rate_pc_queue[rate_head % 64] = p;
      __atomic_store_n(&rate_head, rate_head + 1, __ATOMIC_RELEASE);
    } else {
      unsigned j = (x >> 8) % WS;
      free(slots[j]);
      slots[j] = p;
    }
  }
  if (pc) pthread_join(t, NULL);
  uintptr_t base = pool_base();
  long hits = 0;
  for (long i = 0; i < iters; i++) hits += base != 0 && rate_rec[i] >= base && rate_rec[i] < base + (8 << 20);
  return hits;
}

/* rate_site: batches of K mallocs of n bytes, each batch freed before the
 * next: the batch's first malloc (site A) finds its slab's free list empty
 * and takes the blocks freed (the fast path's swap), the others pop them.
 * Prints the pool's hits at A, then in all: sampling must not favour A. */
static void rate_site(size_t n) {
  enum { K = 64 };
  void *b[K];
  rate_rec = calloc(RATE_ITERS, sizeof *rate_rec);
  long batches = RATE_ITERS / K, at_a = 0, all = 0;
  for (long i = 0; i < batches; i++) {
    for (int j = 0; j < K; j++) rate_rec[i * K + j] = (uintptr_t)(b[j] = malloc(n));
    for (int j = 0; j < K; j++) free(b[j]);
  }
  uintptr_t base = pool_base();
  for (long i = 0; i < batches * K; i++) {
    int hit = base != 0 && rate_rec[i] >= base && rate_rec[i] < base + (8 << 20);
    all += hit;
    at_a += hit && i % K == 0;
  }
  printf("%ld %ld\n", at_a, all);
}

static void my_handler(int sig, siginfo_t *si, void *uc) {
  (void)si;
  (void)uc;
  (void)sig;
  static const char m[] = "program handler\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  _exit(42);
}
static struct sigaction saved_old;
/* a program handler installed after hakmem's that chains to the one it
 * replaced for faults it does not want (as crash reporters do) */
static void chaining_handler(int sig, siginfo_t *si, void *uc) {
  static const char m[] = "program handler, chaining\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  if (saved_old.sa_flags & SA_SIGINFO) saved_old.sa_sigaction(sig, si, uc);
  else if (saved_old.sa_handler != SIG_DFL && saved_old.sa_handler != SIG_IGN) saved_old.sa_handler(sig);
  else _exit(43);
}
static void install(void (*h)(int, siginfo_t *, void *), struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = h;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, old);
}
static int hakmem_handler_installed(void) {
  struct sigaction cur;
  sigaction(SIGSEGV, NULL, &cur);
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction != my_handler && cur.sa_sigaction != chaining_handler;
}

static void wild(void) {
  reached();
  sink = *(volatile char *)(uintptr_t)16; /* a real crash, outside the pool */
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *c = argv[1];
  size_t n = strtoul(argv[2], NULL, 10);
  const char *how = argc > 3 ? argv[3] : "malloc";
  /* (hakmem starts up on the first malloc, which is never sampled) */
  if (strcmp(c, "chain_before") == 0) install(my_handler, NULL);
  free(malloc(1));
  if (strcmp(c, "uaf") == 0) {
    char *p = placed(n, 1, how);
    p[0] = 1;
    free(p);
    reached();
    sink = p[n / 2];
  } else if (strcmp(c, "overflow") == 0) { /* one byte past, right-placed */
    char *p = placed(n, 1, how);
    reached();
    p[n] = 1;
    free(p);
  } else if (strcmp(c, "overflow_left") == 0) { /* one byte past, left-placed: found at free */
    char *p = placed(n, 0, how);
    reached();
    p[n] = 1;
    free(p);
  } else if (strcmp(c, "underflow") == 0) { /* one byte before, left-placed */
    char *p = placed(n, 0, how);
    reached();
    p[-1] = 1;
    free(p);
  } else if (strcmp(c, "rate") == 0 || strcmp(c, "rate_pc") == 0) {
    printf("%ld\n", rate(n, c[4] == '_', RATE_ITERS));
    return 0;
  } else if (strcmp(c, "budget") == 0) { /* a hot loop (its samples, seconds), a pause, a few mallocs */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    long hot = rate(n, 0, RATE_ITERS);
    clock_gettime(CLOCK_MONOTONIC, &b);
    usleep(700000);
    printf("%ld %.3f %ld\n", hot, (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9,
           rate(n, 0, 12000));
    return 0;
  } else if (strcmp(c, "rate_site") == 0) {
    rate_site(n);
    return 0;
  } else if (strcmp(c, "usable") == 0) { /* the bytes up to the usable size are the program's */
    char *p = placed(n, 1, how), *q = placed(n, 0, how);
    size_t u = malloc_usable_size(p);
    if (u < n || u != malloc_usable_size(q)) return 15;
    memset(p, 1, u);
    memset(q, 1, u);
    free(p);
    free(q);
    reached();
    return 0;
  } else if (strcmp(c, "double") == 0) {
    char *p = placed(n, 1, how);
    free(p);
    reached();
    free(p);
  } else if (strcmp(c, "realloc") == 0) { /* realloc, usable size, then the old block is freed */
    char *p = placed(n, 1, how);
    memset(p, 7, n);
    if (malloc_usable_size(p) < n) return 4;
    char *q = realloc(p, 2 * n);
    for (size_t i = 0; i < n; i++)
      if (q[i] != 7) return 5;
    if (malloc_usable_size(q) < 2 * n) return 6;
    q = realloc(q, n / 2 + 1);
    for (size_t i = 0; i < n / 2 + 1; i++)
      if (q[i] != 7) return 7;
    free(q);
    reached();
    sink = p[0];
  } else if (strcmp(c, "full") == 0) { /* more blocks than the pool holds: all usable */
    enum { N = 6000 };
    static char *ps[N];
    for (int i = 0; i < N; i++) {
      ps[i] = malloc(n);
      if (ps[i] == NULL) return 8;
      memset(ps[i], i & 0xff, n);
    }
    for (int i = 0; i < N; i++) {
      for (size_t j = 0; j < n; j++)
        if ((unsigned char)ps[i][j] != (i & 0xff)) return 9;
      free(ps[i]);
    }
    reached();
    return 0;
  } else if (strcmp(c, "resident") == 0) { /* freed multi-page blocks: KiB left resident in PROT_NONE pages */
    enum { N = 16 }; /* the multi-page burst */
    static char *ps[N];
    for (int i = 0; i < N; i++) {
      ps[i] = malloc(n);
      if (ps[i] == NULL) return 8;
      memset(ps[i], 1, n);
    }
    for (int i = 0; i < N; i++) free(ps[i]);
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL) return 10;
    char line[512], perm[8] = "";
    unsigned long kb, total = 0;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "%*x-%*x %7s", perm) == 1) continue;
      if (sscanf(line, "Rss: %lu kB", &kb) == 1 && strcmp(perm, "---p") == 0) total += kb;
    }
    fclose(f);
    printf("%lu\n", total);
    return 0;
  } else if (strcmp(c, "fork") == 0) { /* a child keeps allocating, guarding, catching */
    char *p = placed(n, 1, how);
    memset(p, 1, n);
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < 1000; i++) free(malloc(n + (size_t)i));
      if (p[n - 1] != 1) _exit(10);
      free(p);
      reached();
      sink = p[0]; /* the child's use-after-free: reported there */
      _exit(11);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) return 12;
    free(p);
    return 0;
  } else if (strcmp(c, "chain_none") == 0) { /* no handler: dies of SIGSEGV */
    free(malloc(n));
    if (!hakmem_handler_installed()) return 13;
    wild();
  } else if (strcmp(c, "chain_kill") == 0) { /* SIGSEGV sent by kill: dies of it */
    free(malloc(n));
    if (!hakmem_handler_installed()) return 13;
    reached();
    kill(getpid(), SIGSEGV);
    sleep(5);
    return 14;
  } else if (strcmp(c, "chain_before") == 0) { /* the program's handler (above), then hakmem's */
    char *p = malloc(n);
    if (!hakmem_handler_installed()) return 13;
    if (argc > 3 && strcmp(argv[3], "uaf") == 0) { /* hakmem's still catches its own */
      free(p);
      p = placed(n, 1, "malloc");
      free(p);
      reached();
      sink = p[0];
    }
    wild();
  } else if (strcmp(c, "chain_after") == 0) { /* hakmem's, then the program's, chaining */
    free(malloc(n));
    if (!hakmem_handler_installed()) return 13;
    install(chaining_handler, &saved_old);
    if (argc > 3 && strcmp(argv[3], "uaf") == 0) {
      char *p = placed(n, 1, "malloc");
      free(p);
      reached();
      sink = p[0];
    }
    wild();
  } else {
    return 2;
  }
  return 20; /* the misuse went unnoticed */
}
