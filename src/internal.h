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
#include "sample.h"

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

#define TINY_MAX 1024                     /* Tiny lane: <= 1 KiB */
/* The Pool limit: the largest size served from slabs; above it, the large
 * lane (ace.c). Chosen by measurement (docs/DESIGN.md); 18, 19 or 20. */
#ifndef HM_POOL_SHIFT
#define HM_POOL_SHIFT 18
#endif
#define SMALL_MAX ((size_t)1 << HM_POOL_SHIFT)
/* The largest block of a medium slab; the classes above take big slabs,
 * whose mallocs hand out the lowest free block (hm_malloc_big). */
#define MEDIUM_MAX ((size_t)64 << 10)
#define NUM_CLASSES (16 + 8 * (HM_POOL_SHIFT - 8))

/* Slab kinds: one slab size per SuperSlab, chosen by the block size so that
 * every slab holds at least 7 blocks. */
enum { KIND_SMALL = 0, KIND_MEDIUM = 1, KIND_BIG = 2, NUM_KINDS = 3 };

/* The registry: one byte per 2 MiB of the 47-bit user address space. */
#define REG_ADDR_BITS 47
#define REG_ENTRIES ((size_t)1 << (REG_ADDR_BITS - SS_SHIFT))
/* REG_SS_CACHED: an empty SuperSlab in the backend's cache (its header may
 * have been given back to the OS, so nothing may read it). */
/* REG_LARGE_FREED: a large block started in the chunk and went back to the
 * OS, so a second free can say "double free" (until the chunk is reused). */
/* REG_LARGE_PACK: a 2 MiB chunk of packed large blocks (pack.c). */
enum { REG_NONE = 0, REG_SS = 1, REG_LARGE_HEAD = 2, REG_LARGE_TAIL = 3, REG_SS_CACHED = 4, REG_LARGE_FREED = 5,
       REG_LARGE_PACK = 6 };
extern HM_HIDDEN uint8_t hm_registry[REG_ENTRIES];

/* Relaxed atomics (plain moves on x86): a chunk unmapped by one thread can be
 * mapped and registered by another at once; the kernel orders the two, but
 * only atomics make that a defined program (and quiet for ThreadSanitizer). */
HM_INLINE unsigned hm_reg_kind(uintptr_t a) {
  uintptr_t i = a >> SS_SHIFT;
  return likely(i < REG_ENTRIES) ? __atomic_load_n(&hm_registry[i], __ATOMIC_RELAXED) : (unsigned)REG_NONE;
}
/* free's fast path only compares what it reads of the registry and of a
 * SuperSlab's owner: plain loads, which gcc folds into the compares (it
 * keeps a relaxed atomic load a move of its own; on x86 both are the same
 * load), an instruction less each. ThreadSanitizer builds keep the atomics. */
