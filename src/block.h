/* Blocks: the free tag, the free-list encoding, the block check and the
 * secure fill, inline (docs/DESIGN.md, "Misuse detection"; docs/SECURITY.md).
 * Above types.h and the prototypes; below the lanes. */
#ifndef HAKMEM_BLOCK_H
#define HAKMEM_BLOCK_H

#include "internal.h"

/* ---- hardening: misuse checks, secure mode (docs/SECURITY.md) ---------- */
/* Every block on a free list holds the free tag in its second word (blocks
 * are >= 16 B); handing a block out clears it. free() of a block that holds
 * it is a double free, confirmed by a list scan where that is safe.
 * Default: the tag of a block of slab s is s's address, which free has in a
 * register (no load): an address inside a SuperSlab's header, never the
 * SuperSlab's own (hm_slab_idx), which no block covers and no pointer a
 * program derives from its blocks can hold. Secure: hm_free_tag, random per
 * process (the fill pattern). */
#ifdef HAKMEM_SECURE
#define hm_free_tag_of(s) ((void)(s), hm_free_tag)
#else
#define hm_free_tag_of(s) ((uintptr_t)(const slab_t *)(s))
#endif
enum { HM_OP_FREE, HM_OP_REALLOC, HM_OP_USABLE };

/* Is p (an address in its slab's SuperSlab, sh the slab's shape) the start
 * of a carved block of the slab?
 * Without a division: with block_size d = m << k (m odd), C = m^-1 * (1 +
 * 2^(64-k)) mod 2^64 is odd, so f(x) = x * C mod 2^64 is a bijection, with
 * f(j * d) = j << k and inverse v -> v * m * (1 - 2^(64-k)); the x with
 * f(x) < limit = carved << k are thus the carved block starts, and every
 * other x maps to at least 2^(64-k) > 2^32, which no 32-bit offset is. One
 * multiply and one compare check alignment and range; unused slabs have
 * limit == 0. */
HM_INLINE bool hm_slab_holds(const slab_shape_t *sh, const void *p) {
  uint32_t x = (uint32_t)(uintptr_t)p - sh->start_lo; /* (= p's offset - the first block's: p is in the slab's SuperSlab) */
  /* limit: written by the owner only, read by any freeing thread (HM_PEEK:
   * the compare takes it from memory) */
  return (uint64_t)x * sh->div_mul < HM_PEEK(sh->limit);
}
/* The same check for the slab's owner, from its descriptor, whose line the
 * owner's free touches anyway (the shape is another line): the same
 * multiply and compare, with the descriptor's copies of the multiplier and
 * the limit. */
HM_INLINE bool hm_slab_holds_own(const slab_t *s, const void *p) {
  uint32_t x = (uint32_t)(uintptr_t)p - s->start_lo;
  return (uint64_t)x * s->div_mul < s->limit;
}
/* The block check's limit for n carved blocks of block_size bytes (0: every
 * free into the slab is invalid). (n << k <= the slab's bytes / m fits 32
 * bits; it is kept in 64 so that free's compare takes it from memory.) */
HM_INLINE uint64_t hm_check_limit(uint32_t block_size, unsigned n) {
  return n == 0 ? 0 : (uint64_t)n << __builtin_ctz(block_size);
}
/* The carved count as other threads' frees check it. */
HM_INLINE void hm_shape_set_carved(slab_shape_t *sh, unsigned n) {
  __atomic_store_n(&sh->carved, (uint16_t)n, __ATOMIC_RELAXED);
  __atomic_store_n(&sh->limit, hm_check_limit(sh->block_size, n), __ATOMIC_RELAXED);
}
/* The carved count, as the slab keeps it and as every free checks it. */
HM_INLINE void hm_slab_set_carved(slab_t *s, unsigned n) {
  s->carved = (uint16_t)n;
  s->limit = hm_check_limit(hm_slab_bs(s), n);
  hm_shape_set_carved(hm_shape_of(s), n);
}
#ifdef HAKMEM_SECURE
/* Secure mode: a free block holds the tag in every word from byte 8 to
 * HM_FILL_BYTES: the tag is the fill pattern (bytes 0..7 hold the encoded
 * list pointer). free writes it; handing the block out again checks it
 * (write after free). HM_FILL_BYTES: 16 (default), 32 or 64, set by cmake
 * -DHAKMEM_SECURE_FILL=; docs/SECURITY.md has what each costs. */
#ifndef HM_FILL_BYTES
#define HM_FILL_BYTES 16
#endif
_Static_assert(HM_FILL_BYTES == 16 || HM_FILL_BYTES == 32 || HM_FILL_BYTES == 64, "HM_FILL_BYTES: 16, 32 or 64");
/* Bytes [8, end) of a free block hold the tag (blocks smaller than
 * HM_FILL_BYTES: the tag word only). */
