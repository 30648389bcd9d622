/* Randomized model test: millions of malloc/calloc/realloc/reallocarray/
 * free/aligned operations on random sizes with every live block's contents
 * checked against a shadow record.
 *
 *   test_model [OPS [SEED]] [--hak]
 * OPS is scaled by HAKMEM_TEST_SCALE.  --hak uses the hak_* names. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "hakmem.h"

struct api {
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*reallocarray)(void *, size_t, size_t);
  int (*posix_memalign)(void **, size_t, size_t);
  void *(*aligned_alloc)(size_t, size_t);
  void *(*memalign)(size_t, size_t);
  size_t (*usable)(void *);
};

static struct api A;

struct slot {
  char *p;
  size_t size;
  uint64_t seed;
  size_t align; /* alignment promised at allocation time (0 = default) */
};

#define SLOTS 16384
static struct slot slots[SLOTS];

/* Blocks up to 16 KiB are filled completely; bigger ones sparsely (head,
 * tail and 64 bytes every 16 KiB) to keep the run time reasonable. */
static void fill_block(char *p, size_t n, uint64_t seed) {
  if (n <= 16384) {
    tc_fill(p, n, seed);
    return;
  }
  tc_fill(p, 4096, seed);
  tc_fill(p + n - 4096, 4096, seed + 1);
  for (size_t off = 16384; off + 64 <= n - 4096; off += 16384) tc_fill(p + off, 64, seed + off);
}

static void verify_block(const char *p, size_t n, uint64_t seed, uint64_t op, const char *when) {
  if (n <= 16384) {
    size_t bad = tc_verify(p, n, seed);
    if (bad != (size_t)-1)
      FAILF("op %llu (%s): block %p of %zu bytes corrupted at byte %zu", (unsigned long long)op, when, (void *)p, n,
            bad);
    return;
  }
  size_t bad = tc_verify(p, 4096, seed);
  if (bad == (size_t)-1 && (bad = tc_verify(p + n - 4096, 4096, seed + 1)) != (size_t)-1) bad += n - 4096;
  for (size_t off = 16384; bad == (size_t)-1 && off + 64 <= n - 4096; off += 16384)
    if ((bad = tc_verify(p + off, 64, seed + off)) != (size_t)-1) bad += off;
  if (bad != (size_t)-1)
    FAILF("op %llu (%s): block %p of %zu bytes corrupted at byte %zu", (unsigned long long)op, when, (void *)p, n,
          bad);
}

/* The prefix of `n` bytes of a block filled with fill_block(old_n) that is
 * guaranteed to survive a realloc to n: check only the regions that lie fully
 * inside the new size. */
static void verify_prefix(const char *p, size_t old_n, size_t new_n, uint64_t seed, uint64_t op) {
  if (new_n >= old_n) {
    verify_block(p, old_n, seed, op, "after realloc grow");
    return;
  }
  if (old_n <= 16384) {
    size_t bad = tc_verify(p, new_n, seed);
    if (bad != (size_t)-1)
      FAILF("op %llu: realloc shrink %zu -> %zu lost byte %zu", (unsigned long long)op, old_n, new_n, bad);
    return;
  }
  size_t head = new_n < 4096 ? new_n : 4096;
  size_t bad = tc_verify(p, head, seed);
  for (size_t off = 16384; bad == (size_t)-1 && off + 64 <= old_n - 4096 && off + 64 <= new_n; off += 16384)
    if ((bad = tc_verify(p + off, 64, seed + off)) != (size_t)-1) bad += off;
  if (bad != (size_t)-1)
    FAILF("op %llu: realloc shrink %zu -> %zu lost byte %zu", (unsigned long long)op, old_n, new_n, bad);
}

