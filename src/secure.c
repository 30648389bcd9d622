/* Secure mode (cmake -DHAKMEM_SECURE=ON, `make secure`; docs/SECURITY.md).
 *
 * The inline parts are in block.h: free-list pointers stored xor a
 * per-slab key and checked when followed, and freed blocks filled with a
 * pattern that is checked when they are handed out. Here: what is detected
 * (always fatal: the heap is corrupt, there is no block to leave alone),
 * guard pages, and the random order of fresh blocks. */
#include <sys/mman.h>

#include "block.h"

#ifdef HAKMEM_SECURE
uintptr_t hm_free_tag;
__m128i hm_fill_lane;
#endif

/* At start-up, before any block exists. */
void hm_secure_init(void) {
#ifdef HAKMEM_SECURE
  hm_free_tag = (uintptr_t)hm_random_u64() | 1;
  hm_fill_lane = _mm_set1_epi64x((long long)hm_free_tag);
#endif
}

#ifdef HAKMEM_SECURE

/* b: a free block whose list pointer decodes outside its SuperSlab, or
 * the decoded pointer itself. */
void hm_corrupt_list(const slab_t *s, const block_t *b) {
  (void)s;
  hm_fatal("heap corruption", b, "free-list pointer of a freed block overwritten (write after free?)");
}

/* hm_block_handout found free block b damaged: say where. */
void *hm_handout_failed(const slab_t *s, const block_t *b) {
  const unsigned char *c = (const unsigned char *)b;
  uint64_t tag = (uint64_t)hm_free_tag;
  unsigned i = 8;
  while (i < hm_fill_end(hm_slab_bs(s)) - 1 && c[i] == (unsigned char)(tag >> (8 * (i % 8)))) i++;
  char reason[96] = "freed block modified at byte ";
  hm_format_dec(reason + strlen(reason), (long)i);
  hm_fatal("write after free", b, reason);
}

/* A PROT_NONE page: overflows off the end of a SuperSlab or large span
 * fault instead of running into the next one. mprotect is not counted in
 * hak_os_stats. Should the kernel refuse (no VMA left: vm.max_map_count),
 * the page stays writable and unused: a missing guard, not a failure
 * (false: not in place). */
bool hm_secure_guard(void *page) { return mprotect(page, HM_GUARD_SIZE, PROT_NONE) == 0; }

/* The guard page of a large span whose end moves becomes part of a span
 * handed out later: a page left PROT_NONE there would fault a correct
 * program, so a refusal is fatal (lifting merges VMAs, it needs none). */
void hm_secure_unguard(void *page) {
  if (mprotect(page, HM_GUARD_SIZE, PROT_READ | PROT_WRITE) != 0) hm_fatal("guard page", page, "mprotect refused to lift it");
}

/* Fisher-Yates: a random permutation of idx[0..n). */
void hm_secure_shuffle(uint32_t *idx, uint32_t n) {
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = (uint32_t)(((hm_random_fast() >> 32) * i) >> 32);
    uint32_t t = idx[i - 1];
    idx[i - 1] = idx[j];
    idx[j] = t;
  }
}

#endif
