/* The sampled heap profiler (HAKMEM_PROFILE, HAKMEM_LEAK_REPORT): a
 * consumer of the sampler (sample.h). A sampled allocation is served from
 * the large lane, so that its free, which takes the lane's path, is seen
 * here (hm_prof_freed) without any test on the slab lanes' fast paths.
 * Tables live in private mappings; nothing here calls malloc. The profile
 * is pprof's profile.proto, written by hand and wrapped in a gzip member of
 * stored deflate blocks. docs/DESIGN.md, "Sampling"; docs/USING.md, "Heap
 * profiles". */

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../include/hakmem.h"
#include "block.h"
#include "internal.h"
#include "sample.h"
#include "stack.h"

/* ---- state: one lock (a spin lock: the signal handler only tries it) ---- */

static _Atomic int prof_lock_word;
static _Atomic int dump_pending; /* SIGUSR2 came while the lock was held */
static bool prof_on;
static double rate;              /* HAKMEM_PROFILE_RATE */
static double class_weight[NUM_CLASSES]; /* a sample's weight, charged a class's size (below) */
static const char *prof_path;    /* HAKMEM_PROFILE, or NULL */
static uint64_t start_ns;

/* Counted as hakmem's mutexes are (src/lock.h): a fork from a handler
 * must see that this thread holds it. */
