/* bench_frag [SMALL_MB] [SEED]
 *
 * Fragmentation: how much of the process stays resident per live byte when
 * freed small blocks cannot serve what comes next.
 *   1. fill SMALL_MB (default 256) MiB of small blocks, 16..512 bytes;
 *   2. free half of them, chosen at random;
 *   3. allocate mid-size blocks, 1..32 KiB, until the live bytes are back
 *      to what step 1 allocated.
 * Every block is written whole. Prints RSS and live bytes after each step
 * (RSS from /proc/self/statm minus the RSS before step 1; live: requested
 * bytes) and the ratio after step 3:
 *   rss_live_ratio: 1.42
 * An allocator that segregates sizes keeps the freed small blocks' pages
 * (their neighbours are live) while the mid blocks need new ones, so about
 * 1.5 is expected of it; reusing the freed pages for the mid blocks would
 * bring it towards 1. The floor for an allocator that does not move live
 * blocks is computed from the addresses it returned: the distinct 4 KiB
 * pages the live small blocks cover, plus the live mid bytes, over the
 * live bytes:
 *   floor_ratio: 1.51
 * (rss_live_ratio minus floor_ratio is what the allocator adds: headers,
 * size-class rounding, partly used pages, its own metadata.) Also prints
 * ops/s (mallocs and frees per second, for the benchmark runner).
 */
#include "bench_common.h"

/* Write every page of p: the arrays must be resident before the baseline.
 * (A memset of zeros after malloc is a calloc to the compiler, and a
 * calloc of fresh pages leaves them untouched: they then became resident
 * during the run and counted as the allocator's.) */
static void touch_pages(void *p, size_t n) {
  volatile char *c = p;
  for (size_t i = 0; i < n; i += 4096) c[i] = 0;
}

static int cmp_uptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc > 3) {
    fprintf(stderr, "usage: %s [SMALL_MB] [SEED]\n", argv[0]);
    return 2;
  }
  size_t small_bytes = (size_t)(argc > 1 ? parse_u64(argv[1], "SMALL_MB") : 256) << 20;
  uint64_t seed = argc > 2 ? parse_u64(argv[2], "SEED") : 42;
  rng_t rng;
  rng_seed(&rng, seed, 0);

  size_t cap = small_bytes / 16 + 1, n = 0;
  void **small = calloc(cap, sizeof *small);
  uint32_t *small_sz = calloc(cap, sizeof *small_sz);
  if (!small || !small_sz)
    xmalloc_fail(cap * sizeof *small);
  /* the bench's own arrays are touched before the baseline is taken */
  touch_pages(small, cap * sizeof *small);
  touch_pages(small_sz, cap * sizeof *small_sz);
  size_t mid_cap = small_bytes / 1024 + 1, m = 0;
  void **mid = calloc(mid_cap, sizeof *mid);
  if (!mid)
    xmalloc_fail(mid_cap * sizeof *mid);
  touch_pages(mid, mid_cap * sizeof *mid);
  size_t rss0 = rss_bytes();
  uint64_t ops = 0;
  double t0 = now_sec();

  size_t live = 0;
  while (live < small_bytes && n < cap) {
    size_t sz = rng_range(&rng, 16, 512);
    char *p = malloc(sz);
    if (!p)
      xmalloc_fail(sz);
    memset(p, (int)(n & 0xff), sz);
    small[n] = p;
    small_sz[n++] = (uint32_t)sz;
    live += sz;
    ops++;
  }
  size_t filled = live;
  size_t rss1 = rss_bytes() - rss0;
  printf("fill: live_mb: %.1f rss_mb: %.1f\n", live / 1048576.0, rss1 / 1048576.0);

  /* free a random half: shuffle indices' choice by a coin per block */
  for (size_t i = 0; i < n; i++) {
    if (rng_below(&rng, 2) == 0) {
      free(small[i]);
      live -= small_sz[i];
      small[i] = NULL;
      ops++;
    }
  }
  size_t rss2 = rss_bytes() - rss0;
  printf("half freed: live_mb: %.1f rss_mb: %.1f\n", live / 1048576.0, rss2 / 1048576.0);

  while (live < filled && m < mid_cap) {
    size_t sz = rng_range(&rng, 1024, 32768);
    char *p = malloc(sz);
    if (!p)
      xmalloc_fail(sz);
    memset(p, (int)(m & 0xff), sz);
    mid[m++] = p;
    live += sz;
    ops++;
  }
  double t1 = now_sec();
  size_t rss3 = rss_bytes() - rss0;
  printf("mid allocated: live_mb: %.1f rss_mb: %.1f\n", live / 1048576.0, rss3 / 1048576.0);
  printf("rss_live_ratio: %.2f\n", live ? (double)rss3 / (double)live : 0.0);

  /* The floor: pages that live small blocks cover (sorted, counted once). */
  size_t npages = 0, live_small = 0, live_mid = live;
  uintptr_t *pages = malloc((n * 2 + 1) * sizeof *pages);
  if (!pages)
    xmalloc_fail(n * 2 * sizeof *pages);
  for (size_t i = 0; i < n; i++) {
    if (!small[i])
      continue;
    uintptr_t a = (uintptr_t)small[i], b = a + small_sz[i] - 1;
    live_small += small_sz[i];
    for (uintptr_t pg = a >> 12; pg <= b >> 12; pg++)
      pages[npages++] = pg;
  }
  live_mid -= live_small;
  qsort(pages, npages, sizeof *pages, cmp_uptr);
  size_t distinct = 0;
  for (size_t i = 0; i < npages; i++)
    distinct += i == 0 || pages[i] != pages[i - 1];
  free(pages);
  double floor_bytes = (double)distinct * 4096.0 + (double)live_mid;
  printf("floor_mb: %.1f (small pages %.1f + mid %.1f)\n", floor_bytes / 1048576.0,
         (double)distinct * 4096.0 / 1048576.0, (double)live_mid / 1048576.0);
  printf("floor_ratio: %.2f\n", live ? floor_bytes / (double)live : 0.0);

  uint64_t checksum = 0;
  for (size_t i = 0; i < n; i++)
    if (small[i]) {
      checksum += ((unsigned char *)small[i])[0];
      free(small[i]);
    }
  for (size_t i = 0; i < m; i++) {
    checksum += ((unsigned char *)mid[i])[0];
    free(mid[i]);
  }
  free(small);
  free(small_sz);
  free(mid);
  printf("checksum: %llu\n", (unsigned long long)checksum);
  printf("ops: %llu\n", (unsigned long long)ops);
  printf("ops/s: %.0f\n", (double)ops / (t1 > t0 ? t1 - t0 : 1e-9));
  return 0;
}
