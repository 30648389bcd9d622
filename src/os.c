/* The OS layer: every system call that maps memory or gives it back, and
 * the counters of them (hak_os_stats_get; slow paths only), the residency
 * of a range (pagemap, else mincore). Nothing here calls up: a caller
 * that wants a refused mapping retried gives memory back itself
 * (backend.c). */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

static _Atomic size_t n_mmap, n_munmap, n_madvise, n_mremap, n_mmap_fail, committed, purged;
static _Atomic size_t purged_total; /* cumulative bytes given back with madvise (the report) */

void *hm_os_map(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    atomic_fetch_add_explicit(&n_mmap_fail, 1, memory_order_relaxed);
    return NULL;
  }
  atomic_fetch_add_explicit(&n_mmap, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&committed, len, memory_order_relaxed);
  return p;
}

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
  atomic_fetch_add_explicit(&purged_total, len, memory_order_relaxed);
  return 0;
}

/* Mark [p, p+len) for transparent huge pages (no-op where the kernel has
 * none or its mode is never); counted as a madvise. */
void hm_os_hugepage(void *p, size_t len) {
  if (madvise(p, len, MADV_HUGEPAGE) == 0) atomic_fetch_add_explicit(&n_madvise, 1, memory_order_relaxed);
}

/* process_madvise(2) on the calling process (PIDFD_SELF), which takes any
 * advice there since Linux 6.13: the ranges of many blocks in one system
 * call (counted as one madvise). Elsewhere (older kernels) it fails at
 * once, and is not tried again; under a seccomp filter it is not tried. */
#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#define PIDFD_SELF_ (-10000) /* the calling thread, so its process (Linux 6.14) */
static _Atomic int ranges_state; /* 0 untried, 1 works, -1 refused */

bool hm_os_purge_ranges_ok(void) {
  return hm_opt[HM_OPT_PURGE_RANGES] != 0 && atomic_load_explicit(&ranges_state, memory_order_relaxed) >= 0;
}

bool hm_os_ranges_work(void) { return atomic_load_explicit(&ranges_state, memory_order_relaxed) > 0; }

/* Under a seccomp filter (mode 2 in /proc/self/status) a system call the
 * filter does not know may kill the process instead of failing (systemd's
 * SystemCallFilter= does so by default): process_madvise is not tried
 * there. Read with open/read: no allocation. */
static bool seccomp_filtered(void) {
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true; /* (cannot tell: the safe answer) */
  ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0) return true;
  buf[got] = '\0';
  const char *k = strstr(buf, "Seccomp:");
  if (k == NULL) return false; /* a kernel without seccomp */
  k += 8;
  while (*k == ' ' || *k == '\t') k++;
  return *k != '0';
}

long hm_os_purge_ranges(const struct iovec *v, unsigned n) {
  if (n == 0) return 0;
  if (!hm_os_purge_ranges_ok() || n > HM_OS_RANGES_MAX) return -1;
  if (atomic_load_explicit(&ranges_state, memory_order_relaxed) == 0 && seccomp_filtered()) {
    atomic_store(&ranges_state, -1);
    return -1;
  }
  long r = syscall(SYS_process_madvise, PIDFD_SELF_, v, (size_t)n, MADV_DONTNEED, 0u);
  if (r < 0) {
    if (atomic_load_explicit(&ranges_state, memory_order_relaxed) == 0) atomic_store(&ranges_state, -1);
    return -1;
  }
  atomic_store_explicit(&ranges_state, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&n_madvise, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&purged_total, (size_t)r, memory_order_relaxed);
  return r;
}

void hm_os_purged_add(size_t bytes) { atomic_fetch_add_explicit(&purged, bytes, memory_order_relaxed); }

