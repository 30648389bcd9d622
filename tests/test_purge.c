/* Giving memory back: test_purge MODE [ARG]. The purge settings come from the
 * environment (tests/CMakeLists.txt sets them per test); RSS is read from
 * /proc/self/statm, OS calls from hak_os_stats_get. hakmem-specific.
 *
 *   off        HAKMEM_PURGE=off or HAKMEM_NO_MADVISE=1: madvise never called
 *   eager      HAKMEM_PURGE=eager: madvise as soon as memory is freed; a large
 *              block grown within its span is given back whole
 *   lazy       HAKMEM_PURGE_DELAY_MS=600: not before the delay, soon after
 *   trim       malloc_trim(0), hak_collect(false) and hak_collect(true)
 *   trim_big   malloc_trim(0) gives back the free blocks of big slabs between
 *              blocks in use (all but their first page), once
 *   reuse      purged memory reused: zeros, contents kept, honest byte counts
 *   race       threads reuse slabs while others purge them (no lost writes)
 *   bg         HAKMEM_BG_PURGE=on (or auto): RSS falls while the program sleeps; in a
 *              forked child too
 *   bg_control the same without the background purger: RSS stays
 *   auto on|off  HAKMEM_BG_PURGE=auto: no purger thread while at most the
 *              reserve is left unused; one, and RSS falls while the program
 *              sleeps, once more is (off: HAKMEM_BG_PURGE=off, neither)
 *   limit      HAKMEM_RSS_LIMIT_MB=32: freed memory goes back at once
 *   burst N    N MiB of small blocks freed, then low-rate activity: RSS below
 *              10% of the peak within about a second
 *   stats      HAKMEM_SS_OS_STATS=1 prints one well-formed line at exit
 *   steady     bench_random_mixed's loop at ws 400 and 40,000: no OS call
 *              after warm-up
 *   drain      HAKMEM_PURGE_DELAY_MS=0: one class raised to 64 MiB, 7 of 8
 *              blocks freed at random, then churned at that level: the
 *              slabs it no longer needs empty, go back, and are purged
 *   sparse_first  a sparse slab's free blocks are handed out before the
 *              current slab carves fresh ones
 *   big_lowest [trading]  a class of big slabs (blocks above 64 KiB) hands
 *              out its lowest free block: a few blocks in use at a time keep
 *              taking the same lowest ones, and the rest stay untouched
 *              (trading: after the thread freed another thread's block)
 *   big_idle given|kept  the free blocks at the top of a big slab, not
 *              handed out between two looks (1 s apart), are uncarved and
 *              given back in one call (kept: HAKMEM_PURGE=off or
 *              HAKMEM_BIG_IDLE_SPACING_MS=0); the ones in use keep their
 *              pages
 *   exit_now   HAKMEM_PURGE_DELAY_MS=60000: a thread frees 64 MiB of small
 *              blocks and exits; what it left unused is given back before
 *              pthread_join returns, the delay notwithstanding
 *   exit_shared HAKMEM_PURGE_DELAY_MS=60000 HAKMEM_PURGE_RANGES=0: two
 *              threads each leave 200 holes in packs in use and exit one
 *              after the other; the second exit gives back runs too (the
 *              first does not take the whole allowance of calls), and both
 *              together stay within what the time budget holds plus four
 *              seconds' worth. `exit_shared ranges` (HAKMEM_PURGE_RANGES=1):
 *              all 400 holes go back, 64 a call (skipped where the kernel's
 *              process_madvise cannot advise the calling process)
 *   exit_blocks [SIZE] HAKMEM_PURGE_DELAY_MS=60000: a thread frees every
 *              other of its 64 blocks of SIZE bytes (20 KiB) and exits; the
 *              freed ones keep none of the whole pages past their first 72
 *              bytes resident, the live ones all, and the blocks work when
 *              taken again (skipped where the kernel's
 *              process_madvise cannot advise the calling process)
 *   exit_unused HAKMEM_PURGE_DELAY_MS=60000: a thread empties a slab of 48 B
 *              blocks beside a live block and leaves free 20 KiB blocks;
 *              the call its exit makes for those takes the emptied slab's
 *              pages too (skipped as exit_blocks)
 *   exit_foreign HAKMEM_PURGE_DELAY_MS=60000: thread A's blocks of 20 KiB,
 *              freed by B into its foreign cache; A exits, then B: B's exit
 *              gives back their inner pages (skipped as exit_blocks)
 *   ranges_seccomp HAKMEM_PURGE_DELAY_MS=60000: under a seccomp filter that
 *              kills the process on process_madvise (as systemd's
 *              SystemCallFilter= does with calls it does not list), the
 *              exit_shared scenario completes with plain madvise calls
 *   pack_idle  free pages of a pack in use, idle while the large lane stays
 *              busy next to them, go back within a second or two, within
 *              20 calls a second
 *   pack_regret eight times a block of a pack is freed, idles 0.6 s beside a
 *              busy lane and is taken again: written only here and there
 *              (its ends and a page), its idle pages keep going back (at
 *              least 6 times of 8); written whole, the idle age backs off
 *              (at most 5). Skipped where process_madvise cannot advise
 *              the calling process (there every page taken again is regret) */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/wait.h>
#include <time.h>

#include "hakmem.h"

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

static struct hak_os_stats os(void) {
  struct hak_os_stats s;
  hak_os_stats_get(&s);
  return s;
}

typedef struct {
  void **v;
  size_t n;
} blocks_t;

/* About `bytes` of small blocks (16..1024 B), every byte written. */
static blocks_t fill_small(size_t bytes, uint64_t seed) {
  blocks_t b;
  b.n = bytes / 520;
  b.v = malloc(b.n * sizeof *b.v);
  CHECK(b.v, "malloc of the pointer array");
  tc_rng r = {seed};
  for (size_t i = 0; i < b.n; i++) {
    size_t n = 16 + tc_below(&r, 1009);
    b.v[i] = malloc(n);
    CHECK(b.v[i], "malloc(%zu)", n);
    memset(b.v[i], 0x5a, n);
  }
  return b;
}

/* `bytes` of 1 KiB blocks; all but one per 512 KiB are freed, so that most
 * slabs are unused inside SuperSlabs that stay in use. Returns the pinned. */
static blocks_t fill_pinned(size_t bytes) {
  blocks_t b;
  size_t n = bytes / 1024;
  b.v = malloc(n * sizeof *b.v);
  CHECK(b.v, "malloc of the pointer array");
  for (size_t i = 0; i < n; i++) {
    b.v[i] = malloc(1024);
    CHECK(b.v[i], "malloc(1024)");
    memset(b.v[i], 0x33, 1024);
  }
  b.n = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % 512 == 0)
      b.v[b.n++] = b.v[i];
    else
      free(b.v[i]);
  }
  return b;
}

static void free_all(blocks_t *b) {
  for (size_t i = 0; i < b->n; i++) free(b->v[i]);
  free(b->v);
  b->v = NULL;
  b->n = 0;
}

/* What a program does after a burst: every millisecond, 20 small random
 * allocations and frees over 100 live blocks. Runs until `until` returns
 * true or `secs` pass; returns the seconds it ran. */
static void *act_live[100];
static double activity(double secs, bool (*until)(void *), void *arg) {
  static tc_rng r = {99};
  double t0 = now_s();
  while (now_s() - t0 < secs) {
    if (until != NULL && until(arg)) break;
    for (int k = 0; k < 20; k++) {
      size_t j = tc_below(&r, 100);
      free(act_live[j]);
      act_live[j] = malloc(16 + tc_below(&r, 1009));
      CHECK(act_live[j], "malloc during activity");
      *(char *)act_live[j] = 1;
    }
    sleep_s(0.001);
  }
  return now_s() - t0;
}

static bool rss_below(void *limit) { return tc_rss_bytes() < *(size_t *)limit; }
static bool madvised(void *since) { return os().madvise_calls > *(size_t *)since; }

