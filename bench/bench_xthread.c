/* bench_xthread THREADS ITERS [BATCH] [MIN MAX] [SEED]
 *
 * Cross-thread free.  THREADS threads (>= 2) form a ring: thread i allocates
 * blocks (random sizes in [MIN, MAX], default 16..1024, first and last byte
 * written) in batches of BATCH (default 64) and passes each batch to thread
 * i+1 through a lock-free single-producer/single-consumer queue; thread i+1
 * checks and frees them.  So every thread both produces and consumes, and
 * every block is freed by a thread other than the one that allocated it.
 * Each thread allocates ITERS blocks (rounded up to whole batches).
 *
 * Each malloc and each free is one operation.  Output:
 *   ops/s: 123456789
 */
#include "bench_common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define RING 64 /* batches in flight per queue */

/* Padding keeps the two indices on separate cache lines (allocated with
 * plain malloc, so no over-alignment is requested). */
typedef struct {
  _Atomic uint64_t head; /* written by the producer */
  char pad1[120];
  _Atomic uint64_t tail; /* written by the consumer */
  char pad2[120];
  void **slots; /* RING * batch pointers */
} queue_t;

typedef struct {
  int id;
  queue_t *out, *in;
  uint64_t batches;
  uint32_t batch;
  size_t min, max;
  uint64_t seed;
  uint64_t checksum;
  uint64_t spins;
} thread_arg;

static pthread_barrier_t start_barrier;

static void *run(void *argp) {
  thread_arg *a = argp;
  rng_t rng;
  rng_seed(&rng, a->seed, (uint64_t)a->id);
  uint32_t span = (uint32_t)(a->max - a->min + 1);
  uint64_t produced = 0, consumed = 0, sum = 0, spins = 0;
  pthread_barrier_wait(&start_barrier);
  while (produced < a->batches || consumed < a->batches) {
    int progress = 0;
    if (produced < a->batches) {
      uint64_t head = atomic_load_explicit(&a->out->head, memory_order_relaxed);
      uint64_t tail = atomic_load_explicit(&a->out->tail, memory_order_acquire);
      if (head - tail < RING) {
        void **slot = a->out->slots + (head % RING) * a->batch;
        for (uint32_t i = 0; i < a->batch; i++) {
          uint64_t x = rng_next(&rng);
          size_t sz = a->min + (size_t)(((x >> 32) * (uint64_t)span) >> 32);
          unsigned char *p = malloc(sz);
          if (!p)
            xmalloc_fail(sz);
          p[0] = (unsigned char)sz;
          p[sz - 1] = (unsigned char)i;
          slot[i] = p;
        }
        atomic_store_explicit(&a->out->head, head + 1, memory_order_release);
        produced++;
        progress = 1;
      }
    }
    if (consumed < a->batches) {
      uint64_t tail = atomic_load_explicit(&a->in->tail, memory_order_relaxed);
      uint64_t head = atomic_load_explicit(&a->in->head, memory_order_acquire);
      if (tail != head) {
        void **slot = a->in->slots + (tail % RING) * a->batch;
        for (uint32_t i = 0; i < a->batch; i++) {
          unsigned char *p = slot[i];
          sum += p[0];
          free(p);
        }
        atomic_store_explicit(&a->in->tail, tail + 1, memory_order_release);
        consumed++;
        progress = 1;
      }
    }
    if (!progress) {
      spins++;
      sched_yield();
    }
  }
  a->checksum = sum;
  a->spins = spins;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 7 || argc == 5) {
    fprintf(stderr,
            "usage: %s THREADS ITERS [BATCH] [MIN MAX] [SEED]\n"
            "  THREADS  threads in the ring (>= 2)\n"
            "  ITERS    blocks each thread allocates\n"
            "  BATCH    blocks per hand-over (default 64)\n"
            "  MIN MAX  block size range (default 16 1024)\n"
            "  SEED     PRNG seed (default 1)\n",
            argv[0]);
    return 2;
  }
  uint64_t nthreads = parse_u64(argv[1], "THREADS");
  uint64_t iters = parse_u64(argv[2], "ITERS");
  uint64_t batch = argc > 3 ? parse_u64(argv[3], "BATCH") : 64;
  size_t min = argc > 5 ? (size_t)parse_u64(argv[4], "MIN") : 16;
  size_t max = argc > 5 ? (size_t)parse_u64(argv[5], "MAX") : 1024;
  uint64_t seed = argc > 6 ? parse_u64(argv[6], "SEED") : 1;
  if (nthreads < 2 || nthreads > 1024 || batch < 1 || batch > 100000 || min < 1 ||
      max < min || max - min >= 0xffffffffu) {
    fprintf(stderr, "bad arguments (THREADS must be >= 2)\n");
    return 2;
  }
  uint64_t batches = (iters + batch - 1) / batch;

  queue_t *queues = malloc(nthreads * sizeof *queues);
  thread_arg *args = calloc(nthreads, sizeof *args);
  pthread_t *tids = calloc(nthreads, sizeof *tids);
  if (!queues || !args || !tids)
    xmalloc_fail(nthreads * sizeof *queues);
  for (uint64_t t = 0; t < nthreads; t++) {
    atomic_init(&queues[t].head, 0);
    atomic_init(&queues[t].tail, 0);
    queues[t].slots = calloc(RING * batch, sizeof(void *));
    if (!queues[t].slots)
      xmalloc_fail(RING * batch * sizeof(void *));
  }
  for (uint64_t t = 0; t < nthreads; t++) {
    args[t] = (thread_arg){.id = (int)t,
                           .out = &queues[t],
                           .in = &queues[(t + nthreads - 1) % nthreads],
                           .batches = batches,
                           .batch = (uint32_t)batch,
                           .min = min,
                           .max = max,
                           .seed = seed};
  }
  pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
  for (uint64_t t = 0; t < nthreads; t++) {
    if (pthread_create(&tids[t], NULL, run, &args[t]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  pthread_barrier_wait(&start_barrier);
  double t0 = now_sec();
  for (uint64_t t = 0; t < nthreads; t++)
    pthread_join(tids[t], NULL);
  double secs = now_sec() - t0;
  pthread_barrier_destroy(&start_barrier);

  uint64_t checksum = 0, spins = 0;
  for (uint64_t t = 0; t < nthreads; t++) {
    checksum += args[t].checksum;
    spins += args[t].spins;
    free(queues[t].slots);
  }
  uint64_t ops = 2 * nthreads * batches * batch;
  free(queues);
  free(args);
  free(tids);

  printf("benchmark: bench_xthread threads: %llu iters: %llu batch: %llu size: %zu-%zu seed: %llu\n",
         (unsigned long long)nthreads, (unsigned long long)iters,
         (unsigned long long)batch, min, max, (unsigned long long)seed);
  printf("checksum: %llu\n", (unsigned long long)checksum);
  printf("idle_yields: %llu\n", (unsigned long long)spins);
  printf("seconds: %.6f\n", secs);
  printf("ops: %llu\n", (unsigned long long)ops);
  printf("ops/s: %.0f\n", (double)ops / (secs > 0 ? secs : 1e-9));
  return 0;
}
