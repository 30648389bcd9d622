/* Emptied current slabs are given back when another class needs a slab
 * (src/heap.c, heap_release_idle_cur): a program that goes through the tiny
 * sizes one after the other (malloc then free a batch of each) ends up with
 * about one size's worth of slabs, not one emptied slab kept per size.
 * Measured with hak_stats_get: the tiny lane's `current` is the bytes of
 * blocks carved in slabs not given back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hakmem.h"

static int failed;
static void check(int ok, const char *what, size_t got, size_t bound) {
  printf("%-7s tiny lane carved %zu KiB (bound %zu KiB)%s\n", what, got >> 10, bound >> 10, ok ? "" : "  FAIL");
  if (!ok) failed = 1;
}

static size_t tiny_current(void) {
  static struct hak_stats s;
  hak_stats_get(&s);
  return s.lane[HAK_LANE_TINY].current;
}

static void *escape(void *p) {
  __asm__ volatile("" : : "g"(p) : "memory");
  return p;
}

int main(void) {
  enum { BATCH = 100 };
  void *p[BATCH];
  size_t before = tiny_current();
  for (size_t size = 16; size <= 1024; size += 16)
    for (int round = 0; round < 20; round++) {
      for (int i = 0; i < BATCH; i++) memset(p[i] = escape(malloc(size)), 1, size);
      for (int i = 0; i < BATCH; i++) free(p[i]);
    }
  /* one empty slab kept per size would be 64 slabs, >= 64 pages each
   * (100 blocks of every size: about 3.3 MB); a few slabs' worth is right */
  size_t sweep = tiny_current() - before;
  check(sweep <= (512u << 10), "sweep", sweep, 512u << 10);

  return failed;
}