static size_t rand_size(tc_rng *r) {
  uint64_t k = tc_below(r, 1000);
  if (k < 850) return (size_t)tc_below(r, 1025);                 /* tiny lane */
  if (k < 980) return 1025 + (size_t)tc_below(r, 16384 - 1024);  /* mid, small */
  if (k < 998) {                                                 /* mid, log-uniform up to 256 KiB */
    unsigned lg = 14 + (unsigned)tc_below(r, 4);
    return ((size_t)1 << lg) + (size_t)tc_below(r, (size_t)1 << lg) + (tc_below(r, 2) ? 0 : 1);
  }
  return 262144 + (size_t)tc_below(r, 8u << 20); /* large lane */
}

static size_t rand_align(tc_rng *r) {
  uint64_t k = tc_below(r, 100);
  if (k < 90) return (size_t)8 << tc_below(r, 10); /* 8 .. 4096 */
  if (k < 99) return (size_t)8192 << tc_below(r, 5);
  return (size_t)1 << (17 + tc_below(r, 5)); /* up to 2 MiB */
}

static void check_new(struct slot *s, uint64_t op, const char *fn) {
  if (!s->p) FAILF("op %llu: %s(%zu, align %zu) returned NULL (errno %d)", (unsigned long long)op, fn, s->size,
                   s->align, errno);
  size_t us = A.usable(s->p);
  if (us < s->size)
    FAILF("op %llu: %s(%zu): usable size %zu < request", (unsigned long long)op, fn, s->size, us);
  if (s->align && ((uintptr_t)s->p & (s->align - 1)))
    FAILF("op %llu: %s(size %zu) = %p not aligned to %zu", (unsigned long long)op, fn, s->size, (void *)s->p,
          s->align);
  if (s->size >= 16 && ((uintptr_t)s->p & 15))
    FAILF("op %llu: %s(%zu) = %p not 16-byte aligned", (unsigned long long)op, fn, s->size, (void *)s->p);
}

