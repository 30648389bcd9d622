/* bench_tiny [ROUNDS] [BATCH] [SIZE]
 *
 * Per tiny size class (every 16 bytes from 16 to 1024; SIZE: that size
 * only), BATCH (default 100) allocations, then BATCH frees in allocation
 * order; repeated ROUNDS times (default 5000) per size.  Each malloc and each free is one operation.
 * Measures the thread-local fast path of the allocator: allocation from and
 * return to a cache that is warm after the first round.
 *
 * Output: per-size ops/s for a few representative sizes and the total:
 *   ops/s: 123456789
 */
#include "bench_common.h"

#define MIN_SIZE 16
#define MAX_SIZE 1024
#define STEP 16

static BENCH_NOINLINE uint64_t run_size(void **ptrs, size_t size, uint64_t rounds,
                                        uint32_t batch) {
  uint64_t sum = 0;
  for (uint64_t r = 0; r < rounds; r++) {
    for (uint32_t i = 0; i < batch; i++) {
      unsigned char *p = malloc(size);
      if (!p)
        xmalloc_fail(size);
      p[0] = (unsigned char)i;
      p[size - 1] = (unsigned char)r;
      ptrs[i] = p;
    }
    for (uint32_t i = 0; i < batch; i++) {
      unsigned char *p = ptrs[i];
      sum += p[0];
      free(p);
    }
  }
  return sum;
}

int main(int argc, char **argv) {
  if (argc > 4 || (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
    fprintf(stderr,
            "usage: %s [ROUNDS] [BATCH] [SIZE]\n"
            "  ROUNDS  repetitions per size (default 5000)\n"
            "  BATCH   allocations before the frees (default 100)\n"
            "  SIZE    run this size only (1..1024; default every 16 B from 16)\n",
            argv[0]);
    return 2;
  }
  uint64_t rounds = argc > 1 ? parse_u64(argv[1], "ROUNDS") : 5000;
  uint64_t batch = argc > 2 ? parse_u64(argv[2], "BATCH") : 100;
  if (batch == 0 || batch > 1000000) {
    fprintf(stderr, "BATCH must be 1..1000000\n");
    return 2;
  }
  uint64_t only = argc > 3 ? parse_u64(argv[3], "SIZE") : 0;
  if (argc > 3 && (only == 0 || only > MAX_SIZE)) {
    fprintf(stderr, "SIZE must be 1..%d\n", MAX_SIZE);
    return 2;
  }
  void **ptrs = calloc(batch, sizeof *ptrs);
  if (!ptrs)
    xmalloc_fail(batch * sizeof *ptrs);

  uint64_t checksum = 0;
  uint64_t total_ops = 0;
  double total_secs = 0;
  printf("benchmark: bench_tiny rounds: %llu batch: %llu\n",
         (unsigned long long)rounds, (unsigned long long)batch);
  for (size_t size = only ? only : MIN_SIZE; size <= (only ? only : MAX_SIZE); size += STEP) {
    double t0 = now_sec();
    checksum += run_size(ptrs, size, rounds, (uint32_t)batch);
    double secs = now_sec() - t0;
    uint64_t ops = rounds * batch * 2;
    total_ops += ops;
    total_secs += secs;
    /* Print a few representative classes (powers of two and 1024). */
    if (only || (size & (size - 1)) == 0 || size == 48 || size == 96 || size == 192 || size == 384 ||
        size == 768)
      printf("size %4zu: %.0f ops/s\n", size, (double)ops / (secs > 0 ? secs : 1e-9));
  }
  free(ptrs);
  printf("checksum: %llu\n", (unsigned long long)checksum);
  printf("seconds: %.6f\n", total_secs);
  printf("ops: %llu\n", (unsigned long long)total_ops);
  printf("ops/s: %.0f\n", (double)total_ops / (total_secs > 0 ? total_secs : 1e-9));
  return 0;
}
