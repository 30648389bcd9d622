/* Errors: one line on stderr, then abort (or, for misuse under
 * HAKMEM_ON_ERROR=warn, return). Never allocates: the heap may be what is
 * broken. */
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

void hm_write_fd(int fd, const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

void hm_write_str(const char *s) { hm_write_fd(2, s); }

/* Decimal text of v; out holds at least 21 characters. */
void hm_format_dec(char *out, long v) {
  char tmp[24];
  int n = 0;
  unsigned long u = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0) *out++ = '-';
  while (n > 0) *out++ = tmp[--n];
  *out = '\0';
}

static void format_hex(char *out, uintptr_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[2 * sizeof v];
  int n = 0;
  do {
    tmp[n++] = digits[v & 15];
    v >>= 4;
  } while (v != 0);
  *out++ = '0';
  *out++ = 'x';
  while (n > 0) *out++ = tmp[--n];
  *out = '\0';
}

static void write_error(const char *what, const void *p, const char *reason) {
  char hex[2 + 2 * sizeof(uintptr_t) + 1];
  hm_write_str("hakmem: error: ");
  hm_write_str(what);
  if (p != NULL || reason == NULL) {
    format_hex(hex, (uintptr_t)p);
    hm_write_str(" of ");
    hm_write_str(hex);
  }
  if (reason != NULL) {
    hm_write_str(" (");
    hm_write_str(reason);
    hm_write_str(")");
  }
  hm_write_str("\n");
}

void hm_fatal(const char *what, const void *p, const char *reason) {
  write_error(what, p, reason);
  abort();
}

/* A misuse the allocator survives by not touching the block (invalid or
 * double free): HAKMEM_ON_ERROR=warn prints and returns, abort aborts. */
void hm_misuse(const char *what, const void *p, const char *reason) {
  hm_ensure_init();
  write_error(what, p, reason);
  if (hm_opt[HM_OPT_ON_ERROR] != HM_ON_ERROR_WARN) abort();
}
