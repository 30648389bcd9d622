/* bench_mid_large ITERS WS SEED [MIN MAX]
 *
 * Medium and large blocks.  A slot array of WS entries; each step picks a
 * random slot.  An empty slot gets a new block whose size is drawn
 * log-uniformly from [MIN, MAX] (default 1 KiB .. 4 MiB, so every power-of-two
 * range is equally likely); its first and last byte and the first 64 bytes
 * are written.  A full slot is, with probability 1/3, grown with realloc to
 * 1.25x..2x its size (capped at MAX; the contents are checked to survive the
 * move) and otherwise freed.  Every malloc, realloc and free is one operation.
 *
 * Output:
 *   ops/s: 123456789
 */
#include "bench_common.h"

#include <math.h>

typedef struct {
  unsigned char *p;
  size_t size;
} slot_t;

static size_t draw_size(rng_t *r, double lmin, double lmax) {
  double l = lmin + (lmax - lmin) * rng_unit(r);
  return (size_t)exp2(l);
}

static void fill(unsigned char *p, size_t size, uint64_t tag) {
  size_t n = size < 64 ? size : 64;
  memset(p, (int)(tag & 0xff), n);
  p[size - 1] = (unsigned char)(tag >> 8);
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 6) {
    fprintf(stderr,
            "usage: %s ITERS WS SEED [MIN MAX]\n"
            "  ITERS    steps (each one malloc, realloc or free)\n"
            "  WS       number of slots\n"
            "  SEED     PRNG seed\n"
            "  MIN MAX  size range in bytes (default 1024 4194304)\n",
            argv[0]);
    return 2;
  }
  uint64_t iters = parse_u64(argv[1], "ITERS");
  uint64_t ws = parse_u64(argv[2], "WS");
  uint64_t seed = parse_u64(argv[3], "SEED");
  size_t min = 1024, max = 4u << 20;
  if (argc == 6) {
    min = (size_t)parse_u64(argv[4], "MIN");
    max = (size_t)parse_u64(argv[5], "MAX");
  }
  if (ws < 1 || ws > 0xffffffffu || min < 1 || max < min) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  double lmin = log2((double)min), lmax = log2((double)max);

  slot_t *slots = calloc(ws, sizeof *slots);
  if (!slots)
    xmalloc_fail(ws * sizeof *slots);
  rng_t rng;
  rng_seed(&rng, seed, 0);
  uint64_t mallocs = 0, reallocs = 0, frees = 0, checksum = 0;
  size_t live = 0, peak_live = 0;

  double t0 = now_sec();
  for (uint64_t i = 0; i < iters; i++) {
    slot_t *s = &slots[rng_below(&rng, (uint32_t)ws)];
    if (!s->p) {
      size_t sz = draw_size(&rng, lmin, lmax);
      if (sz < min)
        sz = min;
      if (sz > max)
        sz = max;
      s->p = malloc(sz);
      if (!s->p)
        xmalloc_fail(sz);
      s->size = sz;
      fill(s->p, sz, i);
      live += sz;
      mallocs++;
    } else if (rng_below(&rng, 3) == 0 && s->size < max) {
      double f = 1.25 + 0.75 * rng_unit(&rng);
      size_t nsz = (size_t)((double)s->size * f);
      if (nsz > max)
        nsz = max;
      unsigned char first = s->p[0];
      unsigned char *q = realloc(s->p, nsz);
      if (!q)
        xmalloc_fail(nsz);
      if (q[0] != first) {
        fprintf(stderr, "realloc lost the contents of a block\n");
        return 1;
      }
      checksum += q[0];
      q[nsz - 1] = (unsigned char)i;
      live += nsz - s->size;
      s->p = q;
      s->size = nsz;
      reallocs++;
    } else {
      checksum += s->p[0] + s->p[s->size - 1];
      free(s->p);
      live -= s->size;
      s->p = NULL;
      s->size = 0;
      frees++;
    }
    if (live > peak_live)
      peak_live = live;
  }
  double secs = now_sec() - t0;

  for (uint64_t i = 0; i < ws; i++)
    free(slots[i].p);
  free(slots);

  printf("benchmark: bench_mid_large iters: %llu ws: %llu seed: %llu size: %zu-%zu\n",
         (unsigned long long)iters, (unsigned long long)ws,
         (unsigned long long)seed, min, max);
  printf("mallocs: %llu reallocs: %llu frees: %llu\n", (unsigned long long)mallocs,
         (unsigned long long)reallocs, (unsigned long long)frees);
  printf("peak_live_bytes: %zu\n", peak_live);
  printf("checksum: %llu\n", (unsigned long long)checksum);
  printf("seconds: %.6f\n", secs);
  printf("ops: %llu\n", (unsigned long long)iters);
  printf("ops/s: %.0f\n", (double)iters / (secs > 0 ? secs : 1e-9));
  return 0;
}
