/* Types and geometry: the constants, the registry, the size-class tables,
 * the slab, SuperSlab and thread-heap layouts with their inline accessors,
 * the fast-path counters' fields, the option ids and the clock. The lowest
 * header: it includes nothing of hakmem's but the public hakmem.h
 * (docs/DESIGN.md, "Layers and files"). Internal names shared between
 * files carry the prefix hm_ (never hak_, which is the public API) and
 * hidden visibility. */
#ifndef HAKMEM_TYPES_H
#define HAKMEM_TYPES_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#ifdef HAKMEM_SECURE
#include <emmintrin.h>
#endif

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
#define HM_GUARD_SIZE 4096                /* secure: PROT_NONE page at SuperSlab and span ends */
#else
#define HM_GUARD_SIZE 0
#endif
/* slab 0's blocks start after it: descriptors (2 KiB; secure, 128 B each:
 * 4 KiB) and shapes (2 KiB) */
#define SS_HEADER_SIZE 8192
#define SS_MAX_SLABS 32
#define HM_PAGE_SIZE 4096

#define DIRECT_MAX 1024                   /* direct sizes: malloc indexes hm_tls_direct[] */
/* The Pool limit: the largest size served from slabs; above it, the large
 * lane (large.c). Chosen by measurement (docs/DESIGN.md, "Size classes and the pool limit"); 18, 19 or 20. */
#ifndef HM_POOL_SHIFT
#define HM_POOL_SHIFT 18
#endif
#define POOL_MAX ((size_t)1 << HM_POOL_SHIFT)
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
/* REG_GUARD: the guarded pool's (guard.c). */
enum { REG_NONE = 0, REG_SS = 1, REG_LARGE_HEAD = 2, REG_LARGE_TAIL = 3, REG_SS_CACHED = 4, REG_LARGE_FREED = 5,
       REG_LARGE_PACK = 6, REG_GUARD = 7 };
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
#else
#define HM_PEEK(x) (*(const __typeof__(x) *)&(x))
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
extern HM_HIDDEN const uint8_t hm_direct_class[DIRECT_MAX / 16 + 1];
extern HM_HIDDEN const uint32_t hm_class_size[NUM_CLASSES];
extern HM_HIDDEN const uint8_t hm_class_kind[NUM_CLASSES];
/* Class of DIRECT_MAX < n <= MEDIUM_MAX, indexed by (n - 1) / 128: there
 * the classes are 128 B apart at least, so one load replaces the formula
 * (docs/DESIGN.md, "Size classes and the pool limit"). */
#define HM_MEDIUM_SHIFT 7
extern HM_HIDDEN const uint8_t hm_medium_class[MEDIUM_MAX >> HM_MEDIUM_SHIFT];

/* Class of a request n <= POOL_MAX: 16-byte steps to 256 B, then eight
 * classes per power of two (at most 1/9 of a block wasted above 128 B). */
HM_INLINE unsigned hm_size_class(size_t n) {
  if (likely(n <= DIRECT_MAX)) return hm_direct_class[(n + 15) >> 4];
  unsigned k = 63u - (unsigned)__builtin_clzl(n - 1);
  return 16u + (k - 8u) * 8u + (unsigned)(((n - 1) >> (k - 3)) - 8u);
}

