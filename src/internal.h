/* hakmem internal types and the inline fast paths.
 *
 * Layers (docs/DESIGN.md): thread heap -> slab -> SuperSlab -> backend, with
 * a large lane beside them. Internal names shared between files carry the
 * prefix hm_ (never hak_, which is the public API) and hidden visibility.
 */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hakmem.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define HM_INLINE static inline __attribute__((always_inline))
#define HM_NOINLINE __attribute__((noinline))
#define HM_HIDDEN __attribute__((visibility("hidden")))
#define HM_NORETURN __attribute__((noreturn))

/* ---- geometry ---------------------------------------------------------- */
#define SS_SHIFT 21                       /* SuperSlab: 2 MiB, 2 MiB aligned */
#define SS_SIZE ((uintptr_t)1 << SS_SHIFT)
#define SS_MASK (SS_SIZE - 1)
#ifdef HAKMEM_SECURE
#ifdef HAKMEM_NO_CHECKS
#error "HAKMEM_SECURE needs the misuse checks (do not define HAKMEM_NO_CHECKS)"
#endif
#define SS_HEADER_SIZE 8192               /* secure: slab descriptors are 128 B */
#define HM_GUARD_SIZE 4096                /* secure: PROT_NONE page at SuperSlab and span ends */
#else
#define SS_HEADER_SIZE 4096               /* slab 0's blocks start after it */
#define HM_GUARD_SIZE 0
#endif
#define SS_MAX_SLABS 32
#define PAGE_SIZE_ 4096

#define NUM_CLASSES 96
#define TINY_MAX 1024                     /* Tiny lane: <= 1 KiB */
#define SMALL_MAX ((size_t)256 * 1024)    /* largest size served from slabs */

/* Slab kinds: one slab size per SuperSlab, chosen by the block size so that
 * every slab holds at least 7 blocks. */
enum { KIND_SMALL = 0, KIND_MEDIUM = 1, KIND_BIG = 2, NUM_KINDS = 3 };

/* The registry: one byte per 2 MiB of the 47-bit user address space. */
#define REG_ADDR_BITS 47
#define REG_ENTRIES ((size_t)1 << (REG_ADDR_BITS - SS_SHIFT))
/* REG_LARGE_FREED: the chunk held the start of a large block that was freed
 * and unmapped, so a second free can say "double free" (overwritten when the
 * chunk is hakmem's again). */
enum { REG_NONE = 0, REG_SS = 1, REG_LARGE_HEAD = 2, REG_LARGE_TAIL = 3, REG_LARGE_FREED = 4 };
extern HM_HIDDEN uint8_t hm_registry[REG_ENTRIES];

/* Relaxed atomics (plain moves on x86): a chunk unmapped by one thread can be
 * mapped and registered by another at once; the kernel orders the two, but
 * only atomics make that a defined program (and quiet for ThreadSanitizer). */
HM_INLINE unsigned hm_reg_kind(uintptr_t a) {
  uintptr_t i = a >> SS_SHIFT;
  return likely(i < REG_ENTRIES) ? __atomic_load_n(&hm_registry[i], __ATOMIC_RELAXED) : (unsigned)REG_NONE;
}
HM_INLINE void hm_reg_set(uintptr_t a, unsigned kind) {
  __atomic_store_n(&hm_registry[a >> SS_SHIFT], (uint8_t)kind, __ATOMIC_RELAXED);
}

/* ---- size classes ------------------------------------------------------ */
extern HM_HIDDEN const uint8_t hm_tiny_class[TINY_MAX / 16 + 1];
extern HM_HIDDEN const uint32_t hm_class_size[NUM_CLASSES];
extern HM_HIDDEN const uint8_t hm_class_kind[NUM_CLASSES];

/* Class of a request n <= SMALL_MAX: 16-byte steps to 256 B, then eight
 * classes per power of two (at most 1/9 of a block wasted above 128 B). */
