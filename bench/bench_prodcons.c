/* bench_prodcons [SECONDS] [BATCH] [SIZE]
 *
 * Producer/consumer of small blocks (issue 19): 2 threads each allocate
 * batches of BATCH (default 256) blocks of SIZE bytes (default 64; first
 * byte written) and hand each batch to the other thread through a lock-free
 * single-producer/single-consumer queue; the other thread reads the byte and
 * frees the batch.  So every block is freed by the thread that did not
 * allocate it, with one fixed size class -- the remote-free path in its
 * purest form (bench_xthread mixes sizes 16..1024 and fixed counts).  Each
 * thread prefers to free what it has received before producing more, and
 * produces while its queue has room.  The threads run for SECONDS (default
 * 5), then drain the queues.
 *
 * Output: frees/s: (blocks freed per second, both threads together) and
 * ops/s: (= frees/s, for the runner).
 */
#include "bench_common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define RING 32 /* batches in flight per queue */

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
  _Atomic int *stop;
  _Atomic int *done_producing; /* this thread's flag; the peer's is peer_done */
  _Atomic int *peer_done;
  uint32_t batch;
  size_t size;
  uint64_t frees, checksum, yields;
  char pad[64];
} thread_arg;

static pthread_barrier_t start_barrier;

static int consume(thread_arg *a) {
  uint64_t tail = atomic_load_explicit(&a->in->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&a->in->head, memory_order_acquire);
  if (tail == head)
    return 0;
  void **slot = a->in->slots + (tail % RING) * a->batch;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < a->batch; i++) {
    unsigned char *p = slot[i];
    sum += p[0];
    free(p);
  }
  atomic_store_explicit(&a->in->tail, tail + 1, memory_order_release);
  a->frees += a->batch;
  a->checksum += sum;
  return 1;
}

static int produce(thread_arg *a) {
  uint64_t head = atomic_load_explicit(&a->out->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&a->out->tail, memory_order_acquire);
  if (head - tail >= RING)
    return 0;
  void **slot = a->out->slots + (head % RING) * a->batch;
  for (uint32_t i = 0; i < a->batch; i++) {
    unsigned char *p = malloc(a->size);
    if (!p)
      xmalloc_fail(a->size);
    p[0] = (unsigned char)i;
    slot[i] = p;
  }
  atomic_store_explicit(&a->out->head, head + 1, memory_order_release);
  return 1;
}

static void *run(void *argp) {
  thread_arg *a = argp;
  pthread_barrier_wait(&start_barrier);
  while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
    int progress = consume(a);
    progress |= produce(a);
    if (!progress) {
      a->yields++;
      sched_yield();
    }
  }
  atomic_store_explicit(a->done_producing, 1, memory_order_release);
  /* Drain: the peer produces no more once its flag is set. */
  for (;;) {
    int peer_done = atomic_load_explicit(a->peer_done, memory_order_acquire);
    if (!consume(a)) {
      if (peer_done)
        break;
      sched_yield();
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 4) {
    fprintf(stderr,
            "usage: %s [SECONDS] [BATCH] [SIZE]\n"
            "  SECONDS  run time (default 5)\n"
            "  BATCH    blocks per hand-over (default 256)\n"
            "  SIZE     block size in bytes (default 64)\n",
            argv[0]);
    return 2;
  }
  double seconds = argc > 1 ? parse_double(argv[1], "SECONDS") : 5.0;
  uint64_t batch = argc > 2 ? parse_u64(argv[2], "BATCH") : 256;
  size_t size = argc > 3 ? (size_t)parse_u64(argv[3], "SIZE") : 64;
  if (batch < 1 || batch > 100000 || size < 1 || seconds <= 0 || seconds > 3600) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  queue_t *queues = malloc(2 * sizeof *queues);
  thread_arg *args = calloc(2, sizeof *args);
  if (!queues || !args)
    xmalloc_fail(2 * sizeof *queues);
  static _Atomic int stop, done[2];
  for (int t = 0; t < 2; t++) {
    atomic_init(&queues[t].head, 0);
    atomic_init(&queues[t].tail, 0);
    queues[t].slots = calloc(RING * batch, sizeof(void *));
    if (!queues[t].slots)
      xmalloc_fail(RING * batch * sizeof(void *));
  }
  for (int t = 0; t < 2; t++)
    args[t] = (thread_arg){.id = t,
                           .out = &queues[t],
                           .in = &queues[1 - t],
                           .stop = &stop,
                           .done_producing = &done[t],
                           .peer_done = &done[1 - t],
                           .batch = (uint32_t)batch,
                           .size = size};
  pthread_t tids[2];
  pthread_barrier_init(&start_barrier, NULL, 3);
  for (int t = 0; t < 2; t++) {
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
  for (int t = 0; t < 2; t++)
    pthread_join(tids[t], NULL);
  double secs = now_sec() - t0;
  pthread_barrier_destroy(&start_barrier);

  uint64_t frees = args[0].frees + args[1].frees;
  uint64_t checksum = args[0].checksum + args[1].checksum;
  uint64_t yields = args[0].yields + args[1].yields;
  for (int t = 0; t < 2; t++)
    free(queues[t].slots);
  free(queues);
  free(args);

  printf("benchmark: bench_prodcons seconds: %g batch: %llu size: %zu\n", seconds,
         (unsigned long long)batch, size);
  printf("frees: %llu\n", (unsigned long long)frees);
  printf("idle_yields: %llu\n", (unsigned long long)yields);
  printf("seconds: %.6f\n", secs);
  printf("frees/s: %.0f\n", (double)frees / (secs > 0 ? secs : 1e-9));
  printf("ops/s: %.0f\n", (double)frees / (secs > 0 ? secs : 1e-9));
  (void)checksum; /* depends on timing; read only to keep the loads */
  return 0;
}