/* Resident pages of the 2 MiB from p (a cached large span stays mapped). */
/* Resident pages of [p, p+len), at most 2 MiB (mincore: nothing here reads
 * a page it did not write, so the zero page does not come in). */
static size_t resident_pages(const void *p, size_t len) {
  const uintptr_t page = 4096;
  uintptr_t a = (uintptr_t)p & ~(page - 1), e = ((uintptr_t)p + len + page - 1) & ~(page - 1);
  unsigned char vec[512];
  size_t n = (e - a) / page, r = 0;
  CHECK(n <= sizeof vec && mincore((void *)a, e - a, vec) == 0, "mincore");
  for (size_t i = 0; i < n; i++) r += vec[i] & 1u;
  return r;
}
static bool span_given_back(void *p) { return resident_pages(p, 2 * MiB) < 16; }

/* ---- modes ---------------------------------------------------------------- */

static void t_off(void) {
  blocks_t b = fill_small(64 * MiB, 1);
  size_t peak = tc_rss_bytes();
  free_all(&b);
  activity(0.5, NULL, NULL);
  CHECK(os().madvise_calls == 0, "%zu madvise calls with purging off", os().madvise_calls);
  CHECK(tc_rss_bytes() > peak / 2, "RSS fell from %zu to %zu MiB with purging off", peak / MiB,
        tc_rss_bytes() / MiB);
  /* malloc_trim still unmaps the cache: that is not madvise. (The bound is
   * loose: SuperSlabs holding one of the activity's live blocks stay, with
   * their touched pages, as nothing may be madvised; how many depends on
   * where those blocks land.) */
  malloc_trim(0);
  CHECK(tc_rss_bytes() < peak / 2, "malloc_trim left %zu of %zu MiB", tc_rss_bytes() / MiB, peak / MiB);
  CHECK(os().madvise_calls == 0, "malloc_trim called madvise with purging off");
}

static void t_eager(void) {
  blocks_t b = fill_small(64 * MiB, 2);
  size_t peak = tc_rss_bytes(), m0 = os().madvise_calls;
  free_all(&b);
  /* no waiting, no further call */
  size_t m1 = os().madvise_calls, rss = tc_rss_bytes();
  CHECK(m1 > m0, "no madvise right after freeing 64 MiB with HAKMEM_PURGE=eager");
  CHECK(rss < peak / 4, "RSS %zu of %zu MiB right after freeing with HAKMEM_PURGE=eager", rss / MiB, peak / MiB);
  printf("eager: %zu madvise calls for 64 MiB, RSS %zu -> %zu MiB\n", m1 - m0, peak / MiB, rss / MiB);
  /* A large block grown within its span: giving the span back covers all
   * the grown block touched, not only what the block first asked for. */
  char *p = malloc(1100 * 1024); /* (above the packs' 1 MiB: a span) */
  CHECK(p, "malloc(1100 KiB)");
  char *q = realloc(p, 1536 * 1024);
  CHECK(q == p, "realloc within a 2 MiB span moved the block");
  memset(q, 1, 1536 * 1024);
  free(q);
  activity(2.0, span_given_back, q);
  CHECK(span_given_back(q), "%zu pages of a freed 1.5 MiB block grown in place still resident", resident_pages(q, 2 * MiB));
}

static void t_lazy(void) {
  const double delay = 0.6; /* HAKMEM_PURGE_DELAY_MS=600 */
  /* 128 MiB: what stays (the program, the 4 MiB reserve, the background
   * purger's stack) is well under a tenth; at 64 MiB it was within 0.1 MiB */
  blocks_t b = fill_small(128 * MiB, 3);
  size_t peak = tc_rss_bytes(), m0 = os().madvise_calls;
  double t0 = now_s();
  free_all(&b);
  CHECK(os().madvise_calls == m0, "madvise while freeing, before the delay");
  CHECK(tc_rss_bytes() > peak / 2, "RSS fell at once with a 600 ms delay");
  activity(0.3, madvised, &m0);
  double t = now_s() - t0;
  if (t < delay - 0.05) /* the machine may have stalled us past it */
    CHECK(os().madvise_calls == m0, "madvise %.0f ms after the frees, before the 600 ms delay", t * 1e3);
  activity(3.0, madvised, &m0);
  double t_first = now_s() - t0;
  CHECK(os().madvise_calls > m0, "no madvise within 3 s of activity after a 600 ms delay");
  CHECK(t_first >= delay - 0.01, "first madvise %.0f ms after the frees, before the 600 ms delay", t_first * 1e3);
  size_t target = peak / 10;
  activity(3.0, rss_below, &target);
  double t_low = now_s() - t0;
  CHECK(tc_rss_bytes() < target, "RSS %zu MiB of a %zu MiB peak 3 s after the delay", tc_rss_bytes() / MiB,
        peak / MiB);
  printf("lazy: first madvise after %.0f ms, RSS below 10%% after %.0f ms\n", t_first * 1e3, t_low * 1e3);
}

/* another thread's unused memory, for hak_collect(true) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int phase;

static void *pinned_thread(void *arg) {
  (void)arg;
  blocks_t b = fill_pinned(64 * MiB);
  pthread_mutex_lock(&mu);
  phase = 1;
  pthread_cond_broadcast(&cv);
  while (phase != 2) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  free_all(&b);
  return NULL;
}

static void t_trim(void) {
  /* HAKMEM_PURGE_DELAY_MS=60000: nothing goes back by itself */
  blocks_t b = fill_small(64 * MiB, 4);
  size_t peak = tc_rss_bytes();
  free_all(&b);
  CHECK(tc_rss_bytes() > peak / 2, "RSS fell without a trim");
  CHECK(malloc_trim(0) == 1, "malloc_trim(0) returned 0 with 64 MiB free");
  CHECK(tc_rss_bytes() < peak / 10, "malloc_trim left %zu of %zu MiB", tc_rss_bytes() / MiB, peak / MiB);

  /* unused slabs inside SuperSlabs still in use, this thread's */
  size_t base = tc_rss_bytes();
  b = fill_pinned(64 * MiB);
  size_t high = tc_rss_bytes();
  CHECK(high > base + 48 * MiB, "pinned pattern: RSS only %zu -> %zu MiB", base / MiB, high / MiB);
  CHECK(hak_collect(false) == 1, "hak_collect(false) returned 0");
  size_t after = tc_rss_bytes();
  CHECK(after < base + 20 * MiB, "hak_collect(false): RSS %zu -> %zu MiB (base %zu)", high / MiB, after / MiB,
        base / MiB);
  free_all(&b);
  hak_collect(false);

  /* another thread's: only hak_collect(true) reaches it */
  base = tc_rss_bytes();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, pinned_thread, NULL) == 0, "pthread_create");
  pthread_mutex_lock(&mu);
  while (phase != 1) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  high = tc_rss_bytes();
  hak_collect(false);
  size_t mid = tc_rss_bytes();
  CHECK(mid > base + 40 * MiB, "hak_collect(false) gave back another thread's slabs (%zu -> %zu MiB)", high / MiB,
        mid / MiB);
  CHECK(hak_collect(true) == 1, "hak_collect(true) returned 0");
  after = tc_rss_bytes();
  CHECK(after < base + 20 * MiB, "hak_collect(true): RSS %zu -> %zu MiB (base %zu)", mid / MiB, after / MiB,
        base / MiB);
  pthread_mutex_lock(&mu);
  phase = 2;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(t, NULL);
  printf("trim: pinned other thread %zu -> %zu MiB after hak_collect(true)\n", mid / MiB, after / MiB);
}

/* The free blocks of big slabs between blocks in use: malloc_trim gives
 * back their pages (all but each block's first), once; the blocks in use
 * keep their contents, and the freed ones work when handed out again. */
