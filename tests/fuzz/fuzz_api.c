/* libFuzzer harness: the input is a program of allocation calls on a table
 * of 64 blocks, run against hakmem's hak_* API (built into the harness with
 * coverage instrumentation, invariant checks and UBSan). Every block holds a
 * pattern that is checked before realloc and free; any crash, abort
 * (hakmem's own checks included) or pattern mismatch is a finding.
 * How to build and run: docs/SECURITY.md ("Fuzzing"). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hakmem.h"

#define SLOTS 64

struct slot {
  unsigned char *p;
  size_t n;
  unsigned char seed;
};

static void die(const char *what, size_t a, size_t b) {
  fprintf(stderr, "fuzz_api: %s (%zu, %zu)\n", what, a, b);
  abort();
}

static unsigned char pat(unsigned char seed, size_t i) { return (unsigned char)(seed + i * 31u + (i >> 8)); }

/* All of a block up to 8 KiB, else its first and last 4 KiB. */
static void fill(struct slot *s) {
  for (size_t i = 0; i < s->n; i++) {
    if (i == 4096 && s->n > 8192) i = s->n - 4096;
    s->p[i] = pat(s->seed, i);
  }
}
static void verify(const struct slot *s, size_t upto, const char *when) {
  size_t n = upto < s->n ? upto : s->n;
  for (size_t i = 0; i < n; i++) {
    if (i == 4096 && s->n > 8192) {
      if (n < s->n) return; /* a prefix: the middle was never written */
      i = s->n - 4096;
    }
    if (s->p[i] != pat(s->seed, i)) die(when, i, s->n);
  }
}

/* Sizes: mostly small, sometimes up to 300 KiB or 4 MiB (op bits). */
static size_t size_of(uint8_t op, uint16_t arg) {
  switch ((op >> 4) & 3) {
    case 0: return arg & 1023;
    case 1: return arg & 16383;
    case 2: return (size_t)arg * 5;
    default: return (size_t)arg * 64;
  }
}

static void take(struct slot *s, void *p, size_t n, unsigned char seed) {
  if (p == NULL) {
    if (errno != ENOMEM) die("NULL without ENOMEM", n, (size_t)errno);
    return;
  }
  if (hak_malloc_usable_size(p) < n) die("usable size too small", hak_malloc_usable_size(p), n);
  s->p = p;
  s->n = n;
  s->seed = seed;
  fill(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct slot slot[SLOTS];
  memset(slot, 0, sizeof slot);
  for (size_t i = 0; i + 4 <= size; i += 4) {
    uint8_t op = data[i];
    struct slot *s = &slot[data[i + 1] % SLOTS];
    uint16_t arg = (uint16_t)(data[i + 2] | data[i + 3] << 8);
    size_t n = size_of(op, arg);
    errno = 0;
    switch (op & 7) {
      case 0: /* malloc, or free when taken */
      case 1:
        if (s->p == NULL) {
          take(s, hak_malloc(n), n, data[i + 2]);
        } else {
          verify(s, SIZE_MAX, "before free");
          hak_free(s->p);
          s->p = NULL;
        }
        break;
      case 2: /* calloc */
        if (s->p == NULL) {
          size_t k = 1 + (data[i + 3] & 7), m = n / k;
          unsigned char *p = hak_calloc(k, m);
          if (p != NULL)
            for (size_t j = 0; j < k * m && j < 65536; j++)
              if (p[j] != 0) die("calloc not zeroed", j, k * m);
          take(s, p, k * m, data[i + 3]);
        }
        break;
      case 3: /* realloc (n == 0 frees) */
        if (s->p != NULL) {
          verify(s, SIZE_MAX, "before realloc");
          unsigned char *q = hak_realloc(s->p, n);
          if (n == 0) {
            if (q != NULL) die("realloc(p, 0) returned a block", 0, 0);
            s->p = NULL;
          } else if (q == NULL) {
            verify(s, SIZE_MAX, "after a failed realloc");
          } else {
            s->p = q;
            verify(s, n, "prefix after realloc");
            take(s, q, n, (unsigned char)(s->seed + 1));
          }
        }
        break;
      case 4: /* aligned: 1 B .. 4 MiB alignment */
        if (s->p == NULL) {
          size_t align = (size_t)1 << (data[i + 3] % 23);
          void *p = NULL;
          if (op & 8) {
            int rc = hak_posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, n);
            if (rc != 0 && rc != ENOMEM) die("posix_memalign", (size_t)rc, align);
            if (rc != 0) errno = rc;
          } else {
            p = hak_memalign(align, n);
          }
          if (p != NULL && ((uintptr_t)p & (align - 1)) != 0) die("misaligned", (uintptr_t)p, align);
          take(s, p, n, data[i + 2]);
        }
        break;
      case 5: /* overwrite the block's contents */
        if (s->p != NULL) {
          verify(s, SIZE_MAX, "before rewrite");
          s->seed = (unsigned char)(s->seed ^ data[i + 2]);
          fill(s);
        }
        break;
      case 6: /* a size query */
        if (s->p != NULL && hak_malloc_usable_size(s->p) < s->n) die("usable size shrank", s->n, 0);
        break;
      default:
        if ((arg & 255) == 0) hak_malloc_trim(0);
        break;
    }
  }
  for (int j = 0; j < SLOTS; j++)
    if (slot[j].p != NULL) {
      verify(&slot[j], SIZE_MAX, "at the end");
      hak_free(slot[j].p);
    }
  return 0;
}
