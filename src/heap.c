/* Thread heaps and their slabs: the allocation slow path, frees that need
 * more than a list push, remote-free notification, thread exit (abandon)
 * and adoption of abandoned SuperSlabs.
 *
 * Ownership: a SuperSlab belongs to one heap (ss->owner) or to none
 * (abandoned / in the backend). Only the owner touches a slab's free,
 * local_free, used and state, and its heap's lists, so none of that needs
 * atomics. Other threads only push on slab->remote.
 *
 * Slab states (in_use): UNUSED; ACTIVE (the class's current slab, or FULL);
 * LISTED (on heap->avail[cls], has free blocks); SPARSE (on
 * heap->sparse[cls]: mostly free, left to drain); FOREIGN (a heap's pseudo
 * slab of cached blocks from other threads' slabs, see hm_free_foreign).
 *
 * A FULL slab is on no list. To get it back when other threads free into
 * it, the owner marks it by setting bit 0 of its (empty) remote list; the
 * first remote free that sees the bit records the slab in its SuperSlab's
 * `pending` mask and raises the owner's `pending_hint`, which the owner
 * reads on its slow path. */
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include "heap.h"
#include "list.h"


static const uint8_t kind_shift[NUM_KINDS] = {16, 19, 21}; /* 64 KiB, 512 KiB, 2 MiB */

slab_t hm_empty_slab;
heap_t hm_empty_heap = {.cur = {[0 ... NUM_CLASSES - 1] = &hm_empty_slab}};
_Static_assert(offsetof(heap_t, fc_stand_in) + sizeof(slab_t) <= UINT16_MAX, "foreign cache offsets fit fc_off");
/* fc_off: offsets from a trading thread's free id, its heap's address + 1
 * (hm_free_trading adds it to the id it has in a register). */
#define FC_STAND_IN ((uint16_t)(offsetof(heap_t, fc_stand_in) - 1))
HM_INLINE uint16_t fc_offset(unsigned c) { return (uint16_t)(offsetof(heap_t, foreign) + c * sizeof(slab_t) - 1); }
__thread heap_t *hm_tls_heap __attribute__((tls_model("initial-exec"))) = &hm_empty_heap;
__thread slab_t *hm_tls_direct[HM_DIRECT_SINK + 1] __attribute__((tls_model("initial-exec"))) = {
    [0 ... HM_DIRECT_SINK] = &hm_empty_slab};
__thread uintptr_t hm_tls_free_id __attribute__((tls_model("initial-exec"))) = (uintptr_t)&hm_empty_heap;
/* The thread gave its heap up (hm_heap_thread_exit): a heap it makes after
 * that, in a later destructor, may never be given up (libc runs at most
 * four rounds of them), so its SuperSlabs never carry the thread pointer,
 * which a later thread can get (heap_for_thread). */
static __thread bool tls_exited __attribute__((tls_model("initial-exec")));

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER; /* pool and abandoned lists */
static heap_t *all_heaps; /* every heap made (heap_lock; heaps are recycled, never freed) */
static heap_t *heap_pool;                  /* heaps of exited threads, for reuse */
static superslab_t *abandoned[NUM_KINDS];  /* SuperSlabs of exited threads */
static pthread_key_t heap_key;             /* its destructor runs at thread exit */
static pthread_once_t heap_key_once = PTHREAD_ONCE_INIT;

/* The hm_tls_direct[] granules of each class, four slots (a class of direct
 * sizes has 1, 2 or 4 granules: its last repeats; any other class: the
 * sink, HM_DIRECT_SINK), set up at start-up from hm_direct_class: four
 * stores and no loop for heap_set_cur. */
enum { HM_DIRECT_SPAN = 4 };
_Static_assert(DIRECT_MAX <= 1024, "8 classes per power of two: at most 4 granules a class up to 1 KiB");
static uint8_t direct_gran[NUM_CLASSES][HM_DIRECT_SPAN];
/* Fewer than a quarter of its carved blocks out: not worth handing out
 * from while another slab is. (A quarter: taken when its turn comes, a
 * slab is filled; one that falls below it before its next turn holds
 * blocks the class no longer needs.) */
static bool slab_is_sparse(const slab_t *s) { return hm_slab_used(s) * 4u < s->carved; }

/* s stops being current, or is listed or marked FULL while still named
 * current: its bias comes off used (slab_t.bias). (Tested first: s may be
 * hm_empty_slab, which no thread writes.) */
static void slab_unbias(slab_t *s) {
  if (s->bias == 0) return;
  s->used = (uint16_t)(s->used - s->bias);
  s->bias = 0;
}

/* The credit of s, the current slab of its class (hm_free_push_own), given
 * back to the class's countdown; s then holds `to` (0: none until its next
 * free arms it; HM_CREDIT_OFF: not current). */
static void credit_drop(heap_t *h, slab_t *s, uint16_t to) {
  if (s == &hm_empty_slab) return;
  if (s->credit <= HM_CREDIT_MAX) {
    int64_t *left = &h->sample_left[s->cls];
    if (*left <= INT64_MAX - s->credit) *left += s->credit;
  }
  s->credit = to;
}

/* The owner's frees of s's blocks go to s (slab_t.route). */
static void route_home(slab_t *s) {
#ifdef HAKMEM_SECURE
  (void)s;
#else
  s->route = s;
#endif
}

/* ss's owner, and the tag free compares with the thread pointer (types.h):
 * the calling thread's while h is its heap and it does not trade, else 0,
 * so that the owner's test in free is this thread's and nothing else's
 * (docs/DESIGN.md, "Threads"). */
static void ss_set_owner(superslab_t *ss, heap_t *h) {
  /* (routes name the old owner's caches: each slab its own until it is
   * current and then not) */
  for (unsigned i = 0; i < ss->nslabs; i++) route_home(&ss->slabs[i]);
  uintptr_t tag = h == hm_tls_heap && hm_tls_free_id == (uintptr_t)h ? hm_thread_tag() : 0; /* (hm_tls_heap: never NULL) */
  hm_unit_map_tag(ss, tag);
  atomic_store(&ss->owner, h);
}

/* h's SuperSlabs no longer match any thread's pointer: its thread trades
 * (hm_free_trading tells the owner's blocks from others' itself), or it is
 * gone (fork's child, where a new thread may get its thread pointer). */
static void heap_untag(heap_t *h) {
  for (superslab_t *ss = h->all; ss != NULL; ss = ss->all_next) hm_unit_map_tag(ss, 0);
}

/* Make s the current slab of class c, in cur[] and, for a class of direct sizes, in
 * every hm_tls_direct[] granule of that class. h: the calling thread's heap
 * (or the one it is giving up, hm_heap_thread_exit). */
HM_INLINE void heap_set_cur(heap_t *h, unsigned c, slab_t *s) {
  /* The credit (hm_free_push_own) goes with the class's current slab (the
   * foreign cache holds it too: no owner's free reaches it), given back
   * to the countdown only while the class has none. */
  slab_t *old = h->cur[c];
  slab_unbias(old); /* (first: the sparse test below counts its blocks) */
  if (s == &hm_empty_slab) {
    credit_drop(h, old, HM_CREDIT_OFF);
  } else {
    uint16_t credit = old != &hm_empty_slab && old->credit <= HM_CREDIT_MAX ? old->credit : 0;
    if (old != &hm_empty_slab) old->credit = HM_CREDIT_OFF;
    s->credit = credit; /* (0: its first free takes one; s may be old) */
  }
#ifndef HAKMEM_SECURE
  /* The owner's frees follow the class's current slab (slab_t.route): a
   * slab that stops serving sends them to the class's foreign cache, which
   * heap_alloc hands out before any other slab's blocks. Big classes hand
   * out their lowest block first (big.c): their frees stay. */
  if (old != &hm_empty_slab && old->in_use != SLAB_FOREIGN && hm_class_kind[c] != KIND_BIG &&
      hm_opt[HM_OPT_FOREIGN_CACHE_KB] != 0 && (old->in_use == SLAB_FULL || !slab_is_sparse(old)))
    old->route = &h->foreign[c];
  if (s != &hm_empty_slab && s->in_use != SLAB_FOREIGN) s->route = s;
#endif
  h->cur[c] = s;
  const uint8_t *g = direct_gran[c];
  slab_t **d = hm_tls_direct;
  d[g[0]] = s, d[g[1]] = s, d[g[2]] = s, d[g[3]] = s;
}

/* ---- lists ------------------------------------------------------------- */

/* The back links (list.h): a slab's lives out of its descriptor
 * (hm_slab_prev). */
#define SLAB_PREV(s) (*hm_slab_prev(s))
#define SS_ALL_PREV(ss) ((ss)->all_prev)

/* avail is FIFO: a slab goes to the back, so by the time it is taken again
 * it has gathered frees. (A slab put back at the front after its first
 * free would hand out one block and be switched away from at once.) */
static void avail_push(heap_t *h, slab_t *s) {
  s->in_use = SLAB_LISTED;
  HM_QUEUE_PUSH_TAIL(h->avail[s->cls], h->avail_tail[s->cls], s, next, SLAB_PREV);
}

static void avail_unlink(heap_t *h, slab_t *s) {
  HM_QUEUE_UNLINK(h->avail[s->cls], h->avail_tail[s->cls], s, next, SLAB_PREV);
  s->in_use = SLAB_ACTIVE;
}

/* The sparse list: listed slabs found mostly free when their turn came
 * (slab_is_sparse). They are taken only when no other listed slab of the
 * class has free blocks, the last one listed (the fullest, likely) first:
 * the rest get no new blocks, so their blocks drain with the program's
 * frees, and an emptied slab goes back to its SuperSlab (and later to the
 * OS). Without it every slab the class ever needed at once kept being
 * handed out from, and the frees stayed spread over all of them. */
static void sparse_push(heap_t *h, slab_t *s) {
  s->in_use = SLAB_SPARSE;
  HM_LIST_PUSH(h->sparse[s->cls], s, next, SLAB_PREV);
}

static void sparse_unlink(heap_t *h, slab_t *s) {
  HM_LIST_UNLINK(h->sparse[s->cls], s, next, SLAB_PREV);
  s->in_use = SLAB_ACTIVE;
}

static void partial_push(heap_t *h, superslab_t *ss) {
  ss->on_partial = 1;
  HM_LIST_PUSH(h->partial[ss->kind], ss, next, HM_PREV);
}

static void partial_unlink(heap_t *h, superslab_t *ss) {
  HM_LIST_UNLINK(h->partial[ss->kind], ss, next, HM_PREV);
  ss->on_partial = 0;
}

static void all_push(heap_t *h, superslab_t *ss) {
  HM_LIST_PUSH(h->all, ss, all_next, SS_ALL_PREV);
}

static void all_unlink(heap_t *h, superslab_t *ss) {
  HM_LIST_UNLINK(h->all, ss, all_next, SS_ALL_PREV);
}

static uint32_t ss_all_mask(const superslab_t *ss) {
  return ss->nslabs >= 32 ? 0xffffffffu : ((1u << ss->nslabs) - 1);
}