static bool lock_word_take(void) {
  int expected = 0;
  return atomic_compare_exchange_strong_explicit(&prof_lock_word, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}
static bool prof_trylock(void) {
  hm_tls_locks++;
  atomic_signal_fence(memory_order_seq_cst);
  if (lock_word_take()) return true;
  atomic_signal_fence(memory_order_seq_cst);
  hm_tls_locks--;
  return false;
}
static void prof_lock(void) {
  hm_tls_locks++;
  atomic_signal_fence(memory_order_seq_cst);
  while (!lock_word_take()) sched_yield();
}
static void dump_locked(const char *path, bool symbolize);
static void prof_unlock(void) {
  atomic_store_explicit(&prof_lock_word, 0, memory_order_release);
  /* a SIGUSR2 that found the lock taken: its dump, now */
  while (atomic_load(&dump_pending) && lock_word_take()) {
    atomic_store(&dump_pending, 0);
    dump_locked(prof_path, false);
    atomic_store_explicit(&prof_lock_word, 0, memory_order_release);
  }
  atomic_signal_fence(memory_order_seq_cst);
  hm_tls_locks--;
}

/* ---- private memory ----------------------------------------------------- */

static void *map(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Bump arena for stacks' frames (kept for the process's life). */
#define ARENA_CHUNK ((size_t)1 << 20)
static char *arena_cur, *arena_end;
static void *arena_alloc(size_t len) {
  len = (len + 15) & ~(size_t)15;
  if (arena_cur == NULL || (size_t)(arena_end - arena_cur) < len) {
    size_t chunk = len > ARENA_CHUNK ? len : ARENA_CHUNK;
    char *c = map(chunk);
    if (c == NULL) return NULL;
    arena_cur = c;
    arena_end = c + chunk;
  }
  void *p = arena_cur;
  arena_cur += len;
  return p;
}

/* ---- call sites: stacks with their estimated totals ---------------------- */

/* A site's record stays where it was made (the arena): live blocks and the
 * list of all sites point at it; the hash index of pointers grows. */
typedef struct site {
  struct site *all_next;
  struct bucket *buckets; /* its alloc_* figures, by requested size */
  uint64_t hash;
  uint32_t depth;
  uint32_t samples; /* live samples (the leak report) */
  uint64_t oldest_ns; /* the leak report's scratch */
  double alloc_objects, alloc_space, inuse_objects, inuse_space;
  uintptr_t pcs[];
} site_t;

/* A site's samples of one requested size (pprof's `bytes` label), in the
 * arena too, indexed by (site, size). */
typedef struct bucket {
  struct bucket *site_next;
  site_t *site;
  size_t size;
  double objects, space;
} bucket_t;

static bucket_t **bucket_index;
static size_t bucket_cap, bucket_count;

static site_t **site_index;
static size_t site_cap, site_count;
static site_t *all_sites;

/* Live sampled blocks, by address (open addressing). */
typedef struct {
  uintptr_t addr; /* 0: empty; 1: deleted */
  site_t *site;
  size_t size;   /* requested */
  uint64_t t_ns; /* allocated at (hm_now_ns) */
  double objects, space;
} live_t;

static live_t *live;
static size_t live_cap, live_used; /* used: live + deleted */

static uint64_t hash_pcs(const uintptr_t *pcs, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
  for (int i = 0; i < n; i++) {
    h ^= pcs[i];
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  return h;
}

static bool sites_grow(void) {
  size_t cap = site_cap == 0 ? 1024 : site_cap * 2;
  site_t **t = map(cap * sizeof *t);
  if (t == NULL) return false;
  for (site_t *s = all_sites; s != NULL; s = s->all_next) {
    size_t j = s->hash & (cap - 1);
    while (t[j] != NULL) j = (j + 1) & (cap - 1);
    t[j] = s;
  }
  if (site_index != NULL) munmap(site_index, site_cap * sizeof *site_index);
  site_index = t;
  site_cap = cap;
  return true;
}

/* The site of a stack, made if new; NULL: out of memory. */
static site_t *site_of(const uintptr_t *pcs, int n) {
  if ((site_count + 1) * 2 > site_cap && !sites_grow()) return NULL;
  uint64_t h = hash_pcs(pcs, n);
  size_t j = h & (site_cap - 1);
  for (site_t *s; (s = site_index[j]) != NULL; j = (j + 1) & (site_cap - 1))
    if (s->hash == h && s->depth == (uint32_t)n && memcmp(s->pcs, pcs, n * sizeof *pcs) == 0) return s;
  site_t *s = arena_alloc(sizeof(site_t) + (size_t)n * sizeof *pcs);
  if (s == NULL) return NULL;
  *s = (site_t){.all_next = all_sites, .hash = h, .depth = (uint32_t)n};
  memcpy(s->pcs, pcs, n * sizeof *pcs);
  all_sites = s;
  site_index[j] = s;
  site_count++;
  return s;
}

static size_t bucket_slot(const site_t *st, size_t size, size_t cap) {
  uint64_t h = ((uint64_t)(uintptr_t)st ^ (uint64_t)size * 0xff51afd7ed558ccdULL) * 0x9e3779b97f4a7c15ULL;
  return (size_t)(h >> 24) & (cap - 1);
}

static bool buckets_grow(void) {
  size_t cap = bucket_cap == 0 ? 1024 : bucket_cap * 2;
  bucket_t **t = map(cap * sizeof *t);
  if (t == NULL) return false;
  for (site_t *s = all_sites; s != NULL; s = s->all_next)
    for (bucket_t *b = s->buckets; b != NULL; b = b->site_next) {
      size_t j = bucket_slot(s, b->size, cap);
      while (t[j] != NULL) j = (j + 1) & (cap - 1);
      t[j] = b;
    }
  if (bucket_index != NULL) munmap(bucket_index, bucket_cap * sizeof *bucket_index);
  bucket_index = t;
  bucket_cap = cap;
  return true;
}

/* The bucket of (site, size), made if new; NULL: out of memory. */
static bucket_t *bucket_of(site_t *st, size_t size) {
  if ((bucket_count + 1) * 2 > bucket_cap && !buckets_grow()) return NULL;
  size_t j = bucket_slot(st, size, bucket_cap);
  for (bucket_t *b; (b = bucket_index[j]) != NULL; j = (j + 1) & (bucket_cap - 1))
    if (b->site == st && b->size == size) return b;
  bucket_t *b = arena_alloc(sizeof *b);
  if (b == NULL) return NULL;
  *b = (bucket_t){.site_next = st->buckets, .site = st, .size = size};
  st->buckets = b;
  bucket_index[j] = b;
  bucket_count++;
  return b;
}

static size_t live_slot(uintptr_t a, size_t cap) {
  uint64_t h = (uint64_t)a * 0x9e3779b97f4a7c15ULL;
  return (size_t)(h >> 20) & (cap - 1);
}

static bool live_grow(void) {
  size_t cap = live_cap == 0 ? 4096 : live_cap * 2;
  live_t *t = map(cap * sizeof(live_t));
  if (t == NULL) return false;
  size_t used = 0;
  for (size_t i = 0; i < live_cap; i++) {
    if (live[i].addr <= 1) continue;
    size_t j = live_slot(live[i].addr, cap);
    while (t[j].addr != 0) j = (j + 1) & (cap - 1);
    t[j] = live[i];
    used++;
  }
  if (live != NULL) munmap(live, live_cap * sizeof(live_t));
  live = t;
  live_cap = cap;
  live_used = used;
  return true;
}

/* ---- sampling ----------------------------------------------------------- */

static double weight(size_t charged) { return 1.0 / hm_one_minus_exp_neg((double)(charged == 0 ? 1 : charged) / rate); }

/* Sampled blocks freed, kept for the next samples (up to STASH_MAX of
 * at most STASH_BYTES each; the lock held): the large lane's malloc and
 * free of a block cost some 900 instructions a sample. Still in use in
 * the lane, they are no live samples; free and realloc report a kept
 * block's second free (hm_prof_free, hm_prof_freed); the memory report
 * gives them back first (hm_prof_live_each). */
#define STASH_MAX 8
#define STASH_BYTES ((size_t)16 << 10)
static struct {
  void *p;
  size_t usable;
} stash[STASH_MAX];
static unsigned stash_n;

/* The index of p among the kept blocks, or -1. */
static int stash_find(const void *p) {
  for (unsigned i = 0; i < stash_n; i++)
    if (stash[i].p == p) return (int)i;
  return -1;
}

/* A kept block of at least n usable bytes (the smallest), taken; NULL if
 * none. (Large-lane blocks start on a page.) */
static void *stash_take(size_t n) {
  int best = -1;
  for (unsigned i = 0; i < stash_n; i++)
    if (stash[i].usable >= n && (best < 0 || stash[i].usable < stash[best].usable)) best = (int)i;
  if (best < 0) return NULL;
  void *p = stash[best].p;
  stash[best] = stash[--stash_n];
  ((uintptr_t *)p)[1] = 0; /* (as a pack clears a reused page's: hm_pack_alloc) */
  return p;
}

/* The sampled allocation: from the large lane (its free comes to
 * hm_prof_free), a kept block first, recorded with its stack and weight. */
static void *prof_serve(unsigned fired, size_t n, size_t align, size_t charged) {
  (void)fired;
  uintptr_t pcs[HM_STACK_MAX];
  int depth = hm_stack_capture_at(hm_sample_tls.caller_ra, hm_sample_tls.caller_cfa, pcs, HM_STACK_MAX);
  /* unbiased estimates (as pprof's): a block charged c bytes is sampled
   * with probability 1 - exp(-c / rate) */
  unsigned c = charged <= MEDIUM_MAX ? hm_size_class(charged) : 0;
  double w = charged <= MEDIUM_MAX && hm_class_size[c] == charged ? class_weight[c] : weight(charged);
  uint64_t now = hm_now_ns();
  prof_lock();
  void *p = align <= HM_PAGE_SIZE ? stash_take(n) : NULL;
  if (p == NULL) {
    prof_unlock(); /* (nested with no other lock) */
    if ((p = hm_large_alloc_unsampled(n == 0 ? 1 : n, align)) == NULL) return NULL;
    prof_lock();
  }
  site_t *st = site_of(pcs, depth);
  bucket_t *bk = st != NULL ? bucket_of(st, n) : NULL;
  if (bk != NULL && ((live_used + 1) * 2 <= live_cap || live_grow())) {
    bk->objects += w;
    bk->space += w * (double)n;
    st->alloc_objects += w;
    st->alloc_space += w * (double)n;
    st->inuse_objects += w;
    st->inuse_space += w * (double)n;
    st->samples++;
    size_t j = live_slot((uintptr_t)p, live_cap);
    while (live[j].addr > 1) j = (j + 1) & (live_cap - 1);
    if (live[j].addr == 0) live_used++;
    live[j] = (live_t){.addr = (uintptr_t)p, .site = st, .size = n, .t_ns = now, .objects = w, .space = w * (double)n};
  }
  prof_unlock();
  return p;
}

/* p's live sample taken off (the lock held); false if p is none. */
static bool live_remove(const void *p) {
  if (live_cap == 0) return false;
  for (size_t j = live_slot((uintptr_t)p, live_cap); live[j].addr != 0; j = (j + 1) & (live_cap - 1)) {
    if (live[j].addr != (uintptr_t)p) continue;
    site_t *st = live[j].site;
    st->inuse_objects -= live[j].objects;
    st->inuse_space -= live[j].space;
    st->samples--;
    live[j].addr = 1;
    return true;
  }
  return false;
}

bool hm_prof_free(void *p, unsigned kind) {
  if (!prof_on) return false;
  bool kept = false;
  int i;
  prof_lock();
  if (live_remove(p)) {
    size_t u;
    if (stash_n < STASH_MAX && (u = hm_large_usable_live(p, kind)) != 0 && u <= STASH_BYTES) {
      stash[stash_n].p = p;
      stash[stash_n++].usable = u;
      kept = true;
    }
  } else if ((i = stash_find(p)) >= 0) {
    prof_unlock();
    hm_report_double(p, HM_OP_FREE, "large block already freed");
    return true; /* (kept still) */
  }
  prof_unlock();
  return kept;
}

bool hm_prof_freed(void *p) {
  if (!prof_on) return false;
  prof_lock();
  bool found = live_remove(p);
  int i = found ? -1 : stash_find(p);
  if (i >= 0) stash[i] = stash[--stash_n]; /* (back to the lane with the caller's free) */
  prof_unlock();
  if (i >= 0) hm_report_double(p, HM_OP_REALLOC, "large block already freed");
  return found || i >= 0;
}

/* The kept blocks back to the large lane. */
static void stash_drain(void) {
  void *keep[STASH_MAX];
  prof_lock();
  unsigned n = stash_n;
  for (unsigned i = 0; i < n; i++) keep[i] = stash[i].p;
  stash_n = 0;
  prof_unlock();
  for (unsigned i = 0; i < n; i++) hm_large_free(keep[i]);
}

/* ---- profile.proto, by hand --------------------------------------------- */

/* A growing buffer in private mappings. */
typedef struct {
  uint8_t *p;
  size_t len, cap;
  bool failed;
} buf_t;

static HM_NOINLINE void buf_grow(buf_t *b, size_t more) {
  size_t cap = b->cap == 0 ? (size_t)1 << 16 : b->cap;
  while (cap < b->len + more) cap *= 2;
  uint8_t *q = map(cap);
  if (q == NULL) {
    b->failed = true;
    return;
  }
  if (b->p != NULL) {
    memcpy(q, b->p, b->len);
    munmap(b->p, b->cap);
  }
  b->p = q;
  b->cap = cap;
}
static inline void buf_reserve(buf_t *b, size_t more) {
  if (!b->failed && b->len + more > b->cap) buf_grow(b, more);
}
static void buf_free(buf_t *b) {
  if (b->p != NULL) munmap(b->p, b->cap);
  *b = (buf_t){0};
}
static void put_bytes(buf_t *b, const void *s, size_t n) {
  buf_reserve(b, n);
  if (b->failed) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
}
/* An unchecked write into room reserved by the caller (put_varint,
 * put_sample). */
static uint8_t *raw_varint(uint8_t *p, uint64_t v) {
  for (; v >= 0x80; v >>= 7) *p++ = (uint8_t)(v | 0x80);
  *p++ = (uint8_t)v;
  return p;
}
static void put_varint(buf_t *b, uint64_t v) {
  buf_reserve(b, 10);
  if (b->failed) return;
  b->len = (size_t)(raw_varint(b->p + b->len, v) - b->p);
}
static void put_uint(buf_t *b, unsigned field, uint64_t v) { /* wire type 0 */
  put_varint(b, (uint64_t)field << 3);
  put_varint(b, v);
}
static void put_len(buf_t *b, unsigned field, const void *s, size_t n) { /* wire type 2 */
  put_varint(b, (uint64_t)field << 3 | 2);
  put_varint(b, n);
  put_bytes(b, s, n);
}
/* A sub-message from a scratch buffer, which is emptied. */
static void put_msg(buf_t *b, unsigned field, buf_t *m) {
  put_len(b, field, m->p, m->len);
  if (m->failed) b->failed = true;
  m->len = 0;
}

/* The string table: fixed names first, then mapping file names. */
enum {
  S_EMPTY, S_ALLOC_OBJECTS, S_COUNT, S_ALLOC_SPACE, S_BYTES, S_INUSE_OBJECTS, S_INUSE_SPACE, S_SPACE,
  S_ALLOC_TIME, S_MS, S_FIXED
};
static const char *const fixed_strings[S_FIXED] = {
    "", "alloc_objects", "count", "alloc_space", "bytes", "inuse_objects", "inuse_space", "space",
    "alloc_time_ms", "ms"};

static void put_value_type(buf_t *b, buf_t *m, unsigned field, unsigned type, unsigned unit) {
  put_uint(m, 1, type);
  put_uint(m, 2, unit);
  put_msg(b, field, m);
}

/* The executable mappings of /proc/self/maps: Mapping messages (ids from
 * 1), their file names appended to `strings` (one per mapping); returns the
 * count. ranges[2 * i]: start, limit of mapping i + 1. */
#define MAX_MAPPINGS 1024
static uint64_t parse_hex(char **c) { /* (strtoull may not be signal-safe) */
  uint64_t v = 0;
  for (;; (*c)++) {
    char x = **c;
    unsigned d = x >= '0' && x <= '9' ? (unsigned)(x - '0') : x >= 'a' && x <= 'f' ? (unsigned)(x - 'a' + 10) : 16;
    if (d == 16) return v;
    v = v * 16 + d;
  }
}
static unsigned read_mappings(buf_t *out, buf_t *m, buf_t *strings, uintptr_t *ranges) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char chunk[4096], line[4096 + 64];
  size_t ll = 0;
  unsigned count = 0;
  ssize_t got;
  while ((got = read(fd, chunk, sizeof chunk)) > 0) {
    for (ssize_t i = 0; i < got; i++) {
      if (chunk[i] != '\n') {
        if (ll < sizeof line - 1) line[ll++] = chunk[i];
        continue;
      }
      line[ll] = '\0';
      ll = 0;
      /* start-end perms offset dev inode path */
      char *c = line;
      uintptr_t lo = (uintptr_t)parse_hex(&c);
      if (*c != '-') continue;
      c++;
      uintptr_t hi = (uintptr_t)parse_hex(&c);
      while (*c == ' ') c++;
      char perms[5] = {0};
      for (int k = 0; k < 4 && *c != '\0'; k++) perms[k] = *c++;
      while (*c == ' ') c++;
      uint64_t off = parse_hex(&c);
      for (int field = 0; field < 2; field++) { /* dev, inode */
        while (*c == ' ') c++;
        while (*c != ' ' && *c != '\0') c++;
      }
      while (*c == ' ') c++;
      if (perms[2] != 'x' || *c != '/' || count == MAX_MAPPINGS) continue;
      count++;
      ranges[2 * (count - 1)] = lo;
      ranges[2 * (count - 1) + 1] = hi;
      put_uint(m, 1, count);
      put_uint(m, 2, lo);
      put_uint(m, 3, hi);
      put_uint(m, 4, off);
      put_uint(m, 5, S_FIXED + count - 1);
      put_msg(out, 3, m);
      put_len(strings, 6, c, strlen(c));
    }
  }
  close(fd);
  return count;
}

/* Location ids: one per distinct pc, in a hash built for the dump. */
typedef struct {
  uintptr_t pc;
  uint64_t id;
} loc_t;

static uint64_t loc_id(loc_t *locs, size_t cap, uint64_t *next_id, uintptr_t pc, bool *fresh) {
  size_t j = (size_t)((pc * 0x9e3779b97f4a7c15ULL) >> 17) & (cap - 1);
  for (; locs[j].id != 0; j = (j + 1) & (cap - 1))
    if (locs[j].pc == pc) {
      *fresh = false;
      return locs[j].id;
    }
  locs[j].pc = pc;
  locs[j].id = (*next_id)++;
  *fresh = true;
  return locs[j].id;
}

static int64_t rounded(double v) { return v <= 0 ? 0 : (int64_t)(v + 0.5); }

/* Functions named by dladdr (exported symbols: a stripped program's, which
 * pprof cannot name itself); the rest pprof names from the files. */
typedef struct {
  uintptr_t addr; /* the symbol's; 0: empty */
  uint64_t id;
} fn_t;

/* The function id of pc's exported symbol (0: none), its Function message
 * written when new, its name appended to the string table. */
static uint64_t function_of(uintptr_t pc, fn_t *fns, size_t cap, uint64_t *next_id, uint64_t *next_str, buf_t *out,
                            buf_t *m, buf_t *strings) {
  Dl_info info;
  if (fns == NULL || dladdr((void *)pc, &info) == 0 || info.dli_sname == NULL || info.dli_saddr == NULL) return 0;
  uintptr_t a = (uintptr_t)info.dli_saddr;
  size_t j = (size_t)((a * 0x9e3779b97f4a7c15ULL) >> 17) & (cap - 1);
  for (; fns[j].addr != 0; j = (j + 1) & (cap - 1))
    if (fns[j].addr == a) return fns[j].id;
  fns[j].addr = a;
  fns[j].id = (*next_id)++;
  uint64_t name = (*next_str)++;
  put_len(strings, 6, info.dli_sname, strlen(info.dli_sname));
  put_uint(m, 1, fns[j].id);
  put_uint(m, 2, name);
  put_uint(m, 3, name);
  put_msg(out, 5, m);
  return fns[j].id;
}

/* The dump's state: location and function ids, scratch messages. */
typedef struct {
  buf_t *out, m, line, ids, sample, strings;
  loc_t *locs;
  fn_t *fns;
  size_t cap;
  uint64_t next_id, next_fn, next_str;
  unsigned nmap;
  const uintptr_t *ranges;
} dump_t;

/* A site's stack as packed location ids into d->ids, with the Location
 * messages of pcs not seen before. */
static void put_stack(dump_t *d, const site_t *s) {
  d->ids.len = 0;
  for (uint32_t i = 0; i < s->depth; i++) {
    /* a return address: the call is the instruction before it */
    uintptr_t pc = s->pcs[i] - 1;
    bool fresh;
    uint64_t id = loc_id(d->locs, d->cap, &d->next_id, pc, &fresh);
    put_varint(&d->ids, id);
    if (!fresh) continue;
    put_uint(&d->m, 1, id);
    for (unsigned k = 0; k < d->nmap; k++)
      if (pc >= d->ranges[2 * k] && pc < d->ranges[2 * k + 1]) {
        put_uint(&d->m, 2, k + 1);
        break;
      }
    put_uint(&d->m, 3, pc);
    uint64_t fn = function_of(pc, d->fns, d->cap, &d->next_fn, &d->next_str, d->out, &d->line, &d->strings);
    if (fn != 0) {
      put_uint(&d->line, 1, fn);
      put_msg(&d->m, 4, &d->line);
    }
    put_msg(d->out, 4, &d->m);
  }
}

/* Unchecked writes into room reserved by the caller (put_sample). */
static uint8_t *raw_len(uint8_t *p, unsigned field, const uint8_t *s, size_t n) {
  *p++ = (uint8_t)(field << 3 | 2);
  p = raw_varint(p, n);
  if (n != 0) memcpy(p, s, n);
  return p + n;
}
/* A Label message of a number (fields key, num, num_unit), up to 33 bytes. */
static uint8_t *raw_num_label(uint8_t *p, unsigned key, uint64_t num, unsigned unit) {
  uint8_t m[33], *e = m;
  *e++ = 1 << 3;
  e = raw_varint(e, key);
  *e++ = 3 << 3;
  e = raw_varint(e, num);
  *e++ = 4 << 3;
  e = raw_varint(e, unit);
  return raw_len(p, 3, m, (size_t)(e - m));
}

/* A Sample at d->ids' stack: values v, labels bytes = size and, for a
 * live block, alloc_time_ms (since profiling started). The message is
 * built in place (at most 116 bytes past the ids), in one reservation. */
static void put_sample(dump_t *d, const double v[4], size_t size, const uint64_t *t_ns) {
  if (d->ids.failed) d->out->failed = true;
  buf_t *b = &d->sample;
  b->len = 0;
  buf_reserve(b, d->ids.len + 160);
  if (b->failed) {
    d->out->failed = true;
    return;
  }
  uint8_t *p = raw_len(b->p, 1, d->ids.p, d->ids.len), vals[40], *e = vals;
  for (int k = 0; k < 4; k++) e = raw_varint(e, (uint64_t)rounded(v[k]));
  p = raw_len(p, 2, vals, (size_t)(e - vals));
  p = raw_num_label(p, S_BYTES, size, S_BYTES);
  if (t_ns != NULL) p = raw_num_label(p, S_ALLOC_TIME, (*t_ns - start_ns) / 1000000u, S_MS);
  b->len = (size_t)(p - b->p);
  put_msg(d->out, 2, b);
}

/* The whole Profile message into out (the lock held). symbolize: name
 * exported functions with dladdr (not from the signal handler: it takes
 * the loader's lock). alloc_* figures come one Sample per (site, size),
 * inuse_* ones one per live sample, with its time. */
static void build_profile(buf_t *out, bool symbolize) {
  dump_t d = {.out = out, .next_id = 1, .next_fn = 1};
  buf_t *m = &d.m;
  static const unsigned types[4][2] = {
      {S_ALLOC_OBJECTS, S_COUNT}, {S_ALLOC_SPACE, S_BYTES}, {S_INUSE_OBJECTS, S_COUNT}, {S_INUSE_SPACE, S_BYTES}};
  for (int t = 0; t < 4; t++) put_value_type(out, m, 1, types[t][0], types[t][1]);
  static uintptr_t ranges[2 * MAX_MAPPINGS]; /* (the lock held) */
  d.nmap = read_mappings(out, m, &d.strings, ranges);
  d.ranges = ranges;
  d.next_str = S_FIXED + d.nmap;
  size_t frames = 0;
  for (site_t *s = all_sites; s != NULL; s = s->all_next) frames += s->depth;
  size_t cap = 64;
  while (cap < frames * 2) cap *= 2;
  d.cap = cap;
  loc_t *locs = d.locs = map(cap * sizeof(loc_t));
  fn_t *fns = d.fns = symbolize ? map(cap * sizeof(fn_t)) : NULL;
  if (locs == NULL) out->failed = true;
  for (site_t *s = all_sites; s != NULL && locs != NULL; s = s->all_next) {
    if (s->alloc_objects <= 0) continue;
    put_stack(&d, s);
    for (bucket_t *b = s->buckets; b != NULL; b = b->site_next)
      if (b->objects > 0) put_sample(&d, (const double[4]){b->objects, b->space, 0, 0}, b->size, NULL);
  }
  for (size_t i = 0; i < live_cap && locs != NULL; i++) {
    const live_t *l = &live[i];
    if (l->addr <= 1) continue;
    put_stack(&d, l->site);
    put_sample(&d, (const double[4]){0, 0, l->objects, l->space}, l->size, &l->t_ns);
  }
  if (locs != NULL) munmap(locs, cap * sizeof(loc_t));
  if (fns != NULL) munmap(fns, cap * sizeof(fn_t));
  buf_free(&d.line);
  buf_free(&d.ids);
  buf_free(&d.sample);
  for (int i = 0; i < S_FIXED; i++) put_len(out, 6, fixed_strings[i], strlen(fixed_strings[i]));
  put_bytes(out, d.strings.p, d.strings.len);
  if (d.strings.failed) out->failed = true;
  uint64_t now = hm_now_ns();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  put_uint(out, 9, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec); /* time_nanos */
  put_uint(out, 10, now - start_ns);                                          /* duration_nanos */
  put_value_type(out, m, 11, S_SPACE, S_BYTES);                              /* period_type */
  put_uint(out, 12, (uint64_t)rate);                                          /* period */
  put_uint(out, 14, S_INUSE_SPACE);                                           /* default_sample_type */
  buf_free(m);
  buf_free(&d.strings);
}

/* ---- gzip: one member of stored deflate blocks (no compressor here) ---- */

static uint32_t crc_table[256];
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}
static uint32_t crc32_of(const uint8_t *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

static bool write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

static bool write_gzip(int fd, const uint8_t *p, size_t n) {
  static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  if (!write_all(fd, header, sizeof header)) return false;
  size_t off = 0;
  do {
    size_t len = n - off > 65535 ? 65535 : n - off;
    bool last = off + len == n;
    uint8_t h[5] = {last ? 1 : 0, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len, (uint8_t)(~len >> 8)};
    if (!write_all(fd, h, 5) || !write_all(fd, p + off, len)) return false;
    off += len;
  } while (off < n);
  uint32_t crc = crc32_of(p, n), size = (uint32_t)n;
  uint8_t t[8] = {(uint8_t)crc,  (uint8_t)(crc >> 8),  (uint8_t)(crc >> 16),  (uint8_t)(crc >> 24),
                  (uint8_t)size, (uint8_t)(size >> 8), (uint8_t)(size >> 16), (uint8_t)(size >> 24)};
  return write_all(fd, t, 8);
}

/* PATH with each %p replaced by the pid (and %% by %). */
static bool expand_path(const char *path, char *out, size_t cap) {
  size_t o = 0;
  for (const char *c = path; *c != '\0'; c++) {
    char num[24];
    const char *ins = NULL;
    char one[2] = {*c, 0};
    if (c[0] == '%' && c[1] == 'p') {
      hm_format_dec(num, (long)getpid());
      ins = num;
      c++;
    } else if (c[0] == '%' && c[1] == '%') {
      ins = "%";
      c++;
    } else {
      ins = one;
    }
    size_t l = strlen(ins);
    if (o + l >= cap) return false;
    memcpy(out + o, ins, l);
    o += l;
  }
  out[o] = '\0';
  return true;
}

/* Build and write the profile (the lock held). 0, or -1 with errno. */
static int dump_locked_err(const char *path, bool symbolize) {
  char name[4096];
  if (path == NULL || !expand_path(path, name, sizeof name)) {
    errno = EINVAL;
    return -1;
  }
  buf_t pb = {0};
  build_profile(&pb, symbolize);
  if (pb.failed) {
    buf_free(&pb);
    errno = ENOMEM;
    return -1;
  }
  int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    buf_free(&pb);
    errno = e;
    return -1;
  }
  bool ok = write_gzip(fd, pb.p, pb.len);
  int e = errno;
  close(fd);
  buf_free(&pb);
  if (!ok) {
    errno = e;
    return -1;
  }
  return 0;
}
static void dump_locked(const char *path, bool symbolize) {
  int saved = errno;
  (void)dump_locked_err(path, symbolize);
  errno = saved;
}

