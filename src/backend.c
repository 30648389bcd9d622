/* Backend: memory from the OS, SuperSlabs handed out and taken back.
 *
 * SuperSlabs are carved from 2 MiB-aligned reservations (32 MiB when the OS
 * allows, else one SuperSlab at a time). Empty SuperSlabs come back here and
 * are reused before anything new is mapped, so a steady workload makes no
 * system calls. Every OS call is counted (slow paths only). */
#include <pthread.h>
#include <sys/mman.h>

#include "internal.h"

#define REGION_SIZE ((size_t)32 << 20)

static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
static superslab_t *empty_ss;           /* empty SuperSlabs, ready for reuse */
static char *region_cur, *region_end;   /* unused part of the last reservation */

static _Atomic size_t n_mmap, n_munmap, n_madvise, n_mremap, n_mmap_fail, committed;

static void *os_map_once(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    atomic_fetch_add_explicit(&n_mmap_fail, 1, memory_order_relaxed);
    return NULL;
  }
  atomic_fetch_add_explicit(&n_mmap, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&committed, len, memory_order_relaxed);
  return p;
}

/* Unmap the cached empty SuperSlabs and the unused rest of the last
 * reservation. Returns the bytes given back. backend_lock held. */
static size_t release_cached_locked(void) {
  size_t bytes = 0;
  while (empty_ss != NULL) {
    superslab_t *ss = empty_ss;
    empty_ss = ss->next;
    hm_reg_set((uintptr_t)ss, REG_NONE);
    hm_os_unmap(ss, SS_SIZE);
    bytes += SS_SIZE;
  }
  if (region_cur != region_end) {
    bytes += (size_t)(region_end - region_cur);
    hm_os_unmap(region_cur, (size_t)(region_end - region_cur));
    region_cur = region_end = NULL;
  }
  return bytes;
}

size_t hm_backend_release_cached(void) {
  pthread_mutex_lock(&backend_lock);
  size_t bytes = release_cached_locked();
  pthread_mutex_unlock(&backend_lock);
  return bytes;
}

/* When the OS refuses (address-space limit), cached memory is given back
 * and the mapping tried once more. */
static void *os_map_retry(size_t len, bool locked) {
  void *p = os_map_once(len);
  if (p == NULL && (locked ? release_cached_locked() : hm_backend_release_cached()) != 0) p = os_map_once(len);
  return p;
}

void *hm_os_map(size_t len) { return os_map_retry(len, false); }

void hm_os_unmap(void *p, size_t len) {
  if (len == 0) return;
  munmap(p, len);
  atomic_fetch_add_explicit(&n_munmap, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&committed, len, memory_order_relaxed);
}

/* Give the pages of [p, p+len) back to the OS, keeping the mapping (the
 * range reads as zeros afterwards). Returns 0, or -1 if the OS refused. */
int hm_os_purge(void *p, size_t len) {
  if (len == 0) return 0;
  if (madvise(p, len, MADV_DONTNEED) != 0) return -1;
  atomic_fetch_add_explicit(&n_madvise, 1, memory_order_relaxed);
  return 0;
}

/* Resize a mapping, moving it if may_move; NULL if the OS refused. */
void *hm_os_remap(void *p, size_t old_len, size_t new_len, bool may_move) {
  void *q = mremap(p, old_len, new_len, may_move ? MREMAP_MAYMOVE : 0);
  if (q == MAP_FAILED) return NULL;
  atomic_fetch_add_explicit(&n_mremap, 1, memory_order_relaxed);
  if (new_len >= old_len)
    atomic_fetch_add_explicit(&committed, new_len - old_len, memory_order_relaxed);
  else
    atomic_fetch_sub_explicit(&committed, old_len - new_len, memory_order_relaxed);
  return q;
}

/* Map len bytes aligned to SS_SIZE: over-map and trim both ends. */
static void *os_map_aligned(size_t len) {
  char *raw = os_map_retry(len + SS_SIZE, true);
  if (raw == NULL) return NULL;
  char *base = (char *)(((uintptr_t)raw + SS_MASK) & ~SS_MASK);
  hm_os_unmap(raw, (size_t)(base - raw));
  hm_os_unmap(base + len, (size_t)(raw + len + SS_SIZE - (base + len)));
  return base;
}

superslab_t *hm_backend_ss_alloc(void) {
  superslab_t *ss = NULL;
  pthread_mutex_lock(&backend_lock);
  if (empty_ss != NULL) {
    ss = empty_ss;
    empty_ss = ss->next;
  } else {
    if (region_cur == region_end) {
      char *r = os_map_aligned(REGION_SIZE);
      size_t len = REGION_SIZE;
      if (r == NULL) {  /* near the address-space limit: one SuperSlab only */
        r = os_map_aligned(SS_SIZE);
        len = SS_SIZE;
      }
      if (r != NULL) {
        region_cur = r;
        region_end = r + len;
      }
    }
    if (region_cur != region_end) {
      ss = (superslab_t *)region_cur;
      region_cur += SS_SIZE;
      /* registered only once carved: an uncarved chunk has no header yet */
      hm_reg_set((uintptr_t)ss, REG_SS);
    }
  }
  pthread_mutex_unlock(&backend_lock);
  return ss;
}

void hm_backend_ss_free(superslab_t *ss) {
  HM_ASSERT(atomic_load(&ss->owner) == NULL);
  pthread_mutex_lock(&backend_lock);
  ss->next = empty_ss;
  empty_ss = ss;
  pthread_mutex_unlock(&backend_lock);
}

/* Metadata (thread heaps): bump allocation from mapped chunks, never freed;
 * heaps are recycled by heap.c, so this stays bounded. */
void *hm_meta_alloc(size_t size) {
  static char *cur, *end;
  size = (size + 63) & ~(size_t)63;
  pthread_mutex_lock(&backend_lock);
  if ((size_t)(end - cur) < size) {
    size_t chunk = size > ((size_t)64 << 10) ? size : ((size_t)64 << 10);
    char *p = os_map_retry(chunk, true);
    if (p == NULL) {
      pthread_mutex_unlock(&backend_lock);
      return NULL;
    }
    cur = p;
    end = p + chunk;
  }
  void *r = cur;
  cur += size;
  pthread_mutex_unlock(&backend_lock);
  return r;
}

void hm_backend_fork_prepare(void) { pthread_mutex_lock(&backend_lock); }
void hm_backend_fork_parent(void) { pthread_mutex_unlock(&backend_lock); }
void hm_backend_fork_child(void) { pthread_mutex_init(&backend_lock, NULL); }

void hak_os_stats_get(struct hak_os_stats *out) {
  if (out == NULL) return;
  out->mmap_calls = atomic_load_explicit(&n_mmap, memory_order_relaxed);
  out->munmap_calls = atomic_load_explicit(&n_munmap, memory_order_relaxed);
  out->madvise_calls = atomic_load_explicit(&n_madvise, memory_order_relaxed);
  out->mremap_calls = atomic_load_explicit(&n_mremap, memory_order_relaxed);
  out->mmap_failures = atomic_load_explicit(&n_mmap_fail, memory_order_relaxed);
  out->committed_bytes = atomic_load_explicit(&committed, memory_order_relaxed);
}