#if defined(__SANITIZE_THREAD__)
#define HM_PEEK(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define HM_PEEK_OWNER(ss) atomic_load_explicit(&(ss)->owner, memory_order_relaxed)
#else
#define HM_PEEK(x) (*(const __typeof__(x) *)&(x))
#define HM_PEEK_OWNER(ss) (*(struct heap *const *)&(ss)->owner)
#endif
HM_INLINE bool hm_reg_is(uintptr_t a, unsigned kind) {
  uintptr_t i = a >> SS_SHIFT;
  if (unlikely(i >= REG_ENTRIES)) return false;
  return HM_PEEK(hm_registry[i]) == kind;
}
/* A chunk where a live large block may start or lie (the large lane's). */
HM_INLINE bool hm_reg_large(unsigned kind) {
  return kind == REG_LARGE_HEAD || kind == REG_LARGE_TAIL || kind == REG_LARGE_PACK;
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

#define REMOTE_NOTIFY ((uintptr_t)1)

/* slab->in_use (heap.c describes the states). SLAB_FULL: the owner found
 * no free block; a remote free must notify. While FULL, used holds 1
 * instead of the capacity, so that the first local free brings it to 0 and
 * takes the slow path (slab_unfull puts the true count back): free tests
 * "emptied or FULL" with one decrement. */
enum { SLAB_UNUSED = 0, SLAB_ACTIVE = 1, SLAB_LISTED = 2, SLAB_FOREIGN = 3, SLAB_FULL = 4, SLAB_SPARSE = 5 };

#ifndef HAKMEM_SECURE
/* Default: one line, all that malloc and free read and write, with the
 * block check's multiplier and limit (the owner checks its frees against
 * its own descriptor: hm_slab_holds_own). Other threads' frees go on the
 * slab's remote list, in the SuperSlab header (hm_slab_remote), so that
 * they do not take this line away from the owner. */
typedef struct slab {
  block_t *free;               /* allocations pop here */
  block_t *local_free;         /* the owner's frees */
  uint64_t div_mul;            /* checks: the block check's multiplier (= the shape's) */
  uint32_t start_off;          /* first block, as an offset in the SuperSlab */
  uint32_t block_size;
  uint16_t used;               /* blocks handed out, remote-freed ones included */
  uint16_t capacity;           /* blocks the slab can hold */
  uint16_t carved;             /* blocks carved so far (lazily, to spare RSS); 0 when unused */
  uint8_t cls;
  uint8_t in_use;              /* state, SLAB_FULL included */
  union {
    uint64_t limit;            /* checks: the owner's block check's limit, carved << k (64 bits: the compare takes it from memory) */
    uintptr_t own_id;          /* a foreign cache: its heap's address, + 1 while it is its class's current slab (hm_free_trading) */
  };
  struct slab *next, *prev;    /* heap's list of slabs with free blocks */
} slab_t;
_Static_assert(sizeof(slab_t) == 64, "slab descriptor is one cache line");
#else
/* Secure mode: two lines. The first holds all that malloc and free read
 * (with the key, at the end it cost a second line per call: a D1 miss more
 * per four calls at ws 40,000), the block check's multiplier and limit as
 * in the default layout. The second holds what only slow paths and other
 * threads' frees touch: the remote list (remote frees thus stay off the
 * owner's line) and the avail links. */
typedef struct slab {
  block_t *free;               /* allocations pop here */
  block_t *local_free;         /* the owner's frees */
  uintptr_t key;               /* free-list pointers are stored xor key xor their address */
  uint32_t start_off;          /* first block, as an offset in the SuperSlab */
  uint32_t block_size;
  uint16_t used;               /* blocks handed out, remote-freed ones included */
  uint16_t carved;             /* blocks carved so far (lazily, to spare RSS); 0 when unused */
  uint16_t capacity;           /* blocks the slab can hold */
  uint8_t cls;
  uint8_t in_use;              /* state, SLAB_FULL included */
  uint64_t div_mul;            /* checks: the block check's multiplier (= the shape's) */
  union {
    uint64_t limit;            /* checks: the owner's block check's limit, carved << k */
    uintptr_t own_id;          /* a foreign cache: as in the default layout (unused: no trading here) */
  };
  _Atomic uintptr_t remote __attribute__((aligned(64))); /* other threads' frees (LIFO); bit 0: notify owner */
  struct slab *next, *prev;    /* heap's list of slabs with free blocks */
  uint8_t secure_pad_[40];
} slab_t;
_Static_assert(sizeof(slab_t) == 128, "secure slab descriptor: two cache lines");
_Static_assert(offsetof(slab_t, remote) == 64, "secure: malloc and free read the first line only");
#endif

/* What free needs to know of a slab, apart from the descriptor the owner
 * writes on every malloc and free: a thread freeing another's block reads
 * only this, so it does not take the owner's descriptor line away from it
 * (that cost bench_xthread a quarter of its time). Written by the owner
 * when the slab is set up and as it carves. */
typedef struct {
  uint64_t div_mul;            /* checks: the block check's multiplier (hm_slab_holds) */
  uint64_t limit;              /* checks: carved << (block_size's trailing zero bits) */
  uint32_t start_off;          /* = the descriptor's */
  uint32_t block_size;         /* = the descriptor's */
  uint16_t carved;             /* = the descriptor's, 0 when unused (relaxed atomics) */
  uint16_t carved_kept;        /* unused: carved when released, to take it again as it is (ss_take_slab; owner only) */
  /* The slab's class. Bit SLAB_CLS_CACHED: a block of the slab went into
   * another thread's foreign cache since the slab was taken (set by that
   * thread, once), where the owner's double-free check cannot see it
   * (misuse.c). Other threads read and set it atomically. */
  uint8_t cls;
  uint8_t pad_;
  /* Where a thread that does not own the slab keeps a block it frees: the
   * offset in its heap_t of its foreign cache of the class, once the slab
   * has SLAB_CLS_CACHED and while its SuperSlab has an owner; else of the
   * heap's stand-in (hm_free). Relaxed atomics. */
  uint16_t fc_off;
} slab_shape_t;
_Static_assert(sizeof(slab_shape_t) == 32, "two shapes a cache line");
_Static_assert(sizeof(slab_t) % sizeof(slab_shape_t) == 0, "hm_free scales one index for both");

#define SLAB_CLS_CACHED 0x80u
_Static_assert(NUM_CLASSES <= SLAB_CLS_CACHED, "a class fits below the foreign-cache bit");

/* The slab of each 64 KiB unit of a SuperSlab, as free finds it
 * (hm_free): the slab's index times HM_UNIT_MUL, so that the descriptor
 * and the shape are scaled addresses away (the shape at 4 * the entry, the
 * descriptor at 8 * it: one lea each; secure: 16 * it, two). */
#define SS_UNIT_SHIFT 16
#define HM_UNIT_MUL 8u
_Static_assert((SS_MAX_SLABS - 1) * HM_UNIT_MUL <= 255, "a unit's entry fits a byte");
_Static_assert((SS_SIZE >> SS_UNIT_SHIFT) == SS_MAX_SLABS, "the smallest slab is one unit");

typedef struct superslab {
  /* One line of its own: what free reads first (owner, unit_slab). */
  _Atomic(struct heap *) owner; /* NULL while abandoned or in the backend */
  uint8_t kind;
  uint8_t slab_shift;
  uint8_t nslabs;
  uint8_t on_partial;           /* linked on owner's list of SSs with free slabs */
  uint32_t free_mask;           /* slabs not in use (owner only) */
  _Atomic uint64_t pending;     /* slabs whose FULL flag a remote free hit */
  uint8_t unit_slab[SS_MAX_SLABS]; /* per 64 KiB unit: its slab's index * HM_UNIT_MUL */
  /* The descriptors, from the second line: no descriptor's address is the
   * SuperSlab's, which the end of a block of the chunk below can be (the
   * free tag is a descriptor's address: hm_free_tag_of). */
  slab_t slabs[SS_MAX_SLABS] __attribute__((aligned(64)));
  slab_shape_t shape[SS_MAX_SLABS] __attribute__((aligned(64)));
  struct superslab *next, *prev;         /* partial list / backend / abandoned */
  struct superslab *all_next, *all_prev; /* owner's list of all its SSs */
#ifndef HAKMEM_SECURE
  /* Each slab's remote list: other threads' frees (LIFO); bit 0: notify
   * the owner. Lines of their own, written by other threads' pushes and
   * read by the owner's slow paths only (hm_slab_remote). */
  _Atomic uintptr_t remote[SS_MAX_SLABS] __attribute__((aligned(64)));
#endif
  /* Giving unused slabs back (purge.c); one bit per slab. Only the owner
   * sets `dirty`; a purger claims bits by setting `purging` and clearing
   * `dirty`, so the owner taking a slab back waits for a purge under way. */
  _Atomic uint32_t dirty;                 /* unused and resident */
  _Atomic uint32_t purging;               /* a purger is giving it back now */
  _Atomic uint32_t purged;                /* given back since it became unused */
  _Atomic uint32_t idle_ms[SS_MAX_SLABS]; /* when it became unused (ms clock) */
  uint8_t guarded;              /* secure: the guard page at the end is in place */
} superslab_t;
_Static_assert(offsetof(superslab_t, owner) == 0, "the SuperSlab's fields start it");
_Static_assert(sizeof(superslab_t) <= SS_HEADER_SIZE, "header fits its page");
_Static_assert(offsetof(superslab_t, slabs) == 64, "descriptors from the second line (hm_slab_idx)");

HM_INLINE superslab_t *hm_ss_of(const void *p) {
  return (superslab_t *)((uintptr_t)p & ~SS_MASK);
}
HM_INLINE uint32_t hm_ss_offset(const void *p) { return (uint32_t)((uintptr_t)p & SS_MASK); }
HM_INLINE slab_t *hm_slab_of(superslab_t *ss, const void *p) {
  return &ss->slabs[hm_ss_offset(p) >> ss->slab_shift];
}
HM_INLINE size_t hm_slab_index(const superslab_t *ss, const void *p) {
  return ((uintptr_t)p & SS_MASK) >> ss->slab_shift;
}
/* Slab s's index in its SuperSlab, from its address alone. */
HM_INLINE unsigned hm_slab_idx(const slab_t *s) {
  return (unsigned)((((uintptr_t)s & SS_MASK) - offsetof(superslab_t, slabs)) / sizeof(slab_t));
}
HM_INLINE slab_shape_t *hm_shape_of(const slab_t *s) {
  return &hm_ss_of(s)->shape[hm_slab_idx(s)];
}
HM_INLINE char *hm_slab_start(const slab_t *s) {
  return (char *)hm_ss_of(s) + s->start_off;
}
/* Slab s's remote list (s in a SuperSlab: not a heap's foreign cache or
 * the empty slab). Default: in the SuperSlab header, found from s's
 * address alone (hm_slab_idx), so that another thread's
 * push reads nothing of the owner's descriptor line. Secure: the
 * descriptor's second line. */
HM_INLINE _Atomic uintptr_t *hm_slab_remote(const slab_t *s) {
#ifdef HAKMEM_SECURE
  return (_Atomic uintptr_t *)&s->remote;
#else
  return &hm_ss_of(s)->remote[hm_slab_idx(s)];
#endif
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
  slab_t *sparse[NUM_CLASSES];     /* listed slabs mostly free, left to drain (LIFO) */
  superslab_t *partial[NUM_KINDS]; /* owned SSs with unused slabs */
  /* Blocks of other threads' slabs that this thread freed, per class, kept
   * for its own mallocs instead of being sent back one atomic push at a time
   * (heap.c, "foreign cache"). foreign[c] is a pseudo slab: frees push on its
   * free list (newest first), and it becomes cur[c] when the class's slab
   * runs dry; while it is (`own_id`), the thread's own frees of the class
   * go there too (hm_free_trading). The
   * blocks still count as used in their own slabs. Its `used` is the room
   * left plus one (capacity + 1 - blocks cached): free decrements it and
   * malloc increments it as in an owned slab, so that free treats both
   * alike, and the free that finds 1 there sends the cache back. */
  slab_t foreign[NUM_CLASSES];
  /* What free pushes on when the block's shape names no foreign cache
   * (fc_off): its `used` of 1 sends the block to hm_free_push_slow, which
   * takes it off again. */
  slab_t fc_stand_in;
  /* purge steps: each class's current slab as last seen empty, and its
   * list heads then (hm_heap_release_empty_cur) */
  slab_t *idle_seen[NUM_CLASSES];
  uintptr_t idle_heads[NUM_CLASSES];
  /* classes whose current slab emptied by this thread's frees since a new
   * slab was last taken: the ones that look needs to visit then */
  uint64_t emptied_cur[(NUM_CLASSES + 63) / 64];
  /* per class, a slab that emptied while not the current one, kept with
   * its blocks on its lists for the class's next slab (heap.c, "spare"):
   * a class cycling through two slabs then never gives one back and takes
   * it again. Its class's emptied_cur bit is set, so looks release it. */
  slab_t *spare[NUM_CLASSES];
  superslab_t *all;                /* every owned SS */
  _Atomic int pending_hint;        /* some owned SS has pending notifications */
  /* big-slab classes: looks for idle free blocks (big.c) */
  uint32_t big_countdown;          /* big mallocs until the clock is read */
  uint32_t big_looks;              /* looks so far: the stamp in free blocks */
  uint64_t big_due_ns;             /* next look; 0: not started */
  struct heap *next_free;          /* heap pool */
#ifdef HAKMEM_STATS
  hm_heap_stats_t stats;
  struct heap *stats_next;         /* every heap ever made, for the report */
#endif
} heap_t;

extern HM_HIDDEN heap_t hm_empty_heap;   /* every class points at hm_empty_slab */
extern HM_HIDDEN slab_t hm_empty_slab;
extern HM_HIDDEN __thread heap_t *hm_tls_heap __attribute__((tls_model("initial-exec")));
/* The thread's heap as free compares it with a SuperSlab's owner, bit 0
 * set once the thread has cached another thread's block (it "trades":
 * hm_free_trading; set by hm_free_foreign), so that the owner's free tests
 * both with one compare. */
extern HM_HIDDEN __thread uintptr_t hm_tls_free_id __attribute__((tls_model("initial-exec")));

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
HM_HIDDEN const char *hm_option_path(int id); /* a PATH option: NULL when unset */
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
HM_HIDDEN void *hm_sample_swap(heap_t *h, slab_t *s, size_t n); /* sampling on: the local_free swap */
HM_HIDDEN void *hm_alloc_class(unsigned cls);
/* big.c: malloc of the classes of big slabs (above MEDIUM_MAX): the lowest
 * free block first, and free blocks left idle given back */
HM_HIDDEN void *hm_malloc_big(size_t n);
HM_HIDDEN void hm_big_init(void);
HM_HIDDEN void hm_big_reset(heap_t *h);
HM_HIDDEN size_t hm_big_collect(heap_t *h);
HM_HIDDEN void hm_free_local_slow(heap_t *h, slab_t *s);
HM_HIDDEN void hm_free_foreign(heap_t *h, superslab_t *ss, block_t *b);
HM_HIDDEN void hm_free_push_slow(heap_t *h, superslab_t *ss, slab_t *t, block_t *b);
HM_HIDDEN void hm_heap_flush_foreign(heap_t *h);
HM_HIDDEN void hm_heap_thread_exit(heap_t *h);
HM_HIDDEN void hm_heap_reclaim_abandoned(void);
HM_HIDDEN size_t hm_heap_collect_own(void);
HM_HIDDEN void hm_heap_release_empty_cur(void);
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
/* Move the pages of [p, p+len) to a new mapping, leaving [p, p+len) mapped
 * and empty (it reads zeros); NULL if the OS refused (MREMAP_DONTUNMAP,
 * Linux 5.7). */
HM_HIDDEN void *hm_os_move_pages(void *p, size_t len);
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
/* The report's resident breakdown (pagemap, else mincore): bytes resident
 * in [p, p+len); of the cached empty SuperSlabs; of a SuperSlab's slabs in
 * use (by kind, res[kind]) and unused (res[NUM_KINDS], header included); of
 * the large lane's spans in use (res[0]) and cached (res[1]) and of its
 * packs (res[2]). */
HM_HIDDEN size_t hm_os_resident(const void *p, size_t len);
HM_HIDDEN size_t hm_backend_cached_resident_now(void);
HM_HIDDEN void hm_ss_resident(superslab_t *ss, size_t res[NUM_KINDS + 1]);
HM_HIDDEN void hm_large_resident(size_t res[3]);
/* Empty SuperSlabs idle for delay_ns are given back with madvise, oldest
 * first, at most `budget` bytes; *next_due is lowered to when the next one
 * becomes due (now if the budget ran out). Returns the bytes given back. */
HM_HIDDEN size_t hm_backend_purge_cached(uint64_t now, uint64_t delay_ns, size_t budget, uint64_t *next_due);
/* Calls fn on every SuperSlab in use (owned or abandoned) with the backend
 * lock held, so none is unmapped meanwhile; stops when fn returns false. */
HM_HIDDEN void hm_backend_for_each_ss(bool (*fn)(superslab_t *ss, void *arg), void *arg);
/* Bytes given back with madvise and not yet reused (part of committed). */
HM_HIDDEN void hm_os_purged_add(size_t bytes);
HM_HIDDEN void hm_os_purged_sub(size_t bytes);
/* hakmem's resident memory as it counts it: mapped, minus given back, minus
 * the untouched rest of the last reservation. An upper bound. */
HM_HIDDEN size_t hm_os_resident_estimate(void);
HM_HIDDEN size_t hm_backend_cached_resident(void); /* cached empty SuperSlabs not given back */
struct hm_ss_counts { size_t ss_alloc, ss_free, fallback_mmap, huge_alloc; };
HM_HIDDEN void hm_backend_ss_counts(struct hm_ss_counts *out);
/* ace.c (the large lane) */
HM_HIDDEN void *hm_large_alloc(size_t n, size_t align);
HM_HIDDEN void *hm_large_alloc_unsampled(size_t n, size_t align); /* for a sampler's serve hook */
HM_HIDDEN void *hm_large_calloc(size_t n);
HM_HIDDEN void *hm_large_realloc(void *p, size_t n);
HM_HIDDEN void hm_large_free(void *p);
HM_HIDDEN size_t hm_large_usable(const void *p); /* 0: not the start of a large block */
HM_HIDDEN bool hm_large_is_freed(const void *p); /* the start of a freed (cached) large block */
HM_HIDDEN void hm_large_fork_prepare(void);
HM_HIDDEN void hm_large_fork_parent(void);
HM_HIDDEN void hm_large_fork_child(void);
/* Give back the large lane's cached spans idle for at least min_idle_ns
 * (0: all of them); returns the bytes given back. */
HM_HIDDEN size_t hm_large_release(uint64_t min_idle_ns);
/* Give back (madvise) the pages of the cached spans idle for at least
 * min_idle_ns, oldest first, at most about `budget` bytes; they stay
 * mapped and cached. *next_due is lowered to when the next one becomes due
 * (now if the budget ran out). Returns the bytes given back. */
HM_HIDDEN size_t hm_large_purge(uint64_t now, uint64_t min_idle_ns, size_t budget, uint64_t *next_due);
/* Cached spans' bytes that are not resident (and the free pages of packs
 * that are not). */
HM_HIDDEN size_t hm_large_cached_clean(void);
/* A 2 MiB-aligned one-chunk span for a pack (*fresh: never used, reads
 * zero), or NULL; and one given back to the cache. */
HM_HIDDEN void *hm_large_chunk_take(bool *fresh);
HM_HIDDEN void hm_large_chunk_give(void *chunk);
/* pack.c: large blocks up to HM_PACK_MAX packed at page granularity into
 * 2 MiB chunks (not in secure mode). The lane (ace.c) calls these for
 * blocks in REG_LARGE_PACK chunks. */
#define HM_PACK_MAX ((size_t)1 << 20)
HM_HIDDEN bool hm_pack_enabled(void);
HM_HIDDEN void *hm_pack_alloc(size_t n, bool zero);     /* NULL: use a span */
HM_HIDDEN size_t hm_pack_usable(const void *p);          /* 0: not a live block's start */
HM_HIDDEN bool hm_pack_is_freed(const void *p);
HM_HIDDEN size_t hm_pack_free(void *p);                  /* its bytes; 0: not a live block's start */
HM_HIDDEN bool hm_pack_resize(void *p, size_t n);        /* in place (n <= HM_PACK_MAX) */
HM_HIDDEN void hm_pack_free_moved(void *p);              /* free a block whose pages were moved away */
/* Free pages idle for min_idle_ns given back (madvise), at most about
 * budget bytes; *next_due lowered as hm_large_purge does. */
HM_HIDDEN size_t hm_pack_purge(uint64_t now, uint64_t min_idle_ns, size_t budget, uint64_t *next_due);
HM_HIDDEN size_t hm_pack_release(void);                  /* malloc_trim: all free pages, empty packs */
HM_HIDDEN size_t hm_pack_clean(void);                    /* free pages not resident, bytes */
HM_HIDDEN void hm_pack_resident(size_t *res);            /* the report: packs' resident bytes */
HM_HIDDEN void hm_pack_fork_prepare(void);
HM_HIDDEN void hm_pack_fork_parent(void);
HM_HIDDEN void hm_pack_fork_child(void);
/* purge.c: giving unused memory back (docs/DESIGN.md, "Memory given back") */
enum { PURGE_LAZY = 0, PURGE_EAGER = 1, PURGE_OFF = 2 };
extern HM_HIDDEN int hm_purge_mode;
extern HM_HIDDEN uint64_t hm_purge_delay_ns;
extern HM_HIDDEN size_t hm_rss_limit;          /* bytes; 0: no limit */
extern HM_HIDDEN _Atomic uint64_t hm_purge_due_ns; /* when a purge step is due */
HM_HIDDEN void hm_purge_init(void);
HM_HIDDEN void hm_purge_slab_unused(superslab_t *ss, unsigned i);
/* The owner takes unused slab i again; true if its memory is as it was
 * left (not given back to the OS meanwhile). */
HM_HIDDEN bool hm_purge_slab_take(superslab_t *ss, unsigned i);
HM_HIDDEN size_t hm_purge_ss_leave(superslab_t *ss);
HM_HIDDEN size_t hm_purge_ss_now(superslab_t *ss);
/* Something became unused at `now` (ns): a step is due after the delay.
 * The large lane calls this when it caches a span. */
HM_HIDDEN void hm_purge_note_idle(uint64_t now);
/* Memory given back at purged_at (ns) is reused at now. */
HM_HIDDEN void hm_purge_regret(uint64_t purged_at, uint64_t now);
HM_HIDDEN size_t hm_purge_unused_resident(void);
HM_HIDDEN void hm_purge_count_disabled(void);
HM_HIDDEN int hm_collect(bool all);
HM_HIDDEN void hm_purge_fork_prepare(void);
HM_HIDDEN void hm_purge_fork_parent(void);
HM_HIDDEN void hm_purge_fork_child(void);
HM_HIDDEN void hm_purge_tick_clock(void);
extern HM_HIDDEN __thread uint32_t hm_tick_countdown __attribute__((tls_model("initial-exec")));
/* On slow paths: every HM_TICK_EVERY-th call reads the coarse clock (vDSO)
 * and runs a purge step if one is due. */
#define HM_TICK_EVERY 16
HM_INLINE void hm_purge_tick(void) {
  if (unlikely(--hm_tick_countdown == 0)) hm_purge_tick_clock();
}
/* error.c */
HM_HIDDEN HM_NORETURN void hm_fatal(const char *what, const void *p, const char *reason);
HM_HIDDEN void hm_write_str(const char *s);
HM_HIDDEN void hm_write_fd(int fd, const char *s);
HM_HIDDEN void hm_format_dec(char *out, long v);
/* alloc.c */
HM_HIDDEN void hm_free_slow(void *p);
/* prof.c: the heap profiler (a sampler consumer, sample.h) */
HM_HIDDEN void hm_prof_init(void);
HM_HIDDEN bool hm_prof_freed(void *p); /* a large block freed: true if it was a sampled one */
HM_HIDDEN void hm_prof_fork_prepare(void);
HM_HIDDEN void hm_prof_fork_parent(void);
HM_HIDDEN void hm_prof_fork_child(void);

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
/* Every block on a free list holds the free tag in its second word (blocks
 * are >= 16 B); handing a block out clears it. free() of a block that holds
 * it is a double free, confirmed by a list scan where that is safe.
 * Default: the tag of a block of slab s is s's address, which free has in a
 * register (no load): an address inside a SuperSlab's header, never the
 * SuperSlab's own (hm_slab_idx), which no block covers and no pointer a
 * program derives from its blocks can hold. Secure: hm_free_tag, random per
 * process (the fill pattern). */
#ifdef HAKMEM_SECURE
extern HM_HIDDEN uintptr_t hm_free_tag;   /* random per process, never 0 */
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
  uint32_t x = hm_ss_offset(p) - sh->start_off;
  /* limit: written by the owner only, read by any freeing thread */
  return (uint64_t)x * sh->div_mul < __atomic_load_n(&sh->limit, __ATOMIC_RELAXED);
}
/* The same check for the slab's owner, from its descriptor, whose line the
 * owner's free touches anyway (the shape is another line): the same
 * multiply and compare, with the descriptor's copies of the multiplier and
 * the limit. */
