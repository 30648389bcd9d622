/* Random numbers for hardening: the per-process free tag, and in secure
 * mode the per-slab keys and the allocation order of fresh slabs. Never
 * allocates (used inside the allocator, possibly before main). */
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* From getrandom(2); should the kernel refuse (old kernel, seccomp), from
 * the clock, the pid and addresses (ASLR), which still differ per run. */
uint64_t hm_random_u64(void) {
  uint64_t v;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v) return v;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  static _Atomic uint64_t counter;
  v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)getpid() << 16 ^ (uintptr_t)&v ^
      (uintptr_t)&hm_random_u64 ^ atomic_fetch_add(&counter, 0x9e3779b97f4a7c15ULL);
  return mix64(v);
}

/* splitmix64 per thread, seeded on first use. */
static __thread uint64_t fast_state __attribute__((tls_model("initial-exec")));
uint64_t hm_random_fast(void) {
  if (unlikely(fast_state == 0)) fast_state = hm_random_u64() | 1;
  fast_state += 0x9e3779b97f4a7c15ULL;
  return mix64(fast_state);
}
