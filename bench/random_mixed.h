/* The step loop of bench_random_mixed, shared with bench_checks (which runs
 * it against several copies of hakmem in one process).
 *
 * A slot array of ws entries; each step picks a random slot and frees it if
 * it holds a block, otherwise allocates a random size in [min, max] and
 * writes its first and last byte.  One step is one operation.  The allocator
 * comes as function pointers: inlined into a caller that passes constants
 * (bench_random_mixed), the calls are direct. */
#ifndef BENCH_RANDOM_MIXED_H
#define BENCH_RANDOM_MIXED_H

#include "bench_common.h"

typedef struct {
  uint64_t mallocs, frees, checksum;
} loop_result;

static inline __attribute__((always_inline)) loop_result
random_mixed_steps(void *(*alloc)(size_t), void (*release)(void *), void **slots, uint32_t ws,
                   uint64_t iters, rng_t *rng, size_t min, size_t max) {
  loop_result r = {0, 0, 0};
  uint32_t span = (uint32_t)(max - min + 1);
  for (uint64_t i = 0; i < iters; i++) {
    uint64_t x = rng_next(rng);
    uint32_t idx = (uint32_t)(((x >> 32) * (uint64_t)ws) >> 32);
    void *p = slots[idx];
    if (p) {
      r.checksum += ((unsigned char *)p)[0];
      release(p);
      slots[idx] = NULL;
      r.frees++;
    } else {
      size_t sz = min + (size_t)((((x & 0xffffffffu)) * (uint64_t)span) >> 32);
      unsigned char *q = alloc(sz);
      if (!q)
        xmalloc_fail(sz);
      q[0] = (unsigned char)sz;
      q[sz - 1] = (unsigned char)i;
      slots[idx] = q;
      r.mallocs++;
    }
  }
  return r;
}

#endif