/* ---- invariant checks (make debug) ------------------------------------- */
#ifdef HAKMEM_DEBUG
void hm_check_block(const slab_t *s, const void *p) {
  if (s->in_use == SLAB_FOREIGN) s = hm_slab_of(hm_ss_of(p), p);
  uintptr_t a = (uintptr_t)p, st = (uintptr_t)hm_slab_start(s);
  HM_ASSERT(s->in_use != SLAB_UNUSED);
  HM_ASSERT(a >= st && a < st + (uintptr_t)s->carved * hm_slab_bs(s));
  HM_ASSERT((a - st) % hm_slab_bs(s) == 0);
}

static uint32_t check_list(const slab_t *s, const block_t *b) {
  uint32_t n = 0;
  for (; b != NULL; b = hm_next_get(s, b)) {
    hm_check_block(s, b);
    HM_ASSERT(++n <= s->carved);
  }
  return n;
}

void hm_check_slab(const slab_t *s) {
  if (s == &hm_empty_slab || s->in_use == SLAB_FOREIGN) return;
#ifdef HAKMEM_SECURE
  /* A damaged list head (a write after free, decoded by the fast path) is
   * the program's doing, which the pop's slow path reports: not for an
   * invariant check to trip over first. */
  if ((s->free != NULL && !hm_head_ok(s, s->free)) || (s->local_free != NULL && !hm_head_ok(s, s->local_free)))
    return;
#endif
  HM_ASSERT(s->in_use != SLAB_UNUSED);
  HM_ASSERT(hm_slab_bs(s) == hm_class_size[s->cls]);
  HM_ASSERT(s->carved <= s->capacity);
  /* blocks on the remote list still count as used */
  if (s->in_use == SLAB_FULL) {
    HM_ASSERT(s->used == 1 && s->carved == s->capacity && s->free == NULL && s->local_free == NULL);
    return;
  }
  HM_ASSERT(s->carved == hm_slab_used(s) + check_list(s, s->free) + check_list(s, s->local_free));
}
#endif

/* ---- slabs ------------------------------------------------------------- */

/* Class, block size and the constants of the division-free block check
 * (hm_slab_holds): block_size = m << k with m odd; m^-1 mod 2^64 by Newton's
 * iteration (m * m == 1 mod 8: 3 bits, doubling each step). */
static void slab_set_class(slab_t *s, unsigned cls) {
  uint32_t d = hm_class_size[cls];
  unsigned k = (unsigned)__builtin_ctz(d);
  uint64_t m = d >> k, inv = m;
  for (int i = 0; i < 5; i++) inv *= 2u - m * inv;
  HM_ASSERT(m * inv == 1u && k >= 4 && k < 32);
  s->cls = (uint8_t)cls;
#ifdef HAKMEM_SECURE
  s->block_size = d;
#endif
  slab_shape_t *sh = hm_shape_of(s);
  /* Clears SLAB_CLS_CACHED: an unused slab has no block in any foreign
   * cache. (A plain store: no block of the slab is out, so no other thread
   * reads or sets the byte before the program hands one over; an atomic
   * store here made gcc lay heap_alloc out worse, +0.2 Ir/op.) */
  sh->cls = (uint8_t)cls;
  sh->fc_off = FC_STAND_IN; /* (and so no foreign cache takes its blocks yet) */
  sh->block_size = d;
  s->div_mul = sh->div_mul = inv * (1u + ((uint64_t)1 << (64 - k)));
}

static slab_t *ss_take_slab(heap_t *h, superslab_t *ss, unsigned cls) {
  /* a slab still resident before one given back to the OS, and of those
   * one that last served class cls */
  uint32_t resident = ss->free_mask & atomic_load_explicit(&ss->dirty, memory_order_relaxed);
  uint32_t pick = resident != 0 ? resident : ss->free_mask;
  for (uint32_t m = resident; m != 0; m &= m - 1)
    if (ss->slabs[__builtin_ctz(m)].cls == cls) {
      pick = m;
      break;
    }
  unsigned i = (unsigned)__builtin_ctz(pick);
  ss->free_mask &= ~(1u << i);
  if (ss->free_mask == 0) partial_unlink(h, ss);
  bool intact = hm_purge_slab_take(ss, i); /* waits if a purger is giving it back right now */
  slab_t *s = &ss->slabs[i];
  if (intact && ss->shape[i].carved_kept != 0 && s->cls == cls) {
    /* Released by this heap with every block it had carved on its lists,
     * and not given back since: take it as it is, without carving again.
     * (The list encoding key stays: the lists are not empty.) */
    HM_ASSERT(s->used == 0);
    ss->shape[i].cls = (uint8_t)cls; /* clears SLAB_CLS_CACHED (all its blocks came back) */
    ss->shape[i].fc_off = FC_STAND_IN;
    s->in_use = SLAB_ACTIVE;
    s->next = SLAB_PREV(s) = NULL;
    route_home(s);
    hm_slab_set_carved(s, ss->shape[i].carved_kept); /* frees into it are valid again */
    ss->shape[i].carved_kept = 0;
    hm_stats_carved(cls, s->carved);
    return s;
  }
  size_t bytes = (size_t)1 << ss->slab_shift;
  char *start = (char *)ss + ((size_t)i << ss->slab_shift);
  if (i == 0) {
    start += SS_HEADER_SIZE;
    bytes -= SS_HEADER_SIZE;
  }
  if (i == ss->nslabs - 1u) bytes -= HM_GUARD_SIZE; /* secure: the SuperSlab's guard page */
  s->free = s->local_free = NULL;
  /* (its remote list is empty, as slab_release left it, or zero from the OS) */
  HM_ASSERT(atomic_load_explicit(hm_slab_remote(s), memory_order_relaxed) == 0);
  s->used = 0;
  ss->shape[i].carved_kept = 0;
  slab_set_class(s, cls);
  s->capacity = (uint16_t)(bytes / hm_slab_bs(s));
  hm_slab_set_carved(s, 0);
  s->in_use = SLAB_ACTIVE;
  s->start_lo = ss->shape[i].start_lo = (uint32_t)(uintptr_t)start;
  s->next = SLAB_PREV(s) = NULL;
  route_home(s);
#ifdef HAKMEM_SECURE
  s->key = (uintptr_t)hm_random_fast(); /* the slab's lists are empty: a new key is safe */
#endif
  return s;
}

/* An empty slab leaves the avail or sparse list it is on (ACTIVE). (A
 * sparse slab keeps its notify bit: slab_release clears it.) */
static void slab_unlist(heap_t *h, slab_t *s) {
  if (s->in_use == SLAB_LISTED)
    avail_unlink(h, s);
  else if (s->in_use == SLAB_SPARSE)
    sparse_unlink(h, s);
}

/* Give an empty slab back to its SuperSlab, and an empty SuperSlab back to
 * the backend. Returns true when the SuperSlab itself went. */
static bool slab_release(heap_t *h, slab_t *s) {
  superslab_t *ss = hm_ss_of(s);
  HM_ASSERT(s->used == 0 && s->bias == 0 && h->cur[s->cls] != s);
  hm_check_slab(s);
  hm_stats_released(s->cls, s->carved);
  HM_ASSERT(s->in_use != SLAB_FULL);
  slab_unlist(h, s);
  s->in_use = SLAB_UNUSED;
  /* A free into an unused slab is invalid (by the owner too): carved is 0
   * for the block check. The shape keeps the count aside, and the
   * descriptor its lists (all carved blocks, every one free), so that
   * taking the slab again for the class needs no carving (ss_take_slab). */
  hm_shape_of(s)->carved_kept = s->carved;
  hm_slab_set_carved(s, 0);
  /* Its remote list is empty (used counts the blocks on it), but the
   * notify bit may have stayed since the slab was last FULL: cleared, as
   * the next owner of the slab expects. (No block is out: no push races.) */
  uintptr_t r = atomic_load_explicit(hm_slab_remote(s), memory_order_relaxed);
  HM_ASSERT(r <= REMOTE_NOTIFY);
  if (r != 0) atomic_store_explicit(hm_slab_remote(s), 0, memory_order_relaxed);
  bool had_none = ss->free_mask == 0;
  ss->free_mask |= 1u << hm_slab_idx(s);
  if (ss->free_mask == ss_all_mask(ss)) {
    if (ss->on_partial) partial_unlink(h, ss);
    all_unlink(h, ss);
    ss_set_owner(ss, NULL);
    hm_backend_ss_free(ss);
    return true;
  }
  hm_purge_slab_unused(ss, hm_slab_idx(s));
  if (had_none) partial_push(h, ss);
  return false;
}

/* Take every block other threads freed into s; prepend them to s->free. */
static void slab_collect_remote(slab_t *s) {
  uintptr_t r = atomic_exchange_explicit(hm_slab_remote(s), 0, memory_order_acquire);
  block_t *list = (block_t *)(r & ~REMOTE_NOTIFY);
  if (list == NULL) return;
  uint32_t n = 1;
  block_t *tail = list, *next;
  while ((next = hm_next_get(s, tail)) != NULL) {
    tail = next;
    if (unlikely(++n > s->capacity)) hm_fatal("heap corruption", s, "a cycle in a slab's remote free list");
  }
  HM_ASSERT(n <= s->used);
  hm_next_set(s, tail, s->free);
  s->free = list;
  s->used -= n;
}

/* Carve HAKMEM_CARVE_BYTES' worth (at least 4 blocks; of blocks above 16
 * KiB, 64 KiB's worth, and at least one) of fresh blocks: memory is
 * touched only as it is needed. Each gets the free tag (and in secure mode
 * the fill pattern), and secure mode links them in random order (at most a
 * page's worth at a time). (A fixed number of blocks at a time carves too
 * much of the big slabs: docs/DESIGN.md, "Slabs".) */
#define CARVE_LEAST_BYTES ((uint32_t)64 << 10)
static void slab_carve(slab_t *s) {
  uint32_t bs = hm_slab_bs(s);
  uint32_t n = s->capacity - s->carved;
  uint32_t bytes = (uint32_t)hm_opt[HM_OPT_CARVE_BYTES];
  uint32_t least = bs <= CARVE_LEAST_BYTES / 4 ? 4 : bs < CARVE_LEAST_BYTES ? CARVE_LEAST_BYTES / bs : 1;
  uint32_t want = bytes / bs < least ? least : bytes / bs;
  if (n > want) n = want;
  char *p = hm_slab_start(s) + (size_t)s->carved * bs;
  block_t *list = s->free;
#ifdef HAKMEM_SECURE
  if (n > HM_PAGE_SIZE / 16) n = HM_PAGE_SIZE / 16;
  uint32_t order[HM_PAGE_SIZE / 16];
  for (uint32_t i = 0; i < n; i++) order[i] = i;
  hm_secure_shuffle(order, n);
#define CARVE_AT(i) order[i]
#else
#define CARVE_AT(i) (i)
#endif
  for (uint32_t i = n; i-- > 0;) {
    block_t *b = (block_t *)(p + (size_t)CARVE_AT(i) * bs);
    hm_block_tag_free(bs, hm_free_tag_of(s), b);
    hm_next_set(s, b, list);
    list = b;
  }
#undef CARVE_AT
  s->free = list;
  hm_slab_set_carved(s, s->carved + n);
  hm_stats_carved(s->cls, n);
}