/* The class of DIRECT_MAX < n <= MEDIUM_MAX, from the table. */
HM_INLINE unsigned hm_medium_class_of(size_t n) {
  return hm_medium_class[(n - 1) >> HM_MEDIUM_SHIFT];
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
  block_t *local_free;         /* the owner's frees while a sample is due (hm_free_own_slow) */
  uint64_t div_mul;            /* checks: the block check's multiplier (= the shape's) */
  uint32_t start_lo;           /* first block's address, low 32 bits (hm_slab_holds) */
  uint16_t credit;             /* the owner's frees pushed on free before the sampling countdown is next charged (hm_free_count_own) */
  uint16_t bias;               /* 1 while current after it emptied: counted in used (hm_slab_used) */
  uint16_t used;               /* blocks handed out, remote-freed ones included, plus bias */
  uint16_t capacity;           /* blocks the slab can hold */
  uint16_t carved;             /* blocks carved so far (lazily, to spare RSS); 0 when unused */
  uint8_t cls;
  uint8_t in_use;              /* state, SLAB_FULL included */
  uint64_t limit;              /* checks: the owner's block check's limit, carved << k (64 bits: the compare takes it from memory) */
  struct slab *next;           /* heap's list of slabs with free blocks (the back link: hm_slab_prev) */
  /* Where the owner's frees of the slab's blocks go (hm_free_push_own): the
   * slab itself while it is its class's current slab, else the heap's
   * foreign cache of the class, so that the next malloc takes them while in
   * cache (docs/DESIGN.md, "Fast paths"). Owner only. */
  struct slab *route;
} slab_t;
_Static_assert(sizeof(slab_t) == 64, "slab descriptor is one cache line");
#else
/* Secure mode: two lines. The first holds all that malloc and free read
 * (the key included: at the end of the descriptor it cost a second line
 * per call), the block check's multiplier and limit as
 * in the default layout. The second holds what only slow paths and other
 * threads' frees touch: the remote list (remote frees thus stay off the
 * owner's line) and the avail links. */
typedef struct slab {
  block_t *free;               /* allocations pop here */
  block_t *local_free;         /* the owner's frees while a sample is due (hm_free_own_slow) */
  uintptr_t key;               /* free-list pointers are stored xor key xor their address */
  uint32_t start_lo;           /* first block's address, low 32 bits (hm_slab_holds) */
  uint32_t block_size;
  uint16_t used;               /* blocks handed out, remote-freed ones included, plus bias */
  uint16_t carved;             /* blocks carved so far (lazily, to spare RSS); 0 when unused */
  uint16_t capacity;           /* blocks the slab can hold */
  uint8_t cls;
  uint8_t in_use;              /* state, SLAB_FULL included */
  uint16_t credit;             /* as in the default layout */
  uint16_t bias;               /* as in the default layout */
  uint64_t div_mul;            /* checks: the block check's multiplier (= the shape's) */
  uint64_t limit;              /* checks: the owner's block check's limit, carved << k */
  _Atomic uintptr_t remote __attribute__((aligned(64))); /* other threads' frees (LIFO); bit 0: notify owner */
  struct slab *next, *prev;    /* heap's list of slabs with free blocks (hm_slab_prev) */
  uint8_t secure_pad_[40];
} slab_t;
_Static_assert(sizeof(slab_t) == 128, "secure slab descriptor: two cache lines");
_Static_assert(offsetof(slab_t, remote) == 64, "secure: malloc and free read the first line only");
#endif

/* What free needs to know of a slab, apart from the descriptor the owner
 * writes on every malloc and free: a thread freeing another's block reads
 * only this, so it does not take the owner's descriptor line away from it
 * (docs/DESIGN.md, "Threads"). Written by the owner
 * when the slab is set up and as it carves. */
typedef struct {
  uint64_t div_mul;            /* checks: the block check's multiplier (hm_slab_holds) */
  uint64_t limit;              /* checks: carved << (block_size's trailing zero bits) */
  uint32_t start_lo;           /* = the descriptor's */
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
  uint8_t pad2_[32];           /* a line each: a fixed distance from the descriptor (hm_shape_of) */
} slab_shape_t;
_Static_assert(sizeof(slab_shape_t) == 64, "a shape a cache line");
_Static_assert(sizeof(slab_t) % sizeof(slab_shape_t) == 0, "hm_shape_of scales the descriptor's offset");

#define SLAB_CLS_CACHED 0x80u
_Static_assert(NUM_CLASSES <= SLAB_CLS_CACHED, "a class fits below the foreign-cache bit");

#define SS_UNIT_SHIFT 16
_Static_assert((SS_SIZE >> SS_UNIT_SHIFT) == SS_MAX_SLABS, "the smallest slab is one unit");

