/* bench_random_mixed ITERS WS SEED [MIN MAX]
 *
 * The headline workload.  A slot array of WS entries; each step picks a
 * random slot and frees it if it holds a block, otherwise allocates a random
 * size in [MIN, MAX] (default 16..1024 bytes) and writes its first and last
 * byte.  One step is one operation (a malloc or a free).  Everything left is
 * freed at the end (not timed).
 *
 * Output (one "key: value" per line; "ops/s:" is the machine-readable one):
 *   ops/s: 123456789
 *
 * Built twice: as bench_random_mixed (calls malloc/free, so LD_PRELOAD picks
 * the allocator) and, with -DBENCH_TRIVIAL, as bench_random_mixed_trivial,
 * which uses a minimal allocator compiled into the binary (a free list per
 * 16-byte size class on top of a bump region).  The trivial binary measures
 * the cost of the loop itself; bench_instr.py subtracts it.
 */
#include "random_mixed.h"

#ifdef BENCH_TRIVIAL
/* ---- trivial allocator: size-class free lists over a bump region ---- */
#define TRIV_ALIGN 16
#define TRIV_CLASSES 4096 /* classes of 16 B: sizes up to 64 KiB */
#define TRIV_CHUNK (64u << 20)

typedef struct triv_free_node {
  struct triv_free_node *next;
} triv_free_node;

static triv_free_node *triv_lists[TRIV_CLASSES];
static char *triv_bump, *triv_end;

/* Each block carries a 16-byte header holding its size class. */
static BENCH_NOINLINE void *triv_refill(size_t bytes) {
  size_t chunk = bytes > TRIV_CHUNK ? bytes : TRIV_CHUNK;
  /* The regions come from the process allocator, once per 64 MiB. */
  char *p = malloc(chunk + TRIV_ALIGN);
  if (!p)
    xmalloc_fail(chunk);
  p = (char *)(((uintptr_t)p + TRIV_ALIGN - 1) & ~(uintptr_t)(TRIV_ALIGN - 1));
  triv_bump = p;
  triv_end = p + chunk;
  return p;
}

static inline void *triv_malloc(size_t n) {
  size_t cls = (n + TRIV_ALIGN - 1) / TRIV_ALIGN;
  if (cls >= TRIV_CLASSES)
    return NULL;
  triv_free_node *f = triv_lists[cls];
  if (f) {
    triv_lists[cls] = f->next;
    return f;
  }
  size_t total = cls * TRIV_ALIGN + TRIV_ALIGN;
  if ((size_t)(triv_end - triv_bump) < total)
    triv_refill(total);
  char *p = triv_bump;
  triv_bump += total;
  *(size_t *)p = cls;
  return p + TRIV_ALIGN;
}

static inline void triv_free(void *p) {
  if (!p)
    return;
  size_t cls = *(size_t *)((char *)p - TRIV_ALIGN);
  triv_free_node *f = p;
  f->next = triv_lists[cls];
  triv_lists[cls] = f;
}
#define BENCH_MALLOC triv_malloc
#define BENCH_FREE triv_free
#define BENCH_NAME "bench_random_mixed_trivial"
#else
#define BENCH_MALLOC malloc
#define BENCH_FREE free
#define BENCH_NAME "bench_random_mixed"
#endif

/* The timed loop.  Kept out of line so that callgrind can attribute the
 * instructions of the loop and of the allocator calls it makes to it
 * (bench_instr.py reads the inclusive cost of this function). */
BENCH_NOINLINE loop_result bench_loop(void **slots, uint32_t ws, uint64_t iters,
                                      rng_t *rng, size_t min, size_t max) {
  return random_mixed_steps(BENCH_MALLOC, BENCH_FREE, slots, ws, iters, rng, min, max);
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 6) {
    fprintf(stderr,
            "usage: %s ITERS WS SEED [MIN MAX]\n"
            "  ITERS  number of steps (each is one malloc or one free)\n"
            "  WS     number of slots (working set)\n"
            "  SEED   PRNG seed\n"
            "  MIN MAX  allocation size range in bytes (default 16 1024)\n",
            argv[0]);
    return 2;
  }
  uint64_t iters = parse_u64(argv[1], "ITERS");
  uint64_t ws = parse_u64(argv[2], "WS");
  uint64_t seed = parse_u64(argv[3], "SEED");
  size_t min = 16, max = 1024;
  if (argc == 6) {
    min = (size_t)parse_u64(argv[4], "MIN");
    max = (size_t)parse_u64(argv[5], "MAX");
  }
  if (ws == 0 || ws > 0xffffffffu || min == 0 || max < min ||
      max - min >= 0xffffffffu) {
    fprintf(stderr, "bad arguments: need WS >= 1, 1 <= MIN <= MAX\n");
    return 2;
  }

  void **slots = calloc(ws, sizeof *slots);
  if (!slots)
    xmalloc_fail(ws * sizeof *slots);
  rng_t rng;
  rng_seed(&rng, seed, 0);

  double t0 = now_sec();
  loop_result r = bench_loop(slots, (uint32_t)ws, iters, &rng, min, max);
  double t1 = now_sec();

  size_t live = 0;
  for (uint64_t i = 0; i < ws; i++) {
    if (slots[i]) {
      r.checksum += ((unsigned char *)slots[i])[0];
      BENCH_FREE(slots[i]);
      live++;
    }
  }
  free(slots);

  double secs = t1 - t0;
  double ops = (double)iters / (secs > 0 ? secs : 1e-9);
  printf("benchmark: %s\n", BENCH_NAME);
  printf("iters: %llu ws: %llu seed: %llu size: %zu-%zu\n",
         (unsigned long long)iters, (unsigned long long)ws,
         (unsigned long long)seed, min, max);
  printf("mallocs: %llu frees: %llu live_at_end: %zu\n",
         (unsigned long long)r.mallocs, (unsigned long long)r.frees, live);
  printf("checksum: %llu\n", (unsigned long long)r.checksum);
  printf("seconds: %.6f\n", secs);
  printf("ns/op: %.2f\n", secs * 1e9 / (double)(iters ? iters : 1));
  printf("ops: %llu\n", (unsigned long long)iters);
  printf("ops/s: %.0f\n", ops);
  return 0;
}
