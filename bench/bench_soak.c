/* bench_soak SECONDS [THREADS] [WS] [SEED] [INTERVAL]
 *
 * A long-running mixed workload for watching memory and speed over time.
 * THREADS threads (default 2) share a working set of WS slots (default
 * 10000, split evenly).  Each step picks a random slot of the thread's own:
 *   - empty slot: allocate a size drawn from a mostly-small mix
 *       90%  16 B .. 1 KiB, 9%  1 KiB .. 64 KiB, 1%  64 KiB .. 1 MiB
 *     and write its first and last byte;
 *   - full slot: 1 in 8 realloc to a fresh size from the same mix, 1 in 8
 *     pass the block to the other thread through a mutex-protected mailbox
 *     (freeing whatever block was waiting there, so it is freed by a thread
 *     that did not allocate it), otherwise free.
 * Live bytes (sum of requested sizes of blocks not yet freed) are tracked.
 *
 * Every INTERVAL seconds (default 1) the main thread prints
 *   t: 1.0 ops/s: ... rss_mb: ... live_mb: ... rss/live: ... cpu_ops/s: ...
 * with RSS from /proc/self/statm; cpu_ops/s is operations per second of
 * process CPU time (less sensitive than ops/s to other programs competing
 * for the CPUs).  At the end it prints drift figures from the sample nearest
 * 20% into the run to the last sample:
 *   rss_drift_pct, ops_drift_pct
 * robust ones, the median over the window from 20% to 35% of the run against
 * the median over the last 15%:
 *   rss_drift_median_pct, ops_drift_median_pct, cpu_ops_drift_median_pct
 * the RSS/live ratio at the end, and the overall ops/s line:
 *   ops/s: 123456789
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct {
  void *p;
  size_t size;
} slot_t;

typedef struct {
  int id;
  slot_t *slots;
  uint32_t nslots;
  uint64_t seed;
  _Atomic uint64_t ops;
  _Atomic int64_t live; /* requested bytes allocated by this thread minus freed by it */
  uint64_t checksum;
  char pad[64];
} worker_t;

static _Atomic int stop_flag;
static pthread_mutex_t mailbox_lock = PTHREAD_MUTEX_INITIALIZER;
static slot_t mailbox[64];

static size_t draw_size(rng_t *r) {
  uint32_t band = rng_below(r, 100);
  if (band < 90)
    return rng_range(r, 16, 1024);
  if (band < 99)
    return rng_range(r, 1025, 64u << 10);
  return rng_range(r, (64u << 10) + 1, 1u << 20);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  rng_t rng;
  rng_seed(&rng, w->seed, (uint64_t)w->id);
  uint64_t sum = 0;
  while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    int64_t dlive = 0;
    for (int k = 0; k < 256; k++) {
      slot_t *s = &w->slots[rng_below(&rng, w->nslots)];
      if (!s->p) {
        size_t sz = draw_size(&rng);
        unsigned char *p = malloc(sz);
        if (!p)
          xmalloc_fail(sz);
        p[0] = (unsigned char)sz;
        p[sz - 1] = (unsigned char)k;
        s->p = p;
        s->size = sz;
        dlive += (int64_t)sz;
        continue;
      }
      uint32_t what = rng_below(&rng, 8);
      if (what == 0) {
        size_t nsz = draw_size(&rng);
        unsigned char first = ((unsigned char *)s->p)[0];
        unsigned char *q = realloc(s->p, nsz);
        if (!q)
          xmalloc_fail(nsz);
        if (q[0] != first) {
          fprintf(stderr, "realloc lost the contents of a block\n");
          exit(1);
        }
        q[nsz - 1] = (unsigned char)k;
        dlive += (int64_t)nsz - (int64_t)s->size;
        s->p = q;
        s->size = nsz;
      } else if (what == 1) {
        /* Swap with a mailbox entry; the block found there was (most
         * likely) allocated by another thread. */
        slot_t *m = &mailbox[rng_below(&rng, 64)];
        pthread_mutex_lock(&mailbox_lock);
        slot_t old = *m;
        *m = *s;
        pthread_mutex_unlock(&mailbox_lock);
        /* Ownership of the live bytes moves with the block: account the
         * outgoing block as freed here, the incoming as allocated here. */
        dlive -= (int64_t)s->size;
        s->p = NULL;
        s->size = 0;
        if (old.p) {
          sum += ((unsigned char *)old.p)[0];
          free(old.p);
        }
        /* old.size was counted as live when it entered the mailbox by the
         * other thread and subtracted there; nothing to do here. */
      } else {
        sum += ((unsigned char *)s->p)[0];
        free(s->p);
        dlive -= (int64_t)s->size;
        s->p = NULL;
        s->size = 0;
      }
    }
    atomic_fetch_add_explicit(&w->ops, 256, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->live, dlive, memory_order_relaxed);
  }
  w->checksum = sum;
  return NULL;
}