int hak_profile_dump(const char *path) {
  hm_ensure_init();
  if (!prof_on) {
    errno = ENOTSUP;
    return -1;
  }
  prof_lock();
  int r = dump_locked_err(path != NULL ? path : prof_path, true);
  int e = errno;
  prof_unlock();
  errno = e;
  return r;
}

/* SIGUSR2 (HAKMEM_PROFILE_SIGNAL=1): the dump at once if the lock is free,
 * else by the lock's holder as it lets go (prof_unlock). Uses only open,
 * read, write, close and private mappings. */
static void on_sigusr2(int sig) {
  (void)sig;
  atomic_store(&dump_pending, 1);
  if (!prof_trylock()) return;
  atomic_store(&dump_pending, 0);
  dump_locked(prof_path, false);
  prof_unlock();
}

/* ---- the leak report (HAKMEM_LEAK_REPORT=1) ----------------------------- */

static void write_hex(uintptr_t v) {
  char out[19] = "0x";
  int n = 0;
  char t[16];
  do {
    t[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0);
  for (int i = 0; i < n; i++) out[2 + i] = t[n - 1 - i];
  out[2 + n] = '\0';
  hm_write_str(out);
}
static void write_dec(long v) {
  char t[24];
  hm_format_dec(t, v);
  hm_write_str(t);
}

#define LEAK_SITES_MAX 50
static void leak_report(void) {
  prof_lock();
  size_t n = 0;
  for (site_t *s = all_sites; s != NULL; s = s->all_next)
    if (s->samples > 0) n++;
  site_t **order = n != 0 ? map(n * sizeof *order) : NULL;
  size_t k = 0;
  double total = 0, total_objects = 0;
  for (site_t *s = all_sites; s != NULL && order != NULL; s = s->all_next)
    if (s->samples > 0) {
      order[k++] = s;
      total += s->inuse_space;
      total_objects += s->inuse_objects;
    }
  for (size_t i = 1; i < k; i++) /* largest first */
    for (size_t j = i; j > 0 && order[j]->inuse_space > order[j - 1]->inuse_space; j--) {
      site_t *t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  for (site_t *s = all_sites; s != NULL; s = s->all_next) s->oldest_ns = UINT64_MAX;
  for (size_t i = 0; i < live_cap; i++)
    if (live[i].addr > 1 && live[i].t_ns < live[i].site->oldest_ns) live[i].site->oldest_ns = live[i].t_ns;
  uint64_t now = hm_now_ns();
  hm_write_str("hakmem: leak report: ");
  write_dec(rounded(total));
  hm_write_str(" bytes in ");
  write_dec(rounded(total_objects));
  hm_write_str(" blocks still allocated at exit (estimated from sampled blocks; HAKMEM_PROFILE_RATE=");
  write_dec((long)rate);
  hm_write_str("), ");
  write_dec((long)k);
  hm_write_str(" call sites\n");
  for (size_t i = 0; i < k && i < LEAK_SITES_MAX; i++) {
    site_t *s = order[i];
    hm_write_str("hakmem: leak: ");
    write_dec(rounded(s->inuse_space));
    hm_write_str(" bytes in ");
    write_dec(rounded(s->inuse_objects));
    hm_write_str(" blocks (");
    write_dec(s->samples);
    hm_write_str(s->samples == 1 ? " sample" : " samples");
    if (s->oldest_ns != UINT64_MAX) {
      hm_write_str(", the oldest ");
      write_dec((long)((now - s->oldest_ns) / 1000000u));
      hm_write_str(" ms old");
    }
    hm_write_str(") allocated at:\n");
    for (uint32_t f = 0; f < s->depth; f++) {
      Dl_info info;
      uintptr_t pc = s->pcs[f];
      hm_write_str("hakmem:   #");
      write_dec((long)f);
      hm_write_str(" ");
      write_hex(pc);
      if (dladdr((void *)(pc - 1), &info) != 0) {
        if (info.dli_sname != NULL) {
          hm_write_str(" ");
          hm_write_str(info.dli_sname);
          hm_write_str("+");
          write_hex(pc - (uintptr_t)info.dli_saddr);
        }
        if (info.dli_fname != NULL) {
          hm_write_str(" (");
          hm_write_str(info.dli_fname);
          hm_write_str("+");
          write_hex(pc - (uintptr_t)info.dli_fbase);
          hm_write_str(")");
        }
      }
      hm_write_str("\n");
    }
  }
  if (order != NULL) munmap(order, n * sizeof *order);
  prof_unlock();
}

/* ---- the live samples, read (explain.c) ---------------------------------- */

bool hm_prof_live_each(void (*fn)(const void *p, size_t n, double weight, void *arg), void *arg) {
  if (!prof_on) return false;
  stash_drain(); /* (not the program's blocks) */
  prof_lock();
  for (size_t i = 0; i < live_cap; i++)
    if (live[i].addr > 1 && live[i].objects > 0)
      fn((const void *)live[i].addr, live[i].size, live[i].objects, arg);
  prof_unlock();
  return true;
}

/* ---- start-up, exit, fork ----------------------------------------------- */

void hm_prof_init(void) {
  prof_path = hm_option_path(HM_OPT_PROFILE);
  if (prof_path != NULL && *prof_path == '\0') prof_path = NULL;
  if (prof_path == NULL && !hm_opt[HM_OPT_LEAK_REPORT]) return;
  rate = (double)hm_opt[HM_OPT_PROFILE_RATE];
  for (unsigned c = 0; c < NUM_CLASSES; c++) class_weight[c] = weight(hm_class_size[c]);
  start_ns = hm_now_ns();
  crc_init();
  hm_stack_init();
  prof_on = true;
  hm_sampler_enable(HM_SAMPLER_PROFILE, (uint64_t)hm_opt[HM_OPT_PROFILE_RATE], true, prof_serve);
  if (prof_path != NULL && hm_opt[HM_OPT_PROFILE_SIGNAL]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr2;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
  }
}

/* At exit, after the program's own destructors (a library's destructor). */
__attribute__((destructor)) static void prof_at_exit(void) {
  if (!prof_on) return;
  if (prof_path != NULL) {
    prof_lock();
    dump_locked(prof_path, true);
    prof_unlock();
  }
  if (hm_opt[HM_OPT_LEAK_REPORT]) leak_report();
}

void hm_prof_fork_prepare(void) {
  if (prof_on) prof_lock();
}
void hm_prof_fork_parent(void) {
  if (prof_on) prof_unlock();
}
/* The child keeps profiling, into its own file when PATH has %p. */
void hm_prof_fork_child(void) {
  if (!prof_on) return;
  hm_stack_fork_child();
  atomic_store(&dump_pending, 0);
  atomic_store_explicit(&prof_lock_word, 0, memory_order_release);
}
