/* The seeds' crash cases: the "random mixed" workload.
 *
 *   test_seed_crashes WS OPS [SEED]
 *
 * A slot array of WS entries; each step picks a random slot, frees it if
 * full (after verifying the tag written into it), else mallocs a random
 * 16..1024-byte block and writes to it.  The original allocator ran out of
 * memory after 10M steps at WS 400 and segfaulted at WS 40,000.
 * Asserted: no failure, every block intact, RSS bounded by the working set
 * and not growing over the run.  OPS scales with HAKMEM_TEST_SCALE. */
#define _GNU_SOURCE
#include "test_common.h"

#include <stdint.h>
#include <stdlib.h>

struct slot {
  unsigned char *p;
  uint32_t size;
  uint32_t tag;
};

int main(int argc, char **argv) {
  tc_test_name = "seed random_mixed";
  if (argc < 3) {
    fprintf(stderr, "usage: %s WS OPS [SEED]\n", argv[0]);
    return 2;
  }
  size_t ws = strtoull(argv[1], NULL, 0);
  size_t ops = tc_scaled(strtoull(argv[2], NULL, 0));
  uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 42;
  struct slot *slots = calloc(ws, sizeof *slots);
  CHECK(slots, "calloc of the slot array");
  tc_rng r = {seed};
  size_t rss_base = tc_rss_bytes();
  size_t rss_quarter = 0, rss_peak = 0;
  size_t live = 0, live_bytes = 0, max_live_bytes = 0;
  for (size_t op = 0; op < ops; op++) {
    uint64_t x = tc_next(&r);
    struct slot *s = &slots[x % ws];
    if (s->p) {
      uint32_t t;
      memcpy(&t, s->p, 4);
      if (t != s->tag) FAILF("op %zu: block %p (%u B) head tag %08x, expected %08x", op, (void *)s->p, s->size, t, s->tag);
      memcpy(&t, s->p + s->size - 4, 4);
      if (t != ~s->tag)
        FAILF("op %zu: block %p (%u B) tail tag %08x, expected %08x", op, (void *)s->p, s->size, t, ~s->tag);
      if (s->p[s->size / 2] != (unsigned char)(s->tag >> 3) && s->size >= 12)
        FAILF("op %zu: block %p (%u B) middle byte corrupted", op, (void *)s->p, s->size);
      free(s->p);
      s->p = NULL;
      live--;
      live_bytes -= s->size;
    } else {
      uint32_t n = 16 + (uint32_t)((x >> 32) % 1009); /* 16 .. 1024 */
      unsigned char *p = malloc(n);
      if (!p) FAILF("op %zu: malloc(%u) returned NULL (errno %d) with %zu live blocks / %zu KiB (ws %zu)", op, n,
                    errno, live, live_bytes / 1024, ws);
      s->p = p;
      s->size = n;
      s->tag = (uint32_t)(x >> 8) ^ (uint32_t)op;
      memset(p, (unsigned char)(s->tag >> 3), n);
      memcpy(p, &s->tag, 4);
      uint32_t nt = ~s->tag;
      memcpy(p + n - 4, &nt, 4);
      live++;
      live_bytes += n;
      if (live_bytes > max_live_bytes) max_live_bytes = live_bytes;
    }
    if ((op & 0xFFFF) == 0 || op + 1 == ops) {
      size_t rss = tc_rss_bytes();
      if (rss > rss_peak) rss_peak = rss;
      if (op <= ops / 4) rss_quarter = rss;
    }
  }
  size_t rss_end = tc_rss_bytes();
  for (size_t i = 0; i < ws; i++) {
    if (!slots[i].p) continue;
    uint32_t t;
    memcpy(&t, slots[i].p, 4);
    if (t != slots[i].tag) FAILF("final sweep: slot %zu corrupted", i);
    free(slots[i].p);
  }
  free(slots);
  /* bound: twice the worst-case live payload (every slot full of 1 KiB
   * blocks) plus 32 MiB of fixed overhead */
  size_t bound = rss_base + 2 * ws * 1024 + 32 * MiB;
  printf("random_mixed ws=%zu ops=%zu: max live %zu KiB; RSS base %zu KiB, at 1/4 %zu KiB, peak %zu KiB, end %zu KiB"
         " (bound %zu KiB)\n",
         ws, ops, max_live_bytes / 1024, rss_base / 1024, rss_quarter / 1024, rss_peak / 1024, rss_end / 1024,
         bound / 1024);
  CHECK(rss_peak <= bound, "RSS peak %zu KiB exceeds bound %zu KiB (working set %zu)", rss_peak / 1024,
        bound / 1024, ws);
  CHECK(rss_end <= rss_quarter + rss_quarter / 4 + 8 * MiB,
        "RSS keeps growing: %zu KiB after a quarter of the run, %zu KiB at the end (leak?)", rss_quarter / 1024,
        rss_end / 1024);
  return 0;
}
