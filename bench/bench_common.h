/* Shared helpers for the hakmem benchmarks: a seeded PRNG, a monotonic
 * clock, resident-set size, and argument parsing.
 *
 * Every benchmark uses only malloc/free/realloc/calloc so that the same
 * binary can be run under any allocator via LD_PRELOAD.  Random numbers come
 * from our own generator (splitmix64 seeding a xorshift64*), never rand(), so
 * a seed gives the same sequence everywhere.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__GNUC__)
#define BENCH_UNUSED __attribute__((unused))
#define BENCH_NOINLINE __attribute__((noinline))
#else
#define BENCH_UNUSED
#define BENCH_NOINLINE
#endif

typedef struct {
  uint64_t s;
} rng_t;

static inline uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Seed a generator; distinct (seed, stream) pairs give independent streams. */
static inline void rng_seed(rng_t *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
  r->s = splitmix64(&x);
  if (r->s == 0)
    r->s = 0x2545F4914F6CDD1Dull;
}

/* xorshift64* */
static inline uint64_t rng_next(rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform integer in [0, n), n < 2^32 (Lemire's multiply-shift). */
static inline uint32_t rng_below(rng_t *r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Uniform integer in [lo, hi]. */
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi) {
  return lo + rng_below(r, (uint32_t)(hi - lo + 1));
}

/* Uniform double in [0, 1). */
static inline double rng_unit(rng_t *r) {
  return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Resident set size in bytes, from /proc/self/statm (0 if unavailable). */
static BENCH_UNUSED size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f)
    return 0;
  unsigned long size = 0, resident = 0;
  int n = fscanf(f, "%lu %lu", &size, &resident);
  fclose(f);
  if (n != 2)
    return 0;
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Parse a non-negative integer argument (accepts 1e6, 2M, 64K suffixes). */
static BENCH_UNUSED uint64_t parse_u64(const char *s, const char *what) {
  char *end = NULL;
  errno = 0;
  double d = strtod(s, &end);
  if (errno || end == s || d < 0) {
    fprintf(stderr, "bad %s: '%s'\n", what, s);
    exit(2);
  }
  if (*end == 'k' || *end == 'K')
    d *= 1e3, end++;
  else if (*end == 'm' || *end == 'M')
    d *= 1e6, end++;
  else if (*end == 'g' || *end == 'G')
    d *= 1e9, end++;
  if (*end != '\0') {
    fprintf(stderr, "bad %s: '%s'\n", what, s);
    exit(2);
  }
  return (uint64_t)d;
}

static BENCH_UNUSED double parse_double(const char *s, const char *what) {
  char *end = NULL;
  errno = 0;
  double d = strtod(s, &end);
  if (errno || end == s || *end != '\0' || d < 0) {
    fprintf(stderr, "bad %s: '%s'\n", what, s);
    exit(2);
  }
  return d;
}

static BENCH_UNUSED void *xmalloc_fail(size_t n) {
  fprintf(stderr, "allocation of %zu bytes failed\n", n);
  exit(3);
}

#endif /* BENCH_COMMON_H */