/* Has s blocks freed into it (not only an uncarved part)? */
static bool slab_has_freed(const slab_t *s) {
  return s->free != NULL || s->local_free != NULL ||
         atomic_load_explicit(hm_slab_remote(s), memory_order_relaxed) > REMOTE_NOTIFY;
}

/* Make s->free non-empty from blocks freed into s, if there are any. */
/* s->local_free appended to s->free. */
static HM_NOINLINE void lists_join(slab_t *s) {
  block_t *t = s->free;
  for (block_t *n; (n = hm_next_get(s, t)) != NULL;) t = n;
  hm_next_set(s, t, s->local_free);
  s->local_free = NULL;
}

static bool slab_refill(slab_t *s) {
  if (s->free != NULL) {
    /* (and local_free too: appended, so that the list heap_alloc takes,
     * and charges for sampling, is every free block: carved - used) */
    if (unlikely(s->local_free != NULL)) lists_join(s);
    return true;
  }
  if (s->local_free != NULL) {
    HM_STAT_REFILL(hm_tls_heap, HM_REFILL_LOCAL, hm_slab_free_blocks(s)); /* free is empty */
    s->free = s->local_free;
    s->local_free = NULL;
    return true;
  }
  if (atomic_load_explicit(hm_slab_remote(s), memory_order_relaxed) > REMOTE_NOTIFY) {
#if HM_FAST_COUNTERS
    uint32_t used = s->used;
#endif
    slab_collect_remote(s);
    HM_STAT_REFILL(hm_tls_heap, HM_REFILL_REMOTE, used - s->used);
    if (s->free != NULL) return true;
  }
  return false;
}

/* Make s->free non-empty from s's uncarved part, if it has one. */
static bool slab_refill_carve(slab_t *s) {
  if (s->carved < s->capacity) {
#if HM_FAST_COUNTERS
    uint32_t carved = s->carved;
#endif
    slab_carve(s);
    HM_STAT_REFILL(hm_tls_heap, HM_REFILL_CARVE, s->carved - carved);
    return true;
  }
  return false;
}

/* The slab has no free block: ask remote frees to notify us. Fails when a
 * remote free slipped in, so the caller can use that block instead. The
 * notify bit stays set when the slab leaves the FULL state by its owner's
 * free (free_local_slow), until a remote free takes it: so a slab that
 * cycles through FULL by its owner's frees alone sets it once, and each
 * later time finds it set, with no atomic operation (random_mixed at ws
 * 40,000 takes another slab every 11 mallocs, most often after marking
 * the dry one FULL). A remote free on a listed slab that still has the
 * bit notifies the owner needlessly: heap_process_pending skips a slab
 * that is not FULL. */
static bool slab_try_mark_full(slab_t *s) {
  _Atomic uintptr_t *r = hm_slab_remote(s);
  uintptr_t expected = atomic_load_explicit(r, memory_order_relaxed);
  /* (the bit set and no block: any push from now on notifies) */
  if (expected != REMOTE_NOTIFY &&
      (expected != 0 || !atomic_compare_exchange_strong(r, &expected, REMOTE_NOTIFY)))
    return false;
  HM_ASSERT(s->used == s->capacity);
  s->in_use = SLAB_FULL;
  s->used = 1;
  return true;
}

/* Leave the FULL state; local_frees: blocks the owner freed since (whose
 * decrements of used FULL's count of 1 absorbed). */
static void slab_unfull(slab_t *s, uint32_t local_frees) {
  if (s->in_use != SLAB_FULL) return;
  s->in_use = SLAB_ACTIVE;
  s->used = s->capacity - local_frees;
}

/* Sparse slab s: collect what other threads freed into it, release it if
 * that emptied it, else have the next remote free notify the owner (the
 * FULL slabs' bit; heap_process_pending comes back here): nothing takes a
 * sparse slab's remote list otherwise, and the blocks other threads free
 * are what empties it. Returns true when its SuperSlab went too. */
static bool sparse_watch(heap_t *h, slab_t *s) {
  for (;;) {
    slab_collect_remote(s);
    if (s->used == 0) return slab_release(h, s);
    uintptr_t expected = 0;
    if (atomic_compare_exchange_strong(hm_slab_remote(s), &expected, REMOTE_NOTIFY)) return false;
  }
}

/* ---- SuperSlabs --------------------------------------------------------- */

static void ss_setup(heap_t *h, superslab_t *ss, unsigned kind) {
  ss->kind = (uint8_t)kind;
  ss->slab_shift = kind_shift[kind];
  ss->nslabs = (uint8_t)(SS_SIZE >> kind_shift[kind]);
  hm_unit_map_set(ss);
  ss->free_mask = ss_all_mask(ss);
  atomic_store_explicit(&ss->pending, 0, memory_order_relaxed);
  for (unsigned i = 0; i < ss->nslabs; i++) {
    ss->slabs[i].in_use = SLAB_UNUSED;
    ss->shape[i].carved_kept = 0;
    hm_slab_set_carved(&ss->slabs[i], 0);
  }
#ifdef HAKMEM_SECURE
  if (!ss->guarded) { /* kept while the SuperSlab stays mapped */
    hm_secure_guard((char *)ss + SS_SIZE - HM_GUARD_SIZE);
    ss->guarded = 1;
  }
#endif
  ss_set_owner(ss, h);
  all_push(h, ss);
  partial_push(h, ss);
}

/* Bring slab s of a newly adopted (or exiting) SuperSlab to a clean state
 * for heap h: collect remote frees, then release it, list it or mark it
 * full. Returns true when the SuperSlab went back to the backend. */
static bool adopt_slab(heap_t *h, slab_t *s) {
  slab_unfull(s, 0);
  s->in_use = SLAB_ACTIVE;
  s->next = SLAB_PREV(s) = NULL;
  for (;;) {
    slab_collect_remote(s);
    hm_check_slab(s);
    if (s->used == 0) return slab_release(h, s);
    if (s->free != NULL || s->local_free != NULL || s->carved < s->capacity) {
      avail_push(h, s);
      return false;
    }
    if (slab_try_mark_full(s)) return false;
  }
}

/* Could an abandoned SuperSlab give heap a slab for class c? Yes if it has
 * an unused slab, a class-c slab with free blocks, or blocks freed by other
 * threads to collect (which may empty slabs). Only remote lists change
 * while a SuperSlab is abandoned; the caller holds heap_lock. */
static bool ss_can_serve(superslab_t *ss, unsigned c) {
  if (ss->free_mask != 0) return true;
  for (unsigned i = 0; i < ss->nslabs; i++) {
    const slab_t *s = &ss->slabs[i];
    if (atomic_load_explicit(hm_slab_remote(s), memory_order_relaxed) > REMOTE_NOTIFY) return true;
    if (s->cls == c && (s->free != NULL || s->local_free != NULL || s->carved < s->capacity)) return true;
  }
  return false;
}

/* Abandoned SuperSlabs looked at per adoption: bounds the time a slab
 * request can take when many are abandoned and few can serve. */
#define ADOPT_SCAN 16

/* Take over a SuperSlab left by an exited thread, one that can serve c. */
static bool heap_adopt(heap_t *h, unsigned kind, unsigned c) {
  hm_mutex_lock(&heap_lock);
  superslab_t **link = &abandoned[kind], *ss;
  unsigned seen = 0;
  while ((ss = *link) != NULL && !ss_can_serve(ss, c)) {
    if (++seen == ADOPT_SCAN) {
      ss = NULL;
      break;
    }
    link = &ss->next;
  }
  if (ss != NULL) *link = ss->next;
  hm_mutex_unlock(&heap_lock);
  if (ss == NULL) return false;
  HM_ASSERT(atomic_load(&ss->owner) == NULL);
  HM_STAT_REFILL(h, HM_REFILL_ADOPT, 0);
  /* The owner store comes before reading the slabs' remote lists, so a
   * remote free either is collected below or sees this owner (seq_cst). */
  ss_set_owner(ss, h);
  atomic_store(&ss->pending, 0);
  ss->on_partial = 0;
  all_push(h, ss);
  if (ss->free_mask != 0) partial_push(h, ss);
  for (unsigned i = 0; i < ss->nslabs; i++) {
    if (ss->free_mask & (1u << i)) continue;
    if (adopt_slab(h, &ss->slabs[i])) break;
  }
  return true;
}

/* A remote free hit a FULL slab: collect and list those slabs again. */
static void heap_process_pending(heap_t *h) {
  atomic_store(&h->pending_hint, 0);
  superslab_t *next;
  for (superslab_t *ss = h->all; ss != NULL; ss = next) {
    next = ss->all_next;
    if (atomic_load_explicit(&ss->pending, memory_order_relaxed) == 0) continue;
    uint64_t bits = atomic_exchange(&ss->pending, 0);
    while (bits != 0) {
      unsigned i = (unsigned)__builtin_ctzll(bits);
      bits &= bits - 1;
      slab_t *s = &ss->slabs[i];
      if (s->in_use == SLAB_SPARSE) {
        if (sparse_watch(h, s)) break;
        continue;
      }
      if (s->in_use != SLAB_FULL) continue;
      slab_unfull(s, 0);
      slab_collect_remote(s);
      if (s->used == 0) {
        if (slab_release(h, s)) break;
      } else {
        avail_push(h, s);
      }
    }
  }
}

static bool release_if_idle(heap_t *h, unsigned c, bool all);

/* The look at the current slabs of SuperSlab kind `kind` that emptied
 * (emptied_cur): each released once it stayed empty and untouched since
 * the previous look. */
static void heap_release_emptied_cur(heap_t *h, unsigned kind) {
  for (unsigned w = 0; w < sizeof h->emptied_cur / sizeof h->emptied_cur[0]; w++)
    for (uint64_t bits = h->emptied_cur[w] & ~h->recurring[w]; bits != 0; bits &= bits - 1) {
      unsigned c = w * 64 + (unsigned)__builtin_ctzll(bits);
      if (hm_class_kind[c] != kind) continue;
      bool had = h->cur[c] != &hm_empty_slab;
      /* (a biased current slab may empty again unseen: its bit stays) */
      if (!release_if_idle(h, c, false) && h->cur[c]->bias == 0) h->emptied_cur[w] &= ~((uint64_t)1 << (c % 64));
      if (had && h->cur[c] == &hm_empty_slab) h->looked_out[w] |= (uint64_t)1 << (c % 64);
    }
}

/* A slab for class c that is not the current one: from the owned
 * SuperSlabs, then adopted ones, then the backend. When no unused slab of
 * the kind is resident, other classes' spares, and their current slabs
 * left empty and untouched since the last look, go back first: a program
 * moving on from one size to the next reuses their memory, already
 * resident, instead of touching more, without waiting for a
 * purge step. (Only then: released slabs left unused are given back by
 * purge steps, and a steady workload must make no system call.) */
