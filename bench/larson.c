/* larson THREADS MIN MAX SECONDS [BLOCKS] [ROUNDS] [SEED]
 *
 * A from-scratch version of the classic Larson & Krishnan server simulation
 * ("Memory allocation for long-running server applications", ISMM 1998).
 *
 * The main thread allocates BLOCKS blocks (random sizes in [MIN, MAX]) for
 * each of THREADS lanes.  A worker thread then owns the lane's array: it
 * repeatedly picks a random slot, frees the block there and allocates a new
 * one of random size (writing its first and last byte).  After ROUNDS*BLOCKS
 * replacements the worker starts a fresh thread, hands it the array and
 * exits, so blocks allocated by one thread are freed by its successor, and
 * thread exit (cache flushing) is exercised continually.  After SECONDS the
 * chains stop; the main thread frees whatever remains.
 *
 * Each malloc and each free is one operation.  Output:
 *   ops/s: 123456789
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct {
  int id;
  void **blocks;
  uint32_t nblocks;
  size_t min, max;
  uint64_t per_gen; /* replacements per thread generation */
  uint64_t seed;
  uint64_t generation;
  _Atomic uint64_t ops;
  _Atomic int done;
  uint64_t checksum;
  /* Lanes sit side by side in one array: the padding keeps a lane's
   * writes off the next lane's lines, and the generator lives in the
   * worker's locals. A shared line cost more than the allocators
   * (docs/BENCHMARKS.md, larson). */
  char pad[128];
} lane_t;

static _Atomic int stop_flag;
static _Atomic uint64_t threads_started;

static void *worker(void *arg);

static void start_thread(lane_t *lane) {
  pthread_attr_t attr;
  pthread_t tid;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&tid, &attr, worker, lane);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    /* Could not start a thread: run the generation on this one. */
    worker(lane);
  } else {
    atomic_fetch_add_explicit(&threads_started, 1, memory_order_relaxed);
  }
}

static void *worker(void *arg) {
  lane_t *lane = arg;
  /* Each generation gets its own stream, so runs are reproducible given the
   * seed (up to where SECONDS cuts the run off). */
  rng_t rng;
  rng_seed(&rng, lane->seed, ((uint64_t)lane->id << 32) | lane->generation);
  lane->generation++;
  uint32_t span = (uint32_t)(lane->max - lane->min + 1);
  uint64_t done = 0;
  uint64_t sum = 0;
  while (done < lane->per_gen) {
    uint64_t chunk = lane->per_gen - done < 256 ? lane->per_gen - done : 256;
    for (uint64_t i = 0; i < chunk; i++) {
      uint64_t x = rng_next(&rng);
      uint32_t idx = (uint32_t)(((x >> 32) * (uint64_t)lane->nblocks) >> 32);
      size_t sz = lane->min + (size_t)(((x & 0xffffffffu) * (uint64_t)span) >> 32);
      unsigned char *old = lane->blocks[idx];
      sum += old[0];
      free(old);
      unsigned char *p = malloc(sz);
      if (!p)
        xmalloc_fail(sz);
      p[0] = (unsigned char)sz;
      p[sz - 1] = (unsigned char)i;
      lane->blocks[idx] = p;
    }
    done += chunk;
    atomic_fetch_add_explicit(&lane->ops, 2 * chunk, memory_order_relaxed);
    if (atomic_load_explicit(&stop_flag, memory_order_relaxed))
      break;
  }
  lane->checksum += sum;
  if (atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    atomic_store_explicit(&lane->done, 1, memory_order_release);
    return NULL;
  }
  start_thread(lane);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5 || argc > 8) {
    fprintf(stderr,
            "usage: %s THREADS MIN MAX SECONDS [BLOCKS] [ROUNDS] [SEED]\n"
            "  THREADS  concurrent worker chains\n"
            "  MIN MAX  block size range in bytes\n"
            "  SECONDS  run time (fractions allowed)\n"
            "  BLOCKS   blocks per thread (default 1000)\n"
            "  ROUNDS   a thread replaces ROUNDS*BLOCKS blocks, then hands its\n"
            "           blocks to a new thread (default 100)\n"
            "  SEED     PRNG seed (default 1)\n",
            argv[0]);
    return 2;
  }
  uint64_t nthreads = parse_u64(argv[1], "THREADS");
  size_t min = (size_t)parse_u64(argv[2], "MIN");
  size_t max = (size_t)parse_u64(argv[3], "MAX");
  double seconds = parse_double(argv[4], "SECONDS");
  uint64_t nblocks = argc > 5 ? parse_u64(argv[5], "BLOCKS") : 1000;
  uint64_t rounds = argc > 6 ? parse_u64(argv[6], "ROUNDS") : 100;
  uint64_t seed = argc > 7 ? parse_u64(argv[7], "SEED") : 1;
  if (nthreads < 1 || nthreads > 1024 || min < 1 || max < min ||
      max - min >= 0xffffffffu || nblocks < 1 || nblocks > 0xffffffffu ||
      rounds < 1) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }

  lane_t *lanes = calloc(nthreads, sizeof *lanes);
  if (!lanes)
    xmalloc_fail(nthreads * sizeof *lanes);
  /* Warm-up: the main thread allocates every lane's initial blocks. */
  for (uint64_t t = 0; t < nthreads; t++) {
    lane_t *l = &lanes[t];
    l->id = (int)t;
    l->nblocks = (uint32_t)nblocks;
    l->min = min;
    l->max = max;
    l->per_gen = rounds * nblocks;
    l->seed = seed;
    l->blocks = calloc(nblocks, sizeof *l->blocks);
    if (!l->blocks)
      xmalloc_fail(nblocks * sizeof *l->blocks);
    rng_t r;
    rng_seed(&r, seed, 0xABCDEF00u + t);
    for (uint64_t i = 0; i < nblocks; i++) {
      size_t sz = rng_range(&r, min, max);
      unsigned char *p = malloc(sz);
      if (!p)
        xmalloc_fail(sz);
      p[0] = (unsigned char)sz;
      p[sz - 1] = 0;
      l->blocks[i] = p;
    }
  }

  double t0 = now_sec();
  for (uint64_t t = 0; t < nthreads; t++)
    start_thread(&lanes[t]);
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  atomic_store(&stop_flag, 1);
  for (uint64_t t = 0; t < nthreads; t++) {
    while (!atomic_load_explicit(&lanes[t].done, memory_order_acquire)) {
      struct timespec w = {0, 1000000};
      nanosleep(&w, NULL);
    }
  }
  double secs = now_sec() - t0;

  uint64_t ops = 0, checksum = 0, gens = 0;
  for (uint64_t t = 0; t < nthreads; t++) {
    ops += atomic_load(&lanes[t].ops);
    checksum += lanes[t].checksum;
    gens += lanes[t].generation;
    for (uint64_t i = 0; i < nblocks; i++)
      free(lanes[t].blocks[i]);
    free(lanes[t].blocks);
  }
  free(lanes);

  printf("benchmark: larson threads: %llu size: %zu-%zu blocks: %llu rounds: %llu seed: %llu\n",
         (unsigned long long)nthreads, min, max, (unsigned long long)nblocks,
         (unsigned long long)rounds, (unsigned long long)seed);
  printf("thread_generations: %llu\n", (unsigned long long)gens);
  printf("checksum: %llu\n", (unsigned long long)checksum);
  printf("seconds: %.6f\n", secs);
  printf("ops: %llu\n", (unsigned long long)ops);
  printf("ops/s: %.0f\n", (double)ops / (secs > 0 ? secs : 1e-9));
  return 0;
}