static void t_trim_big(void) {
  enum { N = 40 };
  const size_t bs = 256 << 10; /* 7 to a 2 MiB slab */
  static unsigned char *v[N];
  for (int i = 0; i < N; i++) {
    CHECK((v[i] = malloc(bs)) != NULL, "malloc(%zu)", bs);
    memset(v[i], 0x50 + i % 16, bs);
  }
  for (int i = 0; i < N; i += 2) free(v[i]);
  size_t before = tc_rss_bytes();
  struct hak_os_stats a = os();
  CHECK(malloc_trim(0) == 1, "malloc_trim(0) returned 0 with %d big blocks free", N / 2);
  struct hak_os_stats b = os();
  size_t after = tc_rss_bytes();
  size_t expect = (size_t)(N / 2) * (bs - 4096);
  printf("trim_big: %d free blocks of 256 KiB between blocks in use: RSS %zu -> %zu KiB, %zu madvise calls\n", N / 2,
         before >> 10, after >> 10, b.madvise_calls - a.madvise_calls);
  CHECK(before > after && before - after >= expect - expect / 8, "malloc_trim gave back %zd KiB of the %zu KiB free",
        (ssize_t)(before - after) / 1024, expect >> 10);
  CHECK(b.madvise_calls - a.madvise_calls >= N / 2, "%zu madvise calls for %d free blocks",
        b.madvise_calls - a.madvise_calls, N / 2);
  malloc_trim(0);
  struct hak_os_stats c = os();
  CHECK(c.madvise_calls - b.madvise_calls < N / 2, "a second malloc_trim gave the blocks back again (%zu calls)",
        c.madvise_calls - b.madvise_calls);
  for (int i = 1; i < N; i += 2)
    for (size_t k = 0; k < bs; k += 4096)
      CHECK(v[i][k] == 0x50 + i % 16 && v[i][bs - 1] == 0x50 + i % 16, "block %d in use lost its contents", i);
  for (int i = 0; i < N; i += 2) {
    CHECK((v[i] = malloc(bs)) != NULL, "malloc(%zu)", bs);
    memset(v[i], 0x60, bs);
  }
  for (int i = 0; i < N; i++) free(v[i]);
}

static void t_reuse(void) {
  blocks_t b = fill_pinned(64 * MiB);
  hak_collect(true);
  struct hak_os_stats s1 = os();
  CHECK(s1.purged_bytes > 32 * MiB, "purged_bytes %zu KiB after hak_collect", s1.purged_bytes / 1024);
  CHECK(s1.purged_bytes <= s1.committed_bytes, "purged %zu > committed %zu", s1.purged_bytes, s1.committed_bytes);
  /* the same slabs again: calloc reads zeros, contents stick */
  enum { N = 60000 };
  void **v = malloc(N * sizeof *v);
  CHECK(v, "malloc");
  for (size_t i = 0; i < N; i++) {
    v[i] = calloc(1, 1024);
    CHECK(v[i], "calloc");
    CHECK(tc_find_not(v[i], 1024, 0) == (size_t)-1, "calloc'd block %zu not zero", i);
    tc_fill(v[i], 1024, i);
  }
  struct hak_os_stats s2 = os();
  CHECK(s2.purged_bytes + 32 * MiB < s1.purged_bytes, "purged_bytes %zu -> %zu KiB after reusing 58 MiB",
        s1.purged_bytes / 1024, s2.purged_bytes / 1024);
  CHECK(s2.committed_bytes - s2.purged_bytes >= (size_t)N * 1024, "committed-purged %zu KiB < live %zu KiB",
        (s2.committed_bytes - s2.purged_bytes) / 1024, (size_t)N);
  for (size_t i = 0; i < N; i++) CHECK_PATTERN(v[i], 1024, i, "reused block %zu", i);
  for (size_t i = 0; i < N; i++) free(v[i]);
  free(v);
  free_all(&b);
}

/* Workers empty and refill slabs (and SuperSlabs) with checked contents
 * while the main thread purges everything unused, over and over: a slab
 * given back while in use would lose its contents. */
static _Atomic int race_stop;
static void *race_worker(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  enum { M = 2048 };
  void **v = calloc(M, sizeof *v);
  CHECK(v, "calloc");
  size_t sizes[] = {48, 1000, 6000, 40000, 200000};
  for (uint64_t round = 0; !race_stop; round++) {
    size_t n = sizes[round % 5], m = n >= 200000 ? 64 : M;
    for (size_t i = 0; i < m; i++) {
      v[i] = malloc(n);
      CHECK(v[i], "malloc");
      tc_fill(v[i], n, id * 1000003 + round * 7919 + i);
    }
    sched_yield();
    for (size_t i = 0; i < m; i++) {
      CHECK_PATTERN(v[i], n, id * 1000003 + round * 7919 + i, "round %llu block %zu size %zu",
                    (unsigned long long)round, i, n);
      free(v[i]);
    }
  }
  free(v);
  return NULL;
}

static void t_race(void) {
  /* HAKMEM_PURGE_DELAY_MS=0: every step gives back everything unused */
  pthread_t t[3];
  CHECK(pthread_create(&t[0], NULL, race_worker, (void *)1) == 0, "pthread_create");
  CHECK(pthread_create(&t[1], NULL, race_worker, (void *)2) == 0, "pthread_create");
  CHECK(pthread_create(&t[2], NULL, race_worker, (void *)3) == 0, "pthread_create");
  double t0 = now_s();
  unsigned n = 0;
  while (now_s() - t0 < 1.5 * tc_scale()) {
    hak_collect(true);
    n++;
  }
  race_stop = 1;
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  struct hak_os_stats s = os();
  CHECK(s.madvise_calls > 0, "no madvise in the race");
  printf("race: %u hak_collect(true) calls, %zu madvise calls, contents intact\n", n, s.madvise_calls);
}

static void wait_rss_fall(size_t peak, double secs, const char *what) {
  double t0 = now_s();
  while (tc_rss_bytes() >= peak / 10 && now_s() - t0 < secs) sleep_s(0.02);
  size_t rss = tc_rss_bytes();
  CHECK(rss < peak / 10, "%s: RSS %zu of %zu MiB after %.1f s without calls", what, rss / MiB, peak / MiB, secs);
  printf("%s: RSS %zu -> %zu MiB after %.0f ms asleep\n", what, peak / MiB, rss / MiB, (now_s() - t0) * 1e3);
}

static void t_bg(void) {
  /* HAKMEM_BG_PURGE=on or auto, HAKMEM_PURGE_DELAY_MS=300. 128 MiB: what stays
   * resident (the program, the purger's reserve of 4 MiB) is then well
   * under a tenth of the peak. */
  blocks_t b = fill_small(128 * MiB, 5);
  size_t peak = tc_rss_bytes();
  free_all(&b);
  wait_rss_fall(peak, 3.0, "bg");
  /* a child has no purger thread until it needs one */
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    blocks_t c = fill_small(128 * MiB, 6);
    size_t p = tc_rss_bytes();
    free_all(&c);
    wait_rss_fall(p, 3.0, "bg in a forked child");
    fflush(stdout);
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked child: status 0x%x", st);
}

static void t_bg_control(void) {
  blocks_t b = fill_small(64 * MiB, 5);
  size_t peak = tc_rss_bytes();
  free_all(&b);
  sleep_s(1.5);
  CHECK(tc_rss_bytes() > peak / 2, "RSS fell from %zu to %zu MiB while asleep, without a background purger",
        peak / MiB, tc_rss_bytes() / MiB);
}

/* (tc_status_field reads without stdio: the free of a FILE's buffer may
 * run a purge step and give back what the caller is about to measure) */
static int count_threads(void) { return (int)tc_status_field("Threads"); }