static slab_t *heap_new_slab(heap_t *h, unsigned c) {
  unsigned kind = hm_class_kind[c];
  /* Recurring: a class whose current slab a look released comes back for
   * a slab before the next purge step (a block moved up through the sizes
   * by realloc, one class after another: redis's lists): releasing and
   * taking its slab again on every round cost more than the rest of its
   * mallocs. Looks leave it alone; purge steps still release it. */
  uint64_t bit = (uint64_t)1 << (c % 64);
  if (h->looked_out[c / 64] & bit) {
    h->looked_out[c / 64] &= ~bit;
    h->recurring[c / 64] |= bit;
  }
  superslab_t *p = h->partial[kind];
  if (p == NULL || (p->free_mask & atomic_load_explicit(&p->dirty, memory_order_relaxed)) == 0)
    heap_release_emptied_cur(h, kind);
  for (;;) {
    superslab_t *ss = h->partial[kind];
    if (ss != NULL) {
      HM_STAT_REFILL(h, HM_REFILL_SLAB, 0);
      return ss_take_slab(h, ss, c);
    }
    if (heap_adopt(h, kind, c)) {
      slab_t *s = h->avail[c];
      if (s != NULL) {
        avail_unlink(h, s);
        return s;
      }
      continue;
    }
    ss = hm_backend_ss_alloc();
    if (ss == NULL) return NULL;
    HM_STAT_REFILL(h, HM_REFILL_NEW_SS, 0);
    ss_setup(h, ss, kind);
  }
}

/* Sampling (sample.h; docs/DESIGN.md, "Sampling"): class c's countdown
 * ran out on this malloc: its consumers serve it; a new countdown. (n: 0
 * from heap_alloc, which knows the request only while sampling is exact.) */
static HM_NOINLINE void *heap_sample_serve(heap_t *h, unsigned c, size_t n) {
  uint32_t bs = hm_class_size[c];
  if (n == 0) n = hm_sample_tls.req != 0 ? hm_sample_tls.req : bs;
  credit_drop(h, h->cur[c], 0); /* (a credit was charged to the old countdown) */
  h->sample_left[c] = hm_sample_class_draw(c);
  return hm_sample_serve(hm_sample_class_fire(c), n, 0, bs);
}

/* The first block of s's free list (not empty), handed out. */
HM_INLINE void *slab_take(heap_t *h, slab_t *s, unsigned c) {
  (void)h, (void)c; /* (the statistics build counts) */
  block_t *b = s->free;
#ifdef HAKMEM_SECURE
  if (unlikely(!hm_head_ok(s, b))) hm_corrupt_list(s, b);
#endif
  s->free = hm_next_decode(s, b);
  s->used++;
  HM_STAT_ADD(h, alloc[c], 1);
  return hm_block_handout(s, b, NULL);
}

/* Cut list b of s after its first `keep` blocks (keep >= 1); the rest. */
static block_t *list_cut(slab_t *s, block_t *b, uint32_t keep) {
  for (uint32_t i = 1; i < keep; i++) b = hm_next_get(s, b);
  block_t *rest = hm_next_get(s, b);
  hm_next_set(s, b, NULL);
  return rest;
}

/* heap_alloc's list of s (on free; local_free empty) charged, and the
 * countdown spent within it: as hm_sample_swap, the malloc served. Out of
 * line: it would cost heap_alloc registers. */
static HM_NOINLINE void *heap_sample_install(heap_t *h, slab_t *s) {
  unsigned c = s->cls;
  credit_drop(h, s, 0); /* (its frees' mallocs to come: the countdown's again) */
  if (hm_slab_bs(s) > MEDIUM_MAX) { /* (big classes: charged per call) */
    h->sample_left[c] = INT64_MAX;
  } else {
    int64_t free_blocks = hm_slab_free_blocks(s);
    int64_t k = h->sample_left[c] + free_blocks;
    if (k > free_blocks) return slab_take(h, s, c); /* (the credit given back) */
    if (k <= 1) {
      h->sample_left[c] = k;
      s->local_free = s->free; /* (charged at its swap) */
      s->free = NULL;
      return heap_sample_serve(h, c, 0);
    }
    s->local_free = list_cut(s, s->free, (uint32_t)k - 1);
    h->sample_left[c] = 1;
  }
  return slab_take(h, s, c);
}

/* While the profiler is on (docs/DESIGN.md, "Sampling"): the foreign
 * cache of class c serves from fc_serve[c], its list moved there and
 * charged at once; spent within it at the k-th block, the first k - 1 move
 * and the rest stay, so that the k-th malloc comes back here. */
static void *foreign_serve(heap_t *h, unsigned c) {
  slab_t *f = &h->foreign[c], *g = &h->fc_serve[c];
  if (g->free == NULL) { /* (else a slow call while it still serves) */
    int64_t cached = (int64_t)f->capacity + 1 - f->used;
    if (unlikely(hm_sample_charge(&h->sample_left[c], cached))) {
      int64_t k = h->sample_left[c] + cached;
      if (k <= 1) {
        h->sample_left[c] = k;
        heap_set_cur(h, c, &hm_empty_slab);
        return heap_sample_serve(h, c, 0);
      }
      h->sample_left[c] = 1;
      cached = k - 1;
    }
    block_t *head = f->free, *tail = head;
    if (cached == (int64_t)f->capacity + 1 - f->used) {
      f->free = NULL;
    } else {
      for (int64_t i = 1; i < cached; i++) tail = tail->next;
      f->free = tail->next;
      tail->next = NULL;
    }
    f->used = (uint16_t)(f->used + cached);
    g->free = head;
    g->used = (uint16_t)(g->capacity + 1 - cached);
  }
  if (h->cur[c] != g) heap_set_cur(h, c, g);
  block_t *b = g->free;
  g->free = b->next;
  g->used++;
  return hm_block_handout(g, b, g->free);
}

/* While the profiler is on: the fast path found the serving list g
 * (fc_serve, the current slab) empty, its commonest miss: the cache's list
 * moved there and charged at once, as the fast path's local_free swap
 * does, without heap_alloc (nor the class from the size: g is known). NULL:
 * the cache is empty too, or the countdown runs out within its list
 * (foreign_serve cuts it). */
HM_INLINE void *foreign_refill(heap_t *h, slab_t *g) {
  slab_t *f = (slab_t *)((char *)g - (offsetof(heap_t, fc_serve) - offsetof(heap_t, foreign)));
  block_t *b = f->free;
  if (b == NULL || g->free != NULL) return NULL;
  uint16_t room = f->used, empty = (uint16_t)(f->capacity + 1);
  int64_t cached = (int64_t)empty - room;
  if (unlikely(hm_sample_charge(&h->sample_left[g->cls], cached))) {
    h->sample_left[g->cls] += cached;
    return NULL;
  }
  block_t *next = b->next;
  f->free = NULL;
  f->used = empty;
  g->free = next;
  g->used = (uint16_t)(room + 1); /* (room left + 1, as the cache counts: the same capacity) */
  HM_STAT_ADD(h, alloc[g->cls], 1);
  return hm_block_handout(g, b, next);
}

/* Pop from the foreign cache of class c, making it the current slab. */
static void *foreign_pop(heap_t *h, unsigned c) {
  if (hm_sample_active) return foreign_serve(h, c);
  slab_t *f = &h->foreign[c];
  /* (sampling: its list charged; spent within it, the cache does not
   * serve, each malloc comes here until the sampled one: its blocks must
   * stay on its list, which flushes send back) */
  int64_t cached = (int64_t)f->capacity + 1 - f->used;
  bool serve = true;
  if (unlikely(hm_sample_charge(&h->sample_left[c], cached))) {
    int64_t k = h->sample_left[c] + cached;
    heap_set_cur(h, c, &hm_empty_slab);
    if (k <= 1) {
      h->sample_left[c] = k;
      return heap_sample_serve(h, c, 0);
    }
    h->sample_left[c] = k - 1;
    serve = false;
  }
  block_t *b = f->free;
  f->free = b->next;
  f->used++;
  if (serve) heap_set_cur(h, c, f); /* (until heap_alloc finds it dry, or a flush) */
  return hm_block_handout(f, b, f->free);
}

/* Has class c free blocks outside its current slab: a listed slab's freed
 * ones, a sparse slab, the spare, the foreign cache? (Called only when the
 * current slab's lists are empty: computed before, it cost every call.) */
static bool freed_elsewhere(const heap_t *h, unsigned c) {
  const slab_t *next = h->avail[c];
  return (next != NULL && slab_has_freed(next)) || h->sparse[c] != NULL || h->spare[c] != NULL ||
         h->foreign[c].free != NULL;
}

static void *heap_alloc(heap_t *h, unsigned c) {
  slab_t *s = h->cur[c];
  /* cur[c] still names s, which has nothing left (listed, FULL or the dry
   * foreign cache): set to the empty slab only where something between may
   * look (and not at all when the next slab follows at once: for a direct
   * class that is up to four stores) */
  bool stale = false;
  for (;;) {
    if (s->in_use == SLAB_FOREIGN) {
      /* the cache ran dry (the fast path saw both lists empty; while the
       * profiler is on, s serves and the cache's frees may refill it) */
      if (s->free != NULL || h->foreign[c].free != NULL) return foreign_pop(h, c);
      stale = true; /* the next slab follows */
    } else if (s != &hm_empty_slab) {
      hm_check_slab(s);
      /* Freed blocks first, then the class's other slabs' (sparse ones
       * included), the foreign cache's, and only then fresh memory:
       * touched pages are reused before new ones are touched (test
       * purge_sparse_first). */
      if (slab_refill(s) || (!freed_elsewhere(h, c) && slab_refill_carve(s))) {
        /* (sampling: the list charged, as the fast path's swap does) */
        if (unlikely(hm_sample_charge(&h->sample_left[s->cls], hm_slab_free_blocks(s))))
          return heap_sample_install(h, s);
        return slab_take(h, s, c);
      }
      slab_unbias(s); /* (listed or FULL: no longer serving) */
      if (s->carved < s->capacity) {
        avail_push(h, s); /* it has blocks left to carve */
      } else if (!slab_try_mark_full(s)) {
        continue;
      }
      stale = true;
    }
    if (atomic_load_explicit(&h->pending_hint, memory_order_relaxed)) {
      if (stale) heap_set_cur(h, c, &hm_empty_slab); /* (it may release or list slabs) */
      stale = false;
      heap_process_pending(h);
    }
    /* Cached blocks of other threads first: they are memory in use already. */
    if (h->foreign[c].free != NULL) return foreign_pop(h, c);
    while ((s = h->avail[c]) != NULL && slab_is_sparse(s)) {
      if (stale) heap_set_cur(h, c, &hm_empty_slab); /* (releasing may free SuperSlabs) */
      stale = false;
      avail_unlink(h, s);
      sparse_push(h, s);
      sparse_watch(h, s);
    }
    /* A listed slab with freed blocks, else a sparse one (its free blocks
     * before anyone's uncarved room: a sparse slab always has some, as
     * used < carved), else the spare (every block it carved is free), else
     * a listed slab with room to carve. */
    if (s != NULL && (slab_has_freed(s) || (h->sparse[c] == NULL && h->spare[c] == NULL))) {
      HM_STAT_REFILL(h, HM_REFILL_LISTED, 0);
      avail_unlink(h, s);
    } else if (h->sparse[c] != NULL) {
      s = h->sparse[c];
      HM_STAT_REFILL(h, HM_REFILL_LISTED, 0);
      sparse_unlink(h, s);
      slab_collect_remote(s); /* (clears the notify bit) */
    } else if (h->spare[c] != NULL) {
      s = h->spare[c];
      h->spare[c] = NULL;
      HM_STAT_REFILL(h, HM_REFILL_LISTED, 0);
    } else {
      if (stale) heap_set_cur(h, c, &hm_empty_slab); /* (adopting may release slabs) */
      stale = false;
      s = heap_new_slab(h, c);
      if (s == NULL) {
        errno = ENOMEM;
        return NULL;
      }
    }
    heap_set_cur(h, c, s);
    stale = false;
  }
}

