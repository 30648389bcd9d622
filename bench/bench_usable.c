/* bench_usable ITERS [CALLS] [SEED]
 *
 * malloc_usable_size as a program that keeps its own memory accounting uses
 * it (redis's zmalloc, issue 19): each iteration frees the block in a slot
 * of a 64-slot ring and allocates a new one (sizes 8..512 from a table)
 * into it; with CALLS=1 (default) it also calls malloc_usable_size on the
 * block it is about to free and on the new block, as redis does before
 * every free and after every malloc.  Run under callgrind, once with
 * CALLS=1 and once with CALLS=0: the difference over ITERS is what the two
 * calls cost (scripts/bench_usable.py).  The loop is bench_loop.
 *
 * Output: ops: ITERS, checksum: (the sum of the usable sizes, or of the
 * requested ones with CALLS=0), ops/s:.
 */
#include "bench_common.h"

#include <malloc.h>

#define RING 64
#define NSIZES 256

static size_t sizes[NSIZES];

static BENCH_NOINLINE uint64_t bench_loop(void **ring, uint64_t iters, int calls) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < iters; i++) {
    unsigned s = (unsigned)(i % RING);
    size_t n = sizes[i % NSIZES];
    void *old = ring[s];
    if (calls)
      sum += malloc_usable_size(old);
    free(old);
    void *p = malloc(n);
    if (!p)
      xmalloc_fail(n);
    *(volatile char *)p = 1;
    sum += calls ? malloc_usable_size(p) : n;
    ring[s] = p;
  }
  return sum;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr,
            "usage: %s ITERS [CALLS] [SEED]\n"
            "  ITERS  iterations (free + malloc each)\n"
            "  CALLS  1: malloc_usable_size on the freed and the new block (default); 0: not\n"
            "  SEED   PRNG seed of the size table (default 42)\n",
            argv[0]);
    return 2;
  }
  uint64_t iters = parse_u64(argv[1], "ITERS");
  int calls = argc > 2 ? (int)parse_u64(argv[2], "CALLS") != 0 : 1;
  uint64_t seed = argc > 3 ? parse_u64(argv[3], "SEED") : 42;
  rng_t rng;
  rng_seed(&rng, seed, 0);
  for (int i = 0; i < NSIZES; i++)
    sizes[i] = rng_range(&rng, 8, 512);
  void *ring[RING];
  for (int i = 0; i < RING; i++) {
    ring[i] = malloc(sizes[i]);
    if (!ring[i])
      xmalloc_fail(sizes[i]);
  }
  double t0 = now_sec();
  uint64_t sum = bench_loop(ring, iters, calls);
  double secs = now_sec() - t0;
  for (int i = 0; i < RING; i++)
    free(ring[i]);
  printf("benchmark: bench_usable iters: %llu calls: %d seed: %llu\n", (unsigned long long)iters, calls,
         (unsigned long long)seed);
  printf("checksum: %llu\n", (unsigned long long)sum);
  printf("seconds: %.6f\n", secs);
  printf("ops: %llu\n", (unsigned long long)iters);
  printf("ops/s: %.0f\n", (double)iters / (secs > 0 ? secs : 1e-9));
  return 0;
}
