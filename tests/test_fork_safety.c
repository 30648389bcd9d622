/* fork wherever glibc allows it (docs/DESIGN.md, "Fork"). Each scenario
 * runs under a watchdog (tests/test_watchdog.h): a deadlock fails the test.
 *
 *   stdio    one thread forks in a loop (the child _exits), one calls
 *            fflush(NULL) in a loop, one reads lines with getline (which
 *            reallocs its buffer under the FILE's lock), one opens, writes
 *            and closes files; some children use stdio and the heap
 *   signal   a single-threaded process whose SIGUSR1 handler forks, while
 *            the main loop forks and allocates; a timer sends SIGUSR1
 *   threads  several threads fork while others allocate and free across
 *            threads; each child checks and frees blocks from before the
 *            fork, allocates in every lane and starts threads of its own
 *   first    hakmem's first call in the process comes from a thread that
 *            holds stdout's lock, while a second waits for stdout in
 *            fflush(NULL) and a third forks (meaningful where hak_* run
 *            beside another malloc: the ThreadSanitizer build)
 *
 * test_fork_safety MODE [SECONDS] */
#define _GNU_SOURCE
#include "test_watchdog.h"

#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/single_threaded.h>

#ifdef USE_HAK_NAMES /* the ThreadSanitizer build: hakmem by its own names */
#include "hakmem.h"
#define malloc hak_malloc
#define calloc hak_calloc
#define realloc hak_realloc
#define free hak_free
#define memalign hak_memalign
#endif

static double run_seconds = 3;
static _Atomic int stop;

static void reap(pid_t pid, const char *what) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) FAILF("%s: waitpid: %s", what, strerror(errno));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) FAILF("%s: child failed (status %#x)", what, st);
}

static void pause_s(double secs) {
  struct timespec d = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
  while (nanosleep(&d, &d) != 0 && errno == EINTR) {
  }
}

/* ---- stdio ------------------------------------------------------------------ */

enum { NLINES = 48 };
static FILE *text; /* opened and unlinked by main */
static size_t line_len(unsigned i) { /* every lane: pool (direct sizes and above), large (packed and spans) */
  static const size_t lens[] = {7, 200, 3000, 40000, 300000, 700000};
  return lens[i % 6] + i;
}
static char line_char(unsigned i, size_t j) { return (char)('a' + (i * 7 + j) % 26); }

/* Every fourth child uses stdio and the heap, from two threads, before it
 * _exits: the list lock and hakmem's locks are usable in the child. */
static void *stdio_child_thread(void *arg) {
  for (int i = 0; i < 20; i++) {
    FILE *f = fopen("/dev/null", "w");
    if (f == NULL) _exit(3);
    fprintf(f, "%d\n", i);
    fclose(f);
    free(malloc((size_t)i * 40000 + 1));
  }
  return arg;
}
static void __attribute__((unused)) stdio_child(void) { /* (not called in the TSan build) */
  for (int i = 0; i < 20; i++) free(malloc((size_t)i * 50000 + 1));
  fflush(NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, stdio_child_thread, NULL)) _exit(4);
  stdio_child_thread(NULL);
  pthread_join(t, NULL);
  fflush(NULL);
  _exit(0);
}

static void *stdio_forker(void *arg) {
  long *n = arg;
  while (!atomic_load(&stop)) {
    pid_t p = fork();
    if (p < 0) {
      if (errno == EAGAIN) continue;
      FAILF("fork: %s", strerror(errno));
    }
#ifndef USE_HAK_NAMES /* (TSan's runtime does not support threads in such a child) */
    if (p == 0 && *n % 4 == 0) stdio_child();
#endif
    if (p == 0) _exit(0);
    reap(p, "stdio fork");
    ++*n;
  }
  return NULL;
}

/* FILEs come and go: fopen links one into the list, its first write
 * allocates its buffer under its lock, fclose unlinks and frees it. */
static void *stdio_opener(void *arg) {
  long *n = arg;
  while (!atomic_load(&stop)) {
    FILE *f = fopen("/dev/null", "w");
    if (f == NULL) FAILF("fopen /dev/null: %s", strerror(errno));
    fprintf(f, "%ld %s\n", *n, "some text to be buffered");
    if (fclose(f)) FAILF("fclose");
    ++*n;
  }
  return NULL;
}

static void *stdio_flusher(void *arg) {
  long *n = arg;
  while (!atomic_load(&stop)) {
    fflush(NULL);
    ++*n;
  }
  return NULL;
}

#ifdef USE_HAK_NAMES
/* Under TSan libc's getline uses TSan's malloc: this is getdelim's pattern
 * with hakmem's realloc (grow the buffer under the FILE's lock). */