/* ---- thread heaps ------------------------------------------------------- */

static void heap_key_destructor(void *v) {
  heap_t *h = v;
  if (h != NULL && h == hm_tls_heap) hm_heap_thread_exit(h);
}

void hm_heap_process_init(void) {
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    unsigned k = 0;
    for (unsigned g = 0; g <= DIRECT_MAX / 16; g++)
      if (hm_direct_class[g] == c) {
        if (k == HM_DIRECT_SPAN) hm_fatal("internal check failed", NULL, "a direct class of more than 4 granules");
        direct_gran[c][k++] = (uint8_t)g;
      }
    for (unsigned i = k; i < HM_DIRECT_SPAN; i++) direct_gran[c][i] = k ? direct_gran[c][k - 1] : HM_DIRECT_SINK;
  }
}

/* Made with the first heap, not at start-up (which may come at load time):
 * after the keys a program makes before its first allocation, so that in
 * each round of thread-exit destructors those, if they allocate, run
 * before this one (ThreadSanitizer ends its own thread state in the last
 * round: test tsan_threads_tsd; docs/DESIGN.md, "Threads"). */
static void heap_key_create(void) { pthread_key_create(&heap_key, heap_key_destructor); }

/* Blocks a heap caches per class from other threads' slabs: a byte budget
 * (HAKMEM_FOREIGN_CACHE_KB), but at least FC_MIN_BLOCKS where that takes
 * at most FC_MIN_BYTES (a batch of blocks handed between threads fits:
 * docs/PERFORMANCE.md), and at least one block unless the cache is off. */
#define FC_MIN_BLOCKS 128
#define FC_MIN_BYTES ((uint64_t)128 << 10)
static uint32_t foreign_cap(unsigned c) {
  if (hm_opt[HM_OPT_FOREIGN_CACHE_KB] == 0) return 0;
  uint64_t n = ((uint64_t)hm_opt[HM_OPT_FOREIGN_CACHE_KB] << 10) / hm_class_size[c];
  uint64_t least = FC_MIN_BYTES / hm_class_size[c];
  if (least > FC_MIN_BLOCKS) least = FC_MIN_BLOCKS;
  if (n < least) n = least;
  return n < 1 ? 1 : n > 32767 ? 32767 : (uint32_t)n; /* (counts are mod 2^16) */
}

static void heap_reset(heap_t *h) {
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    slab_t *f = &h->foreign[c];
    memset(f, 0, sizeof *f);
    f->in_use = SLAB_FOREIGN;
    f->cls = (uint8_t)c;
#ifdef HAKMEM_SECURE
    f->block_size = hm_class_size[c];
#endif
    f->capacity = (uint16_t)foreign_cap(c);
    f->used = (uint16_t)(f->capacity + 1);
    /* (so that carved - used counts its blocks, as a slab's free ones: the
     * fast path's swap of local_free charges that, hm_slab_pop) */
    f->carved = f->used;
    if (hm_sample_active) h->fc_serve[c] = *f; /* (nothing cached) */
  }
  memset(&h->fc_stand_in, 0, sizeof h->fc_stand_in);
  h->fc_stand_in.in_use = SLAB_FOREIGN;
  h->fc_stand_in.used = 1;
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    h->cur[c] = &hm_empty_slab; /* (a reused heap's: another thread's old slabs, no credit given back) */
    heap_set_cur(h, c, &hm_empty_slab);
    h->avail[c] = h->avail_tail[c] = h->sparse[c] = NULL;
  }
  for (unsigned k = 0; k < NUM_KINDS; k++) h->partial[k] = NULL;
  h->all = NULL;
  memset(h->idle_seen, 0, sizeof h->idle_seen);
  memset(h->fc_seen, 0, sizeof h->fc_seen);
  hm_big_reset(h);
  memset(h->emptied_cur, 0, sizeof h->emptied_cur);
  memset(h->looked_out, 0, sizeof h->looked_out);
  memset(h->recurring, 0, sizeof h->recurring);
  memset(h->spare, 0, sizeof h->spare);
  atomic_store(&h->pending_hint, 0);
  h->next_free = NULL;
}

/* The calling thread's heap, created on its first allocation. NULL when
 * hakmem forwards to libc, or when no memory is left for the heap. */
static heap_t *heap_for_thread(void) {
  hm_ensure_init();
  if (hm_force_libc) return NULL;
  hm_mutex_lock(&heap_lock);
  heap_t *h = heap_pool;
  if (h != NULL) heap_pool = h->next_free;
  hm_mutex_unlock(&heap_lock);
  if (h == NULL) {
    if ((h = hm_meta_alloc(sizeof(heap_t))) == NULL) return NULL;
    hm_mutex_lock(&heap_lock);
    h->all_next = all_heaps;
    all_heaps = h;
    hm_mutex_unlock(&heap_lock);
#if HM_FAST_COUNTERS
    hm_stats_heap_new(h);
#endif
  }
  heap_reset(h);
  for (unsigned c = 0; c < NUM_CLASSES; c++)
    h->sample_left[c] = hm_class_size[c] <= MEDIUM_MAX ? hm_sample_class_draw(c) : INT64_MAX;
  /* Installed before pthread_setspecific, which may itself allocate. */
  hm_tls_heap = h;
  hm_tls_free_id = (uintptr_t)h | tls_exited; /* (after its exit: trading, so untagged) */
  pthread_once(&heap_key_once, heap_key_create);
  pthread_setspecific(heap_key, h);
  return h;
}

/* The fast path's local_free swap (free is empty) found the class's
 * countdown spent within the list (its k-th malloc is the sampled one):
 * k = 1, this malloc, the list left on local_free for the next; else the
 * list cut, its first k - 1 blocks on free, the rest on local_free, so
 * that malloc comes back here (docs/DESIGN.md, "Sampling"). */
void *hm_sample_swap(heap_t *h, slab_t *s, size_t n) {
  unsigned c = s->cls;
  credit_drop(h, s, 0); /* (its frees' mallocs to come: the countdown's again) */
  int64_t free_blocks = hm_slab_free_blocks(s);
  int64_t k = h->sample_left[c] + free_blocks;
  if (k <= 1) {
    h->sample_left[c] = k;
    /* (malloc jumps here: the return address is the program's) */
    hm_sample_tls.caller_ra = (uintptr_t)__builtin_return_address(0);
    hm_sample_tls.caller_cfa = (uintptr_t)__builtin_dwarf_cfa();
    void *p = heap_sample_serve(h, c, n);
    hm_sample_tls.caller_ra = 0;
    return p;
  }
  block_t *b = s->local_free;
  if (k > free_blocks) { /* (the credit given back: the whole list) */
    k = free_blocks;
    s->local_free = NULL;
  } else {
    s->local_free = list_cut(s, b, (uint32_t)k - 1);
    h->sample_left[c] = 1;
  }
  HM_STAT_REFILL(h, HM_REFILL_LOCAL, (uint32_t)k - 1);
  block_t *next = hm_next_get(s, b);
  s->free = next;
  s->used++;
  HM_STAT_ADD(h, alloc[c], 1);
  return hm_block_handout(s, b, next);
}

/* No heap for this thread: libc's malloc while hakmem forwards to it,
 * else ENOMEM. */
static HM_NOINLINE void *alloc_failed(size_t n) {
  if (hm_force_libc) return __libc_malloc(n);
  errno = ENOMEM;
  return NULL;
}

/* hm_alloc_slow while sampling is exact, but for the refill: (ra, cfa)
 * are the program's call into malloc, which jumps to hm_alloc_slow (a
 * tail call), which lets a sampled stack come from the cache. (Out of
 * line: inlined, the sampling path cost every slow call with sampling off
 * five more saved registers.) */
static HM_NOINLINE void *alloc_slow_sampled(size_t n, uintptr_t ra, uintptr_t cfa) {
  heap_t *h = hm_tls_heap;
  /* (a thread's first call: the heap first, which also sees start-up done) */
  if (unlikely(h == &hm_empty_heap) && (h = heap_for_thread()) == NULL) return alloc_failed(n);
  hm_purge_tick();
  hm_sample_tls.caller_ra = ra;
  hm_sample_tls.caller_cfa = cfa;
  hm_sample_tls.req = n;
  void *p = heap_alloc(h, hm_size_class(n));
  hm_sample_tls.caller_ra = 0;
  hm_sample_tls.req = 0;
  return p;
}

static HM_NOINLINE void *alloc_slow(size_t n) {
  heap_t *h = hm_tls_heap;
  /* (a thread's first call: the heap first, which also sees start-up done) */
  if (unlikely(h == &hm_empty_heap) && (h = heap_for_thread()) == NULL) return alloc_failed(n);
  hm_purge_tick();
  return heap_alloc(h, hm_size_class(n));
}

/* (Frameless: the refill returns at once, the rest goes on in the two
 * above.) */
void *hm_alloc_slow(size_t n, slab_t *s) {
  /* (read before a new thread's heap_for_thread, which waits for start-up:
   * atomic, as its store; either value takes the heap first, s being
   * hm_empty_slab, UNUSED) */
  if (likely(!__atomic_load_n(&hm_sample_active, __ATOMIC_RELAXED))) return alloc_slow(n);
  /* the serving foreign cache ran dry, its commonest miss: refilled at once
   * (while sampling is exact, a foreign cache is current only as fc_serve) */
  if (s->in_use == SLAB_FOREIGN) {
    void *p = foreign_refill(hm_tls_heap, s);
    if (p != NULL) return p;
  }
  return alloc_slow_sampled(n, (uintptr_t)__builtin_return_address(0), (uintptr_t)__builtin_dwarf_cfa());
}