void hm_os_purged_sub(size_t bytes) {
  if (bytes == 0) return;
  atomic_fetch_sub_explicit(&purged, bytes, memory_order_relaxed);
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
void *hm_os_move_pages(void *p, size_t len) {
  void *q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
  if (q == MAP_FAILED) return NULL;
  atomic_fetch_add_explicit(&n_mremap, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&committed, len, memory_order_relaxed); /* the old range stays mapped */
  return q;
}

/* Move the pages of [p, p+len) over [dst, dst+len), a mapping of ours
 * they replace (its pages untouched); false if the OS refused. */
bool hm_os_move_over(void *p, size_t len, void *dst) {
  if (mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == MAP_FAILED) return false;
  atomic_fetch_add_explicit(&n_mremap, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&committed, len, memory_order_relaxed); /* dst's old pages went */
  return true;
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

/* Resident bytes of [p, p+len) (p page aligned): the report's breakdown of
 * where the RSS is. A page the program only read maps the kernel's shared
 * zero page, which mincore calls resident and RSS does not count (a realloc
 * copying a block written at its two ends reads every page between: the
 * breakdown then showed tens of MiB that were not there). /proc/self/pagemap
 * tells them apart without privileges: a page of our own is mapped by this
 * process alone (bit 56), the zero page never is. So are pages shared with
 * a forked parent or child until one of them writes them, which RSS counts
 * and this does not. mincore if pagemap cannot be read. Opened per call, so
 * that no descriptor of ours outlives the report. */
size_t hm_os_resident(const void *p, size_t len) {
  int fd = hm_os_pagemap_open();
  size_t r = hm_os_resident_fd(fd, p, len);
  if (fd >= 0) close(fd);
  return r;
}

int hm_os_pagemap_open(void) { return open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC); }

/* hm_os_resident with pagemap open already (fd < 0: mincore): the
 * breakdown of the resident memory reads thousands of ranges. */
size_t hm_os_resident_fd(int fd, const void *p, size_t len) {
  enum { CHUNK = 512 };
  size_t pages = 0;
  for (size_t off = 0; off < len; off += (size_t)CHUNK * HM_PAGE_SIZE) {
    size_t n = (len - off + HM_PAGE_SIZE - 1) / HM_PAGE_SIZE;
    if (n > CHUNK) n = CHUNK;
    const char *a = (const char *)p + off;
    if (fd >= 0) {
      uint64_t ent[CHUNK];
      if (pread(fd, ent, n * sizeof ent[0], (off_t)((uintptr_t)a / HM_PAGE_SIZE * sizeof ent[0])) ==
          (ssize_t)(n * sizeof ent[0])) {
        for (size_t i = 0; i < n; i++) pages += (ent[i] >> 63) & (ent[i] >> 56) & 1u; /* present, exclusive */
        continue;
      }
    }
    unsigned char vec[CHUNK];
    if (mincore((void *)a, n * HM_PAGE_SIZE, vec) != 0) continue;
    for (size_t i = 0; i < n; i++) pages += vec[i] & 1u;
  }
  return pages * HM_PAGE_SIZE;
}

size_t hm_os_resident_bits(int fd, const void *p, size_t pages, uint64_t *bits) {
  enum { CHUNK = 512 };
  size_t n = pages < CHUNK ? pages : CHUNK, count = 0;
  memset(bits, 0, (n + 63) / 64 * sizeof *bits);
  uint64_t ent[CHUNK];
  unsigned char vec[CHUNK];
  bool pm = fd >= 0 && pread(fd, ent, n * sizeof ent[0], (off_t)((uintptr_t)p / HM_PAGE_SIZE * sizeof ent[0])) ==
                           (ssize_t)(n * sizeof ent[0]);
  if (!pm && mincore((void *)p, n * HM_PAGE_SIZE, vec) != 0) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned r = pm ? (unsigned)((ent[i] >> 63) & (ent[i] >> 56) & 1u) : (vec[i] & 1u);
    bits[i / 64] |= (uint64_t)r << (i % 64);
    count += r;
  }
  return count;
}

/* The process's anonymous resident bytes (RssAnon in /proc/self/status),
 * read into a stack buffer; 0 if unknown. */
size_t hm_os_rss_anon(void) {
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strstr(buf, "\nRssAnon:");
  if (p == NULL) return 0;
  size_t kb = 0;
  for (p += 10; *p == ' ' || *p == '\t'; p++) {}
  for (; *p >= '0' && *p <= '9'; p++) kb = kb * 10 + (size_t)(*p - '0');
  return kb << 10;
}

size_t hm_os_purged_bytes(void) { return atomic_load_explicit(&purged_total, memory_order_relaxed); }

void hak_os_stats_get(struct hak_os_stats *out) {
  if (out == NULL) return;
  out->mmap_calls = atomic_load_explicit(&n_mmap, memory_order_relaxed);
  out->munmap_calls = atomic_load_explicit(&n_munmap, memory_order_relaxed);
  out->madvise_calls = atomic_load_explicit(&n_madvise, memory_order_relaxed);
  out->mremap_calls = atomic_load_explicit(&n_mremap, memory_order_relaxed);
  out->mmap_failures = atomic_load_explicit(&n_mmap_fail, memory_order_relaxed);
  out->committed_bytes = atomic_load_explicit(&committed, memory_order_relaxed);
  out->purged_bytes = atomic_load_explicit(&purged, memory_order_relaxed);
}

size_t hm_os_committed(void) { return atomic_load_explicit(&committed, memory_order_relaxed); }
size_t hm_os_purged_now(void) { return atomic_load_explicit(&purged, memory_order_relaxed); }