static void t_auto(bool on) {
  /* never more than about 1 MiB unused (the reserve is 4 MiB): no thread */
  for (uint64_t r = 0; r < 40; r++) {
    blocks_t b = fill_small(MiB, 100 + r);
    free_all(&b);
  }
  sleep_s(0.3);
  CHECK(count_threads() == 1, "%d threads after 1 MiB bursts (no purger wanted)", count_threads());
  blocks_t b = fill_small(128 * MiB, 9); /* (the reserve and the program stay: under 10%) */
  size_t peak = tc_rss_bytes();
  free_all(&b);
  if (on) {
    wait_rss_fall(peak, 1.5, "auto");
    CHECK(count_threads() == 2, "%d threads after 128 MiB freed (the purger wanted)", count_threads());
  } else {
    sleep_s(1.5);
    CHECK(count_threads() == 1, "%d threads with HAKMEM_BG_PURGE=off", count_threads());
    CHECK(tc_rss_bytes() > peak / 2, "RSS fell from %zu to %zu MiB without a purger", peak / MiB, tc_rss_bytes() / MiB);
  }
}

static void t_limit(void) {
  /* HAKMEM_RSS_LIMIT_MB=32, HAKMEM_PURGE_DELAY_MS=60000 */
  size_t base = tc_rss_bytes();
  blocks_t b = fill_pinned(96 * MiB);
  activity(0.05, NULL, NULL);
  size_t rss = tc_rss_bytes();
  struct hak_os_stats s = os();
  CHECK(s.madvise_calls > 0, "no madvise over the limit");
  CHECK(rss < base + 48 * MiB, "RSS %zu MiB (base %zu) with a 32 MiB limit and 90 MiB freed", rss / MiB, base / MiB);
  printf("limit: RSS %zu MiB (%zu MiB before), %zu madvise calls\n", rss / MiB, base / MiB, s.madvise_calls);
  free_all(&b);
}

static void t_burst(size_t mib) {
  blocks_t b = fill_small(mib * MiB, 7);
  size_t peak = tc_rss_bytes();
  double t0 = now_s();
  free_all(&b);
  size_t target = peak / 10;
  activity(5.0, rss_below, &target);
  double t = now_s() - t0;
  size_t rss = tc_rss_bytes();
  printf("burst: %zu MiB freed, RSS %zu -> %zu MiB after %.0f ms of low-rate activity (%zu madvise calls)\n", mib,
         peak / MiB, rss / MiB, t * 1e3, os().madvise_calls);
  CHECK(rss < target, "RSS %zu of %zu MiB after 5 s", rss / MiB, peak / MiB);
  /* "within about one second"; the slack is for a loaded machine */
  CHECK(t < 1.5, "RSS took %.0f ms to fall below 10%% of the peak", t * 1e3);
}

static void stats_child(void) {
  blocks_t b = fill_small(16 * MiB, 8);
  free_all(&b);
  char *big = malloc(8 * MiB);
  CHECK(big, "malloc(8 MiB)");
  big[0] = 1;
  free(big);
  malloc_trim(0);
  exit(0);
}

