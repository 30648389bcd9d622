/* The line writer: text gathered in a buffer on the caller's stack and
 * written with write(2) (or fwrite to a FILE) when full or flushed. It never
 * allocates: errors, the large lane's trace, the statistics report and the
 * [SS_OS_STATS] line are written while the heap may be broken or in use.
 * A line shorter than the buffer goes out in one write, so that lines of
 * threads writing at once do not mix. */
#ifndef HAKMEM_LINE_H
#define HAKMEM_LINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct hm_line {
  FILE *f;     /* NULL: write to fd */
  int fd;
  size_t n;
  char buf[512];
} hm_line_t;

__attribute__((visibility("hidden"))) void hm_line_init(hm_line_t *o, FILE *f, int fd);
__attribute__((visibility("hidden"))) void hm_line_put(hm_line_t *o, const char *s);
/* v in decimal, right-aligned in width columns (0: no padding) */
__attribute__((visibility("hidden"))) void hm_line_dec(hm_line_t *o, uint64_t v, size_t width);
__attribute__((visibility("hidden"))) void hm_line_hex(hm_line_t *o, uintptr_t v); /* 0x... */
__attribute__((visibility("hidden"))) void hm_line_flush(hm_line_t *o);

/* The primitives: all of s to fd (retrying short writes and EINTR); to
 * stderr; the decimal text of v (out holds at least 21 characters). */
__attribute__((visibility("hidden"))) void hm_write_fd(int fd, const char *s);
__attribute__((visibility("hidden"))) void hm_write_str(const char *s);
__attribute__((visibility("hidden"))) void hm_format_dec(char *out, long v);
/* src appended to the text in dst, within cap bytes (the reasons of errors). */
__attribute__((visibility("hidden"))) void hm_str_append(char *dst, size_t cap, const char *src);

#endif /* HAKMEM_LINE_H */
