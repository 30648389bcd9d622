/* The syscall budget (docs/DESIGN.md, "Memory given back"): after warm-up,
 * a bench_random_mixed-like loop makes no mmap+munmap+madvise+mremap when
 * its blocks are pool blocks of up to 1 KiB (a working set that does not
 * change), and at most 20 a second of run time on average otherwise (the
 * idle pages of packs in use go back), counted by hakmem itself
 * (hak_os_stats_get).
 *
 *   test_syscall_budget WS MIN MAX [MEASURED_OPS]
 *
 * Each step picks a random slot of WS; a full slot is freed, an empty one
 * gets a block of a uniform size in [MIN, MAX] whose first and last byte
 * are written. Warm-up: 20 steps per slot (at least 2M); then
 * MEASURED_OPS steps (default 2M, scaled by HAKMEM_TEST_SCALE) are
 * measured, repeated until at least two seconds have passed where the
 * budget is in time: the budget is an average, and the token bucket may
 * start a window with a second's worth of calls saved (DESIGN.md, "Memory
 * given back"), which a window of a fraction of a second cannot average
 * out. Single-threaded, like bench_random_mixed. hakmem-specific. */
#define _GNU_SOURCE
#include "test_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "hakmem.h"

static size_t os_calls(const struct hak_os_stats *s) {
  return s->mmap_calls + s->munmap_calls + s->madvise_calls + s->mremap_calls;
}

static void run(unsigned char **slots, size_t ws, size_t min, size_t max, size_t ops, tc_rng *r) {
  for (size_t i = 0; i < ops; i++) {
    size_t k = (size_t)tc_below(r, ws);
    unsigned char *p = slots[k];
    if (p != NULL) {
      free(p);
      slots[k] = NULL;
    } else {
      size_t n = min + (size_t)tc_below(r, max - min + 1);
      p = malloc(n);
      CHECK(p, "malloc(%zu)", n);
      p[0] = (unsigned char)n;
      p[n - 1] = (unsigned char)i;
      slots[k] = p;
    }
  }
}

int main(int argc, char **argv) {
  tc_test_name = "syscall_budget";
  if (!HAKMEM_SPECIFIC) return 77;
  if (argc != 4 && argc != 5) FAILF("usage: test_syscall_budget WS MIN MAX [MEASURED_OPS]");
  size_t ws = strtoull(argv[1], NULL, 0), min = strtoull(argv[2], NULL, 0), max = strtoull(argv[3], NULL, 0);
  size_t ops = tc_scaled(argc == 5 ? strtoull(argv[4], NULL, 0) : 2000000);
  CHECK(ws > 0 && min > 0 && max >= min, "bad arguments");
  unsigned char **slots = calloc(ws, sizeof *slots);
  CHECK(slots, "calloc");
  tc_rng r = {42};
  size_t warm = ws * 20 > 2000000 ? ws * 20 : 2000000;
  run(slots, ws, min, max, warm, &r);
  struct hak_os_stats a, b;
  struct timespec t0, t1;
  double secs, min_secs = max <= 1024 ? 0.0 : 2.0;
  size_t measured = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  hak_os_stats_get(&a);
  do {
    run(slots, ws, min, max, ops, &r);
    measured += ops;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  } while (secs < min_secs);
  hak_os_stats_get(&b);
  size_t calls = os_calls(&b) - os_calls(&a);
  size_t budget = max <= 1024 ? 0 : (size_t)(20.0 * secs);
  printf("ws %zu sizes %zu..%zu: %zu OS calls (mmap %zu munmap %zu madvise %zu mremap %zu) in %zu operations "
         "(%.2f s) after %zu of warm-up (budget %zu)\n",
         ws, min, max, calls, b.mmap_calls - a.mmap_calls, b.munmap_calls - a.munmap_calls,
         b.madvise_calls - a.madvise_calls, b.mremap_calls - a.mremap_calls, measured, secs, warm, budget);
  CHECK(calls <= budget, "%zu mmap/munmap/madvise/mremap calls in %zu steady-state operations (budget %zu)", calls,
        measured, budget);
  for (size_t i = 0; i < ws; i++) free(slots[i]);
  free(slots);
  return 0;
}
