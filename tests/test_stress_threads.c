/* Many more threads than cores: SLOTS threads at a time (64 by default on
 * a machine of 2 cores), each allocating blocks of every lane, handing most
 * of them to random other slots to be freed there, freeing what was handed
 * to it after checking each block's contents, and exiting after a random
 * number of operations, to be replaced by a fresh thread in its slot (which
 * inherits the slot's inbox). Runs for a bounded time under a watchdog.
 *
 * test_stress_threads [SLOTS] [SECONDS] */
#define _GNU_SOURCE
#include "test_watchdog.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#ifdef USE_HAK_NAMES /* the ThreadSanitizer build: hakmem by its own names */
#include "hakmem.h"
#define malloc hak_malloc
#define calloc hak_calloc
#define realloc hak_realloc
#define free hak_free
#endif

/* A block's first 24 bytes: its size, its pattern's seed, the inbox link. */
typedef struct blk {
  uint64_t size, seed;
  struct blk *next;
} blk_t;
#define HDR sizeof(blk_t)

enum { MAX_SLOTS = 1024 };
static unsigned nslots = 64;
static double run_seconds = 3;
static struct slot {
  _Atomic(blk_t *) inbox; /* pushed by anyone, taken whole by the slot's thread */
  _Atomic int done;        /* the thread finished: main joins and replaces it */
  pthread_t tid;
  uint64_t gen;
} slots[MAX_SLOTS];
static _Atomic int stop;
static _Atomic long n_alloc, n_free, n_handed, n_threads;

static blk_t *make(uint64_t *rs) {
  tc_rng r = {*rs};
  uint64_t c = tc_below(&r, 1000);
  size_t n = HDR + (c < 850 ? tc_below(&r, 1024) : c < 997 ? tc_below(&r, 65536) : 262144 + tc_below(&r, 1 << 19));
  blk_t *b = (c % 7 == 0) ? calloc(1, n) : malloc(n);
  if (b == NULL) FAILF("malloc(%zu) failed", n);
  if (c % 7 == 0 && tc_find_not((char *)b + HDR, n - HDR < 4096 ? n - HDR : 4096, 0) != (size_t)-1)
    FAILF("calloc(%zu): not zeroed", n);
  b->size = n, b->seed = tc_next(&r), b->next = NULL;
  tc_fill(b + 1, n - HDR, b->seed);
  *rs = r.s;
  atomic_fetch_add_explicit(&n_alloc, 1, memory_order_relaxed);
  return b;
}

static void check_free(blk_t *b) {
  CHECK_PATTERN(b + 1, b->size - HDR, b->seed, "block of %llu bytes", (unsigned long long)b->size);
  free(b);
  atomic_fetch_add_explicit(&n_free, 1, memory_order_relaxed);
}

static void push(struct slot *s, blk_t *b) {
  blk_t *old = atomic_load_explicit(&s->inbox, memory_order_relaxed);
  do b->next = old;
  while (!atomic_compare_exchange_weak_explicit(&s->inbox, &old, b, memory_order_release, memory_order_relaxed));
}

static void drain(struct slot *s) {
  for (blk_t *b = atomic_exchange_explicit(&s->inbox, NULL, memory_order_acquire), *nx; b != NULL; b = nx) {
    nx = b->next;
    check_free(b);
  }
}

static void *run(void *arg) {
  struct slot *me = arg;
  uint64_t rs = tc_mix64((uint64_t)(me - slots) << 32 ^ me->gen);
  tc_rng r = {rs};
  long ops = 200 + (long)tc_below(&r, 4000);
  blk_t *own[16] = {0};
  for (long i = 0; i < ops && !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
    blk_t *b = make(&rs);
    if (i % 4 == 0) { /* some kept and freed by their own thread */
      unsigned k = (unsigned)(rs % 16);
      if (own[k]) check_free(own[k]);
      own[k] = b;
    } else {
      push(&slots[tc_mix64(rs) % nslots], b);
      atomic_fetch_add_explicit(&n_handed, 1, memory_order_relaxed);
    }
    if (i % 8 == 0) drain(me);
    if (i % 64 == 0) sched_yield();
  }
  drain(me);
  for (int k = 0; k < 16; k++)
    if (own[k]) check_free(own[k]);
  atomic_store_explicit(&me->done, 1, memory_order_release);
  return NULL;
}

static void start(struct slot *s) {
  s->gen++;
  atomic_store(&s->done, 0);
  int e;
  while ((e = pthread_create(&s->tid, NULL, run, s)) == EAGAIN) sched_yield();
  if (e) FAILF("pthread_create: %s", strerror(e));
  atomic_fetch_add(&n_threads, 1);
}

static void scenario(void *unused) {
  (void)unused;
  for (unsigned i = 0; i < nslots; i++) start(&slots[i]);
  double t0 = tc_now();
  while (tc_now() - t0 < run_seconds) {
    for (unsigned i = 0; i < nslots; i++)
      if (atomic_load_explicit(&slots[i].done, memory_order_acquire)) {
        pthread_join(slots[i].tid, NULL);
        start(&slots[i]);
      }
    struct timespec d = {0, 1000 * 1000};
    nanosleep(&d, NULL);
  }
  atomic_store(&stop, 1);
  for (unsigned i = 0; i < nslots; i++) pthread_join(slots[i].tid, NULL);
  for (unsigned i = 0; i < nslots; i++) drain(&slots[i]); /* pushed after their slot's thread left */
  long a = atomic_load(&n_alloc), f = atomic_load(&n_free);
  printf("stress: %u slots, %ld threads in %.1f s: %ld blocks (%ld handed to another thread), %ld freed\n", nslots,
         atomic_load(&n_threads), tc_now() - t0, a, atomic_load(&n_handed), f);
  if (a != f) FAILF("%ld blocks allocated, %ld freed", a, f);
  if (atomic_load(&n_threads) <= (long)nslots) FAILF("no thread was replaced");
}

int main(int argc, char **argv) {
  tc_test_name = "stress_threads";
  if (argc > 1) nslots = (unsigned)atoi(argv[1]);
  if (argc > 2) run_seconds = atof(argv[2]);
  if (nslots < 2 || nslots > MAX_SLOTS) FAILF("SLOTS must be 2..%d", MAX_SLOTS);
  setvbuf(stdout, NULL, _IOLBF, 0);
  tc_bounded("stress", scenario, NULL, run_seconds + 60);
  return 0;
}