static ssize_t read_line(char **line, size_t *cap, FILE *f) {
  size_t n = 0;
  flockfile(f);
  for (int c; (c = getc_unlocked(f)) != EOF;) {
    if (n + 2 > *cap) {
      size_t want = *cap < 120 ? 120 : *cap * 2;
      char *q = realloc(*line, want);
      if (q == NULL) FAILF("realloc(%zu)", want);
      *line = q, *cap = want;
    }
    (*line)[n++] = (char)c;
    if (c == '\n') break;
  }
  funlockfile(f);
  if (n == 0) return -1;
  (*line)[n] = '\0';
  return (ssize_t)n;
}
#else
#define read_line getline
#endif

static void *stdio_reader(void *arg) {
  long *n = arg;
  FILE *f = text;
  while (!atomic_load(&stop)) {
    rewind(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    for (unsigned i = 0; (got = read_line(&line, &cap, f)) > 0; i++) {
      size_t want = line_len(i % NLINES);
      if ((size_t)got != want + 1) FAILF("line %u: %zd bytes, expected %zu", i, got, want + 1);
      for (size_t j = 0; j < want; j += 997)
        if (line[j] != line_char(i % NLINES, j)) FAILF("line %u corrupted at byte %zu", i, j);
      if (i % 2 == 0) { /* a fresh buffer: getline reallocs it up again */
        free(line);
        line = NULL;
        cap = 0;
      }
      ++*n;
    }
    free(line);
  }
  return NULL;
}

static void scenario_stdio(void *unused) {
  (void)unused;
  long forks = 0, flushes = 0, lines = 0, opens = 0;
  pthread_t t[4];
  if (pthread_create(&t[0], NULL, stdio_reader, &lines) || pthread_create(&t[1], NULL, stdio_flusher, &flushes) ||
      pthread_create(&t[2], NULL, stdio_forker, &forks) || pthread_create(&t[3], NULL, stdio_opener, &opens))
    FAILF("pthread_create");
  pause_s(run_seconds);
  atomic_store(&stop, 1);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  printf("stdio: %ld forks, %ld fflush(NULL), %ld lines read, %ld files opened in %.1f s\n", forks, flushes, lines,
         opens, run_seconds);
  if (forks == 0 || flushes == 0 || lines == 0 || opens == 0) FAILF("no progress");
}

/* ---- first ------------------------------------------------------------------ */

/* The cycle start-up must not close (docs/DESIGN.md, "Start-up, fork,
 * options and statistics"): main holds stdout's lock; the flusher holds
 * libc's list lock, waiting for stdout; the forker holds libc's atfork
 * lock, waiting for the list lock; main's first hakmem call registering
 * fork handlers would wait for the atfork lock. */
static void *first_flusher(void *arg) {
  fflush(NULL);
  return arg;
}
static void *first_forker(void *arg) {
  pid_t p = fork();
  if (p < 0) FAILF("fork: %s", strerror(errno));
  if (p == 0) _exit(0);
  reap(p, "first: fork");
  return arg;
}

static void scenario_first(void *unused) {
  (void)unused;
  pthread_t fl, fk;
  flockfile(stdout);
  if (pthread_create(&fl, NULL, first_flusher, NULL)) FAILF("pthread_create");
  pause_s(0.2); /* (the flusher is waiting for stdout) */
  if (pthread_create(&fk, NULL, first_forker, NULL)) FAILF("pthread_create");
  pause_s(0.2); /* (the forker is waiting for the list lock) */
  char *p = malloc(100);
  if (p == NULL) FAILF("malloc(100)");
  memset(p, 1, 100);
  funlockfile(stdout);
  pthread_join(fl, NULL);
  pthread_join(fk, NULL);
  free(p);
  printf("first: hakmem started beside a waiting fork\n");
}

/* ---- signal ----------------------------------------------------------------- */

static volatile sig_atomic_t handler_forks, handler_stop;
static timer_t tm;
/* one-shot, re-armed by the handler when it is done: however long its fork
 * takes on a loaded machine, the main loop gets 1 ms before the next one */
static const struct itimerspec one_ms = {{0, 0}, {0, 1000 * 1000}};

static void on_usr1(int sig) {
  (void)sig;
  int e = errno;
  pid_t p = fork();
  if (p == 0) _exit(0);
  if (p > 0) {
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    handler_forks = handler_forks + 1;
  }
  if (!handler_stop) timer_settime(tm, 0, &one_ms, NULL);
  errno = e;
}

static void scenario_signal(void *unused) {
  (void)unused;
  if (!__libc_single_threaded) FAILF("the signal scenario needs a single-threaded process");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, NULL)) FAILF("sigaction");
  /* a POSIX timer signals the process itself: no helper thread */
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGUSR1;
  if (timer_create(CLOCK_MONOTONIC, &ev, &tm)) FAILF("timer_create: %s", strerror(errno));
  if (timer_settime(tm, 0, &one_ms, NULL)) FAILF("timer_settime");
  if (!__libc_single_threaded) FAILF("timer_create started a thread");
  tc_rng r = {42};
  double end = tc_now() + run_seconds;
  long forks = 0, allocs = 0;
  void *keep[64] = {0};
  size_t keep_n[64] = {0};
  while (tc_now() < end) {
    for (int k = 0; k < 64; k++) {
      unsigned s = (unsigned)tc_below(&r, 64);
      if (keep[s]) {
        CHECK_PATTERN(keep[s], keep_n[s], s, "signal: block %u", s);
        free(keep[s]);
      }
      uint64_t c = tc_below(&r, 100);
      keep_n[s] = c < 80 ? 1 + tc_below(&r, 1024) : c < 95 ? 1025 + tc_below(&r, 200000) : 300000 + tc_below(&r, 1 << 20);
      keep[s] = malloc(keep_n[s]);
      if (keep[s] == NULL) FAILF("malloc(%zu)", keep_n[s]);
      tc_fill(keep[s], keep_n[s], s);
      allocs++;
    }
    pid_t p = fork();
    if (p < 0) {
      if (errno == EAGAIN) continue;
      FAILF("fork: %s", strerror(errno));
    }
    if (p == 0) _exit(0);
    reap(p, "signal: main loop's fork");
    forks++;
  }
  handler_stop = 1;
  struct itimerspec off = {{0, 0}, {0, 0}};
  timer_settime(tm, 0, &off, NULL);
  for (int s = 0; s < 64; s++) free(keep[s]);
  /* (hakmem's purger, a thread, may have started: glibc's own fork then
   * takes its atfork lock, which a handler's fork inside it would wait on
   * forever without hakmem's fork: docs/DESIGN.md, "Fork") */
  printf("signal: %ld forks in the main loop, %ld in the handler, %ld mallocs in %.1f s (%s)\n", forks,
         (long)handler_forks, allocs, run_seconds,
         __libc_single_threaded ? "single-threaded" : "a second thread was started");
  if (forks == 0 || handler_forks == 0) FAILF("no progress");
}