/* Run this program as "stats_child" with env; return its stderr. */
static void run_child(const char *env1, const char *env2, char *out, size_t cap) {
  int fd[2];
  CHECK(pipe(fd) == 0, "pipe");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    char *argv[] = {"test_purge", "stats_child", NULL};
    char *envp[] = {(char *)env1, (char *)env2, NULL};
    execve("/proc/self/exe", argv, envp);
    _exit(127);
  }
  close(fd[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < cap && (r = read(fd[0], out + got, cap - 1 - got)) > 0) got += (size_t)r;
  out[got] = 0;
  close(fd[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "stats child failed: %s", out);
}

typedef struct {
  size_t alloc, free, madvise, disabled, mmap, fallback, huge;
} line_t;

static line_t parse_line(const char *text) {
  line_t l;
  int end = -1;
  int n = sscanf(text,
                 "[SS_OS_STATS] alloc=%zu free=%zu madvise=%zu madvise_disabled=%zu mmap_total=%zu "
                 "fallback_mmap=%zu huge_alloc=%zu%n",
                 &l.alloc, &l.free, &l.madvise, &l.disabled, &l.mmap, &l.fallback, &l.huge, &end);
  CHECK(n == 7 && end > 0 && text[end] == '\n' && text[end + 1] == '\0', "not one [SS_OS_STATS] line: '%s'", text);
  return l;
}

static void t_stats(void) {
  char out[4096];
  run_child("HAKMEM_SS_OS_STATS=1", "HAKMEM_PURGE=eager", out, sizeof out);
  line_t l = parse_line(out);
  CHECK(l.alloc >= 8 && l.free >= 8, "16 MiB of blocks: alloc=%zu free=%zu", l.alloc, l.free);
  CHECK(l.madvise >= 1 && l.disabled == 0, "eager: madvise=%zu madvise_disabled=%zu", l.madvise, l.disabled);
  CHECK(l.mmap >= 1 && l.fallback == 0 && l.huge >= 1, "mmap_total=%zu fallback_mmap=%zu huge_alloc=%zu", l.mmap,
        l.fallback, l.huge);
  printf("stats (eager): %s", out);
  run_child("HAKMEM_SS_OS_STATS=1", "HAKMEM_PURGE=off", out, sizeof out);
  l = parse_line(out);
  CHECK(l.madvise == 0 && l.disabled >= 8, "off: madvise=%zu madvise_disabled=%zu", l.madvise, l.disabled);
  printf("stats (off):   %s", out);
  run_child("HAKMEM_PURGE=eager", NULL, out, sizeof out);
  CHECK(out[0] == '\0', "a line without HAKMEM_SS_OS_STATS: '%s'", out);
}

/* bench_random_mixed's loop */
static void random_mixed(void **slots, uint32_t ws, uint64_t iters, tc_rng *r) {
  for (uint64_t i = 0; i < iters; i++) {
    uint64_t x = tc_next(r);
    uint32_t idx = (uint32_t)(((x >> 32) * ws) >> 32);
    if (slots[idx]) {
      free(slots[idx]);
      slots[idx] = NULL;
    } else {
      size_t n = 16 + (size_t)(((x & 0xffffffffu) * 1009) >> 32);
      unsigned char *q = malloc(n);
      CHECK(q, "malloc");
      q[0] = 1;
      q[n - 1] = 2;
      slots[idx] = q;
    }
  }
}

static void t_steady(void) {
  uint32_t wss[] = {400, 40000};
  for (int k = 0; k < 2; k++) {
    uint32_t ws = wss[k];
    void **slots = calloc(ws, sizeof *slots);
    CHECK(slots, "calloc");
    tc_rng r = {42};
    random_mixed(slots, ws, 5000000, &r); /* warm-up */
    struct hak_os_stats a = os();
    uint64_t iters = tc_scaled(40000000);
    random_mixed(slots, ws, iters, &r);
    struct hak_os_stats b = os();
    size_t calls = (b.mmap_calls - a.mmap_calls) + (b.munmap_calls - a.munmap_calls) +
                   (b.madvise_calls - a.madvise_calls) + (b.mremap_calls - a.mremap_calls);
    printf("steady ws %u: %zu OS calls in %llu operations after warm-up\n", ws, calls, (unsigned long long)iters);
    CHECK(calls == 0, "ws %u: %zu mmap/munmap/madvise/mremap calls in steady state (madvise %zu)", ws, calls,
          b.madvise_calls - a.madvise_calls);
    for (uint32_t i = 0; i < ws; i++) free(slots[i]);
    free(slots);
  }
}

/* The slab choice (docs/DESIGN.md, "Slabs"): after a peak, the slabs a
 * class no longer needs must empty. Freed at random, every slab keeps an
 * eighth of its blocks; churned at that level, a choice that hands out
 * blocks from every slab with free ones in turn (FIFO) refills each before
 * it can empty, and keeps four times the slabs needed. Counted by hakmem
 * itself: the tiny lane's bytes in slabs (carved minus given back with
 * emptied slabs) and the purged bytes; RSS as a cross-check. */
static void t_drain(void) {
  const size_t bs = 256, n = 64 * MiB / bs;
  void **v = malloc(n * sizeof *v);
  CHECK(v, "malloc of the pointer array");
  struct hak_stats s0, s1, s2;
  hak_stats_get(&s0);
  for (size_t i = 0; i < n; i++) {
    v[i] = malloc(bs);
    CHECK(v[i], "malloc(%zu)", bs);
    memset(v[i], 0x44, bs);
  }
  size_t rss_peak = tc_rss_bytes();
  tc_rng r = {11};
  size_t live = 0;
  for (size_t i = 0; i < n; i++) {
    if (tc_below(&r, 8) == 0)
      v[live++] = v[i];
    else
      free(v[i]);
  }
  hak_stats_get(&s1);
  size_t peak_slabs = s1.lane[HAK_LANE_TINY].current - s0.lane[HAK_LANE_TINY].current;
  struct hak_os_stats o1 = os();
  /* Churn at the lower level: thirty times the live blocks replaced at random. */
  for (size_t k = 0; k < 30 * live; k++) {
    size_t j = tc_below(&r, live);
    free(v[j]);
    v[j] = malloc(bs);
    CHECK(v[j], "malloc(%zu)", bs);
    memset(v[j], 0x45, bs);
  }
  hak_stats_get(&s2);
  struct hak_os_stats o2 = os();
  size_t slabs = s2.lane[HAK_LANE_TINY].current - s0.lane[HAK_LANE_TINY].current;
  size_t purged = o2.purged_bytes > o1.purged_bytes ? o2.purged_bytes - o1.purged_bytes : 0;
  size_t rss = tc_rss_bytes();
  printf("drain: %zu of %zu blocks live; tiny slabs %zu -> %zu MiB (live %zu MiB), %zu MiB purged, RSS %zu -> %zu MiB\n",
         live, n, peak_slabs / MiB, slabs / MiB, live * bs / MiB, purged / MiB, rss_peak / MiB, rss / MiB);
  CHECK(peak_slabs >= 60 * MiB, "the peak took %zu MiB of tiny slabs", peak_slabs / MiB);
  /* Needed: about the live 8 MiB (FIFO alone kept 32 MiB after this churn,
   * and 64 before it); the rest must have emptied. */
  CHECK(slabs < 16 * MiB, "%zu MiB still in tiny slabs after churning 8 MiB of live blocks (peak %zu MiB)",
        slabs / MiB, peak_slabs / MiB);
  CHECK(purged >= 32 * MiB, "only %zu MiB purged of the emptied slabs", purged / MiB);
  CHECK(rss < rss_peak - 32 * MiB, "RSS %zu MiB after the churn, %zu at the peak", rss / MiB, rss_peak / MiB);
  for (size_t i = 0; i < live; i++) free(v[i]);
  free(v);
}

/* The slab choice, once more: a sparse slab's free blocks go before any
 * slab's uncarved room. Slab A filled and seven of eight of its blocks
 * freed while the current slab B still has room to carve: the next
 * mallocs come from A (carving B would touch fresh pages while A's free
 * blocks wait; over 30 minutes of bench_soak that crept). Slabs told
 * apart by their 64 KiB (the small kind's slab size) regions. */
static void t_sparse_first(void) {
  enum { N = 400 };
  const size_t bs = 256;
  static void *v[N], *w[N];
  for (size_t i = 0; i < N; i++) {
    v[i] = malloc(bs);
    CHECK(v[i], "malloc(%zu)", bs);
    memset(v[i], 0x46, bs);
  }
  uintptr_t a = (uintptr_t)v[0] >> 16, b = (uintptr_t)v[N - 1] >> 16;
  CHECK(a != b, "%d blocks of %zu B in one 64 KiB slab", N, bs);
  size_t in_a = 0, freed = 0;
  for (size_t i = 0; i < N; i++) {
    if ((uintptr_t)v[i] >> 16 != a) continue;
    if (in_a++ % 8 != 0) {
      free(v[i]);
      v[i] = NULL;
      freed++;
    }
  }
  CHECK(in_a >= 128, "slab A holds only %zu blocks", in_a);
  size_t m = freed / 2, from_a = 0, from_b = 0;
  for (size_t k = 0; k < m; k++) {
    w[k] = malloc(bs);
    CHECK(w[k], "malloc(%zu)", bs);
    memset(w[k], 0x47, bs);
    from_a += (uintptr_t)w[k] >> 16 == a;
    from_b += (uintptr_t)w[k] >> 16 == b;
  }
  printf("sparse_first: slab A %zu blocks, %zu freed; of %zu mallocs %zu from A, %zu from B\n", in_a, freed, m, from_a,
         from_b);
  /* B's blocks carved before A went sparse come first: at most one carve
   * (HAKMEM_CARVE_BYTES, 4 KiB: 16 blocks). */
  CHECK(from_b <= 16, "%zu of %zu mallocs from the current slab while slab A had %zu free blocks", from_b, m, freed);
  CHECK(from_a + from_b == m, "%zu mallocs from neither slab", m - from_a - from_b);
  for (size_t k = 0; k < m; k++) free(w[k]);
  for (size_t i = 0; i < N; i++) free(v[i]);
}

static int cmp_ptr(const void *x, const void *y) {
  uintptr_t a = (uintptr_t) * (void *const *)x, b = (uintptr_t) * (void *const *)y;
  return a < b ? -1 : a > b;
}

/* A thread that hands out one block and stays until told to go (a block
 * of an exited thread's SuperSlab is sent straight back, not cached). */
static pthread_mutex_t one_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t one_cond = PTHREAD_COND_INITIALIZER;
static void *one_block;
static int one_go;
static void *alloc_one(void *arg) {
  (void)arg;
  pthread_mutex_lock(&one_lock);
  one_block = malloc(100);
  pthread_cond_broadcast(&one_cond);
  while (!one_go) pthread_cond_wait(&one_cond, &one_lock);
  pthread_mutex_unlock(&one_lock);
  return NULL;
}

/* trading: the thread first frees another thread's block, after which its
 * frees take hm_free_trading's path (pushed on the free list, not on
 * local_free) */
static void t_big_lowest(bool trading) {
  enum { N = 12, LIVE = 3, ROUNDS = 300 };
  if (trading) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_one, NULL) == 0, "pthread_create");
    pthread_mutex_lock(&one_lock);
    while (one_block == NULL) pthread_cond_wait(&one_cond, &one_lock);
    pthread_mutex_unlock(&one_lock);
    free(one_block); /* cached: this thread trades from now on */
    pthread_mutex_lock(&one_lock);
    one_go = 1;
    pthread_cond_broadcast(&one_cond);
    pthread_mutex_unlock(&one_lock);
    pthread_join(t, NULL);
  }
  const size_t bs = 100 << 10;
  void *v[N], *sorted[N];
  for (int i = 0; i < N; i++) {
    v[i] = malloc(bs);
    CHECK(v[i], "malloc(%zu)", bs);
    ((char *)v[i])[0] = ((char *)v[i])[bs - 1] = 1;
    sorted[i] = v[i];
  }
  qsort(sorted, N, sizeof sorted[0], cmp_ptr);
  tc_rng r = {7};
  for (int i = N - 1; i > 0; i--) { /* freed in a random order */
    int j = (int)tc_below(&r, (uint64_t)i + 1);
    void *t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
  for (int i = 0; i < N; i++) free(v[i]);
  /* LIVE blocks at a time, freed in a random order, many times over */
  int used[N] = {0}, outside = 0;
  for (int k = 0; k < ROUNDS; k++) {
    void *w[LIVE];
    for (int i = 0; i < LIVE; i++) {
      w[i] = malloc(bs);
      CHECK(w[i], "malloc(%zu)", bs);
      ((char *)w[i])[0] = ((char *)w[i])[bs - 1] = 2;
      int at = -1;
      for (int j = 0; j < N; j++)
        if (sorted[j] == w[i]) at = j;
      if (at < 0)
        outside++;
      else
        used[at]++;
    }
    for (int i = LIVE - 1; i > 0; i--) {
      int j = (int)tc_below(&r, (uint64_t)i + 1);
      void *t = w[i];
      w[i] = w[j];
      w[j] = t;
    }
    for (int i = 0; i < LIVE; i++) free(w[i]);
  }
  int distinct = 0;
  for (int j = 0; j < N; j++) distinct += used[j] != 0;
  printf("big_lowest: %d rounds of %d blocks of %zu KiB took %d of the %d freed blocks (%d from elsewhere)\n", ROUNDS,
         LIVE, bs >> 10, distinct, N, outside);
  CHECK(outside == 0, "%d mallocs did not reuse the freed blocks", outside);
  for (int j = 0; j < N; j++)
    CHECK((j < LIVE) == (used[j] == ROUNDS), "block %d of %d by address handed out %d times in %d rounds", j, N,
          used[j], ROUNDS);
}