void *hm_alloc_class(unsigned c) {
  heap_t *h = hm_tls_heap;
  if (unlikely(h == &hm_empty_heap) && (h = heap_for_thread()) == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  uint32_t bs = hm_class_size[c];
  /* (the fast path's pop: heap_alloc takes a list, charged, once cur's is empty) */
  if (bs <= MEDIUM_MAX) return hm_slab_pop(h->cur[c], bs);
  if (unlikely(hm_sample_any)) { /* (big classes: charged per call) */
    unsigned fired = hm_sample_one(bs);
    if (fired != 0) return hm_sample_serve(fired, bs, 0, bs);
  }
  return heap_alloc(h, c);
}

/* A slab emptied by its owner's frees while another serves its class: the
 * class's spare, if the class has none and its slabs are 64 KiB ones.
 * Released, it would go back to its SuperSlab, marked unused (a clock read
 * and four atomic operations), and be taken back the next time the current
 * slab runs dry: a class cycling through two slabs did that every round
 * (docs/DESIGN.md, "Slabs").
 * Only small slabs: a spare stays its thread's until the thread's next
 * look (release_if_idle), and the larger blocks' programs touch more
 * memory per slab taken than taking it costs. */
static void slab_emptied(heap_t *h, slab_t *s) {
  unsigned c = s->cls;
  if (h->spare[c] != NULL || hm_class_kind[c] != KIND_SMALL) {
    slab_release(h, s);
    return;
  }
  slab_unlist(h, s);
  h->spare[c] = s;
  h->emptied_cur[c / 64] |= (uint64_t)1 << (c % 64);
}

/* The owner's free emptied s or found it FULL. tick: a purge tick when s
 * emptied (not for blocks going home from the foreign cache, whose walk
 * a look could otherwise enter: free_home). */
HM_INLINE void free_local_slow(heap_t *h, slab_t *s, bool tick) {
  if (s->in_use == SLAB_FULL) {
    slab_unfull(s, 1); /* (the notify bit stays: slab_try_mark_full) */
    avail_push(h, s);
  }
  if (s->used == 0) {
    if (h->cur[s->cls] != s)
      slab_emptied(h, s);
    else { /* kept for the next malloc; released if it stays idle (heap_new_slab) */
      h->emptied_cur[s->cls / 64] |= (uint64_t)1 << (s->cls % 64);
      /* biased until it stops being current: its next emptyings take no
       * slow path (slab_t.bias); its emptied_cur bit stays meanwhile */
      s->bias = 1;
      s->used = 1;
    }
    if (tick) hm_purge_tick(); /* a slab emptied: also what a program freeing at a low rate does */
  }
}

static void foreign_overflow(heap_t *h, slab_t *f);

/* The free of b, a block of s, whose credit ran out (or that holds none)
 * or that emptied or was FULL (hm_free_push_own; used counted). The
 * current slab takes a new credit from the class's countdown: while none
 * is left (a sampled malloc due), its owner's frees go on local_free, whose
 * swap charges them and serves the sample in place (hm_sample_swap). */
void hm_free_own_slow(block_t *b, slab_t *s) {
  heap_t *h = hm_tls_heap; /* (read here: free's owner test needs no heap) */
  bool on_free = true, took = false;
  if (s->credit == HM_CREDIT_OFF) { /* (it was 0; a slab not current counts down from HM_CREDIT_OFF) */
    if (h->cur[s->cls] != s) {
      s->credit = HM_CREDIT_OFF;
    } else {
      /* (a small credit: the lists installed meanwhile find the countdown
       * not spent by it) */
      int64_t *left = &h->sample_left[s->cls];
      int64_t k = *left - 1 < HM_CREDIT_TAKE ? *left - 1 : HM_CREDIT_TAKE;
      on_free = k > 0;
      if (on_free) *left -= k; /* (b's malloc included) */
      s->credit = on_free ? (uint16_t)(k - 1) : 0;
      took = true;
    }
  }
  if (on_free) {
    hm_next_set(s, b, s->free);
    s->free = b;
  } else {
    hm_next_set(s, b, s->local_free);
    s->local_free = b;
  }
  if (s->used != 0) {
    /* a credit taken: a tick every HM_CREDIT_TAKE frees, which emptyings
     * of a biased slab no longer give (slab_t.bias); last, as a step may
     * release s */
    if (took) hm_purge_tick();
    return;
  }
  if (s->in_use == SLAB_FOREIGN) /* (routed here, slab_t.route: over its budget) */
    foreign_overflow(h, s);
  else
    free_local_slow(h, s, true);
}

/* Push the chain head..tail of blocks of slab s on its remote list; wake
 * the owner if the slab is FULL. */
static void remote_push(superslab_t *ss, slab_t *s, block_t *head, block_t *tail) {
  uintptr_t old = atomic_load_explicit(hm_slab_remote(s), memory_order_relaxed);
  do {
    hm_next_set(s, tail, (block_t *)(old & ~REMOTE_NOTIFY));
  } while (!atomic_compare_exchange_weak_explicit(hm_slab_remote(s), &old, (uintptr_t)head,
                                                  memory_order_release, memory_order_relaxed));
  if (unlikely(old & REMOTE_NOTIFY)) {
    /* (the index from s's address: the owner's descriptor line stays with it) */
    atomic_fetch_or(&ss->pending, (uint64_t)1 << hm_slab_idx(s));
    heap_t *owner = atomic_load(&ss->owner);
    if (owner != NULL) atomic_store(&owner->pending_hint, 1);
  }
}

/* Block b of slab s, one of h's own, back from h's foreign cache (the
 * owner's free while s was not current: slab_t.route), freed into s as
 * the owner's free is, without a credit: on the current slab's local_free,
 * which the fast path's swap charges to sampling. */
static void free_home(heap_t *h, slab_t *s, block_t *b) {
  if (h->cur[s->cls] == s) {
    hm_next_set(s, b, s->local_free);
    s->local_free = b;
  } else {
    hm_next_set(s, b, s->free);
    s->free = b;
  }
  if (--s->used == 0) {
    free_local_slow(h, s, false); /* (s may be gone with its SuperSlab) */
    return;
  }
  /* (a slab mostly free again drains as a sparse one does: its blocks are
   * not handed out again through the cache, DESIGN.md "Slabs") */
  if (s->in_use != SLAB_FULL && slab_is_sparse(s)) route_home(s);
}

/* Send a list of cached blocks back to their slabs: h's own freed into
 * them, others' one atomic push per run of blocks of the same slab.
 * Returns the number of blocks. */
static uint32_t foreign_send_back(heap_t *h, block_t *b) {
  uint32_t n = 0;
  while (b != NULL) {
    superslab_t *ss = hm_ss_of(b);
    slab_t *s = hm_slab_of(ss, b);
    if (atomic_load_explicit(&ss->owner, memory_order_relaxed) == h) {
      block_t *next = b->next;
      free_home(h, s, b);
      n++;
      b = next;
      continue;
    }
    block_t *head = b, *tail = b;
    n++;
    for (b = b->next; b != NULL && hm_ss_of(b) == ss && hm_slab_of(ss, b) == s; b = b->next) {
      tail = b;
      n++;
    }
    remote_push(ss, s, head, tail);
  }
  return n;
}

/* Blocks of list l, taken off cache f, go home (foreign_send_back); f
 * counts the room. */
static void foreign_drop(heap_t *h, slab_t *f, block_t *l) {
  uint32_t n = foreign_send_back(h, l); /* (before the count: the walk may free, and a look flush f) */
  f->used = (uint16_t)(f->used + n);
}

/* Foreign cache f went over its budget: the newest half of the budget
 * stays, for the next mallocs while it is in this core's cache; the older
 * blocks go back to their slabs. */
static void foreign_overflow(heap_t *h, slab_t *f) {
  block_t **link = &f->free;
  for (uint32_t k = f->capacity / 2; k > 0 && *link != NULL; k--) link = &(*link)->next;
  block_t *old = *link;
  *link = NULL;
  /* The owner's frees while a sample is due (the cache current: slab_t.route)
   * wait on local_free: they go too, or a short free list would leave
   * the cache over its budget and `used` wrap. */
  block_t *l = f->local_free;
  f->local_free = NULL;
  foreign_drop(h, f, old);
  foreign_drop(h, f, l);
}

/* One block straight back to its slab's remote list, counted as a free by
 * this thread (h: its heap, or hm_empty_heap). */
static void free_to_slab(heap_t *h, superslab_t *ss, block_t *b) {
  slab_t *s = hm_slab_of(ss, b);
  if (h != &hm_empty_heap) HM_STAT_ADD(h, free_remote[s->cls], 1);
#if HM_FAST_COUNTERS
  else hm_stats_free_without_heap(s->cls);
#endif
  remote_push(ss, s, b, b);
}

/* free of a block of a slab this thread does not own: keep it in the
 * heap's foreign cache; past the cache's budget, send the cached blocks
 * not yet in use back to their owners. (free does the common case itself:
 * hm_free.) */
void hm_free_foreign(heap_t *h, superslab_t *ss, block_t *b) {
  /* Not cached, but sent straight back: in secure mode (the cache's lists
   * would mix blocks whose links are encoded with different slabs' keys);
   * a block of an abandoned SuperSlab (cached, it would keep that SuperSlab
   * from emptying when threads come and go); and when there is no memory
   * for this thread's heap. */
#ifdef HAKMEM_SECURE
  free_to_slab(h, ss, b);
  return;
#endif
  /* (h's own SuperSlab stays h's: only this thread changes that) */
  const heap_t *owner = atomic_load_explicit(&ss->owner, memory_order_relaxed);
  if (owner == NULL) {
    free_to_slab(h, ss, b);
    return;
  }
  if (unlikely(h == &hm_empty_heap)) {
    heap_t *created = heap_for_thread();
    if (created == NULL) {
      free_to_slab(h, ss, b);
      return;
    }
    h = created;
  }
  /* h is this thread's heap. (Not with no foreign cache: a trading thread's
   * own frees would go back one atomic push each, hm_free_trading.) */
  if (likely(hm_opt[HM_OPT_FOREIGN_CACHE_KB] != 0) && hm_tls_free_id != ((uintptr_t)h | 1)) {
    hm_tls_free_id = (uintptr_t)h | 1;
    heap_untag(h);
  }
  slab_shape_t *sh = &ss->shape[hm_slab_index(ss, b)];
  unsigned c = __atomic_load_n(&sh->cls, __ATOMIC_RELAXED);
  bool big = hm_class_kind[c & ~SLAB_CLS_CACHED] == KIND_BIG;
  if (big && owner == h) {
    /* a big class's own block: back to its slab, which hands out its
     * lowest block first (big.c); trading frees of big blocks come here
     * (their shapes name the stand-in) */
    hm_free_push_own(hm_slab_of(ss, b), b);
    return;
  }
  /* Tell the owner's double-free check that a block of this slab may sit
   * in a cache it cannot scan (once per slab: the line stays shared). */
  if (!(c & SLAB_CLS_CACHED)) __atomic_fetch_or(&sh->cls, SLAB_CLS_CACHED, __ATOMIC_RELAXED);
  c &= ~SLAB_CLS_CACHED;
  /* From now on free pushes the slab's blocks on the cache itself: unless
   * the owner exits meanwhile (it sets the stand-in after clearing owner;
   * seq_cst: either this sees NULL or the stand-in is stored last). */
  if (!big && __atomic_load_n(&sh->fc_off, __ATOMIC_RELAXED) != fc_offset(c)) {
    __atomic_store_n(&sh->fc_off, fc_offset(c), __ATOMIC_SEQ_CST);
    if (atomic_load(&ss->owner) == NULL) __atomic_store_n(&sh->fc_off, FC_STAND_IN, __ATOMIC_SEQ_CST);
  }
#if HM_FAST_COUNTERS
  if (owner == h)
    HM_STAT_ADD(h, free_local[c], 1);
  else
    HM_STAT_ADD(h, free_remote[c], 1);
#endif
  slab_t *f = &h->foreign[c];
  b->next = f->free;
  f->free = b;
  if (unlikely(--f->used == 0)) foreign_overflow(h, f);
}

/* hm_free_trading pushed block b on t and brought t's `used` to 0: this
 * thread's foreign cache over its budget, or the stand-in (b's slab has no
 * block cached since it was taken, or its SuperSlab's owner exited). */
void hm_free_push_slow(heap_t *h, superslab_t *ss, slab_t *t, block_t *b) {
  if (t == &h->fc_stand_in) {
    t->free = NULL; /* b alone: take it off */
    t->used = 1;
    hm_free_foreign(h, ss, b);
  } else {
    foreign_overflow(h, t);
  }
}

/* Send every cached foreign block back (thread exit, malloc_trim). */
void hm_heap_flush_foreign(heap_t *h) {
  if (h == &hm_empty_heap) return;
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    slab_t *f = &h->foreign[c];
    slab_t *g = &h->fc_serve[c];
    if (h->cur[c] == f || h->cur[c] == g) heap_set_cur(h, c, &hm_empty_slab);
    /* (each list off its cache before it goes: its walk may free) */
    if (hm_sample_active) {
      block_t *l = g->free;
      g->free = NULL;
      g->used = f->used = (uint16_t)(f->capacity + 1);
      foreign_send_back(h, l);
    }
    block_t *l = f->free;
    f->free = NULL;
    f->used = (uint16_t)(f->capacity + 1);
    foreign_send_back(h, l);
  }
}

