/* Errors: one line on stderr, then abort. Never allocates: the heap may be
 * what is broken. */
#include <stdlib.h>

#include "internal.h"

void hm_write_error(const char *what, const void *p, const char *reason) {
  hm_line_t o;
  hm_line_init(&o, NULL, 2);
  hm_line_put(&o, "hakmem: error: ");
  hm_line_put(&o, what);
  if (p != NULL || reason == NULL) {
    hm_line_put(&o, " of ");
    hm_line_hex(&o, (uintptr_t)p);
  }
  if (reason != NULL) {
    hm_line_put(&o, " (");
    hm_line_put(&o, reason);
    hm_line_put(&o, ")");
  }
  hm_line_put(&o, "\n");
  hm_line_flush(&o);
}

void hm_fatal(const char *what, const void *p, const char *reason) {
  hm_write_error(what, p, reason);
  abort();
}
