// bench_large_churn [STEPS] [SLOTS] [MIN_MIB MAX_MIB] [SEED]
//
// Large blocks, churned (issue 19): SLOTS slots (default 20); each step
// replaces a random slot with a new zero-filled block of MIN..MAX MiB
// (default 5..25, uniform in bytes) made by std::make_unique<char[]>(n),
// which value-initializes, i.e. writes every byte, so each page of the new
// block is touched.  The old block is freed by the assignment.  STEPS
// default 2000.  What it measures: whether an allocator reuses the memory of
// freed large blocks for new ones of other sizes, or maps (and faults in)
// fresh pages each time.
//
// Output: seconds: (the time), steps/s: and ops/s: (= steps/s, for the
// runner); checksum: depends only on the seed.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench_common.h"

int main(int argc, char **argv) {
  if (argc > 6 || argc == 4) {
    std::fprintf(stderr,
                 "usage: %s [STEPS] [SLOTS] [MIN_MIB MAX_MIB] [SEED]\n"
                 "  STEPS    slot replacements (default 2000)\n"
                 "  SLOTS    live blocks (default 20)\n"
                 "  MIN_MIB MAX_MIB  block size range in MiB (default 5 25)\n"
                 "  SEED     PRNG seed (default 42)\n",
                 argv[0]);
    return 2;
  }
  uint64_t steps = argc > 1 ? parse_u64(argv[1], "STEPS") : 2000;
  uint64_t nslots = argc > 2 ? parse_u64(argv[2], "SLOTS") : 20;
  uint64_t min_mib = argc > 4 ? parse_u64(argv[3], "MIN_MIB") : 5;
  uint64_t max_mib = argc > 4 ? parse_u64(argv[4], "MAX_MIB") : 25;
  uint64_t seed = argc > 5 ? parse_u64(argv[5], "SEED") : 42;
  if (nslots < 1 || nslots > 100000 || min_mib < 1 || max_mib < min_mib || max_mib > 1024) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  const size_t lo = (size_t)min_mib << 20, hi = (size_t)max_mib << 20;
  rng_t rng;
  rng_seed(&rng, seed, 0);
  std::vector<std::unique_ptr<char[]>> slots(nslots);
  std::vector<size_t> sizes(nslots, 0);
  uint64_t sum = 0;
  double t0 = now_sec();
  for (uint64_t i = 0; i < steps; i++) {
    uint32_t s = rng_below(&rng, (uint32_t)nslots);
    size_t n = rng_range(&rng, lo, hi);
    slots[s] = std::make_unique<char[]>(n);
    // Read back two bytes the zero fill wrote and mark the block, so the
    // fill cannot be elided and a wrong block would show in the checksum.
    char *p = slots[s].get();
    sum += (unsigned char)p[n / 2] + (unsigned char)p[n - 1] + n;
    p[0] = (char)i;
    sizes[s] = n;
  }
  double secs = now_sec() - t0;
  size_t peak_live = 0;
  for (uint64_t s = 0; s < nslots; s++) {
    if (slots[s])
      sum += (unsigned char)slots[s][sizes[s] - 1];
    peak_live += sizes[s];
  }
  slots.clear();
  std::printf("benchmark: bench_large_churn steps: %llu slots: %llu size: %llu-%llu MiB seed: %llu\n",
              (unsigned long long)steps, (unsigned long long)nslots, (unsigned long long)min_mib,
              (unsigned long long)max_mib, (unsigned long long)seed);
  std::printf("checksum: %llu\n", (unsigned long long)sum);
  std::printf("live_end_mb: %.1f\n", (double)peak_live / (1 << 20));
  std::printf("seconds: %.6f\n", secs);
  std::printf("steps/s: %.1f\n", (double)steps / (secs > 0 ? secs : 1e-9));
  std::printf("ops/s: %.1f\n", (double)steps / (secs > 0 ? secs : 1e-9));
  return 0;
}
