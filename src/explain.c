/* hakmem's resident memory explained: every range hakmem maps is read
 * from /proc/self/pagemap (else mincore) once, and each resident page is
 * put in one part, so that the parts add up to the total (the JSON
 * report's "resident" object, the text report's "resident explained"
 * line; docs/USING.md, "Statistics").
 *
 * Within a slab in use, the pages of its carved blocks are split between
 * the blocks handed out and the free ones in proportion to their counts
 * (nothing says which free block lies where without walking lists the
 * owner is changing). Blocks other threads freed count as handed out in
 * their slabs: those on remote lists are counted (hm_slab_remote_count)
 * and free, those in foreign caches are moved to the caches at their
 * block size. */
#include <unistd.h>

#include "guard.h"
#include "internal.h"

struct walk {
  int fd;
  struct hm_explain *e;
};

static uintptr_t page_down(uintptr_t a) { return a & ~(uintptr_t)(HM_PAGE_SIZE - 1); }
static uintptr_t page_up(uintptr_t a) { return page_down(a + HM_PAGE_SIZE - 1); }

/* Resident bytes of the pages [a, b) covers, a and b page aligned. */
static size_t res(int fd, uintptr_t a, uintptr_t b) { return b > a ? hm_os_resident_fd(fd, (const void *)a, b - a) : 0; }

static void explain_ss(superslab_t *ss, void *arg) {
  struct walk *w = arg;
  struct hm_explain *e = w->e;
  unsigned n = __atomic_load_n(&ss->nslabs, __ATOMIC_RELAXED), shift = __atomic_load_n(&ss->slab_shift, __ATOMIC_RELAXED);
  if (n > SS_MAX_SLABS) n = SS_MAX_SLABS;
  uintptr_t base = (uintptr_t)ss;
  e->meta_headers += res(w->fd, base, base + SS_HEADER_SIZE);
  for (unsigned i = 0; i < n; i++) {
    const slab_t *s = &ss->slabs[i];
    uintptr_t a = base + ((uintptr_t)i << shift) + (i == 0 ? SS_HEADER_SIZE : 0);
    uintptr_t end = base + ((uintptr_t)(i + 1) << shift);
    unsigned state = __atomic_load_n(&s->in_use, __ATOMIC_RELAXED);
    if (state == SLAB_UNUSED) {
      e->unused_slabs += res(w->fd, a, end);
      continue;
    }
    size_t carved = __atomic_load_n(&s->carved, __ATOMIC_RELAXED);
    size_t used = hm_slab_used(s);
    size_t bs = hm_slab_bs_relaxed(s);
    uintptr_t start = base + hm_start_off(__atomic_load_n(&s->start_lo, __ATOMIC_RELAXED));
    if (state == SLAB_FULL) used = carved; /* (1 while FULL) */
    if (used > carved) used = carved;
    size_t remote = hm_slab_remote_count(s); /* freed by other threads, not yet taken back */
    used = remote < used ? used - remote : 0;
    uintptr_t cend = page_up(start + carved * bs);
    if (cend < a) cend = a;
    if (cend > end) cend = end;
    size_t rc = res(w->fd, a, cend), rest = res(w->fd, cend, end);
    if (used == 0) { /* a thread's empty current slab or spare */
      e->empty_slabs += rc + rest;
      continue;
    }
    size_t out = (size_t)((unsigned __int128)rc * used / carved);
    e->blocks_pool += out;
    e->free_in_slabs += rc - out + rest;
  }
}

/* The live samples (prof.c), weighted: the bytes asked for and the usable
 * bytes the lanes give for them (the class size; above the pool, the
 * sampled block's own, as it came from the large lane); and, unweighted,
 * the resident bytes the sampled blocks take beyond that (each is a large
 * block: a page at least; a span in secure builds). The profiler's lock
 * is held: a sampled block is not freed meanwhile (hm_prof_free first). */
struct est {
  int fd;
  double requested, usable;
  size_t own, n;
};
static void add_sample(const void *p, size_t n, double w, void *arg) {
  struct est *s = arg;
  size_t lu = hm_large_usable(p), u = n <= POOL_MAX ? hm_class_size[hm_size_class(n)] : lu;
  uintptr_t a = (uintptr_t)p;
  size_t r = res(s->fd, page_down(a), page_up(a + lu));
  s->requested += w * (double)n;
  s->usable += w * (double)u;
  s->own += r > u ? r - u : 0;
  s->n++;
}

/* Splits the blocks handed out into requested bytes and class rounding in
 * the proportion the live samples show (a ratio estimate: exact for blocks
 * of one size, whatever the number of samples), after setting apart the
 * sampled blocks' own extra pages. */
static void split_blocks(struct hm_explain *e, const struct est *s) {
  e->live_samples = s->n;
  if (s->n == 0 || s->usable <= 0) return;
  e->sampled = s->own < e->blocks ? s->own : e->blocks;
  size_t rest = e->blocks - e->sampled;
  double r = (double)rest * (s->usable - s->requested) / s->usable + 0.5;
  e->rounding = r <= 0 ? 0 : r >= (double)rest ? rest : (size_t)r;
  e->requested = rest - e->rounding;
}

void hm_explain(struct hm_explain *e) {
  memset(e, 0, sizeof *e);
  struct walk w = {hm_os_pagemap_open(), e};
  struct est samples = {.fd = w.fd};
  e->profiling = hm_prof_live_each(add_sample, &samples); /* (before the walks: no lock held) */
  e->pagemap = w.fd >= 0;
  hm_backend_walk_ss(explain_ss, &w);
  /* foreign caches: their blocks count as handed out in their slabs */
  e->foreign = hm_heap_foreign_bytes(&e->heaps, NULL);
  if (e->foreign > e->blocks_pool) e->foreign = e->blocks_pool;
  e->blocks_pool -= e->foreign;
  e->unused_superslabs = hm_backend_cached_resident_now();
  e->unused_reserve = hm_backend_reserve_resident(w.fd);
  size_t large[5] = {0};
  hm_large_explain(w.fd, large);
  e->blocks_large = large[0] + large[2];
  e->large_cache = large[1];
  e->unused_packs = large[3];
  e->meta_packs = large[4];
  e->guarded_pool = hm_guard_resident(w.fd);
  e->meta_chunks = hm_backend_meta_resident(w.fd);
  e->meta_registry = res(w.fd, page_down((uintptr_t)hm_registry), page_up((uintptr_t)hm_registry + REG_ENTRIES));
  if (w.fd >= 0) close(w.fd);

  e->blocks = e->blocks_pool + e->blocks_large;
  split_blocks(e, &samples);
  e->thread_caches = e->foreign + e->empty_slabs;
  e->unused = e->unused_slabs + e->unused_superslabs + e->unused_reserve + e->unused_packs;
  e->metadata = e->meta_headers + e->meta_packs + e->meta_chunks + e->meta_registry;
  e->total = e->blocks + e->free_in_slabs + e->thread_caches + e->unused + e->large_cache + e->guarded_pool +
             e->metadata;
}
