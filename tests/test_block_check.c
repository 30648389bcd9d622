/* The block check (src/block.h, docs/SECURITY.md "How"), exhaustively:
 * for every size class, on a live slab of the class, every byte offset of
 * its SuperSlab through both forms, the one other threads' frees use (the
 * slab's shape: hm_slab_holds) and the owner's (its descriptor:
 * hm_slab_holds_own):
 *   - each accepts exactly the carved block starts;
 *   - the map under the compare sends block j to j << k and every other
 *     offset, the slab's uncarved blocks included, to at least the limit
 *     of a slab carved to its capacity, so the check is right for every
 *     carved count;
 *   - the limits follow the carved count; a released slab's descriptor
 *     keeps its count aside (to be taken again as it is) and both forms
 *     reject every free into it.
 * hakmem is linked in: malloc and free are its own. */
#include <stdio.h>
#include <stdlib.h>

#include "block.h"
#include "test_common.h"

static unsigned long checked;

static void check_slab(unsigned c, const slab_t *s) {
  superslab_t *ss = hm_ss_of(s);
  const slab_shape_t *sh = hm_shape_of(s);
  uint32_t d = hm_slab_bs(s), start = hm_start_off(s->start_lo), carved = s->carved, cap = s->capacity;
  unsigned k = (unsigned)__builtin_ctz(d);
  CHECK(d == hm_class_size[c] && sh->block_size == d && sh->start_lo == s->start_lo, "class %u: shape and descriptor differ",
        c);
  CHECK(carved > 0 && carved <= cap && sh->carved == carved, "class %u: carved %u of %u (shape %u)", c, carved, cap,
        sh->carved);
  CHECK(sh->limit == hm_check_limit(d, carved), "class %u: shape limit %llu, carved %u", c,
        (unsigned long long)sh->limit, carved);
  CHECK(s->div_mul == sh->div_mul, "class %u: the descriptor's multiplier is not the shape's", c);
  CHECK(s->limit == sh->limit, "class %u: descriptor limit %llu, shape %llu", c, (unsigned long long)s->limit,
        (unsigned long long)sh->limit);
  for (uint32_t o = 0; o < SS_SIZE; o++) {
    const char *p = (const char *)ss + o;
    uint32_t x = o - start; /* as the checks compute it: wraps below start */
    bool block = o >= start && x % d == 0 && x / d < cap;
    bool want = block && x / d < carved;
    bool other = hm_slab_holds(sh, p), own = hm_slab_holds_own(s, p);
    if (other != want || own != want)
      CHECK(0, "class %u (%u B): offset %u of the SuperSlab (start %u, carved %u): shape %d, owner %d, want %d", c,
            d, o, start, carved, other, own, want);
    uint64_t f = (uint64_t)x * sh->div_mul;
    bool f_ok = block ? f == (uint64_t)(x / d) << k : f >= (uint64_t)cap << k;
    if (!f_ok)
      CHECK(0, "class %u (%u B): offset %u: map %#llx, block %d", c, d, o, (unsigned long long)f, block);
  }
  checked += SS_SIZE;
}

int main(void) {
  tc_test_name = "block_check";
  if (!HAKMEM_SPECIFIC) return 77;
  void *blocks[NUM_CLASSES];
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    CHECK((blocks[c] = malloc(hm_class_size[c])) != NULL, "malloc(%u)", hm_class_size[c]);
    superslab_t *ss = hm_ss_of(blocks[c]);
    CHECK(hm_reg_kind((uintptr_t)blocks[c]) == REG_SS && atomic_load(&ss->owner) == hm_tls_heap,
          "class %u: not a block of this thread's slab", c);
    check_slab(c, hm_slab_of(ss, blocks[c]));
  }
  printf("  %u classes, %lu offsets: both forms accept exactly the carved block starts\n", (unsigned)NUM_CLASSES,
         checked);
  for (unsigned c = 0; c < NUM_CLASSES; c++) free(blocks[c]);

  /* A slab emptied and released: every free into it is invalid, by the
   * owner too (its blocks' tags may be gone with the memory given back).
   * 3000 blocks of 64 B fill three 64 KiB slabs: the middle one, emptied
   * first, is kept as the class's spare; the first, emptied next, is
   * released. */
  enum { N = 3000 };
  static char *v[N];
  for (int i = 0; i < N; i++) CHECK((v[i] = malloc(64)) != NULL, "malloc");
  slab_t *s = hm_slab_of(hm_ss_of(v[0]), v[0]);
  slab_t *middle = hm_slab_of(hm_ss_of(v[N / 2]), v[N / 2]);
  CHECK(middle != s && middle != hm_slab_of(hm_ss_of(v[N - 1]), v[N - 1]), "the blocks are not in three slabs");
  for (int i = 0; i < N; i++)
    if (hm_slab_of(hm_ss_of(v[i]), v[i]) == middle) free(v[i]);
  CHECK(middle->in_use == SLAB_ACTIVE && middle->carved > 0 && hm_tls_heap->spare[middle->cls] == middle,
        "the emptied middle slab is not the class's spare (in_use %u, carved %u)", middle->in_use, middle->carved);
  for (int i = 0; i < N; i++)
    if (hm_slab_of(hm_ss_of(v[i]), v[i]) == s) free(v[i]);
  CHECK(s->in_use == SLAB_UNUSED && s->carved == 0 && hm_shape_of(s)->carved_kept > 0,
        "the 64-byte slab was not released (in_use %u, carved %u, kept %u)", s->in_use, s->carved,
        hm_shape_of(s)->carved_kept);
  CHECK(hm_shape_of(s)->limit == 0 && !hm_slab_holds(hm_shape_of(s), v[0]), "released slab: the shape accepts");
  CHECK(!hm_slab_holds_own(s, v[0]), "released slab: the owner's check accepts");
  CHECK(s->limit == 0, "released slab: descriptor limit %llu", (unsigned long long)s->limit);
  printf("  a released slab accepts no free\n");
  for (int i = 0; i < N; i++)
    if (hm_slab_of(hm_ss_of(v[i]), v[i]) != s && hm_slab_of(hm_ss_of(v[i]), v[i]) != middle) free(v[i]);
  return 0;
}