HM_INLINE bool hm_slab_holds_own(const slab_t *s, const void *p) {
  uint32_t x = hm_ss_offset(p) - s->start_off;
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
  s->limit = hm_check_limit(s->block_size, n);
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
#include <emmintrin.h>
extern HM_HIDDEN __m128i hm_fill_lane; /* the tag, twice */
HM_HIDDEN HM_NORETURN void hm_corrupt_list(const slab_t *s, const block_t *b);
HM_HIDDEN void *hm_handout_failed(const slab_t *s, const block_t *b);
HM_HIDDEN bool hm_secure_guard(void *page);
HM_HIDDEN void hm_secure_unguard(void *page);
HM_HIDDEN void hm_secure_shuffle(uint32_t *idx, uint32_t n);

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
  return HM_MARK_FREE(hm_slab_holds_own(s, p), s->block_size, hm_free_tag_of(s), p);
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

/* Pop a block of s; when its free list is empty, take the owner's frees
 * (local_free) as the new free list right here, the commonest refill; the
 * slow path does the rest. */
HM_INLINE void *hm_slab_pop(heap_t *h, slab_t *s, size_t n) {
  block_t *b = s->free;
  if (unlikely(!hm_head_ok(s, b))) { /* hardening: b != NULL (secure: and not damaged) */
    if (b != NULL || !hm_head_ok(s, b = s->local_free)) return hm_alloc_slow(n);
    /* (sampling on: the swap charges the list first: sample.h) */
    if (unlikely(hm_sample_active)) return hm_sample_swap(h, s, n);
    s->local_free = NULL;
    /* blocks taken: all the owner freed, unless s is the foreign cache */
    HM_STAT_REFILL(h, HM_REFILL_LOCAL, s->in_use == SLAB_FOREIGN ? 0 : s->carved - s->used);
  }
  (void)h;
  hm_check_block(s, b);
  block_t *next = hm_next_decode(s, b);
  s->free = next;
  __builtin_prefetch(next); /* the next pop reads its link: start the load now */
  s->used++;
  HM_STAT_ADD(h, alloc[s->cls], 1);
  return hm_block_handout(s, b, next); /* hardening: clears the free tag (secure: checks) */
}

/* malloc for n <= SMALL_MAX: pop the current slab's free list. */
HM_INLINE void *hm_malloc_small(size_t n) {
  heap_t *h = hm_tls_heap;
  if (likely(n <= TINY_MAX)) return hm_slab_pop(h, h->direct[(n + 15) >> 4], n);
  if (likely(n <= MEDIUM_MAX)) return hm_slab_pop(h, h->cur[hm_size_class(n)], n);
  return hm_malloc_big(n);
}

/* (Not written as hm_malloc_small behind a SMALL_MAX test: testing TINY_MAX
 * first saves tiny sizes a compare and a branch.) */
HM_INLINE void *hm_malloc(size_t n) {
  heap_t *h = hm_tls_heap;
  if (likely(n <= TINY_MAX)) return hm_slab_pop(h, h->direct[(n + 15) >> 4], n);
  if (likely(n <= MEDIUM_MAX)) return hm_slab_pop(h, h->cur[hm_size_class(n)], n);
  if (n <= SMALL_MAX) return hm_malloc_big(n);
  return hm_large_alloc(n, 0);
}

/* The owner's push of a block being freed: on local_free, without atomics. */
HM_INLINE void hm_free_push_own(heap_t *h, slab_t *s, block_t *b) {
  hm_check_block(s, b);
  HM_STAT_ADD(h, free_local[s->cls], 1);
  hm_next_set(s, b, s->local_free);
  s->local_free = b;
  if (unlikely(--s->used == 0)) hm_free_local_slow(h, s); /* emptied, or FULL */
}

/* Push a block being freed: the owner on local_free, other threads through
 * hm_free_foreign. */
HM_INLINE void hm_free_push(superslab_t *ss, slab_t *s, block_t *b) {
  heap_t *h = hm_tls_heap;
  if (likely(atomic_load_explicit(&ss->owner, memory_order_relaxed) == h))
    hm_free_push_own(h, s, b);
  else
    hm_free_foreign(h, ss, b);
}

/* x == y ? a : b, by a conditional move: where the test is a coin toss, a
 * branch on it is mispredicted every other time (and gcc makes a ?: of
 * two slab addresses a branch). */
HM_INLINE slab_t *hm_select_slab(const void *x, const void *y, slab_t *a, slab_t *b) {
#if defined(__x86_64__)
  __asm__("cmp %2, %1\n\tcmove %3, %0" : "+r"(b) : "r"(x), "rm"(y), "r"(a) : "cc"); /* (y may stay in memory) */
  return b;
#else
  return (slab_t *)((uintptr_t)b ^ (((uintptr_t)a ^ (uintptr_t)b) & -(uintptr_t)(x == y)));
#endif
}

/* free for a thread that trades blocks with others (hm_tls_free_id): its
 * frees are its own blocks and others' by turns, a branch on which is
 * mispredicted every other time (bench_xthread: 35-65% each way; it cost
 * a third of the time, bench_soak a quarter). So both are pushed alike,
 * on a slab chosen without a branch: the block's own slab for its owner,
 * else this thread's foreign cache of its class, or the stand-in while the
 * shape names none (fc_off), whose `used` of 1 sends the block to
 * hm_free_push_slow. Every thread checks the block against the shape (the
 * descriptor's line stays with the owner). */
HM_INLINE void hm_free_trading(heap_t *h, const heap_t *owner, superslab_t *ss, slab_t *s, const slab_shape_t *sh,
                               void *p) {
  if (unlikely(!hm_block_mark_free(sh, s, p))) { /* hardening */
    hm_free_suspect(p);
    return;
  }
  uint16_t fc_off = __atomic_load_n(&sh->fc_off, __ATOMIC_RELAXED);
  slab_t *fc = (slab_t *)((char *)h + fc_off);
  /* While the cache serves the class's mallocs, the thread's own blocks go
   * there too: one list, whose newest block the next malloc takes while it
   * is still in this core's cache. The owner is compared with the cache's
   * own_id, h then h + 1, which no heap is (the stand-in's: h). */
  slab_t *t = hm_select_slab(owner, (const void *)fc->own_id, s, fc);
  block_t *b = (block_t *)p;
#ifdef HAKMEM_DEBUG
  if (t == s) hm_check_block(s, b);
#endif
#if HM_STATS_BUILD
  if (owner == h)
    HM_STAT_ADD(h, free_local[s->cls], 1);
  else if (t != &h->fc_stand_in)
    HM_STAT_ADD(h, free_remote[t->cls], 1);
#endif
  /* On the free list, not local_free: the next malloc takes the newest
   * block, still in this core's cache (popped in the order freed, 75% of
   * bench_xthread's mallocs missed D1 on the block under callgrind). */
  b->next = t->free;
  t->free = b;
  /* emptied, FULL, the foreign cache over budget, or the stand-in */
  if (unlikely(--t->used == 0)) hm_free_push_slow(h, ss, t, b);
}

/* free: find the SuperSlab by masking, the slab by its unit's entry. */
HM_INLINE void hm_free(void *p) {
  if (likely(hm_reg_is((uintptr_t)p, REG_SS))) {
    superslab_t *ss = hm_ss_of(p);
    /* (one scaled entry for both arrays: the addresses fold into the loads) */
    uintptr_t o = (uintptr_t)ss->unit_slab[hm_ss_offset(p) >> SS_UNIT_SHIFT] * (sizeof(slab_shape_t) / HM_UNIT_MUL);
    slab_t *s = (slab_t *)((char *)ss->slabs + o * (sizeof(slab_t) / sizeof(slab_shape_t)));
    const slab_shape_t *sh = (const slab_shape_t *)((const char *)ss->shape + o);
    uintptr_t id = hm_tls_free_id;
    /* The owner checks the block against the descriptor it writes anyway,
     * another thread against the shape (the descriptor's line stays with
     * the owner). A thread that trades never takes this branch, whose
     * outcome would be a coin toss for it. */
    if (likely((uintptr_t)HM_PEEK_OWNER(ss) == id)) {
      if (unlikely(!hm_block_mark_free_own(s, p))) { /* hardening */
        hm_free_suspect(p);
        return;
      }
      hm_free_push_own((heap_t *)id, s, (block_t *)p);
      return;
    }
#ifndef HAKMEM_SECURE
    if (id & 1) {
      hm_free_trading((heap_t *)(id - 1), atomic_load_explicit(&ss->owner, memory_order_relaxed), ss, s, sh, p);
      return;
    }
#endif
    if (unlikely(!hm_block_mark_free(sh, s, p))) {
      hm_free_suspect(p);
      return;
    }
    hm_free_foreign((heap_t *)id, ss, (block_t *)p);
    return;
  }
  hm_free_slow(p);
}

#endif /* HAKMEM_INTERNAL_H */