static void t_big_idle(bool given) {
  enum { N = 12, LIVE = 2 };
  const size_t bs = 100 << 10, pages = bs / 4096;
  void *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = malloc(bs);
    CHECK(v[i], "malloc(%zu)", bs);
    memset(v[i], 0x33, bs); /* every page resident */
  }
  qsort(v, N, sizeof v[0], cmp_ptr);
  for (int i = 0; i < N; i++) free(v[i]);
  uint64_t madv0 = os().madvise_calls;
  double t0 = now_s();
  /* kept: 3.5 s, well past two looks; given: until the give-back (about
   * 2 s: two looks), at most 20 s */
  while (given ? os().madvise_calls == madv0 && now_s() - t0 < 20 : now_s() - t0 < 3.5) {
    void *w[LIVE];
    for (int i = 0; i < LIVE; i++) {
      w[i] = malloc(bs);
      CHECK(w[i] == v[i], "malloc %d of a round: %p, not the lowest free block %p", i, w[i], v[i]);
      ((char *)w[i])[0] = ((char *)w[i])[bs - 1] = 1;
    }
    for (int i = 0; i < LIVE; i++) free(w[i]);
    sleep_s(0.001);
  }
  uint64_t madv = os().madvise_calls - madv0;
  size_t idle_res = 0;
  for (int i = LIVE; i < N; i++) idle_res += resident_pages(v[i], bs);
  size_t live_res = resident_pages(v[0], bs);
  printf("big_idle: %d idle blocks of %zu pages: %zu pages resident, %llu madvise calls; a block in use: %zu pages\n",
         N - LIVE, pages, idle_res, (unsigned long long)madv, live_res);
  CHECK(live_res == pages, "a block in use lost pages: %zu of %zu resident", live_res, pages);
  if (given) {
    CHECK(idle_res == 0 && madv == 1, "idle blocks keep %zu pages, after %llu madvise calls (want 0 after 1)", idle_res,
          (unsigned long long)madv);
  } else {
    CHECK(idle_res == (size_t)(N - LIVE) * pages && madv == 0, "HAKMEM_PURGE=off: %zu pages resident, %llu madvise",
          idle_res, (unsigned long long)madv);
  }
  /* handed out again, every block works */
  for (int i = 0; i < N; i++) {
    v[i] = malloc(bs);
    CHECK(v[i], "malloc(%zu)", bs);
    memset(v[i], 0x44, bs);
  }
  for (int i = 0; i < N; i++) free(v[i]);
}

static void *exit_now_thread(void *arg) {
  (void)arg;
  enum { N = 64 * 1024 };
  static char *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = malloc(1000);
    CHECK(v[i], "malloc");
    memset(v[i], 0x55, 1000);
  }
  for (int i = 0; i < N; i++) free(v[i]);
  return NULL;
}

static void t_exit_now(void) {
  size_t before = tc_rss_bytes();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, exit_now_thread, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  size_t after = tc_rss_bytes();
  printf("exit_now: RSS %zu MiB before the thread, %zu MiB after its exit\n", before >> 20, after >> 20);
  /* the reserve (4 MiB) and slack; 64 MiB were touched */
  CHECK(after < before + (12u << 20), "RSS grew by %zu MiB over the thread's life", (after - before) >> 20);
}

/* exit_shared: a thread leaves N holes of `pages` pages in packs (every
 * other block of 2N freed, once both threads have allocated theirs: no
 * block lands in a hole; the rest kept live), then waits for its turn to
 * exit; the madvise calls its exit made are read after the join. */
typedef struct {
  size_t pages;
  pthread_barrier_t *allocated, *ready;
  sem_t go;
  size_t madv_at_exit;
  char *holes[200];
} exit_share_t;

static void *exit_shared_thread(void *arg) {
  exit_share_t *a = arg;
  enum { N = 200 };
  size_t bs = a->pages * 4096;
  char **v = malloc(2 * N * sizeof *v);
  CHECK(v, "malloc");
  for (int i = 0; i < 2 * N; i++) {
    v[i] = malloc(bs);
    CHECK(v[i], "malloc(%zu)", bs);
    memset(v[i], 0x66, bs);
  }
  pthread_barrier_wait(a->allocated); /* (no block then lands in a hole) */
  for (int i = 0; i < 2 * N; i += 2) { /* holes; the odd ones stay live (leaked) */
    a->holes[i / 2] = v[i];
    free(v[i]);
  }
  free(v);
  pthread_barrier_wait(a->ready);
  while (sem_wait(&a->go) != 0) {
  }
  a->madv_at_exit = os().madvise_calls;
  return NULL;
}

static bool ranges_supported(void);
static void t_exit_shared(bool ranges) {
  char *probe = malloc(300 * 1024);
  bool packed = probe != NULL && malloc_usable_size(probe) == 300 * 1024; /* (a span is 2 MiB) */
  free(probe);
  if (!packed) {
    printf("exit_shared: no packs in this build (secure mode): skipped\n");
    exit(77);
  }
  if (ranges && !ranges_supported()) {
    printf("exit_shared: process_madvise cannot advise this process (Linux 6.13): skipped\n");
    exit(77);
  }
  pthread_barrier_t allocated, ready;
  CHECK(pthread_barrier_init(&allocated, NULL, 2) == 0 && pthread_barrier_init(&ready, NULL, 3) == 0, "barrier");
  exit_share_t a[2] = {{.pages = 10, .allocated = &allocated, .ready = &ready},
                       {.pages = 12, .allocated = &allocated, .ready = &ready}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    CHECK(sem_init(&a[i].go, 0, 0) == 0, "sem_init");
    CHECK(pthread_create(&t[i], NULL, exit_shared_thread, &a[i]) == 0, "pthread_create");
  }
  pthread_barrier_wait(&ready);
  size_t calls[2];
  for (int i = 0; i < 2; i++) {
    sem_post(&a[i].go);
    pthread_join(t[i], NULL);
    calls[i] = os().madvise_calls - a[i].madv_at_exit;
  }
  size_t res = 0;
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 200; k++) res += resident_pages(a[i].holes[k], a[i].pages * 4096);
  printf("exit_shared: madvise calls of the first exit %zu, of the second %zu; %zu pages of the holes resident\n",
         calls[0], calls[1], res);
  if (ranges) {
    CHECK(calls[0] + calls[1] <= 10 && res == 0, "%zu calls, %zu pages of the holes resident (want all back in 7 calls)",
          calls[0] + calls[1], res);
    return;
  }
  /* IDLE_CALLS_PER_S 10: the bucket (10) + 2 s each, 4 s of debt at most */
  CHECK(calls[0] >= 10 && calls[1] >= 10, "an exit gave back too little: %zu and %zu calls", calls[0], calls[1]);
  CHECK(calls[0] + calls[1] <= 52, "the exits made %zu calls together, over the budget", calls[0] + calls[1]);
}

