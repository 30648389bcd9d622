/* Backend: memory from the OS, SuperSlabs handed out and taken back.
 *
 * SuperSlabs are carved from 2 MiB-aligned reservations (32 MiB when the OS
 * allows, else one SuperSlab at a time). Empty SuperSlabs come back here and
 * are reused before anything new is mapped, so a steady workload makes no
 * system calls. The cache of empty SuperSlabs is kept outside them (an
 * array, newest on top), so a whole SuperSlab, header included, can be given
 * back with madvise and adjacent ones in one call. The OS calls themselves
 * are os.c's. */
#include <pthread.h>

#include "internal.h"

#define REGION_SIZE ((size_t)32 << 20)
#define PURGE_BATCH 64   /* SuperSlabs given back per call at most */

/* An empty SuperSlab in the cache: since when, and how much of it is
 * already given back (SS_SIZE once purged whole). */
typedef struct {
  superslab_t *ss;
  uint64_t since_ns;
  size_t purged;
} cached_t;

static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
/* cache[0 .. cache_clean) are purged whole; cache[cache_clean .. cache_n)
 * are resident, oldest first. Allocation takes the top (the most recent). */
static cached_t *cache;
static size_t cache_n, cache_cap, cache_clean;
static char *region_cur, *region_end;   /* unused part of the last reservation */
static size_t reserved;                 /* bytes of reservations mapped so far */
static uintptr_t ss_lo = UINTPTR_MAX, ss_hi; /* bounds of every SuperSlab carved (the report's walk) */
static _Atomic size_t region_left;      /* its size, for the resident estimate */
static _Atomic size_t cache_resident;   /* bytes of cached SuperSlabs not given back */
/* Every reservation, for walking the SuperSlabs in use (hm_backend_for_each_ss). */
typedef struct {
  char *base;
  size_t len;
} region_t;
static region_t *regions;
static size_t region_n, region_cap;

static _Atomic size_t n_ss_alloc, n_ss_free, n_fallback, n_large_maps;
/* Hooks (docs/DESIGN.md, "Hooks"): the large lane's, registered at start-up. */
static size_t (*oom_release)(uint64_t min_idle_ns);
static size_t (*untouched_hook)(void);

void hm_backend_set_oom_release(size_t (*release)(uint64_t min_idle_ns)) { oom_release = release; }
void hm_backend_set_untouched(size_t (*untouched)(void)) { untouched_hook = untouched; }

static void *meta_alloc_locked(size_t size);

static int cmp_cached(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const cached_t *)a)->ss, y = (uintptr_t)((const cached_t *)b)->ss;
  return x < y ? -1 : x > y;
}

/* Sort entries by address (insertion sort: batches are small or rare). */
static void sort_by_address(cached_t *e, size_t n) {
  for (size_t i = 1; i < n; i++) {
    cached_t x = e[i];
    size_t j = i;
    for (; j > 0 && cmp_cached(&e[j - 1], &x) > 0; j--) e[j] = e[j - 1];
    e[j] = x;
  }
}

/* Length of the run of address-adjacent SuperSlabs starting at e[0]. */
static size_t adjacent_run(const cached_t *e, size_t n) {
  size_t k = 1;
  while (k < n && (char *)e[k].ss == (char *)e[k - 1].ss + SS_SIZE) k++;
  return k;
}

/* Unmap the cached empty SuperSlabs (adjacent ones in one call) and the
 * unused rest of the last reservation. Returns the bytes given back.
 * backend_lock held. */
static size_t release_cached_locked(void) {
  size_t bytes = 0;
  sort_by_address(cache, cache_n);
  for (size_t i = 0; i < cache_n;) {
    size_t k = adjacent_run(cache + i, cache_n - i);
    size_t was_purged = 0;
    for (size_t j = i; j < i + k; j++) {
      hm_reg_set((uintptr_t)cache[j].ss, REG_NONE);
      was_purged += cache[j].purged;
    }
    hm_os_unmap(cache[i].ss, k * SS_SIZE);
    hm_os_purged_sub(was_purged);
    bytes += k * SS_SIZE - was_purged;
    i += k;
  }
  cache_n = cache_clean = 0;
  atomic_store_explicit(&cache_resident, 0, memory_order_relaxed);
  if (region_cur != region_end) {
    hm_os_unmap(region_cur, (size_t)(region_end - region_cur));
    region_cur = region_end = NULL;
    atomic_store_explicit(&region_left, 0, memory_order_relaxed);
  }
  return bytes;
}

