/* bench_thread_ws [SECONDS] [THREADS] [SLOTS] [MAX] [SEED]
 *
 * Per-thread random working sets (issue 19): THREADS threads (default 2),
 * each with its own SLOTS slots (default 1024, filled first), repeatedly
 * free a random slot and allocate a new block into it, for SECONDS (default
 * 2).  Sizes run from 4 bytes to MAX (default 32 KiB), skewed to small ones:
 * log2(size) = 2 + (log2(MAX) - 2) * u*u with u uniform in [0, 1), then
 * uniform within that power of two -- so with the defaults about 55% of the
 * blocks are at most 64 bytes, 78% at most 1 KiB, and 1 in 10 above 8 KiB.
 * The first byte of each block is written and read back when it is freed.
 * No block crosses threads.
 *
 * Output: iters/s: (free+malloc pairs per second, all threads together) and
 * ops/s: (= iters/s, for the runner).
 */
#include "bench_common.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

typedef struct {
  int id;
  uint32_t slots;
  uint64_t seed;
  uint64_t iters, checksum;
  char pad[64];
} thread_arg;

static _Atomic int stop;
static pthread_barrier_t start_barrier;

/* The size table: 4096 sizes drawn from the distribution above, so that the
 * loop's own cost is one table load, not a pow(). */
#define NSIZES 4096
static size_t size_table[NSIZES];

static void *run(void *argp) {
  thread_arg *a = argp;
  rng_t rng;
  rng_seed(&rng, a->seed, (uint64_t)a->id + 1);
  unsigned char **slot = malloc(a->slots * sizeof *slot);
  if (!slot)
    xmalloc_fail(a->slots * sizeof *slot);
  for (uint32_t i = 0; i < a->slots; i++) {
    size_t n = size_table[rng_below(&rng, NSIZES)];
    slot[i] = malloc(n);
    if (!slot[i])
      xmalloc_fail(n);
    slot[i][0] = (unsigned char)n;
  }
  pthread_barrier_wait(&start_barrier);
  uint64_t iters = 0, sum = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    for (int k = 0; k < 256; k++) {
      uint64_t x = rng_next(&rng);
      uint32_t i = (uint32_t)(((x >> 32) * a->slots) >> 32);
      size_t n = size_table[x & (NSIZES - 1)];
      sum += slot[i][0];
      free(slot[i]);
      unsigned char *p = malloc(n);
      if (!p)
        xmalloc_fail(n);
      p[0] = (unsigned char)n;
      slot[i] = p;
    }
    iters += 256;
  }
  for (uint32_t i = 0; i < a->slots; i++)
    free(slot[i]);
  free(slot);
  a->iters = iters;
  a->checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 6) {
    fprintf(stderr,
            "usage: %s [SECONDS] [THREADS] [SLOTS] [MAX] [SEED]\n"
            "  SECONDS  run time (default 2)\n"
            "  THREADS  threads (default 2)\n"
            "  SLOTS    slots per thread (default 1024)\n"
            "  MAX      largest block in bytes (default 32768)\n"
            "  SEED     PRNG seed (default 42)\n",
            argv[0]);
    return 2;
  }
  double seconds = argc > 1 ? parse_double(argv[1], "SECONDS") : 2.0;
  uint64_t nthreads = argc > 2 ? parse_u64(argv[2], "THREADS") : 2;
  uint64_t slots = argc > 3 ? parse_u64(argv[3], "SLOTS") : 1024;
  uint64_t max = argc > 4 ? parse_u64(argv[4], "MAX") : 32768;
  uint64_t seed = argc > 5 ? parse_u64(argv[5], "SEED") : 42;
  if (nthreads < 1 || nthreads > 1024 || slots < 1 || slots > (1u << 24) || max < 8 || max > (1u << 30) ||
      seconds <= 0 || seconds > 3600) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  double log2_max = log2((double)max);
  rng_t rng;
  rng_seed(&rng, seed, 0);
  unsigned small = 0;
  for (int i = 0; i < NSIZES; i++) {
    double u = rng_unit(&rng);
    double e = 2.0 + (log2_max - 2.0) * u * u;
    size_t lo = (size_t)1 << (int)e;
    size_t hi = lo * 2 - 1 < max ? lo * 2 - 1 : (size_t)max;
    size_table[i] = rng_range(&rng, lo, hi);
    small += size_table[i] <= 64;
  }

  thread_arg *args = calloc(nthreads, sizeof *args);
  pthread_t *tids = calloc(nthreads, sizeof *tids);
  if (!args || !tids)
    xmalloc_fail(nthreads * sizeof *args);
  pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
  for (uint64_t t = 0; t < nthreads; t++) {
    args[t] = (thread_arg){.id = (int)t, .slots = (uint32_t)slots, .seed = seed};
    if (pthread_create(&tids[t], NULL, run, &args[t]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  pthread_barrier_wait(&start_barrier);
  double t0 = now_sec();
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  atomic_store(&stop, 1);
  double secs = 0;
  uint64_t iters = 0;
  for (uint64_t t = 0; t < nthreads; t++) {
    pthread_join(tids[t], NULL);
    iters += args[t].iters;
  }
  secs = now_sec() - t0;
  pthread_barrier_destroy(&start_barrier);
  free(args);
  free(tids);

  printf("benchmark: bench_thread_ws seconds: %g threads: %llu slots: %llu size: 4-%llu seed: %llu\n", seconds,
         (unsigned long long)nthreads, (unsigned long long)slots, (unsigned long long)max,
         (unsigned long long)seed);
  printf("small_share: %.3f\n", small / (double)NSIZES);
  printf("iters: %llu\n", (unsigned long long)iters);
  printf("seconds: %.6f\n", secs);
  printf("iters/s: %.0f\n", (double)iters / (secs > 0 ? secs : 1e-9));
  printf("ops/s: %.0f\n", (double)iters / (secs > 0 ? secs : 1e-9));
  return 0;
}