/* exit_blocks: can process_madvise advise this process (PIDFD_SELF,
 * MADV_DONTNEED: Linux 6.13)? An empty vector checks both. */
static bool ranges_supported(void) {
  return syscall(SYS_process_madvise, -10000, (void *)NULL, (size_t)0, MADV_DONTNEED, 0u) == 0;
}

static void t_ranges_seccomp(void) {
#if defined(__x86_64__)
  if (!ranges_supported()) {
    printf("ranges_seccomp: process_madvise cannot advise this process (Linux 6.13): skipped\n");
    exit(77);
  }
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xc000003e /* AUDIT_ARCH_X86_64 */, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_madvise, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs: %s", strerror(errno));
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    printf("ranges_seccomp: no seccomp filter here (%s): skipped\n", strerror(errno));
    exit(77);
  }
  t_exit_shared(false); /* killed by SIGSYS if hakmem tries process_madvise */
#else
  printf("ranges_seccomp: the filter is written for x86-64: skipped\n");
  exit(77);
#endif
}

enum { EB_N = 64, EB_KEEP = 72 /* heap.c's EXIT_KEEP: link, tag, pattern, stamp */ };
static char *eb_blocks[EB_N];
static size_t eb_size;

/* v[0..n) = n new blocks of `size` bytes, every byte written. */
static void malloc_written(char **v, int n, size_t size, int byte) {
  for (int i = 0; i < n; i++) {
    v[i] = malloc(size);
    CHECK(v[i], "malloc(%zu)", size);
    memset(v[i], byte, size);
  }
}

static void *exit_blocks_thread(void *arg) {
  (void)arg;
  malloc_written(eb_blocks, EB_N, eb_size, 0x77);
  for (int i = 0; i < EB_N; i += 2) free(eb_blocks[i]);
  return NULL;
}

/* The whole pages of a block past its first EB_KEEP bytes: [*from, *to). */
static void eb_inner(const char *b, uintptr_t *from, uintptr_t *to) {
  *from = ((uintptr_t)b + EB_KEEP + 4095) & ~(uintptr_t)4095;
  *to = ((uintptr_t)b + eb_size) & ~(uintptr_t)4095;
  if (*to < *from) *to = *from;
}

static void t_exit_blocks(size_t size) {
  if (!ranges_supported()) {
    printf("exit_blocks: process_madvise cannot advise this process (Linux 6.13): skipped\n");
    exit(77);
  }
  eb_size = size;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, exit_blocks_thread, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  size_t freed = 0, live = 0, inner = 0, live_inner = 0;
  for (int i = 0; i < EB_N; i++) {
    uintptr_t from, to;
    eb_inner(eb_blocks[i], &from, &to);
    size_t r = to > from ? resident_pages((void *)from, to - from) : 0;
    if (i % 2 == 0) {
      freed += r;
      inner += (to - from) / 4096;
    } else {
      live += r;
      live_inner += (to - from) / 4096;
    }
  }
  printf("exit_blocks: %d freed blocks of %zu bytes: %zu of their %zu inner pages resident; %d live ones: %zu of %zu\n",
         EB_N / 2, size, freed, inner, EB_N / 2, live, live_inner);
  CHECK(inner >= EB_N / 4, "too few whole pages inside the blocks to test (%zu)", inner);
  CHECK(live == live_inner, "live blocks lost pages: %zu of %zu", live, live_inner);
  CHECK(freed == 0, "the freed blocks keep %zu of their %zu inner pages", freed, inner);
  for (int i = 1; i < EB_N; i += 2)
    for (size_t k = 0; k < eb_size; k += 512) CHECK(eb_blocks[i][k] == 0x77, "live block %d changed", i);
  /* taken again (this thread adopts the SuperSlab), the blocks work */
  char *again[EB_N];
  for (int i = 0; i < EB_N; i++) {
    again[i] = malloc(eb_size);
    CHECK(again[i], "malloc");
    memset(again[i], 0x11, eb_size);
  }
  for (int i = 0; i < EB_N; i++) free(again[i]);
  for (int i = 1; i < EB_N; i += 2) free(eb_blocks[i]);
}

/* exit_unused: a thread's slab of 48-byte blocks, all freed, beside a live
 * block of another class (so the SuperSlab stays in use), and every other
 * of 64 blocks of 20 KiB freed (so the exit makes a call): the exit's call
 * takes the emptied slab's pages too. */
enum { EU_N = 1000 };
static char *eu_small[EU_N], *eu_live;

static void *exit_unused_thread(void *arg) {
  (void)arg;
  malloc_written(&eu_live, 1, 64, 0x55);
  malloc_written(eu_small, EU_N, 48, 0x66);
  for (int i = 0; i < EU_N; i++) free(eu_small[i]);
  return exit_blocks_thread(NULL);
}

static void t_exit_unused(void) {
  if (!ranges_supported()) {
    printf("exit_unused: process_madvise cannot advise this process (Linux 6.13): skipped\n");
    exit(77);
  }
  eb_size = 20 * 1024;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, exit_unused_thread, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  /* the whole pages the freed small blocks covered, past the first */
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < EU_N; i++) {
    if ((uintptr_t)eu_small[i] < lo) lo = (uintptr_t)eu_small[i];
    if ((uintptr_t)eu_small[i] + 48 > hi) hi = (uintptr_t)eu_small[i] + 48;
  }
  lo = (lo + 4095) & ~(uintptr_t)4095;
  hi &= ~(uintptr_t)4095;
  CHECK(hi > lo && hi - lo < (64u << 10), "the small blocks lie in one slab (%#lx..%#lx)", (unsigned long)lo,
        (unsigned long)hi);
  size_t r = resident_pages((void *)lo, hi - lo);
  printf("exit_unused: the emptied slab keeps %zu of its %zu whole pages resident\n", r, (size_t)(hi - lo) / 4096);
  CHECK(r == 0, "the emptied slab keeps %zu pages resident", r);
  CHECK(eu_live[0] == 0x55 && eu_live[63] == 0x55, "the live block changed");
  free(eu_live);
  for (int i = 1; i < EB_N; i += 2) free(eb_blocks[i]);
}

/* exit_foreign: thread A's two blocks of 20 KiB, freed by thread B (into
 * B's foreign cache); A exits, then B: B's exit gives back their inner
 * pages before it sends them home to A's abandoned SuperSlab. */
enum { EF_N = 2, EF_SIZE = 20 * 1024 };
static char *ef_blocks[EF_N];
static pthread_barrier_t ef_bar;

static void *exit_foreign_a(void *arg) {
  (void)arg;
  malloc_written(ef_blocks, EF_N, EF_SIZE, 0x42);
  pthread_barrier_wait(&ef_bar); /* B frees them */
  pthread_barrier_wait(&ef_bar);
  return NULL;
}

static void *exit_foreign_b(void *arg) {
  pthread_t *a = arg;
  /* (B has a heap of its own; of another class: a trading thread's own
   * frees share its cache's budget, and this one would send A's home) */
  char *mine = malloc(64);
  CHECK(mine, "malloc");
  pthread_barrier_wait(&ef_bar);
  for (int i = 0; i < EF_N; i++) free(ef_blocks[i]);
  pthread_barrier_wait(&ef_bar);
  pthread_join(*a, NULL); /* A has exited */
  free(mine);
  return NULL;
}