int main(int argc, char **argv) {
  tc_test_name = "model";
  size_t ops = 3000000;
  uint64_t seed = 12345;
  int hak = 0, pos = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--hak") == 0) hak = 1;
    else if (pos == 0) ops = strtoull(argv[i], NULL, 0), pos++;
    else seed = strtoull(argv[i], NULL, 0);
  }
  ops = tc_scaled(ops);
  if (hak)
    A = (struct api){hak_malloc, hak_free, hak_calloc, hak_realloc, hak_reallocarray, hak_posix_memalign,
                     hak_aligned_alloc, hak_memalign, hak_malloc_usable_size};
  else
    A = (struct api){malloc, free, calloc, realloc, reallocarray, posix_memalign, aligned_alloc, memalign,
                     malloc_usable_size};
  printf("model: %zu ops, seed %llu, %s names, debug build: %d\n", ops, (unsigned long long)seed,
         hak ? "hak_*" : "unprefixed", hak_debug_build());
  fflush(stdout);

  tc_rng r = {seed};
  uint64_t next_seed = 1;
  size_t n_alloc = 0, n_free = 0, n_realloc = 0, n_calloc = 0, n_aligned = 0, live = 0, max_live = 0;
  size_t live_bytes = 0, max_live_bytes = 0;
  for (uint64_t op = 0; op < ops; op++) {
    /* Slot locality varies over time so that the live set grows and shrinks. */
    size_t window = 64 + (size_t)((op / 200000) % 4) * (SLOTS / 4 - 16);
    struct slot *s = &slots[tc_below(&r, window < SLOTS ? window : SLOTS)];
    uint64_t k = tc_below(&r, 100);
    if (!s->p) {
      s->size = rand_size(&r);
      s->seed = next_seed++;
      s->align = 0;
      if (k < 55) {
        s->p = A.malloc(s->size);
        check_new(s, op, "malloc");
      } else if (k < 70) {
        size_t nm = s->size, sz = 1;
        if (s->size % 8 == 0 && tc_below(&r, 2)) nm = s->size / 8, sz = 8;
        s->p = A.calloc(nm, sz);
        check_new(s, op, "calloc");
        size_t bad = tc_find_not(s->p, s->size, 0);
        if (bad != (size_t)-1)
          FAILF("op %llu: calloc(%zu, %zu) byte %zu not zero", (unsigned long long)op, nm, sz, bad);
        n_calloc++;
      } else if (k < 90) {
        s->align = rand_align(&r);
        if (s->size > (1u << 20) && s->align > 65536) s->size = 1 + s->size % (1u << 20);
        int which = (int)tc_below(&r, 3);
        if (which == 0) {
          void *p = NULL;
          int rc = A.posix_memalign(&p, s->align, s->size);
          if (rc != 0) FAILF("op %llu: posix_memalign(%zu, %zu) = %d", (unsigned long long)op, s->align, s->size, rc);
          s->p = p;
          check_new(s, op, "posix_memalign");
        } else if (which == 1) {
          s->p = A.aligned_alloc(s->align, s->size);
          check_new(s, op, "aligned_alloc");
        } else {
          s->p = A.memalign(s->align, s->size);
          check_new(s, op, "memalign");
        }
        n_aligned++;
      } else {
        s->p = A.realloc(NULL, s->size);
        check_new(s, op, "realloc(NULL)");
      }
      fill_block(s->p, s->size, s->seed);
      n_alloc++;
      live++;
      live_bytes += s->size;
    } else if (k < 45) {
      verify_block(s->p, s->size, s->seed, op, "before free");
      A.free(s->p);
      s->p = NULL;
      live--;
      live_bytes -= s->size;
      n_free++;
    } else if (k < 85) {
      size_t nsz = tc_below(&r, 4) == 0 ? s->size + tc_below(&r, 64) : rand_size(&r);
      if (nsz == 0) nsz = 1; /* realloc(p, 0) frees: covered by test_api */
      verify_block(s->p, s->size, s->seed, op, "before realloc");
      char *q;
      if (k < 75) {
        q = A.realloc(s->p, nsz);
      } else {
        size_t nm = nsz, sz = 1;
        if (nsz % 4 == 0) nm = nsz / 4, sz = 4;
        q = A.reallocarray(s->p, nm, sz);
      }
      if (!q) FAILF("op %llu: realloc(%p, %zu -> %zu) returned NULL", (unsigned long long)op, (void *)s->p, s->size,
                    nsz);
      if (A.usable(q) < nsz) FAILF("op %llu: realloc usable %zu < %zu", (unsigned long long)op, A.usable(q), nsz);
      if (nsz >= 16 && ((uintptr_t)q & 15)) FAILF("op %llu: realloc result %p misaligned", (unsigned long long)op, (void *)q);
      verify_prefix(q, s->size, nsz, s->seed, op);
      live_bytes = live_bytes - s->size + nsz;
      s->p = q;
      s->size = nsz;
      s->align = 0;
      s->seed = next_seed++;
      fill_block(s->p, s->size, s->seed);
      n_realloc++;
    } else {
      verify_block(s->p, s->size, s->seed, op, "spot check");
    }
    if (live > max_live) max_live = live;
    if (live_bytes > max_live_bytes) max_live_bytes = live_bytes;
    if ((op + 1) % 500000 == 0) {
      for (size_t i = 0; i < SLOTS; i++)
        if (slots[i].p) verify_block(slots[i].p, slots[i].size, slots[i].seed, op, "periodic sweep");
    }
  }
  for (size_t i = 0; i < SLOTS; i++) {
    if (!slots[i].p) continue;
    verify_block(slots[i].p, slots[i].size, slots[i].seed, ops, "final sweep");
    A.free(slots[i].p);
    slots[i].p = NULL;
  }
  printf("model: ok: %zu allocs (%zu calloc, %zu aligned), %zu frees, %zu reallocs; max live %zu blocks / %zu KiB\n",
         n_alloc, n_calloc, n_aligned, n_free, n_realloc, max_live, max_live_bytes / 1024);
  return 0;
}