/* ---- threads ---------------------------------------------------------------- */

enum { WORKERS = 6, FORKERS = 4, STABLE = 512, BOX = 128 };
static void *stable[WORKERS][STABLE]; /* written before the forks start, read by children */
static void *_Atomic box[BOX];         /* blocks handed between workers */
static _Atomic int ready;

static size_t stable_len(unsigned w, unsigned i) {
  return (size_t)((w * 131 + i * 37) % 3000) + 1 + (i % 61 == 0 ? 300000 : 0) + (i % 17 == 0 ? 40000 : 0);
}
static uint64_t stable_seed(unsigned w, unsigned i) { return (uint64_t)w << 32 | i; }
/* a handed-over block: its size and seed in its first 16 bytes */
static void *box_make(tc_rng *r) {
  uint64_t c = tc_below(r, 100);
  size_t n = 16 + (c < 90 ? tc_below(r, 1024) : c < 98 ? tc_below(r, 100000) : 300000 + tc_below(r, 500000));
  uint64_t *p = malloc(n);
  if (p == NULL) FAILF("malloc(%zu)", n);
  p[0] = n, p[1] = tc_next(r);
  tc_fill(p + 2, n - 16, p[1]);
  return p;
}
static void box_free(void *q) {
  if (q == NULL) return;
  uint64_t *p = q;
  CHECK_PATTERN(p + 2, p[0] - 16, p[1], "handed-over block");
  free(p);
}

static void *worker(void *arg) {
  unsigned w = (unsigned)(uintptr_t)arg;
  for (unsigned i = 0; i < STABLE; i++) {
    stable[w][i] = malloc(stable_len(w, i));
    if (stable[w][i] == NULL) FAILF("malloc");
    tc_fill(stable[w][i], stable_len(w, i), stable_seed(w, i));
  }
  atomic_fetch_add(&ready, 1);
  tc_rng r = {w + 100};
  void *local[64] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    unsigned k = (unsigned)tc_below(&r, 64);
    if (local[k]) {
      box_free(local[k]);
      local[k] = NULL;
    } else {
      local[k] = box_make(&r);
    }
    box_free(atomic_exchange(&box[tc_below(&r, BOX)], box_make(&r)));
  }
  for (int k = 0; k < 64; k++) box_free(local[k]);
  return NULL;
}

