/* HAKMEM_* options: read once at start-up from the environment (getenv does
 * not allocate), each checked against its row in options.def. A bad value
 * prints one warning line and keeps the default. */
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

enum { T_BOOL, T_INT, T_CHOICE, T_PATH }; /* PATH: hm_opt holds the getenv string (hm_option_path) */

struct option_row {
  const char *name;
  int type;
  long def, min, max;
  const char *choices;
  const char *meaning;
};

static const struct option_row rows[HM_OPT_COUNT] = {
#define HM_OPTION(NAME, TYPE, DEF, MIN, MAX, CHOICES, MEANING) \
  {"HAKMEM_" #NAME, T_##TYPE, DEF, MIN, MAX, CHOICES, MEANING},
#include "options.def"
#undef HM_OPTION
};

long hm_opt[HM_OPT_COUNT] = {
#define HM_OPTION(NAME, TYPE, DEF, MIN, MAX, CHOICES, MEANING) DEF,
#include "options.def"
#undef HM_OPTION
};

int hm_force_libc; /* set at start-up (init.c) */
static unsigned char opt_set[HM_OPT_COUNT]; /* given in the environment */
static int limit_from_cgroup;               /* HAKMEM_RSS_LIMIT_MB is the cgroup's */

/* Former names, still read when the option's own name is not set
 * (docs/DESIGN.md, "Glossary"). */
static const struct {
  int id;
  const char *name;
} aliases[] = {{HM_OPT_LARGE_CACHE_MB, "HAKMEM_ACE_MAX_MB"}, {HM_OPT_LARGE_TRACE, "HAKMEM_ACE_TRACE"}};

static const char *option_value(int id) {
  const char *v = getenv(rows[id].name);
  for (size_t k = 0; (v == NULL || *v == '\0') && k < sizeof aliases / sizeof aliases[0]; k++)
    if (aliases[k].id == id) v = getenv(aliases[k].name);
  return v;
}

/* Index of v among the '|'-separated choices, or -1. */
static long choice_index(const char *choices, const char *v) {
  long i = 0;
  const char *c = choices;
  while (*c != '\0') {
    size_t len = 0;
    while (c[len] != '\0' && c[len] != '|') len++;
    if (strlen(v) == len && strncmp(c, v, len) == 0) return i;
    c += len;
    if (*c == '|') c++;
    i++;
  }
  return -1;
}

/* The choice text of index i (into buf, at most cap-1 characters). */
static const char *choice_name(const char *choices, long i, char *buf, size_t cap) {
  const char *c = choices;
  for (; i > 0 && *c != '\0'; c++)
    if (*c == '|') i--;
  size_t len = 0;
  while (c[len] != '\0' && c[len] != '|' && len + 1 < cap) len++;
  memcpy(buf, c, len);
  buf[len] = '\0';
  return buf;
}

static int parse_long(const char *v, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') return 0;
  *out = x;
  return 1;
}

static void warn_bad(const struct option_row *r, const char *v) {
  char lo[24], hi[24];
  hm_write_str("hakmem: warning: ignoring ");
  hm_write_str(r->name);
  hm_write_str("=");
  hm_write_str(v);
  if (r->type == T_BOOL) {
    hm_write_str(" (must be 0 or 1)");
  } else if (r->type == T_INT) {
    hm_format_dec(lo, r->min);
    hm_format_dec(hi, r->max);
    hm_write_str(" (must be an integer from ");
    hm_write_str(lo);
    hm_write_str(" to ");
    hm_write_str(hi);
    hm_write_str(")");
  } else {
    hm_write_str(" (must be one of ");
    hm_write_str(r->choices);
    hm_write_str(")");
  }
  hm_write_str("; using the default\n");
}

void hm_options_init(void) {
  for (int i = 0; i < HM_OPT_COUNT; i++) {
    const struct option_row *r = &rows[i];
    const char *v = option_value(i);
    if (v == NULL || *v == '\0') continue;
    long x;
    int ok;
    if (r->type == T_CHOICE) {
      x = choice_index(r->choices, v);
      /* a choice of on|off also takes the 1|0 of the boolean it replaced
       * (HAKMEM_BG_PURGE was one) */
      if (x < 0 && (strcmp(v, "1") == 0 || strcmp(v, "0") == 0)) x = choice_index(r->choices, *v == '1' ? "on" : "off");
      ok = x >= 0;
    } else if (r->type == T_PATH) {
      x = (long)(intptr_t)v;
      ok = 1;
    } else {
      ok = parse_long(v, &x) && x >= r->min && x <= r->max;
    }
    if (!ok) {
      warn_bad(r, v);
      continue;
    }
    hm_opt[i] = x;
    opt_set[i] = 1;
  }
  /* the cgroup's limit stands in for an unset HAKMEM_RSS_LIMIT_MB (cgroup.c) */
  if (!opt_set[HM_OPT_RSS_LIMIT_MB] && hm_opt[HM_OPT_CGROUP] && !hm_opt[HM_OPT_FORCE_LIBC_ALLOC]) {
    size_t lim = hm_cgroup_limit() >> 20;
    if (lim != 0) {
      hm_opt[HM_OPT_RSS_LIMIT_MB] = (long)(lim < (size_t)rows[HM_OPT_RSS_LIMIT_MB].max ? lim : (size_t)rows[HM_OPT_RSS_LIMIT_MB].max);
      limit_from_cgroup = 1;
    }
  }
}

int hm_option_is_set(int id) { return opt_set[id]; }

const char *hm_option_path(int id) { return (const char *)(intptr_t)hm_opt[id]; }

static void value_text(const struct option_row *r, long v, char *buf, size_t cap) {
  if (r->type == T_CHOICE) {
    choice_name(r->choices, v, buf, cap);
  } else if (r->type == T_PATH) {
    const char *s = v != 0 ? (const char *)(intptr_t)v : "";
    size_t len = strlen(s) < cap - 1 ? strlen(s) : cap - 1;
    memcpy(buf, s, len);
    buf[len] = '\0';
  } else {
    hm_format_dec(buf, v);
  }
  if (r == &rows[HM_OPT_RSS_LIMIT_MB] && v == hm_opt[HM_OPT_RSS_LIMIT_MB] && limit_from_cgroup) {
    size_t len = strlen(buf);
    const char *parts[] = {" (from ", hm_cgroup_source(), ")"};
    for (size_t k = 0; k < 3; k++)
      for (const char *s = parts[k]; *s != '\0' && len + 1 < cap; s++) buf[len++] = *s;
    buf[len] = '\0';
  }
}

/* One line per option: name, default, current value, meaning; tab-separated
 * so that scripts (the README generator, `hakmem options`) can cut it. */
void hm_options_write(int fd) {
  char def[96], cur[96];
  for (int i = 0; i < HM_OPT_COUNT; i++) {
    const struct option_row *r = &rows[i];
    value_text(r, r->def, def, sizeof def);
    value_text(r, hm_opt[i], cur, sizeof cur);
    const char *parts[] = {r->name, "\t", def, "\t", cur, "\t", r->meaning, "\n"};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) hm_write_fd(fd, parts[k]);
  }
}

void hak_options_write(int fd) {
  hm_ensure_init(); /* the options are read on the first allocation */
  hm_options_write(fd);
}

/* HAKMEM_VERBOSE=1: the effective configuration, at start-up, on stderr.
 * Runs inside the allocator's initialisation, so it only write()s. */
void hm_options_print_config(void) {
  char cur[96];
  hm_write_str("hakmem: configuration (statistics counters ");
  hm_write_str(HM_FAST_COUNTERS ? "on" : "off");
  hm_write_str(", invariant checks ");
  hm_write_str(hak_debug_build() ? "on" : "off");
  hm_write_str("):\n");
  for (int i = 0; i < HM_OPT_COUNT; i++) {
    const struct option_row *r = &rows[i];
    value_text(r, hm_opt[i], cur, sizeof cur);
    const char *parts[] = {"hakmem:   ", r->name, "=", cur, opt_set[i] ? " (from the environment)\n" : "\n"};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) hm_write_str(parts[k]);
  }
}