/* Thread exit: the whole pages inside free blocks (past each block's
 * first EXIT_KEEP bytes: the list link, the free tag,
 * secure mode's pattern, big.c's stamp) go back, many ranges a call
 * (hm_os_purge_ranges), within the calls the exit may make
 * (docs/DESIGN.md, "Memory given back"). Nobody will take these blocks
 * before an adopter: the slabs' lists are still this thread's. */
#define EXIT_KEEP 72
#ifdef HAKMEM_SECURE
_Static_assert(EXIT_KEEP >= HM_FILL_BYTES, "the fill pattern stays");
#endif
#define EXIT_RANGES 128 /* a call's ranges (on the exiting thread's stack) */
typedef struct {
  struct iovec v[EXIT_RANGES];
  unsigned n, calls, max_calls;
  size_t bytes;
} exit_give_t;

static void exit_give_flush(exit_give_t *g) {
  if (g->n == 0) return;
  long r = hm_os_purge_ranges(g->v, g->n);
  if (r >= 0) {
    g->calls++;
    g->bytes += (size_t)r;
  }
  g->n = 0;
}

/* The last call of an exit that makes one also takes its SuperSlabs'
 * unused resident slabs, as many ranges as it has room for (no call of
 * their own: they would otherwise wait for the steps, "Memory given back"). */
static void exit_give_last(exit_give_t *g, superslab_t *all) {
  struct {
    superslab_t *ss;
    uint32_t bits;
    unsigned from, to; /* its ranges in g->v */
  } cl[EXIT_RANGES];
  unsigned ncl = 0;
  for (superslab_t *ss = all; ss != NULL && g->n < EXIT_RANGES; ss = ss->all_next) {
    uint32_t bits = hm_purge_claim(ss, atomic_load(&ss->dirty));
    unsigned from = g->n;
    uint32_t taken = hm_purge_claimed_ranges(ss, bits, g->v, &g->n, EXIT_RANGES);
    hm_purge_claimed_settle(ss, bits & ~taken, false); /* (no room left for them) */
    if (taken != 0) cl[ncl++] = (__typeof__(cl[0])){ss, taken, from, g->n};
  }
  long r = hm_os_purge_ranges(g->v, g->n);
  size_t upto = 0, done = r > 0 ? (size_t)r : 0;
  bool ok[EXIT_RANGES];
  for (unsigned k = 0; k < g->n; k++) ok[k] = r >= 0 && (upto += g->v[k].iov_len) <= done;
  for (unsigned c = 0; c < ncl; c++) {
    bool given = true;
    for (unsigned k = cl[c].from; k < cl[c].to; k++) given &= ok[k];
    hm_purge_claimed_settle(cl[c].ss, cl[c].bits, given);
  }
  if (r >= 0) {
    g->calls++;
    g->bytes += (size_t)r;
  }
  g->n = 0;
}

/* A free block of bs bytes: its whole pages past EXIT_KEEP. false: no
 * call left for them. */
static bool exit_give_block(exit_give_t *g, const block_t *b, uint32_t bs) {
  uintptr_t from = ((uintptr_t)b + EXIT_KEEP + HM_PAGE_SIZE - 1) & ~(uintptr_t)(HM_PAGE_SIZE - 1);
  uintptr_t to = ((uintptr_t)b + bs) & ~(uintptr_t)(HM_PAGE_SIZE - 1);
  if (to <= from) return true;
  if (g->n == EXIT_RANGES) {
    if (g->calls == g->max_calls || !hm_os_purge_ranges_ok()) return false;
    exit_give_flush(g);
  }
  g->v[g->n++] = (struct iovec){(void *)from, to - from};
  return true;
}

static void exit_give_slab(exit_give_t *g, slab_t *s) {
  uint32_t bs = hm_slab_bs(s);
  if (bs < HM_PAGE_SIZE + EXIT_KEEP || s->in_use == SLAB_UNUSED || s->in_use == SLAB_FULL) return;
  block_t *lists[2] = {s->free, s->local_free};
  for (unsigned k = 0; k < 2; k++)
    for (block_t *b = lists[k]; b != NULL; b = hm_next_get(s, b))
      if (!exit_give_block(g, b, bs)) return;
}

/* The blocks of other threads' slabs in the foreign caches, before they go
 * back (then their owners, or adopters, may take them at once); those of
 * an exited owner would otherwise be given back by nobody. */
static void exit_give_foreign(exit_give_t *g, heap_t *h) {
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    uint32_t bs = hm_class_size[c];
    if (bs < HM_PAGE_SIZE + EXIT_KEEP) continue;
    block_t *lists[2] = {h->foreign[c].free, hm_sample_active ? h->fc_serve[c].free : NULL};
    for (unsigned k = 0; k < 2; k++)
      for (block_t *b = lists[k]; b != NULL; b = b->next)
        if (!exit_give_block(g, b, bs)) return;
  }
  if (g->calls < g->max_calls) exit_give_flush(g);
}

/* Thread exit: free what is free, leave the rest to be adopted. Blocks in
 * abandoned SuperSlabs can still be freed from any thread (remote path). */
void hm_heap_thread_exit(heap_t *h) {
  size_t unused_before = hm_purge_exit_begin();
  exit_give_t give;
  give.n = give.calls = 0;
  give.bytes = 0;
  give.max_calls = hm_os_purge_ranges_ok() ? hm_purge_exit_calls() : 0;
  if (give.max_calls != 0 && h != &hm_empty_heap) exit_give_foreign(&give, h);
  hm_heap_flush_foreign(h);
  hm_tls_heap = &hm_empty_heap;
  hm_tls_free_id = (uintptr_t)&hm_empty_heap;
  tls_exited = true;
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    heap_set_cur(h, c, &hm_empty_slab);
    h->avail[c] = h->avail_tail[c] = h->sparse[c] = NULL;
  }
  /* The avail lists link slabs of different SuperSlabs: every slab leaves
   * them before any SuperSlab is abandoned, or unlinking a slab later would
   * write into a slab another thread may have adopted (found by TSan). */
  for (superslab_t *ss = h->all; ss != NULL; ss = ss->all_next)
    for (unsigned i = 0; i < ss->nslabs; i++) {
      slab_t *s = &ss->slabs[i];
      if (s->in_use == SLAB_UNUSED || s->in_use == SLAB_FULL) continue;
      s->in_use = SLAB_ACTIVE;
      s->next = SLAB_PREV(s) = NULL;
    }
  superslab_t *next;
  for (superslab_t *ss = h->all; ss != NULL; ss = next) {
    next = ss->all_next;
    bool gone = false;
    /* !gone first: once released, the SuperSlab may be another thread's */
    for (unsigned i = 0; !gone && i < ss->nslabs; i++) {
      slab_t *s = &ss->slabs[i];
      if (s->in_use == SLAB_UNUSED) continue;
      slab_unfull(s, 0);
      slab_collect_remote(s); /* also clears the notify bit */
      if (s->used == 0) gone = slab_release(h, s);
    }
    if (gone) continue;
    for (unsigned i = 0; i < ss->nslabs && give.calls < give.max_calls; i++) exit_give_slab(&give, &ss->slabs[i]);
  }
  /* (before any SuperSlab is abandoned: then another thread may adopt it) */
  if (give.calls < give.max_calls && give.n != 0) exit_give_last(&give, h->all);
  for (superslab_t *ss = h->all; ss != NULL; ss = next) {
    next = ss->all_next;
    if (ss->on_partial) partial_unlink(h, ss);
    all_unlink(h, ss);
    ss_set_owner(ss, NULL);
    /* Its blocks go straight back from now on, not into foreign caches
     * (hm_free_foreign): free pushes them on the stand-in. */
    for (unsigned i = 0; i < ss->nslabs; i++) __atomic_store_n(&ss->shape[i].fc_off, FC_STAND_IN, __ATOMIC_SEQ_CST);
    hm_mutex_lock(&heap_lock);
    ss->next = abandoned[ss->kind];
    abandoned[ss->kind] = ss;
    hm_mutex_unlock(&heap_lock);
  }
  heap_reset(h);
  hm_mutex_lock(&heap_lock);
  h->next_free = heap_pool;
  heap_pool = h;
  hm_mutex_unlock(&heap_lock);
  hm_purge_exit_end(unused_before, give.bytes, give.calls); /* (the purger, if what this left unused wants it) */
}

/* Collect the remote frees of every abandoned SuperSlab and give the ones
 * that became empty to the backend (malloc_trim). heap_lock keeps adopters
 * away; other threads only push on remote lists meanwhile. */
