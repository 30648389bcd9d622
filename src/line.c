/* The allocation-free line writer (line.h). */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "line.h"

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

/* Copies src after dst's text, within cap bytes. */
void hm_str_append(char *dst, size_t cap, const char *src) {
  size_t n = strlen(dst);
  while (*src != '\0' && n + 1 < cap) dst[n++] = *src++;
  dst[n] = '\0';
}

void hm_line_init(hm_line_t *o, FILE *f, int fd) {
  o->f = f;
  o->fd = fd;
  o->n = 0;
}

void hm_line_flush(hm_line_t *o) {
  if (o->n == 0) return;
  if (o->f != NULL) {
    fwrite(o->buf, 1, o->n, o->f);
  } else {
    o->buf[o->n] = '\0';
    hm_write_fd(o->fd, o->buf);
  }
  o->n = 0;
}

void hm_line_put(hm_line_t *o, const char *s) {
  for (; *s != '\0'; s++) {
    if (o->n + 1 >= sizeof o->buf) hm_line_flush(o);
    o->buf[o->n++] = *s;
  }
}

void hm_line_dec(hm_line_t *o, uint64_t v, size_t width) {
  char t[24];
  size_t n = sizeof t - 1;
  t[n] = '\0';
  do {
    t[--n] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t w = sizeof t - 1 - n; w < width; w++) hm_line_put(o, " ");
  hm_line_put(o, t + n);
}

void hm_line_hex(hm_line_t *o, uintptr_t v) {
  static const char digits[] = "0123456789abcdef";
  char t[2 * sizeof v + 1];
  size_t n = sizeof t - 1;
  t[n] = '\0';
  do {
    t[--n] = digits[v & 15];
    v >>= 4;
  } while (v != 0);
  hm_line_put(o, "0x");
  hm_line_put(o, t + n);
}