static void *child_thread(void *arg) {
  tc_rng r = {(uintptr_t)arg};
  void *v[32] = {0};
  for (int i = 0; i < 3000; i++) {
    unsigned k = (unsigned)tc_below(&r, 32);
    box_free(v[k]);
    v[k] = box_make(&r);
    if (i % 8 == 0) box_free(atomic_exchange(&box[tc_below(&r, BOX)], box_make(&r)));
  }
  for (int k = 0; k < 32; k++) box_free(v[k]);
  return NULL;
}

static void fork_child(unsigned f) {
  /* blocks of threads that do not exist here: intact, and free works */
  for (unsigned w = 0; w < WORKERS; w++)
    for (unsigned i = f; i < STABLE; i += FORKERS) {
      CHECK_PATTERN(stable[w][i], stable_len(w, i), stable_seed(w, i), "child: worker %u's block %u", w, i);
      free(stable[w][i]);
    }
  tc_rng r = {f + 7};
  void *v[256] = {0};
  for (int i = 0; i < 4000; i++) {
    unsigned k = (unsigned)tc_below(&r, 256);
    box_free(v[k]);
    v[k] = box_make(&r);
  }
#ifndef USE_HAK_NAMES /* (TSan's runtime does not support threads in such a child) */
  pthread_t t[2];
  for (uintptr_t i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, child_thread, (void *)(i + 1))) FAILF("child: pthread_create");
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
#else
  child_thread((void *)1);
#endif
  for (int k = 0; k < 256; k++) box_free(v[k]);
  _exit(0);
}

static _Atomic long nforks;
static void *forker(void *arg) {
  unsigned f = (unsigned)(uintptr_t)arg;
  while (!atomic_load(&stop)) {
    pid_t p = fork();
    if (p < 0) {
      if (errno == EAGAIN) continue;
      FAILF("fork: %s", strerror(errno));
    }
    if (p == 0) fork_child(f);
    reap(p, "threads: child");
    atomic_fetch_add(&nforks, 1);
  }
  return NULL;
}

static void scenario_threads(void *unused) {
  (void)unused;
  pthread_t w[WORKERS], f[FORKERS];
  for (uintptr_t i = 0; i < WORKERS; i++)
    if (pthread_create(&w[i], NULL, worker, (void *)i)) FAILF("pthread_create");
  while (atomic_load(&ready) < WORKERS) sched_yield();
  for (uintptr_t i = 0; i < FORKERS; i++)
    if (pthread_create(&f[i], NULL, forker, (void *)i)) FAILF("pthread_create");
  pause_s(run_seconds);
  atomic_store(&stop, 1);
  for (int i = 0; i < FORKERS; i++) pthread_join(f[i], NULL);
  for (int i = 0; i < WORKERS; i++) pthread_join(w[i], NULL);
  for (int b = 0; b < BOX; b++) box_free(atomic_exchange(&box[b], NULL));
  for (unsigned i = 0; i < WORKERS; i++)
    for (unsigned j = 0; j < STABLE; j++) {
      CHECK_PATTERN(stable[i][j], stable_len(i, j), stable_seed(i, j), "parent: worker %u's block %u", i, j);
      free(stable[i][j]);
    }
  printf("threads: %ld forks from %d threads beside %d allocating threads in %.1f s\n", (long)atomic_load(&nforks),
         FORKERS, WORKERS, run_seconds);
  if (atomic_load(&nforks) == 0) FAILF("no progress");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  tc_test_name = "fork_safety";
  if (argc > 2) run_seconds = atof(argv[2]);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(mode, "stdio") == 0) {
    /* the file the reader reads: lines in every lane, verified as read */
    if ((text = tmpfile()) == NULL) FAILF("tmpfile: %s", strerror(errno));
    for (unsigned i = 0; i < NLINES; i++) {
      for (size_t j = 0; j < line_len(i); j++) putc(line_char(i, j), text);
      putc('\n', text);
    }
    if (fflush(text)) FAILF("writing the text file");
    tc_bounded("stdio", scenario_stdio, NULL, run_seconds + 30);
  } else if (strcmp(mode, "signal") == 0) {
    tc_bounded("signal", scenario_signal, NULL, run_seconds + 30);
  } else if (strcmp(mode, "first") == 0) {
    tc_bounded("first", scenario_first, NULL, run_seconds + 30);
  } else if (strcmp(mode, "threads") == 0) {
    tc_bounded("threads", scenario_threads, NULL, run_seconds + 30);
  } else {
    fprintf(stderr, "usage: test_fork_safety stdio|signal|threads|first [seconds]\n");
    return 2;
  }
  return 0;
}
