/* Shared helpers for the hakmem test suite (C and C++). */
#ifndef HAKMEM_TEST_COMMON_H
#define HAKMEM_TEST_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* HAKMEM_TEST_SHIM is defined only when the suite is built against a
 * glibc-forwarding stand-in for hakmem (used to validate the tests
 * themselves); hakmem-specific assertions are compiled out then. */
#ifdef HAKMEM_TEST_SHIM
#define HAKMEM_SPECIFIC 0
#else
#define HAKMEM_SPECIFIC 1
#endif

static const char *tc_test_name = "test";

/* Print a message and terminate the process with status 1 (no atexit
 * handlers: the heap may be broken). */
static void __attribute__((noreturn, format(printf, 3, 4), unused))
tc_fail(const char *file, int line, const char *fmt, ...) {
  char buf[2048];
  int off = snprintf(buf, sizeof buf, "FAIL [%s] %s:%d: ", tc_test_name, file, line);
  va_list ap;
  va_start(ap, fmt);
  if (off < 0) off = 0;
  vsnprintf(buf + off, sizeof buf - (size_t)off, fmt, ap);
  va_end(ap);
  size_t len = strlen(buf);
  fflush(stdout);
  if (len + 1 < sizeof buf) buf[len++] = '\n';
  ssize_t w = write(2, buf, len);
  (void)w;
  _exit(1);
}

static void __attribute__((noreturn, format(printf, 4, 5), unused))
tc_check_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  tc_fail(file, line, "check `%s` failed: %s", cond, msg);
}

/* CHECK(cond, "fmt", args...) */
#define CHECK(cond, ...)                                               \
  do {                                                                 \
    if (__builtin_expect(!(cond), 0))                                  \
      tc_check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);           \
  } while (0)

#define FAILF(...) tc_fail(__FILE__, __LINE__, __VA_ARGS__)

/* Keep the compiler from reasoning about a pointer or size. */
static inline void *tc_escape(void *p) {
  __asm__ volatile("" : "+r"(p) : : "memory");
  return p;
}
static inline size_t tc_opaque(size_t x) {
  __asm__ volatile("" : "+r"(x));
  return x;
}

/* ---- deterministic RNG (splitmix64 seeded xorshift) ---- */
typedef struct { uint64_t s; } tc_rng;
static inline uint64_t tc_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline uint64_t tc_next(tc_rng *r) {
  r->s += 0x9E3779B97F4A7C15ull;
  uint64_t z = r->s;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline uint64_t tc_below(tc_rng *r, uint64_t n) { return n ? tc_next(r) % n : 0; }

/* ---- content patterns ---- */
static inline uint8_t tc_pat_byte(uint64_t seed, size_t i) {
  uint64_t w = tc_mix64(seed ^ (uint64_t)(i >> 3) * 0x100000001B3ull);
  return (uint8_t)(w >> ((i & 7) * 8));
}
/* Fill n bytes of p with the pattern derived from seed. */
static void __attribute__((unused)) tc_fill(void *p, size_t n, uint64_t seed) {
  uint8_t *b = (uint8_t *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = tc_mix64(seed ^ (uint64_t)(i >> 3) * 0x100000001B3ull);
    memcpy(b + i, &w, 8);
  }
  for (; i < n; i++) b[i] = tc_pat_byte(seed, i);
}
/* Returns the index of the first byte that differs from the pattern, or
 * (size_t)-1 if all n bytes match. */
static size_t __attribute__((unused)) tc_verify(const void *p, size_t n, uint64_t seed) {
  const uint8_t *b = (const uint8_t *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = tc_mix64(seed ^ (uint64_t)(i >> 3) * 0x100000001B3ull), g;
    memcpy(&g, b + i, 8);
    if (g != w) break;
  }
  for (; i < n; i++)
    if (b[i] != tc_pat_byte(seed, i)) return i;
  return (size_t)-1;
}
#define CHECK_PATTERN(p, n, seed, ...)                                                  \
  do {                                                                                  \
    size_t tc_bad_ = tc_verify((p), (n), (seed));                                       \
    if (tc_bad_ != (size_t)-1) {                                                        \
      char tc_msg_[512];                                                                \
      snprintf(tc_msg_, sizeof tc_msg_, __VA_ARGS__);                                   \
      tc_fail(__FILE__, __LINE__, "%s: content corrupted at byte %zu of %zu (block %p, seed %llu)", \
              tc_msg_, tc_bad_, (size_t)(n), (const void *)(p), (unsigned long long)(seed)); \
    }                                                                                   \
  } while (0)

/* Index of first byte != c, or (size_t)-1. */
static size_t __attribute__((unused)) tc_find_not(const void *p, size_t n, uint8_t c) {
  const uint8_t *b = (const uint8_t *)p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != c) return i;
  return (size_t)-1;
}

/* ---- process memory (read with open/read: no heap use) ---- */
#include <fcntl.h>
static ssize_t tc_read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got + 1 < cap) {
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = 0;
  return (ssize_t)got;
}
/* Resident set size in bytes (/proc/self/statm). */
static size_t __attribute__((unused)) tc_rss_bytes(void) {
  char buf[256];
  if (tc_read_file("/proc/self/statm", buf, sizeof buf) <= 0) FAILF("cannot read /proc/self/statm");
  unsigned long size = 0, rss = 0;
  if (sscanf(buf, "%lu %lu", &size, &rss) != 2) FAILF("cannot parse /proc/self/statm: %s", buf);
  return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}
/* The number of a /proc/self/status field (e.g. "Threads"), read without
 * stdio (a FILE's buffer is a malloc). */
static unsigned long __attribute__((unused)) tc_status_field(const char *field) {
  char buf[8192];
  if (tc_read_file("/proc/self/status", buf, sizeof buf) <= 0) FAILF("cannot read /proc/self/status");
  size_t fl = strlen(field);
  for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, field, fl) == 0 && l[fl] == ':') {
      unsigned long v = 0;
      if (sscanf(l + fl + 1, "%lu", &v) != 1) FAILF("cannot parse %s", field);
      return v;
    }
  }
  FAILF("field %s not in /proc/self/status", field);
}
/* A "Vm...:" field of /proc/self/status in bytes (e.g. "VmSize"). */
static size_t __attribute__((unused)) tc_status_bytes(const char *field) { return (size_t)tc_status_field(field) * 1024; }
#define MiB ((size_t)1 << 20)

/* Iteration scale from HAKMEM_TEST_SCALE (default 1.0). */
static double __attribute__((unused)) tc_scale(void) {
  const char *s = getenv("HAKMEM_TEST_SCALE");
  double v = s && *s ? atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}
static size_t __attribute__((unused)) tc_scaled(size_t n) {
  double v = (double)n * tc_scale();
  return v < 1 ? 1 : (size_t)v;
}

#ifdef __cplusplus
}
#endif
#endif