HM_INLINE unsigned hm_size_class(size_t n) {
  if (likely(n <= TINY_MAX)) return hm_tiny_class[(n + 15) >> 4];
  unsigned k = 63u - (unsigned)__builtin_clzl(n - 1);
  return 16u + (k - 8u) * 8u + (unsigned)(((n - 1) >> (k - 3)) - 8u);
}

/* ---- slabs and SuperSlabs ---------------------------------------------- */
typedef struct block { struct block *next; } block_t;

struct heap;

#define SLAB_FULL 1u       /* owner found no free block; a remote free must notify */
#define REMOTE_NOTIFY ((uintptr_t)1)

typedef struct slab {
  block_t *free;               /* allocations pop here */
  block_t *local_free;         /* the owner's frees */
  _Atomic uintptr_t remote;    /* other threads' frees (LIFO); bit 0: notify owner */
  uint32_t start_off;          /* first block, as an offset in the SuperSlab */
  uint32_t block_size;
  uint32_t div_inv;            /* checks: inverse of block_size's odd part mod 2^32 */
  uint16_t used;               /* blocks handed out, remote-freed ones included */
  uint16_t capacity;           /* blocks the slab can hold */
  uint16_t carved;             /* blocks carved so far (lazily, to spare RSS); 0 when unused */
  uint8_t div_shift;           /* checks: trailing zero bits of block_size */
  uint8_t flags;               /* SLAB_FULL */
  uint8_t cls;
  uint8_t in_use;
  uint8_t index;               /* position in the SuperSlab */
  struct slab *next, *prev;    /* heap's list of slabs with free blocks */
#ifdef HAKMEM_SECURE
  uintptr_t key;               /* free-list pointers are stored xor key xor their address */
  uint8_t secure_pad_[56];
#endif
} slab_t;
#ifdef HAKMEM_SECURE
_Static_assert(sizeof(slab_t) == 128, "secure slab descriptor: two cache lines");
#else
_Static_assert(sizeof(slab_t) == 64, "slab descriptor is one cache line");
#endif

typedef struct superslab {
  _Atomic(struct heap *) owner; /* NULL while abandoned or in the backend */
  uint8_t kind;
  uint8_t slab_shift;
  uint8_t nslabs;
  uint8_t on_partial;           /* linked on owner's list of SSs with free slabs */
  uint32_t free_mask;           /* slabs not in use (owner only) */
  _Atomic uint64_t pending;     /* slabs whose FULL flag a remote free hit */
  struct superslab *next, *prev;         /* partial list / backend / abandoned */
  struct superslab *all_next, *all_prev; /* owner's list of all its SSs */
  uint8_t guarded;              /* secure: the guard page at the end is in place */
  uint8_t pad_[7];
  slab_t slabs[SS_MAX_SLABS];
} superslab_t;
_Static_assert(offsetof(superslab_t, slabs) == 64, "slabs start at a cache line");
_Static_assert(sizeof(superslab_t) <= SS_HEADER_SIZE, "header fits its page");

HM_INLINE superslab_t *hm_ss_of(const void *p) {
  return (superslab_t *)((uintptr_t)p & ~SS_MASK);
}
HM_INLINE uint32_t hm_ss_offset(const void *p) { return (uint32_t)((uintptr_t)p & SS_MASK); }
HM_INLINE slab_t *hm_slab_of(superslab_t *ss, const void *p) {
  return &ss->slabs[hm_ss_offset(p) >> ss->slab_shift];
}
HM_INLINE char *hm_slab_start(const slab_t *s) {
  return (char *)hm_ss_of(s) + s->start_off;
}

/* ---- thread heaps ------------------------------------------------------ */
typedef struct heap {
  slab_t *cur[NUM_CLASSES];        /* slab serving allocations (never NULL) */
  slab_t *avail[NUM_CLASSES];      /* other slabs of the class with free blocks */
  superslab_t *partial[NUM_KINDS]; /* owned SSs with unused slabs */
  superslab_t *all;                /* every owned SS */
  _Atomic int pending_hint;        /* some owned SS has pending notifications */
  struct heap *next_free;          /* heap pool */
} heap_t;