/* The unit map (docs/DESIGN.md, "Fast paths"): per 64 KiB of the 47-bit
 * user address space, the descriptor of the slab that covers it (NULL: no
 * set-up SuperSlab does) and the SuperSlab owner's tag, so that free finds
 * the slab and tells its owner in one line. Reserved read-only at start-up
 * (32 GiB of address space, in no commit charge); a page of it is made
 * writable, and so committed, per 16 MiB where SuperSlabs lie.
 * hm_unit_map_n stays 0 until then (or if the mapping is refused): every
 * free then takes the registry's path (hm_free_slow), as it does for a
 * SuperSlab whose page could not be made writable. */
typedef struct {
  struct slab *slab;
  /* The owner's thread pointer while it does not trade, else 0 (heap.c,
   * ss_set_owner); non-zero only where slab is set: the owner's free
   * compares it first and then takes slab without a test. */
  uintptr_t owner_tag;
} unit_entry_t;
#define UNIT_MAP_ENTRIES ((size_t)1 << (REG_ADDR_BITS - SS_UNIT_SHIFT))
extern HM_HIDDEN unit_entry_t *hm_unit_map;
extern HM_HIDDEN uintptr_t hm_unit_map_n;
HM_HIDDEN void hm_unit_map_init(void);
struct superslab;
HM_HIDDEN void hm_unit_map_set(struct superslab *ss);
HM_HIDDEN void hm_unit_map_tag(struct superslab *ss, uintptr_t tag);
HM_HIDDEN void hm_unit_map_clear(uintptr_t ss);

