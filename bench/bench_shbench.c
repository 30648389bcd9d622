/* bench_shbench [THREADS] [ROUNDS] [PER_ROUND] [SEED]
 *
 * Mixed sizes with varying lifetimes, in the spirit of MicroQuill's shbench
 * (our own program): THREADS threads (default 2) each run ROUNDS rounds
 * (default 20000).  In a round a thread first frees every block whose
 * lifetime ends in that round, then allocates PER_ROUND blocks (default 64)
 * and gives each a lifetime of 1..63 rounds: half live 1 round (freed at
 * once in the next round, in allocation order), the rest a geometric number
 * of rounds (mean about 8, capped at 63).  Sizes are mixed: 70% 16-64
 * bytes (a block holds its list link, size and a tag in its first 16),
 * 20% 65-512, 9% 513-4096, 1% 4097-65536.  The tag's low byte is also
 * written to the block's last byte and checked when it is freed.  No block
 * crosses threads, and each thread's sequence depends only on the seed and
 * its number, so the checksum is the same under every allocator.
 *
 * Each malloc and each free is one operation.  Output: ops/s:.
 */
#include "bench_common.h"

#include <pthread.h>

#define HORIZON 64 /* lifetimes are 1..HORIZON-1 rounds */

typedef struct node {
  struct node *next;
  uint32_t size;
  uint32_t tag;
} node;

typedef struct {
  int id;
  uint64_t rounds, per_round, seed;
  uint64_t ops, checksum;
  int bad;
  char pad[64];
} thread_arg;

static pthread_barrier_t start_barrier;

static size_t draw_size(rng_t *r) {
  uint32_t c = rng_below(r, 100);
  if (c < 70)
    return rng_range(r, sizeof(node), 64);
  if (c < 90)
    return rng_range(r, 65, 512);
  if (c < 99)
    return rng_range(r, 513, 4096);
  return rng_range(r, 4097, 65536);
}

static uint32_t draw_life(rng_t *r) {
  if (rng_below(r, 2) == 0)
    return 1;
  uint32_t d = 1;
  while (d < HORIZON - 1 && rng_below(r, 8) != 0)
    d++;
  return d;
}

static void free_list(node *n, thread_arg *a) {
  while (n) {
    node *next = n->next;
    unsigned char *p = (unsigned char *)n;
    if (p[n->size - 1] != (unsigned char)n->tag)
      a->bad = 1;
    a->checksum += n->tag ^ n->size;
    free(n);
    a->ops++;
    n = next;
  }
}

static void *run(void *argp) {
  thread_arg *a = argp;
  rng_t rng;
  rng_seed(&rng, a->seed, (uint64_t)a->id + 1);
  /* bucket[r % HORIZON]: blocks freed in round r, kept in allocation order
   * (head and tail), so short-lived blocks go back first-in first-out. */
  node *head[HORIZON] = {0}, *tail[HORIZON] = {0};
  pthread_barrier_wait(&start_barrier);
  for (uint64_t r = 0; r < a->rounds; r++) {
    unsigned b = (unsigned)(r % HORIZON);
    free_list(head[b], a);
    head[b] = tail[b] = NULL;
    for (uint64_t k = 0; k < a->per_round; k++) {
      size_t n = draw_size(&rng);
      node *p = malloc(n);
      if (!p)
        xmalloc_fail(n);
      a->ops++;
      p->next = NULL;
      p->size = (uint32_t)n;
      p->tag = (uint32_t)rng_next(&rng);
      ((unsigned char *)p)[n - 1] = (unsigned char)p->tag;
      unsigned d = (unsigned)((r + draw_life(&rng)) % HORIZON);
      if (tail[d])
        tail[d]->next = p;
      else
        head[d] = p;
      tail[d] = p;
    }
  }
  for (unsigned b = 0; b < HORIZON; b++)
    free_list(head[b], a);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 5) {
    fprintf(stderr,
            "usage: %s [THREADS] [ROUNDS] [PER_ROUND] [SEED]\n"
            "  THREADS    threads (default 2)\n"
            "  ROUNDS     rounds per thread (default 20000)\n"
            "  PER_ROUND  blocks allocated per round (default 64)\n"
            "  SEED       PRNG seed (default 42)\n",
            argv[0]);
    return 2;
  }
  uint64_t nthreads = argc > 1 ? parse_u64(argv[1], "THREADS") : 2;
  uint64_t rounds = argc > 2 ? parse_u64(argv[2], "ROUNDS") : 20000;
  uint64_t per_round = argc > 3 ? parse_u64(argv[3], "PER_ROUND") : 64;
  uint64_t seed = argc > 4 ? parse_u64(argv[4], "SEED") : 42;
  if (nthreads < 1 || nthreads > 1024 || per_round < 1 || per_round > 1000000) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  thread_arg *args = calloc(nthreads, sizeof *args);
  pthread_t *tids = calloc(nthreads, sizeof *tids);
  if (!args || !tids)
    xmalloc_fail(nthreads * sizeof *args);
  pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
  for (uint64_t t = 0; t < nthreads; t++) {
    args[t] = (thread_arg){.id = (int)t, .rounds = rounds, .per_round = per_round, .seed = seed};
    if (pthread_create(&tids[t], NULL, run, &args[t]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  pthread_barrier_wait(&start_barrier);
  double t0 = now_sec();
  uint64_t ops = 0, checksum = 0;
  int bad = 0;
  for (uint64_t t = 0; t < nthreads; t++) {
    pthread_join(tids[t], NULL);
    ops += args[t].ops;
    checksum += args[t].checksum;
    bad |= args[t].bad;
  }
  double secs = now_sec() - t0;
  pthread_barrier_destroy(&start_barrier);
  free(args);
  free(tids);
  if (bad) {
    fprintf(stderr, "a block's contents changed while it was live\n");
    return 1;
  }
  printf("benchmark: bench_shbench threads: %llu rounds: %llu per_round: %llu seed: %llu\n",
         (unsigned long long)nthreads, (unsigned long long)rounds, (unsigned long long)per_round,
         (unsigned long long)seed);
  printf("checksum: %llu\n", (unsigned long long)checksum);
  printf("seconds: %.6f\n", secs);
  printf("ops: %llu\n", (unsigned long long)ops);
  printf("ops/s: %.0f\n", (double)ops / (secs > 0 ? secs : 1e-9));
  return 0;
}