static void t_exit_foreign(void) {
#ifdef HAKMEM_SECURE
  printf("exit_foreign: secure builds keep no foreign caches: skipped\n");
  exit(77);
#endif
  if (!ranges_supported()) {
    printf("exit_foreign: process_madvise cannot advise this process (Linux 6.13): skipped\n");
    exit(77);
  }
  pthread_t a, b;
  CHECK(pthread_barrier_init(&ef_bar, NULL, 2) == 0, "barrier");
  CHECK(pthread_create(&a, NULL, exit_foreign_a, NULL) == 0, "pthread_create");
  CHECK(pthread_create(&b, NULL, exit_foreign_b, &a) == 0, "pthread_create");
  pthread_join(b, NULL);
  size_t r = 0;
  for (int i = 0; i < EF_N; i++) {
    uintptr_t from = ((uintptr_t)ef_blocks[i] + 72 + 4095) & ~(uintptr_t)4095;
    uintptr_t to = ((uintptr_t)ef_blocks[i] + EF_SIZE) & ~(uintptr_t)4095;
    r += resident_pages((void *)from, to - from);
  }
  printf("exit_foreign: %d blocks another thread freed: %zu inner pages resident\n", EF_N, r);
  CHECK(r == 0, "%zu inner pages of the foreign-freed blocks stay resident", r);
}

static size_t os_calls_now(void) {
  struct hak_os_stats s;
  hak_os_stats_get(&s);
  return s.mmap_calls + s.munmap_calls + s.madvise_calls + s.mremap_calls;
}

static void t_pack_idle(void) {
  const size_t K = 1024;
  malloc_trim(0);
  char *probe = malloc(300 * K);
  bool packed = probe != NULL && malloc_usable_size(probe) == 300 * K;
  free(probe);
  if (!packed) {
    printf("pack_idle: no packs in this build (secure mode): skipped\n");
    exit(77);
  }
  /* one pack: keep1 | a | keep2 | the rest (about 840 KiB) */
  char *k1 = malloc(300 * K), *a = malloc(600 * K), *k2 = malloc(300 * K);
  CHECK(k1 && a && k2, "malloc");
  CHECK(((uintptr_t)k1 >> 21) == ((uintptr_t)a >> 21) && ((uintptr_t)a >> 21) == ((uintptr_t)k2 >> 21),
        "three blocks in one pack");
  memset(a, 7, 600 * K);
  free(a);
  CHECK(resident_pages(a, 600 * K) == 600 * K / 4096, "the freed block's pages are not resident before a purge");
  /* The lane stays busy: 700 KiB blocks (too long for a's run) come and go in the rest. */
  size_t c0 = os_calls_now();
  double t0 = now_s(), t = 0;
  size_t left = 1;
  while ((t = now_s() - t0) < 3.0) {
    char *b = malloc(700 * K);
    CHECK(b, "malloc");
    b[0] = 1;
    b[700 * K - 1] = 2;
    free(b);
    if ((left = resident_pages(a, 600 * K)) == 0) break;
    sleep_s(0.002);
  }
  size_t calls = os_calls_now() - c0;
  printf("pack_idle: a's pages resident %zu after %.2f s, %zu OS calls\n", left, t, calls);
  CHECK(left == 0, "%zu of the idle run's pages still resident after %.1f s of a busy lane", left, t);
  CHECK(calls <= 20 * t + 2, "%zu OS calls in %.2f s", calls, t);
  free(k1);
  free(k2);
}

/* pack_regret: how many of 8 cycles found the freed block's written page
 * given back after its idle time. */
static unsigned regret_cycles(bool whole) {
  const size_t K = 1024, A = 600 * K;
  char *k1 = malloc(300 * K), *a = malloc(A), *k2 = malloc(300 * K);
  CHECK(k1 && a && k2, "malloc");
  CHECK(((uintptr_t)k1 >> 21) == ((uintptr_t)a >> 21) && ((uintptr_t)a >> 21) == ((uintptr_t)k2 >> 21),
        "three blocks in one pack");
  unsigned back = 0;
  for (unsigned c = 0; c < 8; c++) {
    char *page = a + (size_t)(17 + 13 * c) * 4096; /* not an end page, a new one each time */
    if (whole) memset(a, 7, A);
    a[0] = 1, a[A - 1] = 2, page[0] = 3;
    free(a);
    /* the lane stays busy: 700 KiB blocks (too long for a's run) in the rest */
    for (double t0 = now_s(); now_s() - t0 < 0.6; sleep_s(0.002)) {
      char *b = malloc(700 * K);
      CHECK(b, "malloc");
      b[0] = 1, b[700 * K - 1] = 2;
      free(b);
    }
    back += resident_pages(page, 4096) == 0;
    char *again = malloc(A);
    CHECK(again == a, "the block takes its run again");
  }
  free(a);
  free(k1);
  free(k2);
  return back;
}

static void t_pack_regret(void) {
  malloc_trim(0);
  char *probe = malloc(300 * 1024);
  bool packed = probe != NULL && malloc_usable_size(probe) == 300 * 1024;
  free(probe);
  if (!packed) {
    printf("pack_regret: no packs in this build (secure mode): skipped\n");
    exit(77);
  }
  if (!ranges_supported()) {
    printf("pack_regret: process_madvise cannot advise this process (Linux 6.13): skipped\n");
    exit(77);
  }
  unsigned sparse = regret_cycles(false), whole = regret_cycles(true);
  printf("pack_regret: the idle page went back %u of 8 times written here and there, %u of 8 written whole\n", sparse,
         whole);
  CHECK(sparse >= 6, "blocks written here and there: the idle pages went back only %u of 8 times", sparse);
  CHECK(whole <= 5, "blocks written whole: the idle pages went back %u of 8 times (no back-off)", whole);
}

int main(int argc, char **argv) {
  tc_test_name = "purge";
  if (!HAKMEM_SPECIFIC) return 77;
  if (argc < 2) FAILF("usage: test_purge MODE [ARG]");
  const char *m = argv[1];
  free(malloc(1)); /* start-up */
  if (!strcmp(m, "off")) t_off();
  else if (!strcmp(m, "eager")) t_eager();
  else if (!strcmp(m, "lazy")) t_lazy();
  else if (!strcmp(m, "trim")) t_trim();
  else if (!strcmp(m, "trim_big")) t_trim_big();
  else if (!strcmp(m, "reuse")) t_reuse();
  else if (!strcmp(m, "race")) t_race();
  else if (!strcmp(m, "bg")) t_bg();
  else if (!strcmp(m, "bg_control")) t_bg_control();
  else if (!strcmp(m, "auto")) t_auto(argc > 2 && !strcmp(argv[2], "on"));
  else if (!strcmp(m, "limit")) t_limit();
  else if (!strcmp(m, "burst")) t_burst(argc > 2 ? (size_t)atol(argv[2]) : 256);
  else if (!strcmp(m, "stats")) t_stats();
  else if (!strcmp(m, "stats_child")) stats_child();
  else if (!strcmp(m, "steady")) t_steady();
  else if (!strcmp(m, "drain")) t_drain();
  else if (!strcmp(m, "sparse_first")) t_sparse_first();
  else if (!strcmp(m, "big_lowest")) t_big_lowest(argc > 2 && !strcmp(argv[2], "trading"));
  else if (!strcmp(m, "big_idle")) t_big_idle(argc > 2 && !strcmp(argv[2], "given"));
  else if (!strcmp(m, "exit_now")) t_exit_now();
  else if (!strcmp(m, "exit_shared")) t_exit_shared(argc > 2 && !strcmp(argv[2], "ranges"));
  else if (!strcmp(m, "exit_unused")) t_exit_unused();
  else if (!strcmp(m, "exit_foreign")) t_exit_foreign();
  else if (!strcmp(m, "exit_blocks")) t_exit_blocks(argc > 2 ? strtoul(argv[2], NULL, 0) : 20 * 1024);
  else if (!strcmp(m, "ranges_seccomp")) t_ranges_seccomp();
  else if (!strcmp(m, "pack_idle")) t_pack_idle();
  else if (!strcmp(m, "pack_regret")) t_pack_regret();
  else FAILF("unknown mode %s", m);
  printf("purge %s: ok\n", m);
  return 0;
}