typedef struct superslab {
  /* One line of its own: the owner, read by other threads' frees. */
  _Atomic(struct heap *) owner; /* NULL while abandoned or in the backend */
  uint8_t kind;
  uint8_t slab_shift;
  uint8_t nslabs;
  uint8_t on_partial;           /* linked on owner's list of SSs with free slabs */
  uint32_t free_mask;           /* slabs not in use (owner only) */
  _Atomic uint64_t pending;     /* slabs whose FULL flag a remote free hit */
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
#ifndef HAKMEM_SECURE
  /* Each slab's back link on its heap's avail or sparse list (owner
   * only; hm_slab_prev): out of the descriptor, whose line malloc and free
   * use. */
  struct slab *slab_prev[SS_MAX_SLABS];
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

/* The calling thread's pointer (x86-64: %fs:0, the TCB's own address; no
 * GOT load, as a TLS variable of a shared library takes): unique among
 * live threads, never 0. free compares it with the unit map's owner_tag
 * (docs/DESIGN.md, "Threads"). */
HM_INLINE uintptr_t hm_thread_tag(void) {
#if defined(__x86_64__)
  uintptr_t t;
  __asm__("mov %%fs:0, %0" : "=r"(t));
  return t;
#else
  return (uintptr_t)__builtin_thread_pointer();
#endif
}

HM_INLINE superslab_t *hm_ss_of(const void *p) {
  return (superslab_t *)((uintptr_t)p & ~SS_MASK);
}
HM_INLINE uint32_t hm_ss_offset(const void *p) { return (uint32_t)((uintptr_t)p & SS_MASK); }
/* malloc_usable_size's lookup: the descriptor of p's slab (NULL: p lies in
 * no set-up SuperSlab). hm_free writes the bound test out itself: through
 * an entry pointer NULL-tested, gcc tests the pointer too. */
HM_INLINE slab_t *hm_unit_slab(const void *p) {
  uintptr_t u = (uintptr_t)p >> SS_UNIT_SHIFT;
  return __builtin_expect(u < HM_PEEK(hm_unit_map_n), 1) ? HM_PEEK(HM_PEEK(hm_unit_map)[u].slab) : NULL;
}
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
/* The shape of slab s: a fixed distance from the descriptor where the two
 * strides are equal (default: other threads' frees and
 * malloc_usable_size find it with one lea);
 * secure, whose descriptors are twice as long, scales the descriptor's
 * offset in the SuperSlab, (s + ss) / 2 (ss is 2 MiB aligned). */
enum { HM_SHAPE_R = sizeof(slab_t) / sizeof(slab_shape_t) };
HM_INLINE slab_shape_t *hm_shape_of(const slab_t *s) {
  uintptr_t base = ((uintptr_t)s + (HM_SHAPE_R - 1) * ((uintptr_t)s & ~SS_MASK)) / HM_SHAPE_R; /* ss + s's offset / R */
  return (slab_shape_t *)(base + (offsetof(superslab_t, shape) - offsetof(superslab_t, slabs) / HM_SHAPE_R));
}
/* Slab s's block size: the default descriptor keeps none (its line is
 * full), the shape has it. */
HM_INLINE uint32_t hm_slab_bs(const slab_t *s) {
#ifdef HAKMEM_SECURE
  return s->block_size;
#else
  return hm_shape_of(s)->block_size;
#endif
}
/* Blocks of s handed out. A current slab that emptied once keeps a bias
 * of 1 in used until it stops being current, so that its owner's frees
 * do not take the slow path each time it empties again (docs/DESIGN.md,
 * "Slabs"). Relaxed, and never below 0: other threads' reports read it
 * while the owner changes the two. */
HM_INLINE uint32_t hm_slab_used(const slab_t *s) {
  uint32_t u = __atomic_load_n(&s->used, __ATOMIC_RELAXED), b = __atomic_load_n(&s->bias, __ATOMIC_RELAXED);
  return u > b ? u - b : 0;
}
/* Carved blocks of s not handed out (the foreign cache: blocks cached),
 * as its owner counts them (its used and bias agree: no test). */
HM_INLINE int64_t hm_slab_free_blocks(const slab_t *s) { return (int64_t)s->carved - (int64_t)s->used + s->bias; }
/* Slab s's back link on its heap's avail or sparse list (slab_prev;
 * secure mode's descriptor has room for it). */
HM_INLINE slab_t **hm_slab_prev(slab_t *s) {
#ifdef HAKMEM_SECURE
  return &s->prev;
#else
  return &hm_ss_of(s)->slab_prev[hm_slab_idx(s)];
#endif
}
/* Where the owner's free of a block of s pushes it (slab_t.route; secure
 * mode keeps no foreign cache: the slab). */
HM_INLINE slab_t *hm_slab_route(slab_t *s) {
#ifdef HAKMEM_SECURE
  return s;
#else
  return s->route;
#endif
}
/* The same, read while the owner may change it (relaxed). */
HM_INLINE uint32_t hm_slab_bs_relaxed(const slab_t *s) {
#ifdef HAKMEM_SECURE
  return __atomic_load_n(&s->block_size, __ATOMIC_RELAXED);
#else
  return __atomic_load_n(&hm_shape_of(s)->block_size, __ATOMIC_RELAXED);
#endif
}

/* The first block's offset in its SuperSlab: the low bits of start_lo (a
 * SuperSlab is SS_SIZE-aligned, so its address adds nothing to them). */
HM_INLINE uint32_t hm_start_off(uint32_t start_lo) { return start_lo & (uint32_t)SS_MASK; }
HM_INLINE char *hm_slab_start(const slab_t *s) {
  return (char *)hm_ss_of(s) + hm_start_off(s->start_lo);
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

/* ---- statistics (src/counters.c, src/stats.c) -------------------------- */
/* The rows of the report: the pool's direct sizes (classes up to
 * DIRECT_MAX), the rest of the pool, the large lane (counters.c). */
enum { HM_LANE_DIRECT = 0, HM_LANE_POOL = 1, HM_LANE_LARGE = 2, HM_LANES = 3 };

/* -DHAKMEM_FAST_COUNTERS (cmake -DHAKMEM_FAST_COUNTERS=ON): the fast paths count too, into
 * their heap (owner-written, read by the report with relaxed loads; a heap
 * keeps its counts when an exited thread's heap is reused). Otherwise
 * HM_STAT_* compile to nothing. */
#ifdef HAKMEM_FAST_COUNTERS
#define HM_FAST_COUNTERS 1
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
#define HM_FAST_COUNTERS 0
#define HM_STAT_ADD(h, field, n) ((void)0)
#define HM_STAT_REFILL(h, src, blocks) ((void)0)
#endif

/* ---- thread heaps ------------------------------------------------------ */
typedef struct heap {
  /* (cur[] of each 16-byte granule up to DIRECT_MAX: hm_tls_direct, in the
   * thread's own TLS, internal.h) */
  slab_t *cur[NUM_CLASSES];        /* slab serving allocations (never NULL) */
  /* Sampling's countdowns, per class (sample.h), charged a list's length as
   * the fast path swaps local_free in or heap_alloc installs a list, and
   * ahead by the current slab's credit (hm_free_own_slow): here, as malloc
   * has h in a register. INT64_MAX: nothing samples. */
  int64_t sample_left[NUM_CLASSES];
  slab_t *avail[NUM_CLASSES];      /* other slabs of the class with free blocks */
  slab_t *avail_tail[NUM_CLASSES]; /* (FIFO: pushed at the tail) */
  slab_t *sparse[NUM_CLASSES];     /* listed slabs mostly free, left to drain (LIFO) */
  superslab_t *partial[NUM_KINDS]; /* owned SSs with unused slabs */
  /* Blocks of other threads' slabs that this thread freed, per class, kept
   * for its own mallocs instead of being sent back one atomic push at a time
   * (heap.c, "foreign cache"). foreign[c] is a pseudo slab: frees push on its
   * free list (newest first), and it becomes cur[c] when the class's slab
   * runs dry. Once the thread trades, its own frees go there too
   * (hm_free_trading). The blocks still count as used in their own slabs.
   * Its `used` is the room left plus one (capacity + 1 - blocks cached):
   * free decrements it and malloc increments it as in an owned slab, so
   * that free treats both alike, and the free that finds 1 there sends the
   * cache back. */
  slab_t foreign[NUM_CLASSES];
  /* What free pushes on when the block's shape names no foreign cache
   * (fc_off): its `used` of 1 sends the block to hm_free_push_slow, which
   * takes it off again. */
  slab_t fc_stand_in;
  /* purge steps: each class's current slab as last seen empty, and its
   * list heads then (hm_heap_release_empty_cur) */
  slab_t *idle_seen[NUM_CLASSES];
  uintptr_t idle_heads[NUM_CLASSES];
  /* each foreign cache's newest block as last seen by a look while not
   * serving (release_if_idle): the same at the next look, it goes home */
  uintptr_t fc_seen[NUM_CLASSES];
  /* classes whose current slab emptied by this thread's frees since a new
   * slab was last taken: the ones that look needs to visit then */
  uint64_t emptied_cur[(NUM_CLASSES + 63) / 64];
  /* classes whose current slab a look released (looked_out), and those
   * that then took a slab again before the next purge step (recurring):
   * looks leave the latter alone until that step (heap.c, "recurring") */
  uint64_t looked_out[(NUM_CLASSES + 63) / 64];
  uint64_t recurring[(NUM_CLASSES + 63) / 64];
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
  struct heap *all_next;           /* every heap ever made (the resident breakdown's foreign caches) */
  /* While the profiler is on, each foreign cache serves from here, its list
   * moved (and charged) at once: frees push on foreign[], never on the list
   * malloc pops (docs/DESIGN.md, "Sampling"). */
  slab_t fc_serve[NUM_CLASSES];
#if HM_FAST_COUNTERS
  hm_heap_stats_t stats;
  struct heap *stats_next;         /* every heap ever made, for the report */
#endif
} heap_t;

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

/* Monotonic time in ns; the coarse clock is read from the vDSO, no syscall. */
HM_INLINE uint64_t hm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif /* HAKMEM_TYPES_H */
