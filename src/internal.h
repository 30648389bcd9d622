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
#define SS_HEADER_SIZE 4096               /* slab 0's blocks start after it */
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
enum { REG_NONE = 0, REG_SS = 1, REG_LARGE_HEAD = 2, REG_LARGE_TAIL = 3 };
extern HM_HIDDEN uint8_t hm_registry[REG_ENTRIES];

HM_INLINE unsigned hm_reg_kind(uintptr_t a) {
  uintptr_t i = a >> SS_SHIFT;
  return likely(i < REG_ENTRIES) ? hm_registry[i] : (unsigned)REG_NONE;
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

/* slab->flags: the owner found no free block; a remote free must notify.
 * While FULL, used holds 1 instead of the capacity, so that the first local
 * free brings it to 0 and takes the slow path (slab_unfull puts the true
 * count back): free tests "emptied or FULL" with one decrement. */
#define SLAB_FULL 1u
#define REMOTE_NOTIFY ((uintptr_t)1)

/* slab->in_use (heap.c describes the states) */
enum { SLAB_UNUSED = 0, SLAB_ACTIVE = 1, SLAB_LISTED = 2, SLAB_FOREIGN = 3 };

typedef struct slab {
  block_t *free;               /* allocations pop here */
  block_t *local_free;         /* the owner's frees */
  _Atomic uintptr_t remote;    /* other threads' frees (LIFO); bit 0: notify owner */
  uint32_t used;               /* blocks handed out, remote-freed ones included */
  uint32_t block_size;
  uint16_t capacity;           /* blocks the slab can hold */
  uint16_t carved;             /* blocks carved so far (lazily, to spare RSS) */
  uint8_t flags;               /* SLAB_FULL */
  uint8_t cls;
  uint8_t in_use;
  uint8_t index;               /* position in the SuperSlab */
  char *start;                 /* first block */
  struct slab *next, *prev;    /* heap's list of slabs with free blocks */
} slab_t;
_Static_assert(sizeof(slab_t) == 64, "slab descriptor is one cache line");

typedef struct superslab {
  /* First, so that a slab's descriptor is at ss + 64 * index. */
  slab_t slabs[SS_MAX_SLABS];
  _Atomic(struct heap *) owner; /* NULL while abandoned or in the backend */
  uint8_t kind;
  uint8_t slab_shift;
  uint8_t nslabs;
  uint8_t on_partial;           /* linked on owner's list of SSs with free slabs */
  uint32_t free_mask;           /* slabs not in use (owner only) */
  _Atomic uint64_t pending;     /* slabs whose FULL flag a remote free hit */
  struct superslab *next, *prev;         /* partial list / backend / abandoned */
  struct superslab *all_next, *all_prev; /* owner's list of all its SSs */
  /* Each slab's class, read by other threads' frees: a line the owner
   * rarely writes, unlike the slab descriptors. */
  uint8_t slab_cls[SS_MAX_SLABS];
} superslab_t;
_Static_assert(offsetof(superslab_t, owner) % 64 == 0, "the SuperSlab's fields start a cache line");
_Static_assert(sizeof(superslab_t) <= SS_HEADER_SIZE, "header fits its page");

HM_INLINE superslab_t *hm_ss_of(const void *p) {
  return (superslab_t *)((uintptr_t)p & ~SS_MASK);
}
HM_INLINE slab_t *hm_slab_of(superslab_t *ss, const void *p) {
  return &ss->slabs[((uintptr_t)p - (uintptr_t)ss) >> ss->slab_shift];
}

/* ---- statistics (src/stats.c) ------------------------------------------ */
/* The lanes of the report: tiny (classes up to 1 KiB), mid (the other slab
 * classes), large. Always counted, on slow paths only: bytes carved into
 * blocks and bytes of blocks given back with their emptied slab, per slab
 * lane; the large lane's blocks. */
enum { HM_LANE_TINY = 0, HM_LANE_MID = 1, HM_LANE_LARGE = 2, HM_LANES = 3 };
HM_HIDDEN void hm_stats_carved(unsigned cls, size_t blocks);
HM_HIDDEN void hm_stats_released(unsigned cls, size_t blocks);
/* A large block of `usable` bytes in a mapping of `mapped` bytes came
 * (sign +1) or went (sign -1). */
HM_HIDDEN void hm_stats_large(int sign, size_t usable, size_t mapped);

/* -DHAKMEM_STATS (cmake -DHAKMEM_STATS=ON): the fast paths count too, into
 * their heap (owner-written, read by the report with relaxed loads; a heap
 * keeps its counts when an exited thread's heap is reused). Otherwise
 * HM_STAT_* compile to nothing. */
#ifdef HAKMEM_STATS
#define HM_STATS_BUILD 1
enum {
  HM_REFILL_CARVE, HM_REFILL_LOCAL, HM_REFILL_REMOTE, /* a slab's free list refilled from */
  HM_REFILL_LISTED, HM_REFILL_SLAB,                   /* the class got another slab: listed, unused */
  HM_REFILL_ADOPT, HM_REFILL_NEW_SS,                  /* SuperSlabs: adopted, from the backend */
  HM_REFILL_COUNT
};
typedef struct hm_heap_stats {
  uint64_t alloc[NUM_CLASSES];       /* blocks handed out */
  uint64_t free_local[NUM_CLASSES];  /* frees into this heap's own slabs */
  uint64_t free_remote[NUM_CLASSES]; /* frees by this thread into other heaps' slabs */
  uint64_t refill[HM_REFILL_COUNT];  /* slow-path events by source */
  uint64_t refill_blocks[HM_REFILL_COUNT];
} hm_heap_stats_t;
HM_INLINE void hm_stat_add(uint64_t *c, uint64_t n) {
  __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}
#define HM_STAT_ADD(h, field, n) hm_stat_add(&(h)->stats.field, (n))
#define HM_STAT_REFILL(h, src, blocks) \
  (HM_STAT_ADD(h, refill[src], 1), HM_STAT_ADD(h, refill_blocks[src], (blocks)))
#else
#define HM_STATS_BUILD 0
#define HM_STAT_ADD(h, field, n) ((void)0)
#define HM_STAT_REFILL(h, src, blocks) ((void)0)
#endif

/* ---- thread heaps ------------------------------------------------------ */
typedef struct heap {
  /* cur[] of the class of each 16-byte granule up to TINY_MAX: malloc of a
   * tiny size indexes it directly, without the class lookup. */
  slab_t *direct[TINY_MAX / 16 + 1];
  slab_t *cur[NUM_CLASSES];        /* slab serving allocations (never NULL) */
  slab_t *avail[NUM_CLASSES];      /* other slabs of the class with free blocks */
  slab_t *avail_tail[NUM_CLASSES]; /* (FIFO: pushed at the tail) */
  superslab_t *partial[NUM_KINDS]; /* owned SSs with unused slabs */
  uint64_t idle_cur[2];            /* classes whose current slab emptied */
  /* Blocks of other threads' slabs that this thread freed, per class, kept
   * for its own mallocs instead of being sent back one atomic push at a time
   * (heap.c, "foreign cache"). foreign[c] is a pseudo slab: frees push on its
   * local_free, and it becomes cur[c] when the class's slab runs dry. The
   * blocks still count as used in their own slabs. */
  slab_t foreign[NUM_CLASSES];
  uint32_t foreign_pushed[NUM_CLASSES]; /* minus foreign[c].used = blocks cached */
  superslab_t *all;                /* every owned SS */
  _Atomic int pending_hint;        /* some owned SS has pending notifications */
  struct heap *next_free;          /* heap pool */
#ifdef HAKMEM_STATS
  hm_heap_stats_t stats;
  struct heap *stats_next;         /* every heap ever made, for the report */
#endif
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
extern HM_HIDDEN long hm_opt[HM_OPT_COUNT];
HM_HIDDEN void hm_options_init(void);
HM_HIDDEN int hm_option_is_set(int id);
HM_HIDDEN void hm_options_write(int fd);
HM_HIDDEN void hm_options_print_config(void); /* HAKMEM_VERBOSE=1 */
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
HM_HIDDEN void hm_free_foreign(heap_t *h, superslab_t *ss, block_t *b);
HM_HIDDEN void hm_heap_flush_foreign(heap_t *h);
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
/* stats.c (-DHAKMEM_STATS) */
#ifdef HAKMEM_STATS
HM_HIDDEN void hm_stats_heap_new(heap_t *h);
HM_HIDDEN void hm_stats_free_without_heap(unsigned cls);
#endif
/* glibc's statistics interfaces, exported by override.c */
struct mallinfo;
struct mallinfo2;
HM_HIDDEN struct mallinfo2 hm_mallinfo2(void);
HM_HIDDEN struct mallinfo hm_mallinfo(void);
HM_HIDDEN void hm_malloc_stats(void);
/* backend.c, for the report: every carved SuperSlab that is still mapped,
 * backend lock held; the bytes kept for reuse (what malloc_trim returns) */
HM_HIDDEN void hm_backend_walk_ss(void (*fn)(superslab_t *ss, void *arg), void *arg);
HM_HIDDEN size_t hm_backend_cached_bytes(void);
HM_HIDDEN size_t hm_os_purged_bytes(void);
/* heap.c, for the report: bytes in blocks handed out, per slab lane */
HM_HIDDEN void hm_ss_in_use(superslab_t *ss, size_t in_use[2]);
/* large.c */
HM_HIDDEN void *hm_large_alloc(size_t n, size_t align);
HM_HIDDEN void hm_large_free(void *p);
HM_HIDDEN size_t hm_large_usable(const void *p);
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

/* ---- fast paths -------------------------------------------------------- */

/* Pop a block of s; when its free list is empty, take the owner's frees
 * (local_free) as the new free list right here, the commonest refill; the
 * slow path does the rest. */
HM_INLINE void *hm_slab_pop(heap_t *h, slab_t *s, size_t n) {
  block_t *b = s->free;
  if (unlikely(b == NULL)) {
    b = s->local_free;
    if (unlikely(b == NULL)) return hm_alloc_slow(n);
    s->local_free = NULL;
    /* blocks taken: all the owner freed, unless s is the foreign cache */
    HM_STAT_REFILL(h, HM_REFILL_LOCAL, s->in_use == SLAB_FOREIGN ? 0 : s->carved - s->used);
  }
  (void)h;
  hm_check_block(s, b);
  s->free = b->next;
  s->used++;
  HM_STAT_ADD(h, alloc[s->cls], 1);
  return b;
}

/* malloc for n <= SMALL_MAX: pop the current slab's free list. */
HM_INLINE void *hm_malloc_small(size_t n) {
  heap_t *h = hm_tls_heap;
  if (likely(n <= TINY_MAX)) return hm_slab_pop(h, h->direct[(n + 15) >> 4], n);
  return hm_slab_pop(h, h->cur[hm_size_class(n)], n);
}

HM_INLINE void *hm_malloc(size_t n) {
  heap_t *h = hm_tls_heap;
  if (likely(n <= TINY_MAX)) return hm_slab_pop(h, h->direct[(n + 15) >> 4], n);
  if (likely(n <= SMALL_MAX)) return hm_slab_pop(h, h->cur[hm_size_class(n)], n);
  return hm_large_alloc(n, 0);
}

/* free: find the SuperSlab by masking, the slab by a shift; the owner pushes
 * on local_free without atomics, other threads on the atomic remote list. */
HM_INLINE void hm_free(void *p) {
  if (likely(hm_reg_kind((uintptr_t)p) == REG_SS)) {
    superslab_t *ss = hm_ss_of(p);
    heap_t *h = hm_tls_heap;
    if (likely(atomic_load_explicit(&ss->owner, memory_order_relaxed) == h)) {
      slab_t *s = hm_slab_of(ss, p);
      hm_check_block(s, p);
      block_t *b = (block_t *)p;
      HM_STAT_ADD(h, free_local[s->cls], 1);
      b->next = s->local_free;
      s->local_free = b;
      if (unlikely(--s->used == 0)) hm_free_local_slow(h, s); /* emptied, or FULL */
      return;
    }
    hm_free_foreign(h, ss, (block_t *)p);
    return;
  }
  hm_free_slow(p);
}

#endif /* HAKMEM_INTERNAL_H */