void hm_heap_reclaim_abandoned(void) {
  hm_mutex_lock(&heap_lock);
  for (unsigned k = 0; k < NUM_KINDS; k++) {
    superslab_t **link = &abandoned[k], *ss;
    while ((ss = *link) != NULL) {
      uint32_t emptied = 0;
      for (unsigned i = 0; i < ss->nslabs; i++) {
        slab_t *s = &ss->slabs[i];
        if (ss->free_mask & (1u << i)) continue;
        slab_collect_remote(s);
        hm_check_slab(s);
        if (s->used == 0) {
          hm_stats_released(s->cls, s->carved);
          s->in_use = SLAB_UNUSED;
          ss->shape[i].carved_kept = 0;
          hm_slab_set_carved(s, 0);
          emptied |= 1u << i;
        }
      }
      ss->free_mask |= emptied;
      if (ss->free_mask == ss_all_mask(ss)) {
        *link = ss->next;
        hm_backend_ss_free(ss);
      } else {
        for (; emptied != 0; emptied &= emptied - 1) hm_purge_slab_unused(ss, (unsigned)__builtin_ctz(emptied));
        link = &ss->next;
      }
    }
  }
  hm_mutex_unlock(&heap_lock);
}

/* Class c's foreign cache, not serving and untouched since the previous
 * look: its blocks go home (foreign_send_back), so that a class no longer
 * used does not keep its slabs, nor another thread's, from emptying. */
static void flush_if_idle(heap_t *h, unsigned c) {
#ifdef HAKMEM_SECURE
  (void)h, (void)c; /* (no cache) */
  return;
#endif
  slab_t *f = &h->foreign[c];
  uintptr_t head = (uintptr_t)f->free;
  if (head == 0) return; /* (a stale fc_seen at worst sends a list home one look early) */
  if (h->cur[c] == f || hm_sample_active || h->fc_seen[c] != head) {
    h->fc_seen[c] = head;
    return;
  }
  h->fc_seen[c] = 0;
  f->free = NULL;
  foreign_drop(h, f, (block_t *)head);
}

/* Release class c's spare (untouched since it emptied), and its current
 * slab if it is empty. With all (hak_collect), remote frees are collected
 * first; otherwise (a purge step, a new slab taken) only a current slab
 * left untouched since the previous look, and not the last in use in its
 * SuperSlab (which would go to the backend). Returns whether another look
 * is worth it: empty and current, but not yet idle. */
static bool release_if_idle(heap_t *h, unsigned c, bool all) {
  if (!all) flush_if_idle(h, c);
  slab_t *s = h->spare[c];
  if (s != NULL) { /* untouched since it emptied */
    h->spare[c] = NULL;
    slab_release(h, s);
  }
  s = h->cur[c];
  if (s == &hm_empty_slab || s->in_use == SLAB_FOREIGN) return false;
  if (all) slab_collect_remote(s);
  if (hm_slab_used(s) != 0) return false;
  if (!all) {
    /* a malloc or a free changes free (or local_free): one block taken
     * and given back between two looks reads as idle, and the slab goes
     * with its blocks on its lists */
    uintptr_t heads = (uintptr_t)s->free ^ (uintptr_t)s->local_free;
    bool idle = h->idle_seen[c] == s && h->idle_heads[c] == heads;
    h->idle_seen[c] = s;
    h->idle_heads[c] = heads;
    if (!idle) return true;
    superslab_t *ss = hm_ss_of(s);
    if ((ss->free_mask | 1u << hm_slab_idx(s)) == ss_all_mask(ss)) return false;
  }
  heap_set_cur(h, c, &hm_empty_slab);
  slab_release(h, s);
  return false;
}

static void heap_release_empty_cur(heap_t *h, bool all) {
  for (unsigned c = 0; c < NUM_CLASSES; c++) release_if_idle(h, c, all);
  memset(h->looked_out, 0, sizeof h->looked_out);
  memset(h->recurring, 0, sizeof h->recurring);
}

/* A purge step: the calling thread's current slabs that are empty and were
 * not used since the last step go back to their SuperSlabs, so that a
 * later step gives them back if they stay unused (an emptied slab is kept
 * current for the next malloc, and a class no longer used would keep it
 * resident for good). Taken again, a slab not yet given back needs no
 * carving (ss_take_slab). A slab that would empty its SuperSlab stays:
 * with the SuperSlab gone, a second free of one of its blocks could only
 * be called an invalid free. */
void hm_heap_release_empty_cur(void) {
  heap_t *h = hm_tls_heap;
  if (h != &hm_empty_heap) heap_release_empty_cur(h, false);
}

/* hak_collect: give back what the calling thread holds unused: its empty
 * current slabs and spares, slabs emptied by other threads' frees, the
 * unused slabs of its SuperSlabs, and the free blocks of its big slabs
 * (hm_big_collect). Returns the bytes given back with madvise. */
size_t hm_heap_collect_own(void) {
  heap_t *h = hm_tls_heap;
  if (h == &hm_empty_heap) return 0;
  if (atomic_load_explicit(&h->pending_hint, memory_order_relaxed)) heap_process_pending(h);
  heap_release_empty_cur(h, true);
  size_t bytes = 0;
  superslab_t *next;
  for (superslab_t *ss = h->all; ss != NULL; ss = next) {
    next = ss->all_next;
    bool gone = false;
    for (unsigned i = 0; i < ss->nslabs && !gone; i++) {
      slab_t *s = &ss->slabs[i];
      if (s->in_use == SLAB_SPARSE) {
        gone = sparse_watch(h, s);
        continue;
      }
      if (s->in_use != SLAB_LISTED || atomic_load_explicit(hm_slab_remote(s), memory_order_relaxed) <= REMOTE_NOTIFY) continue;
      slab_collect_remote(s);
      if (s->used == 0) gone = slab_release(h, s);
    }
    if (!gone) bytes += hm_purge_ss_now(ss);
  }
  return bytes + hm_big_collect(h);
}

/* fork: no thread may hold the lock while the child is created. The child
 * keeps the other threads' heaps as they were (they may have been mid-way
 * through an update); their blocks stay valid and freeing them works. */
void hm_heap_fork_prepare(void) { pthread_mutex_lock(&heap_lock); }
void hm_heap_fork_parent(void) { pthread_mutex_unlock(&heap_lock); }
/* The other threads' heaps keep their SuperSlabs in the child; a thread it
 * starts may get one of their thread pointers (libc reuses their stacks). */
void hm_heap_fork_child(void) {
  pthread_mutex_init(&heap_lock, NULL);
  for (heap_t *h = all_heaps; h != NULL; h = h->all_next)
    if (h != hm_tls_heap) heap_untag(h);
}

/* The report's walk: bytes in blocks handed out (remote-freed blocks not yet
 * collected included), per slab lane. Other threads may be changing these
 * slabs: the reads are relaxed and the figure is as of the moment each
 * slab is read. The caller keeps the SuperSlab mapped (hm_backend_walk_ss). */
void hm_ss_in_use(superslab_t *ss, size_t in_use[2]) {
  unsigned n = __atomic_load_n(&ss->nslabs, __ATOMIC_RELAXED);
  if (n > SS_MAX_SLABS) n = SS_MAX_SLABS;
  for (unsigned i = 0; i < n; i++) {
    slab_t *s = &ss->slabs[i];
    if (__atomic_load_n(&s->in_use, __ATOMIC_RELAXED) == SLAB_UNUSED) continue;
    unsigned cls = __atomic_load_n(&s->cls, __ATOMIC_RELAXED);
    if (cls >= NUM_CLASSES) continue;
    size_t used = hm_slab_used(s);
    if (__atomic_load_n(&s->in_use, __ATOMIC_RELAXED) == SLAB_FULL) used = s->capacity; /* (1 while FULL) */
    in_use[hm_class_size[cls] <= DIRECT_MAX ? HM_LANE_DIRECT : HM_LANE_POOL] += used * hm_class_size[cls];
  }
}

void hm_ss_resident(superslab_t *ss, size_t res[NUM_KINDS + 1]) {
  unsigned n = __atomic_load_n(&ss->nslabs, __ATOMIC_RELAXED), shift = __atomic_load_n(&ss->slab_shift, __ATOMIC_RELAXED);
  unsigned kind = __atomic_load_n(&ss->kind, __ATOMIC_RELAXED);
  if (n > SS_MAX_SLABS) n = SS_MAX_SLABS;
  if (kind >= NUM_KINDS) return;
  int fd = hm_os_pagemap_open(); /* once for the 33 ranges */
  res[NUM_KINDS] += hm_os_resident_fd(fd, ss, SS_HEADER_SIZE);
  for (unsigned i = 0; i < n; i++) {
    char *a = (char *)ss + ((size_t)i << shift) + (i == 0 ? SS_HEADER_SIZE : 0);
    size_t r = hm_os_resident_fd(fd, a, (size_t)(((char *)ss + ((size_t)(i + 1) << shift)) - a));
    bool used = __atomic_load_n(&ss->slabs[i].in_use, __ATOMIC_RELAXED) != SLAB_UNUSED;
    res[used ? kind : NUM_KINDS] += r;
  }
  if (fd >= 0) close(fd);
}

/* Read while the owners run: relaxed loads, a snapshot good to a block.
 * lanes (if not NULL): the bytes by lane, HM_LANE_DIRECT and HM_LANE_POOL
 * (as hm_ss_in_use counts them). */
size_t hm_heap_foreign_bytes(size_t *heaps, size_t lanes[2]) {
  size_t bytes = 0, n = 0;
  hm_mutex_lock(&heap_lock);
  for (heap_t *h = all_heaps; h != NULL; h = h->all_next, n++) {
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
      const slab_t *f = &h->foreign[c];
      unsigned cap = __atomic_load_n(&f->capacity, __ATOMIC_RELAXED), used = __atomic_load_n(&f->used, __ATOMIC_RELAXED);
      size_t b = 0;
      if (cap + 1 > used) b += (size_t)(cap + 1 - used) * hm_class_size[c]; /* used: room left + 1 */
      if (hm_sample_active) { /* (its blocks being served) */
        used = __atomic_load_n(&h->fc_serve[c].used, __ATOMIC_RELAXED);
        if (cap + 1 > used) b += (size_t)(cap + 1 - used) * hm_class_size[c];
      }
      bytes += b;
      if (lanes != NULL) lanes[hm_class_size[c] <= DIRECT_MAX ? HM_LANE_DIRECT : HM_LANE_POOL] += b;
    }
  }
  hm_mutex_unlock(&heap_lock);
  *heaps = n;
  return bytes;
}

/* Blocks on s's remote list (counted as used until the owner takes them):
 * a walk that reads only block boundaries of s's carved range, at most
 * `carved` steps, so that a list the owner takes and hands out meanwhile
 * gives a wrong count but no stray read. SuperSlab held by the caller
 * (hm_backend_walk_ss). */
size_t hm_slab_remote_count(const slab_t *s) {
  uintptr_t start = (uintptr_t)hm_ss_of(s) + hm_start_off(__atomic_load_n(&s->start_lo, __ATOMIC_RELAXED));
  size_t bs = hm_slab_bs_relaxed(s), carved = __atomic_load_n(&s->carved, __ATOMIC_RELAXED);
  uintptr_t b = atomic_load_explicit(hm_slab_remote(s), memory_order_acquire) & ~REMOTE_NOTIFY;
  size_t n = 0;
  while (b != 0 && n < carved && bs != 0 && b >= start && b < start + carved * bs && (b - start) % bs == 0) {
    n++;
    b = (uintptr_t)hm_next_decode(s, (const block_t *)b);
  }
  return n;
}
