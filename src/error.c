/* Errors: one line on stderr, then abort; misuse reports (invalid and
 * double frees: misuse.c, large.c), which HAKMEM_ON_ERROR=warn turns into
 * a warning. Never allocates: the heap may be what is broken. */
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

/* A misuse the allocator survives by not touching the block (invalid or
 * double free): HAKMEM_ON_ERROR=warn prints and returns, abort aborts. */
void hm_misuse(const char *what, const void *p, const char *reason) {
  hm_ensure_init();
  hm_write_error(what, p, reason);
  if (hm_opt[HM_OPT_ON_ERROR] != HM_ON_ERROR_WARN) abort();
}

static const char *const op_prefix[] = {"", "realloc: ", "malloc_usable_size: "};

static void report(const char *what, const void *p, int op, const char *reason) {
  char buf[160] = "";
  hm_str_append(buf, sizeof buf, op_prefix[op]);
  hm_str_append(buf, sizeof buf, reason);
  hm_misuse(what, p, buf);
}

void hm_report_invalid(const void *p, int op, const char *reason) { report("invalid free", p, op, reason); }
void hm_report_double(const void *p, int op, const char *reason) { report("double free", p, op, reason); }