size_t hm_backend_release_cached(void) {
  hm_mutex_lock(&backend_lock);
  size_t bytes = release_cached_locked();
  hm_mutex_unlock(&backend_lock);
  return bytes;
}

/* When the OS refuses (address-space limit), cached memory is given back
 * and the mapping tried once more. */
static void *os_map_retry(size_t len, bool locked) {
  void *p = hm_os_map(len);
  if (p == NULL && (locked ? release_cached_locked() : hm_backend_release_cached()) + (oom_release != NULL ? oom_release(0) : 0) != 0)
    p = hm_os_map(len);
  return p;
}

/* Only the large lane maps through here: each call is one span. */
void *hm_backend_map_span(size_t len) {
  atomic_fetch_add_explicit(&n_large_maps, 1, memory_order_relaxed);
  return os_map_retry(len, false);
}

size_t hm_backend_resident_estimate(void) {
  size_t c = hm_os_committed();
  size_t p = hm_os_purged_now();
  size_t untouched = atomic_load_explicit(&region_left, memory_order_relaxed);
  if (untouched_hook != NULL) untouched += untouched_hook(); /* cached large spans never used or given back */
  return c > p + untouched ? c - p - untouched : 0;
}

size_t hm_backend_cached_resident(void) { return atomic_load_explicit(&cache_resident, memory_order_relaxed); }

/* Map len bytes aligned to SS_SIZE: over-map and trim both ends. */
static void *os_map_aligned(size_t len) {
  char *raw = os_map_retry(len + SS_SIZE, true);
  if (raw == NULL) return NULL;
  char *base = (char *)(((uintptr_t)raw + SS_MASK) & ~SS_MASK);
  hm_os_unmap(raw, (size_t)(base - raw));
  hm_os_unmap(base + len, (size_t)(raw + len + SS_SIZE - (base + len)));
  return base;
}

static void add_region(char *base, size_t len) {
  if (region_n == region_cap) {
    size_t cap = region_cap ? region_cap * 2 : 64;
    region_t *r = meta_alloc_locked(cap * sizeof *r);
    if (r == NULL) return; /* its SuperSlabs are then only purged once empty */
    if (region_n != 0) memcpy(r, regions, region_n * sizeof *r);
    regions = r; /* the old array stays: metadata is never freed */
    region_cap = cap;
  }
  regions[region_n++] = (region_t){base, len};
}

superslab_t *hm_backend_ss_alloc(void) {
  superslab_t *ss = NULL;
  hm_mutex_lock(&backend_lock);
  if (cache_n != 0) {
    cached_t e = cache[--cache_n];
    if (cache_clean > cache_n) cache_clean = cache_n;
    atomic_fetch_sub_explicit(&cache_resident, SS_SIZE - e.purged, memory_order_relaxed);
    ss = e.ss;
    hm_reg_set((uintptr_t)ss, REG_SS);
    hm_mutex_unlock(&backend_lock);
    if (e.purged == SS_SIZE) hm_purge_regret(e.since_ns, hm_now_ns());
    /* what was given back is counted as committed again once handed out */
    hm_os_purged_sub(e.purged);
    atomic_fetch_add_explicit(&n_ss_alloc, 1, memory_order_relaxed);
    return ss;
  }
  if (region_cur == region_end) {
    char *r = os_map_aligned(REGION_SIZE);
    size_t len = REGION_SIZE;
    if (r == NULL) {  /* near the address-space limit: one SuperSlab only */
      r = os_map_aligned(SS_SIZE);
      len = SS_SIZE;
      if (r != NULL) atomic_fetch_add_explicit(&n_fallback, 1, memory_order_relaxed);
    }
    if (r != NULL) {
      /* huge pages once the heap is large (docs/DESIGN.md, "SuperSlabs and the backend") */
      size_t thp_min = (size_t)hm_opt[HM_OPT_THP_MIN_MB] << 20;
      if (thp_min != 0 && reserved + len > thp_min) hm_os_hugepage(r, len);
      reserved += len;
      add_region(r, len); /* first: it may give back what is cached */
      region_cur = r;
      region_end = r + len;
    }
  }
  if (region_cur != region_end) {
    ss = (superslab_t *)region_cur;
    region_cur += SS_SIZE;
    if ((uintptr_t)ss < ss_lo) ss_lo = (uintptr_t)ss;
    if ((uintptr_t)ss > ss_hi) ss_hi = (uintptr_t)ss;
    atomic_store_explicit(&region_left, (size_t)(region_end - region_cur), memory_order_relaxed);
    /* registered only once carved: an uncarved chunk has no header yet */
    hm_reg_set((uintptr_t)ss, REG_SS);
    atomic_fetch_add_explicit(&n_ss_alloc, 1, memory_order_relaxed);
  }
  hm_mutex_unlock(&backend_lock);
  return ss;
}