extern HM_HIDDEN heap_t hm_empty_heap;   /* every class points at hm_empty_slab */
extern HM_HIDDEN slab_t hm_empty_slab;
extern HM_HIDDEN __thread heap_t *hm_tls_heap __attribute__((tls_model("initial-exec")));

/* ---- process state and options ----------------------------------------- */
/* Options (options.def): hm_opt[HM_OPT_NAME] holds the value of HAKMEM_NAME,
 * set once by hm_options_init before the allocator is ready. */
enum {
#define HM_OPTION(NAME, TYPE, DEF, MIN, MAX, CHOICES, MEANING) HM_OPT_##NAME,
#include "options.def"
#undef HM_OPTION
  HM_OPT_COUNT
};
enum { HM_ON_ERROR_ABORT = 0, HM_ON_ERROR_WARN = 1 }; /* HAKMEM_ON_ERROR choices */
extern HM_HIDDEN long hm_opt[HM_OPT_COUNT];
HM_HIDDEN void hm_options_init(void);
HM_HIDDEN int hm_option_is_set(int id);
HM_HIDDEN void hm_options_write(int fd);
extern HM_HIDDEN int hm_force_libc;    /* HAKMEM_FORCE_LIBC_ALLOC=1 */
extern HM_HIDDEN _Atomic int hm_init_state; /* 0 none, 1 running, 2 done */
HM_HIDDEN void hm_init_slow(void);
HM_INLINE void hm_ensure_init(void) {
  if (unlikely(atomic_load_explicit(&hm_init_state, memory_order_acquire) != 2)) hm_init_slow();
}

/* Monotonic time in ns; the coarse clock is read from the vDSO, no syscall. */
#include <time.h>
HM_INLINE uint64_t hm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- functions shared between files ------------------------------------ */
/* glibc's allocator, for HAKMEM_FORCE_LIBC_ALLOC=1 */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
/* heap.c */
HM_HIDDEN void hm_heap_process_init(void);
HM_HIDDEN void *hm_alloc_slow(size_t n);
HM_HIDDEN void *hm_alloc_class(unsigned cls);
HM_HIDDEN void hm_free_local_slow(heap_t *h, slab_t *s);
HM_HIDDEN void hm_free_remote(superslab_t *ss, slab_t *s, block_t *b);
HM_HIDDEN void hm_heap_thread_exit(heap_t *h);
HM_HIDDEN void hm_heap_reclaim_abandoned(void);
HM_HIDDEN void hm_heap_fork_prepare(void);
HM_HIDDEN void hm_heap_fork_parent(void);
HM_HIDDEN void hm_heap_fork_child(void);
/* backend.c */
HM_HIDDEN superslab_t *hm_backend_ss_alloc(void);
HM_HIDDEN void hm_backend_ss_free(superslab_t *ss);
HM_HIDDEN size_t hm_backend_release_cached(void);
HM_HIDDEN void *hm_os_map(size_t len);
HM_HIDDEN void hm_os_unmap(void *p, size_t len);
HM_HIDDEN int hm_os_purge(void *p, size_t len);
HM_HIDDEN void *hm_os_remap(void *p, size_t old_len, size_t new_len, bool may_move);
HM_HIDDEN void hm_backend_fork_prepare(void);
HM_HIDDEN void hm_backend_fork_parent(void);
HM_HIDDEN void hm_backend_fork_child(void);
HM_HIDDEN void *hm_meta_alloc(size_t size);
/* large.c */
HM_HIDDEN void *hm_large_alloc(size_t n, size_t align);
HM_HIDDEN void hm_large_free(void *p);
HM_HIDDEN size_t hm_large_usable(const void *p); /* 0: not the start of a large block */
/* Give back the large lane's cached spans idle for at least min_idle_ns
 * (0: all of them); returns the bytes given back. */