/* Bytes waiting in the mailbox (live, but owned by no thread). */
static int64_t mailbox_bytes(void) {
  int64_t b = 0;
  pthread_mutex_lock(&mailbox_lock);
  for (int i = 0; i < 64; i++)
    b += (int64_t)mailbox[i].size;
  pthread_mutex_unlock(&mailbox_lock);
  return b;
}

typedef struct {
  double t, ops_s, rss, live, cpu_ops_s;
} sample_t;

static double cpu_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of field `off` over samples whose time lies in [lo, hi). */
static double window_median(const sample_t *s, size_t n, double lo, double hi, size_t off) {
  double v[4096];
  size_t k = 0;
  for (size_t i = 0; i < n && k < 4096; i++)
    if (s[i].t >= lo - 1e-9 && s[i].t < hi - 1e-9)
      v[k++] = *(const double *)((const char *)&s[i] + off);
  if (k == 0)
    return 0;
  qsort(v, k, sizeof v[0], cmp_double);
  return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

static double pct(double from, double to) { return from > 0 ? (to - from) / from * 100.0 : 0.0; }

int main(int argc, char **argv) {
  if (argc < 2 || argc > 6) {
    fprintf(stderr,
            "usage: %s SECONDS [THREADS] [WS] [SEED] [INTERVAL]\n"
            "  SECONDS   run time\n"
            "  THREADS   worker threads (default 2)\n"
            "  WS        total slots, split between threads (default 10000)\n"
            "  SEED      PRNG seed (default 1)\n"
            "  INTERVAL  seconds between reports (default 1)\n",
            argv[0]);
    return 2;
  }
  double seconds = parse_double(argv[1], "SECONDS");
  uint64_t nthreads = argc > 2 ? parse_u64(argv[2], "THREADS") : 2;
  uint64_t ws = argc > 3 ? parse_u64(argv[3], "WS") : 10000;
  uint64_t seed = argc > 4 ? parse_u64(argv[4], "SEED") : 1;
  double interval = argc > 5 ? parse_double(argv[5], "INTERVAL") : 1.0;
  if (nthreads < 1 || nthreads > 256 || ws < nthreads || interval <= 0) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }

  worker_t *w = calloc(nthreads, sizeof *w);
  pthread_t *tids = calloc(nthreads, sizeof *tids);
  size_t nsamples_max = (size_t)(seconds / interval) + 2;
  sample_t *samples = calloc(nsamples_max, sizeof *samples);
  if (!w || !tids || !samples)
    xmalloc_fail(nthreads * sizeof *w);
  for (uint64_t t = 0; t < nthreads; t++) {
    w[t].id = (int)t;
    w[t].nslots = (uint32_t)(ws / nthreads);
    w[t].seed = seed;
    w[t].slots = calloc(w[t].nslots, sizeof(slot_t));
    if (!w[t].slots)
      xmalloc_fail(w[t].nslots * sizeof(slot_t));
  }
  printf("benchmark: bench_soak seconds: %g threads: %llu ws: %llu seed: %llu\n",
         seconds, (unsigned long long)nthreads, (unsigned long long)ws,
         (unsigned long long)seed);
  fflush(stdout);

  size_t rss0 = rss_bytes();
  double t0 = now_sec();
  for (uint64_t t = 0; t < nthreads; t++) {
    if (pthread_create(&tids[t], NULL, worker, &w[t]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  size_t ns = 0;
  uint64_t last_ops = 0;
  double last_t = 0, last_cpu = cpu_sec();
  for (size_t k = 1;; k++) {
    double target = (double)k * interval;
    if (target > seconds + 1e-9)
      target = seconds;
    double now = now_sec() - t0;
    if (target > now) {
      double d = target - now;
      struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    double t = now_sec() - t0;
    uint64_t ops = 0;
    int64_t live = mailbox_bytes();
    for (uint64_t i = 0; i < nthreads; i++) {
      ops += atomic_load_explicit(&w[i].ops, memory_order_relaxed);
      live += atomic_load_explicit(&w[i].live, memory_order_relaxed);
    }
    double ops_s = (double)(ops - last_ops) / (t - last_t);
    double cpu = cpu_sec();
    double cpu_ops_s = cpu > last_cpu ? (double)(ops - last_ops) / (cpu - last_cpu) : 0.0;
    double rss = (double)rss_bytes();
    if (ns < nsamples_max)
      samples[ns++] = (sample_t){t, ops_s, rss, (double)live, cpu_ops_s};
    printf("t: %.2f ops/s: %.0f rss_mb: %.1f live_mb: %.1f rss/live: %.2f cpu_ops/s: %.0f\n", t, ops_s,
           rss / 1048576.0, (double)live / 1048576.0, live > 0 ? rss / (double)live : 0.0, cpu_ops_s);
    fflush(stdout);
    last_ops = ops;
    last_t = t;
    last_cpu = cpu;
    if (target >= seconds)
      break;
  }
  atomic_store(&stop_flag, 1);
  for (uint64_t t = 0; t < nthreads; t++)
    pthread_join(tids[t], NULL);
  double secs = now_sec() - t0;

  uint64_t ops = 0, checksum = 0;
  int64_t live = mailbox_bytes();
  for (uint64_t t = 0; t < nthreads; t++) {
    ops += atomic_load(&w[t].ops);
    live += atomic_load(&w[t].live);
    checksum += w[t].checksum;
  }
  double rss_end = (double)rss_bytes();

  /* Drift: from the sample nearest 20% of the run to the last sample. */
  size_t i20 = 0;
  for (size_t i = 0; i < ns; i++) {
    if (samples[i].t >= 0.2 * seconds - 1e-9) {
      i20 = i;
      break;
    }
  }
  sample_t a = samples[i20], b = samples[ns ? ns - 1 : 0];
  double rss_drift = a.rss > 0 ? (b.rss - a.rss) / a.rss * 100.0 : 0.0;
  double ops_drift = a.ops_s > 0 ? (b.ops_s - a.ops_s) / a.ops_s * 100.0 : 0.0;
  double ratio_sum = 0;
  size_t ratio_n = 0;
  for (size_t i = i20; i < ns; i++) {
    if (samples[i].live > 0) {
      ratio_sum += samples[i].rss / samples[i].live;
      ratio_n++;
    }
  }

  /* Free everything, then look at RSS once more. */
  for (uint64_t t = 0; t < nthreads; t++) {
    for (uint32_t i = 0; i < w[t].nslots; i++)
      free(w[t].slots[i].p);
    free(w[t].slots);
  }
  for (int i = 0; i < 64; i++)
    free(mailbox[i].p);
  size_t rss_freed = rss_bytes();

  printf("drift_window: t=%.2f..%.2f\n", a.t, b.t);
  printf("rss_start_mb: %.1f rss_20pct_mb: %.1f rss_end_mb: %.1f\n", (double)rss0 / 1048576.0,
         a.rss / 1048576.0, rss_end / 1048576.0);
  printf("rss_drift_pct: %.1f\n", rss_drift);
  printf("ops_20pct: %.0f ops_end: %.0f\n", a.ops_s, b.ops_s);
  printf("ops_drift_pct: %.1f\n", ops_drift);
  /* Robust drift: window medians, 20%..35% of the run against the last 15%. */
  double w0 = 0.2 * seconds, w1 = 0.35 * seconds, w2 = 0.85 * seconds, w3 = seconds + interval;
  double r0 = window_median(samples, ns, w0, w1, offsetof(sample_t, rss));
  double r1 = window_median(samples, ns, w2, w3, offsetof(sample_t, rss));
  double o0 = window_median(samples, ns, w0, w1, offsetof(sample_t, ops_s));
  double o1 = window_median(samples, ns, w2, w3, offsetof(sample_t, ops_s));
  double c0 = window_median(samples, ns, w0, w1, offsetof(sample_t, cpu_ops_s));
  double c1 = window_median(samples, ns, w2, w3, offsetof(sample_t, cpu_ops_s));
  printf("median_windows: t=%.1f..%.1f vs t=%.1f..%.1f\n", w0, w1, w2, seconds);
  printf("rss_median_mb: %.1f -> %.1f ops_median: %.0f -> %.0f cpu_ops_median: %.0f -> %.0f\n",
         r0 / 1048576.0, r1 / 1048576.0, o0, o1, c0, c1);
  printf("rss_drift_median_pct: %.1f\n", pct(r0, r1));
  printf("ops_drift_median_pct: %.1f\n", pct(o0, o1));
  printf("cpu_ops_drift_median_pct: %.1f\n", pct(c0, c1));
  printf("live_end_mb: %.1f\n", (double)live / 1048576.0);
  printf("rss_live_ratio: %.2f\n", live > 0 ? rss_end / (double)live : 0.0);
  printf("rss_live_ratio_mean: %.2f\n", ratio_n ? ratio_sum / (double)ratio_n : 0.0);
  printf("rss_after_free_mb: %.1f\n", (double)rss_freed / 1048576.0);
  printf("checksum: %llu\n", (unsigned long long)checksum);
  printf("seconds: %.6f\n", secs);
  printf("ops: %llu\n", (unsigned long long)ops);
  printf("ops/s: %.0f\n", (double)ops / (secs > 0 ? secs : 1e-9));
  free(samples);
  free(w);
  free(tids);
  return 0;
}