/* Room for one more cache entry; false if no metadata could be had. */
static bool cache_reserve_locked(void) {
  if (cache_n < cache_cap) return true;
  size_t cap = cache_cap ? cache_cap * 2 : 256;
  cached_t *c = meta_alloc_locked(cap * sizeof *c);
  if (c == NULL) return false;
  if (cache_n != 0) memcpy(c, cache, cache_n * sizeof *c);
  cache = c; /* the old array stays: metadata is never freed */
  cache_cap = cap;
  return true;
}

void hm_backend_ss_free(superslab_t *ss) {
  HM_ASSERT(atomic_load(&ss->owner) == NULL);
  hm_unit_map_clear((uintptr_t)ss); /* free takes the registry's path from here */
  size_t was_purged = hm_purge_ss_leave(ss);
  uint64_t now = hm_now_ns();
  atomic_fetch_add_explicit(&n_ss_free, 1, memory_order_relaxed);
  hm_mutex_lock(&backend_lock);
  if (!cache_reserve_locked()) {
    hm_reg_set((uintptr_t)ss, REG_NONE);
    hm_os_unmap(ss, SS_SIZE);
    hm_mutex_unlock(&backend_lock);
    hm_os_purged_sub(was_purged);
    return;
  }
  cache[cache_n++] = (cached_t){ss, now, was_purged};
  atomic_fetch_add_explicit(&cache_resident, SS_SIZE - was_purged, memory_order_relaxed);
  hm_reg_set((uintptr_t)ss, REG_SS_CACHED);
  hm_mutex_unlock(&backend_lock);
  if (hm_purge_unused_now(now)) {
    uint64_t next = UINT64_MAX;
    hm_backend_purge_cached(now, 0, SIZE_MAX, &next);
  }
}

size_t hm_backend_purge_cached(uint64_t now, uint64_t delay_ns, size_t budget, uint64_t *next_due) {
  cached_t batch[PURGE_BATCH];
  size_t k = 0, bytes = 0;
  hm_mutex_lock(&backend_lock);
  size_t i = cache_clean;
  while (i < cache_n && k < PURGE_BATCH && bytes < budget && cache[i].since_ns + delay_ns <= now) {
    bytes += SS_SIZE - cache[i].purged;
    batch[k++] = cache[i++];
  }
  if (i < cache_n) {
    /* not yet idle long enough, or out of budget: when to come back */
    uint64_t due = cache[i].since_ns + delay_ns <= now ? now : cache[i].since_ns + delay_ns;
    if (due < *next_due) *next_due = due;
  }
  if (k == 0) {
    hm_mutex_unlock(&backend_lock);
    return 0;
  }
  /* Out of the cache while the OS works, so that nobody reuses them. */
  memmove(cache + cache_clean, cache + i, (cache_n - i) * sizeof *cache);
  cache_n -= k;
  atomic_fetch_sub_explicit(&cache_resident, bytes, memory_order_relaxed);
  hm_mutex_unlock(&backend_lock);

  sort_by_address(batch, k);
  for (size_t j = 0; j < k;) {
    size_t run = adjacent_run(batch + j, k - j);
    hm_os_purge(batch[j].ss, run * SS_SIZE);
    j += run;
  }
  hm_os_purged_add(bytes);
  uint64_t done = hm_now_ns();
  for (size_t j = 0; j < k; j++) { /* since_ns now says when it was given back */
    batch[j].purged = SS_SIZE;
    batch[j].since_ns = done;
  }

  hm_mutex_lock(&backend_lock);
  for (size_t j = 0; j < k; j++) {
    if (!cache_reserve_locked()) { /* no metadata: give the rest back whole */
      for (; j < k; j++) {
        hm_reg_set((uintptr_t)batch[j].ss, REG_NONE);
        hm_os_unmap(batch[j].ss, SS_SIZE);
        hm_os_purged_sub(SS_SIZE);
      }
      break;
    }
    /* purged ones go below the resident ones */
    memmove(cache + cache_clean + 1, cache + cache_clean, (cache_n - cache_clean) * sizeof *cache);
    cache[cache_clean++] = batch[j];
    cache_n++;
  }
  hm_mutex_unlock(&backend_lock);
  return bytes;
}