HM_HIDDEN size_t hm_large_release(uint64_t min_idle_ns);
/* error.c */
HM_HIDDEN HM_NORETURN void hm_fatal(const char *what, const void *p, const char *reason);
HM_HIDDEN void hm_write_str(const char *s);
HM_HIDDEN void hm_write_fd(int fd, const char *s);
HM_HIDDEN void hm_format_dec(char *out, long v);
/* alloc.c */
HM_HIDDEN void hm_free_slow(void *p);

/* ---- invariant checks (make debug) ------------------------------------- */
#ifdef HAKMEM_DEBUG
#define HM_ASSERT(c) \
  do { if (unlikely(!(c))) hm_fatal("internal check failed", NULL, #c " at " __FILE__); } while (0)
HM_HIDDEN void hm_check_slab(const slab_t *s);
HM_HIDDEN void hm_check_block(const slab_t *s, const void *p);
#else
#define HM_ASSERT(c) ((void)0)
#define hm_check_slab(s) ((void)0)
#define hm_check_block(s, p) ((void)0)
#endif

/* ---- hardening: misuse checks, secure mode (docs/SECURITY.md) ---------- */
/* Every block on a free list holds hm_free_tag in its second word (blocks
 * are >= 16 B); handing a block out clears it. free() of a block that holds
 * it is a double free, confirmed by a list scan where that is safe. */
extern HM_HIDDEN uintptr_t hm_free_tag;   /* random per process, never 0 */
enum { HM_OP_FREE, HM_OP_REALLOC, HM_OP_USABLE };

/* Is p (an address in s's SuperSlab) the start of a carved block of s?
 * Without a division: with block_size d = m << k (m odd), x -> rotr(x * m^-1
 * mod 2^32, k) is a bijection that maps x = j * d to j, so every other x maps
 * to at least 2^32 / d > carved. One compare checks alignment and range;
 * unused slabs have carved == 0. */
HM_INLINE bool hm_slab_holds(const slab_t *s, const void *p) {
  uint32_t x = hm_ss_offset(p) - s->start_off;
  uint32_t q = x * s->div_inv;
  unsigned k = s->div_shift;
  q = (q >> k) | (q << (-k & 31)); /* rotate right */
  /* carved: written by the owner only, read by any freeing thread */
  return q < __atomic_load_n(&s->carved, __ATOMIC_RELAXED);
}
HM_INLINE void hm_slab_set_carved(slab_t *s, unsigned n) {
  __atomic_store_n(&s->carved, (uint16_t)n, __ATOMIC_RELAXED);
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
#include <emmintrin.h>
extern HM_HIDDEN __m128i hm_fill_lane; /* the tag, twice */
HM_HIDDEN HM_NORETURN void hm_corrupt_list(const slab_t *s, const block_t *b);
HM_HIDDEN void *hm_handout_failed(const slab_t *s, const block_t *b);
HM_HIDDEN void hm_secure_guard(void *page);
HM_HIDDEN void hm_secure_shuffle(uint32_t *idx, uint32_t n);

/* Bytes [8, end) of a free block hold the tag (blocks smaller than
 * HM_FILL_BYTES: the tag word only). */
HM_INLINE unsigned hm_fill_end(const slab_t *s) {
  return s->block_size >= HM_FILL_BYTES ? HM_FILL_BYTES : 16;
}
HM_INLINE void hm_secure_fill(const slab_t *s, void *p) {
  char *c = (char *)p;
  if (HM_FILL_BYTES > 16 && likely(s->block_size >= HM_FILL_BYTES)) {
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
  if (HM_FILL_BYTES > 16 && likely(s->block_size >= HM_FILL_BYTES)) {
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
 * store (clear the free tag). Secure: check the tag and the pattern first. */
HM_INLINE void *hm_block_handout(const slab_t *s, block_t *b) {
  (void)s;
#ifdef HAKMEM_SECURE
  if (unlikely(!hm_secure_intact(s, b))) return hm_handout_failed(s, b); /* never returns */
#endif
#ifndef HAKMEM_NO_CHECKS
  ((uintptr_t *)b)[1] = 0;
#endif
  return b;
}

/* A free block gets its tag (in secure mode: its pattern). */
HM_INLINE void hm_block_tag_free(const slab_t *s, void *p) {
#ifdef HAKMEM_SECURE
  hm_secure_fill(s, p);
#else
  (void)s;
  ((uintptr_t *)p)[1] = hm_free_tag;
#endif
}

/* free(p), p in a SuperSlab chunk: true if p is a block handed out and not
 * freed since, which is now marked free; false sends the caller to
 * hm_free_suspect (interior, unaligned, stale pointers; double frees). */
HM_INLINE bool hm_block_mark_free(const slab_t *s, void *p) {
#ifdef HAKMEM_NO_CHECKS
  (void)s;
  (void)p;
  return true;
#else
  if (unlikely(!hm_slab_holds(s, p) || ((uintptr_t *)p)[1] == hm_free_tag)) return false;
  hm_block_tag_free(s, p);
  return true;
#endif
}

/* random.c: hm_random_u64 from the kernel (slow, any time); hm_random_fast
 * from a per-thread generator seeded by it */
HM_HIDDEN uint64_t hm_random_u64(void);
HM_HIDDEN uint64_t hm_random_fast(void);
/* misuse.c */
HM_HIDDEN void hm_free_suspect(void *p);
HM_HIDDEN size_t hm_usable_checked(void *p, int op);
HM_HIDDEN void hm_report_invalid(const void *p, int op, const char *reason);
HM_HIDDEN void hm_report_double(const void *p, int op, const char *reason);
HM_HIDDEN void hm_misuse_init(void);
/* error.c: prints "hakmem: error: what of 0x... (reason)"; aborts unless
 * HAKMEM_ON_ERROR=warn */
HM_HIDDEN void hm_misuse(const char *what, const void *p, const char *reason);

/* ---- fast paths -------------------------------------------------------- */

/* malloc for n <= SMALL_MAX: pop the current slab's free list. */
HM_INLINE void *hm_malloc_small(size_t n) {
  slab_t *s = hm_tls_heap->cur[hm_size_class(n)];
  block_t *b = s->free;
  if (likely(hm_head_ok(s, b))) { /* hardening: b != NULL (secure: and not damaged) */
    hm_check_block(s, b);
    s->free = hm_next_decode(s, b);
    s->used++;
    return hm_block_handout(s, b); /* hardening: clears the free tag (secure: checks) */
  }
  return hm_alloc_slow(n);
}

HM_INLINE void *hm_malloc(size_t n) {
  if (likely(n <= SMALL_MAX)) return hm_malloc_small(n);
  return hm_large_alloc(n, 0);
}

/* Push a block being freed: the owner on local_free without atomics, other
 * threads on the atomic remote list. */
HM_INLINE void hm_free_push(superslab_t *ss, slab_t *s, block_t *b) {
  heap_t *h = hm_tls_heap;
  hm_check_block(s, b);
  if (likely(atomic_load_explicit(&ss->owner, memory_order_relaxed) == h)) {
    hm_next_set(s, b, s->local_free);
    s->local_free = b;
    if (unlikely(--s->used == 0 || s->flags != 0)) hm_free_local_slow(h, s);
    return;
  }
  hm_free_remote(ss, s, b);
}

/* free: find the SuperSlab by masking, the slab by a shift. */
HM_INLINE void hm_free(void *p) {
  if (likely(hm_reg_kind((uintptr_t)p) == REG_SS)) {
    superslab_t *ss = hm_ss_of(p);
    slab_t *s = hm_slab_of(ss, p);
    if (unlikely(!hm_block_mark_free(s, p))) { /* hardening */
      hm_free_suspect(p);
      return;
    }
    hm_free_push(ss, s, (block_t *)p);
    return;
  }
  hm_free_slow(p);
}

#endif /* HAKMEM_INTERNAL_H */
