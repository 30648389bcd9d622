/* Unused slabs of SuperSlabs in use, given back to the OS (docs/DESIGN.md,
 * "Memory given back"): bits in ss->dirty (unused and resident), with the
 * time each became unused in ss->idle_ms.
 *
 * Any thread may purge any SuperSlab's unused slabs. It claims them first:
 * it sets their bits in `purging` (only bits nobody else holds), then clears
 * them in `dirty`; the bits still set there are its own. The owner taking a
 * slab back clears its `dirty` bit; if it was already clear, the slab is
 * given back or being given back, and the owner waits for `purging` to drop.
 * A SuperSlab goes to the backend only after its bits are taken back
 * (hm_purge_ss_leave), so one being purged is never unmapped or reused. */
#include <sched.h>
#include <sys/uio.h>

#include "internal.h"

static _Atomic size_t dirty_bytes;    /* unused slabs still resident, all SuperSlabs */

size_t hm_purge_dirty_bytes(void) { return atomic_load_explicit(&dirty_bytes, memory_order_relaxed); }

static uint32_t ms_of(uint64_t ns) { return (uint32_t)(ns / 1000000u); }

static size_t slab_bytes(const superslab_t *ss, unsigned i) {
  return ((size_t)1 << ss->slab_shift) - (i == 0 ? SS_HEADER_SIZE : 0);
}

size_t hm_purge_claimed_bytes(const superslab_t *ss, uint32_t bits) {
  size_t n = (size_t)__builtin_popcount(bits) << ss->slab_shift;
  return (bits & 1u) ? n - SS_HEADER_SIZE : n;
}

/* Claim the unused, resident slabs of `want` for purging; returns those
 * claimed (their `purging` bits set, `dirty` bits cleared). */
uint32_t hm_purge_claim(superslab_t *ss, uint32_t want) {
  uint32_t cur = atomic_load(&ss->purging), mine;
  do {
    mine = want & ~cur;
    if (mine == 0) return 0;
  } while (!atomic_compare_exchange_weak(&ss->purging, &cur, cur | mine));
  uint32_t got = atomic_fetch_and(&ss->dirty, ~mine) & mine;
  if (mine & ~got) atomic_fetch_and(&ss->purging, ~(mine & ~got));
  if (got != 0) atomic_fetch_sub_explicit(&dirty_bytes, hm_purge_claimed_bytes(ss, got), memory_order_relaxed);
  return got;
}

/* Give back the claimed slabs `bits` of ss, adjacent ones in one call (the
 * header page before slab 0 stays), then let the owner have them again. */
uint32_t hm_purge_claimed_ranges(const superslab_t *ss, uint32_t bits, struct iovec *v, unsigned *n, unsigned max) {
  unsigned shift = ss->slab_shift;
  uint32_t taken = 0;
  for (uint32_t rest = bits; rest != 0 && *n < max;) {
    unsigned i = (unsigned)__builtin_ctz(rest), j = i;
    while (j + 1 < 32 && (rest & (1u << (j + 1)))) j++;
    uint32_t run = (uint32_t)(((uint64_t)2 << j) - ((uint64_t)1 << i));
    char *a = (char *)ss + ((size_t)i << shift) + (i == 0 ? SS_HEADER_SIZE : 0);
    char *b = (char *)ss + ((size_t)(j + 1) << shift);
    v[(*n)++] = (struct iovec){a, (size_t)(b - a)};
    taken |= run;
    rest &= ~run;
  }
  return taken;
}

size_t hm_purge_claimed(superslab_t *ss, uint32_t bits) {
  if (bits == 0) return 0;
  struct iovec v[16]; /* (at most 16 runs of 32 bits) */
  unsigned n = 0;
  hm_purge_claimed_ranges(ss, bits, v, &n, 16);
  for (unsigned k = 0; k < n; k++) hm_os_purge(v[k].iov_base, v[k].iov_len);
  return hm_purge_claimed_settle(ss, bits, true);
}