HM_INLINE unsigned hm_fill_end(uint32_t block_size) {
  return block_size >= HM_FILL_BYTES ? HM_FILL_BYTES : 16;
}
HM_INLINE void hm_secure_fill(uint32_t block_size, void *p) {
  char *c = (char *)p;
  if (HM_FILL_BYTES > 16 && likely(block_size >= HM_FILL_BYTES)) {
    _mm_storeu_si128((__m128i *)(c + 8), hm_fill_lane); /* bytes 8..23 */
    for (unsigned off = 16; off < HM_FILL_BYTES; off += 16) _mm_store_si128((__m128i *)(c + off), hm_fill_lane);
  } else {
    ((uint64_t *)p)[1] = (uint64_t)hm_free_tag;
  }
}
/* Are the tag and the pattern of free block b intact? */
HM_INLINE bool hm_secure_intact(const slab_t *s, const block_t *b) {
  const char *c = (const char *)b;
  unsigned eq;
  if (HM_FILL_BYTES > 16 && likely(hm_slab_bs(s) >= HM_FILL_BYTES)) {
    __m128i x = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(c + 8)), hm_fill_lane);
    for (unsigned off = 16; off < HM_FILL_BYTES; off += 16)
      x = _mm_and_si128(x, _mm_cmpeq_epi8(_mm_load_si128((const __m128i *)(c + off)), hm_fill_lane));
    eq = (unsigned)_mm_movemask_epi8(x) == 0xffffu;
  } else {
    eq = ((const uint64_t *)b)[1] == (uint64_t)hm_free_tag;
  }
  return eq;
}
#endif

/* The next pointer of free block b. Secure: stored xor the slab's key xor
 * b's address, so that a write into a freed block is detected instead of
 * followed: decoded, an overwritten pointer lands outside b's SuperSlab
 * (unless the write guessed the 64-bit key); one that stays inside is caught
 * before it is handed out, having no tag. hm_next_get checks (slow paths);
 * the fast path decodes, and hm_head_ok checks the new head before the next
 * pop reads through it. */
HM_INLINE block_t *hm_next_decode(const slab_t *s, const block_t *b) {
#ifdef HAKMEM_SECURE
  return (block_t *)((uintptr_t)b->next ^ s->key ^ (uintptr_t)b);
#else
  (void)s;
  return b->next;
#endif
}
HM_INLINE block_t *hm_next_get(const slab_t *s, const block_t *b) {
  block_t *n = hm_next_decode(s, b);
#ifdef HAKMEM_SECURE
  if (unlikely(n != NULL && ((uintptr_t)n ^ (uintptr_t)b) > SS_MASK)) hm_corrupt_list(s, b);
#endif
  return n;
}
HM_INLINE void hm_next_set(const slab_t *s, block_t *b, const block_t *n) {
#ifdef HAKMEM_SECURE
  b->next = (block_t *)((uintptr_t)n ^ s->key ^ (uintptr_t)b);
#else
  (void)s;
  b->next = (block_t *)n;
#endif
}

/* Is b, the head of s's free list, a block to pop? Default: not NULL.
 * Secure: in s's SuperSlab (NULL is not), so that a damaged list pointer
 * takes the slow path, which reports it, instead of being followed. */
HM_INLINE bool hm_head_ok(const slab_t *s, const block_t *b) {
#ifdef HAKMEM_SECURE
  return ((uintptr_t)b ^ (uintptr_t)s) <= SS_MASK;
#else
  (void)s;
  return b != NULL;
#endif
}

/* Block b leaves its free list for the program; returns b. Default: one
 * store over the free tag, of w: b's successor on the list, which the
 * caller has in a register (a block's address or NULL, never a tag; 4
 * bytes of code against 8 for a zero). Secure: check the tag and the
 * pattern first, and clear the tag to 0. */
HM_INLINE void *hm_block_handout(const slab_t *s, block_t *b, const block_t *w) {
  (void)s;
  (void)w;
#ifdef HAKMEM_SECURE
  if (unlikely(!hm_secure_intact(s, b))) return hm_handout_failed(s, b); /* never returns */
  w = NULL;
#endif
#ifndef HAKMEM_NO_CHECKS
  ((const block_t **)b)[1] = w;
#endif
  return b;
}

/* A free block of block_size bytes gets its tag (hm_free_tag_of its slab;
 * in secure mode: its pattern). */
HM_INLINE void hm_block_tag_free(uint32_t block_size, uintptr_t tag, void *p) {
#ifdef HAKMEM_SECURE
  (void)tag;
  hm_secure_fill(block_size, p);
#else
  (void)block_size;
  ((uintptr_t *)p)[1] = tag;
#endif
}

/* free(p), p in a SuperSlab chunk: true if p is a block handed out and not
 * freed since, which is now marked free; false sends the caller to
 * hm_free_suspect (interior, unaligned, stale pointers; double frees).
 * holds: the block check (not evaluated without the checks). */
#ifdef HAKMEM_NO_CHECKS
#define HM_MARK_FREE(holds, block_size, tag, p) \
  ((void)sizeof(holds), (void)(block_size), (void)(tag), (void)(p), true)
#else
#define HM_MARK_FREE(holds, block_size, tag, p) \
  (likely(holds) && hm_block_tag_unless_tagged((block_size), (tag), (p)))
HM_INLINE bool hm_block_tag_unless_tagged(uint32_t block_size, uintptr_t tag, void *p) {
  if (unlikely(((uintptr_t *)p)[1] == tag)) return false;
  hm_block_tag_free(block_size, tag, p);
  return true;
}
#endif
/* by a thread other than the owner: the block check from the shape (s:
 * the slab's descriptor, whose address is the tag; its line is not read) */
HM_INLINE bool hm_block_mark_free(const slab_shape_t *sh, const slab_t *s, void *p) {
  return HM_MARK_FREE(hm_slab_holds(sh, p), sh->block_size, hm_free_tag_of(s), p);
}
/* by the slab's owner: the block check from its descriptor */
HM_INLINE bool hm_block_mark_free_own(const slab_t *s, void *p) {
  return HM_MARK_FREE(hm_slab_holds_own(s, p), hm_slab_bs(s), hm_free_tag_of(s), p);
}
#endif /* HAKMEM_BLOCK_H */