void hm_backend_for_each_ss(bool (*fn)(superslab_t *ss, void *arg), void *arg) {
  hm_mutex_lock(&backend_lock);
  for (size_t r = 0; r < region_n; r++) {
    for (size_t off = 0; off < regions[r].len; off += SS_SIZE) {
      char *c = regions[r].base + off;
      if (__atomic_load_n(&hm_registry[(uintptr_t)c >> SS_SHIFT], __ATOMIC_RELAXED) != REG_SS) continue;
      if (!fn((superslab_t *)c, arg)) goto out;
    }
  }
out:
  hm_mutex_unlock(&backend_lock);
}

void hm_backend_ss_counts(struct hm_ss_counts *out) {
  out->ss_alloc = atomic_load_explicit(&n_ss_alloc, memory_order_relaxed);
  out->ss_free = atomic_load_explicit(&n_ss_free, memory_order_relaxed);
  out->fallback_mmap = atomic_load_explicit(&n_fallback, memory_order_relaxed);
  out->large_maps = atomic_load_explicit(&n_large_maps, memory_order_relaxed);
}

/* Each metadata chunk starts with a line linking it to the others, so
 * that the resident breakdown finds them (hm_backend_meta_resident). */
typedef struct meta_chunk {
  struct meta_chunk *next;
  size_t len;
} meta_chunk_t;
static meta_chunk_t *meta_chunks;

/* Metadata (thread heaps, the cache and region arrays): bump allocation
 * from mapped chunks, never freed; heaps are recycled by heap.c and the
 * arrays only double, so this stays bounded. backend_lock held. */
static void *meta_alloc_locked(size_t size) {
  static char *cur, *end;
  size = (size + 63) & ~(size_t)63;
  if ((size_t)(end - cur) < size) {
    size_t chunk = size + 64 > ((size_t)64 << 10) ? (size + 64 + HM_PAGE_SIZE - 1) & ~(size_t)(HM_PAGE_SIZE - 1)
                                                   : ((size_t)64 << 10);
    char *p = os_map_retry(chunk, true);
    if (p == NULL) return NULL;
    meta_chunk_t *m = (meta_chunk_t *)p;
    m->next = meta_chunks;
    m->len = chunk;
    meta_chunks = m;
    cur = p + 64;
    end = p + chunk;
  }
  void *r = cur;
  cur += size;
  return r;
}

void *hm_meta_alloc(size_t size) {
  hm_mutex_lock(&backend_lock);
  void *r = meta_alloc_locked(size);
  hm_mutex_unlock(&backend_lock);
  return r;
}

/* The registry tells which chunks between the bounds are SuperSlabs still
 * mapped; the lock keeps release_cached_locked from unmapping one meanwhile. */
void hm_backend_walk_ss(void (*fn)(superslab_t *ss, void *arg), void *arg) {
  hm_mutex_lock(&backend_lock);
  for (uintptr_t a = ss_lo; a <= ss_hi && ss_lo != UINTPTR_MAX; a += SS_SIZE)
    if (hm_reg_kind(a) == REG_SS) fn((superslab_t *)a, arg);
  hm_mutex_unlock(&backend_lock);
}

size_t hm_backend_cached_bytes(void) {
  hm_mutex_lock(&backend_lock);
  size_t bytes = (size_t)(region_end - region_cur);
  bytes += cache_n * SS_SIZE;
  hm_mutex_unlock(&backend_lock);
  return bytes;
}

/* Resident bytes of the cached empty SuperSlabs. */
size_t hm_backend_cached_resident_now(void) {
  hm_mutex_lock(&backend_lock);
  size_t bytes = 0;
  for (size_t i = 0; i < cache_n; i++) bytes += hm_os_resident(cache[i].ss, SS_SIZE);
  hm_mutex_unlock(&backend_lock);
  return bytes;
}

size_t hm_backend_meta_resident(int fd) {
  size_t bytes = 0;
  hm_mutex_lock(&backend_lock);
  for (meta_chunk_t *m = meta_chunks; m != NULL; m = m->next) bytes += hm_os_resident_fd(fd, m, m->len);
  hm_mutex_unlock(&backend_lock);
  return bytes;
}

size_t hm_backend_reserve_resident(int fd) {
  hm_mutex_lock(&backend_lock);
  size_t bytes = region_cur != region_end ? hm_os_resident_fd(fd, region_cur, (size_t)(region_end - region_cur)) : 0;
  hm_mutex_unlock(&backend_lock);
  return bytes;
}

void hm_backend_fork_prepare(void) { pthread_mutex_lock(&backend_lock); }
void hm_backend_fork_parent(void) { pthread_mutex_unlock(&backend_lock); }
void hm_backend_fork_child(void) { pthread_mutex_init(&backend_lock, NULL); }