size_t hm_purge_claimed_settle(superslab_t *ss, uint32_t bits, bool given) {
  if (bits == 0) return 0;
  size_t bytes = hm_purge_claimed_bytes(ss, bits);
  if (given) {
    uint32_t now_ms = ms_of(hm_now_ns()); /* while purged, idle_ms says since when */
    for (uint32_t b = bits; b != 0; b &= b - 1)
      atomic_store_explicit(&ss->idle_ms[__builtin_ctz(b)], now_ms, memory_order_relaxed);
    atomic_fetch_or(&ss->purged, bits);
    hm_os_purged_add(bytes);
  } else {
    atomic_fetch_add_explicit(&dirty_bytes, bytes, memory_order_relaxed);
    atomic_fetch_or(&ss->dirty, bits);
  }
  atomic_fetch_and(&ss->purging, ~bits);
  return bytes;
}

void hm_purge_slab_unused(superslab_t *ss, unsigned i) {
  if (hm_purge_mode == PURGE_OFF) {
    hm_purge_count_disabled();
    return;
  }
  uint64_t now = hm_now_ns();
  uint32_t bit = 1u << i;
  atomic_store_explicit(&ss->idle_ms[i], ms_of(now), memory_order_relaxed);
  atomic_fetch_add_explicit(&dirty_bytes, slab_bytes(ss, i), memory_order_relaxed);
  atomic_fetch_or(&ss->dirty, bit); /* after idle_ms: a purger reads both */
  if (hm_purge_unused_now(now)) hm_purge_claimed(ss, hm_purge_claim(ss, bit));
}

bool hm_purge_slab_take(superslab_t *ss, unsigned i) {
  uint32_t bit = 1u << i;
  if (atomic_fetch_and(&ss->dirty, ~bit) & bit) { /* resident, and now ours */
    atomic_fetch_sub_explicit(&dirty_bytes, slab_bytes(ss, i), memory_order_relaxed);
    return true;
  }
  if (hm_purge_mode == PURGE_OFF) return true; /* (nothing is given back) */
  /* never used since the SuperSlab was set up, given back, or being given back */
  for (unsigned spins = 0; atomic_load(&ss->purging) & bit; spins++) {
    if (spins < 64)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  if (atomic_load(&ss->purged) & bit) {
    atomic_fetch_and(&ss->purged, ~bit);
    uint64_t now = hm_now_ns();
    uint32_t ago_ms = ms_of(now) - atomic_load_explicit(&ss->idle_ms[i], memory_order_relaxed);
    hm_purge_regret(now - (uint64_t)ago_ms * 1000000u, now);
    hm_os_purged_sub(slab_bytes(ss, i)); /* it reads as zeros; resident again as it is used */
  }
  return false;
}

size_t hm_purge_ss_leave(superslab_t *ss) {
  uint32_t d = atomic_exchange(&ss->dirty, 0);
  if (d != 0) atomic_fetch_sub_explicit(&dirty_bytes, hm_purge_claimed_bytes(ss, d), memory_order_relaxed);
  for (unsigned spins = 0; atomic_load(&ss->purging) != 0; spins++) {
    if (spins < 64)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  uint32_t p = atomic_exchange(&ss->purged, 0);
  return p ? hm_purge_claimed_bytes(ss, p) : 0;
}

/* Unused slabs of ss idle for at least delay_ms (all of them with 0). */
uint32_t hm_purge_idle_slabs(superslab_t *ss, uint32_t now_ms, uint32_t delay_ms, uint64_t *next_due) {
  uint32_t d = atomic_load(&ss->dirty), want = 0;
  while (d != 0) {
    unsigned i = (unsigned)__builtin_ctz(d);
    d &= d - 1;
    uint32_t age = now_ms - atomic_load_explicit(&ss->idle_ms[i], memory_order_relaxed);
    if (age > 0x80000000u) age = 0; /* its clock read came just after ours */
    if (age >= delay_ms) {
      want |= 1u << i;
    } else {
      uint64_t due = ((uint64_t)now_ms + (delay_ms - age)) * 1000000u;
      if (due < *next_due) *next_due = due;
    }
  }
  return want;
}

size_t hm_purge_ss_now(superslab_t *ss) {
  if (hm_purge_mode == PURGE_OFF) return 0;
  uint64_t ignore = UINT64_MAX;
  return hm_purge_claimed(ss, hm_purge_claim(ss, hm_purge_idle_slabs(ss, 0, 0, &ignore)));
}

