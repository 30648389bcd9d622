/* The process's cgroup memory limits, read once at start-up (docs/DESIGN.md,
 * "Memory given back"): cgroup v2 memory.high and memory.max, v1
 * memory.soft_limit_in_bytes and memory.limit_in_bytes, of the process's
 * cgroup and its ancestors up to the mount's root. The cgroup comes from
 * /proc/self/cgroup, the hierarchy's mount from /proc/self/mountinfo.
 * Runs inside the allocator's initialisation: open/read into stack buffers,
 * no allocation, no stdio. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define PATH_CAP 512
#define NO_LIMIT UINT64_MAX

static const char *source = "none";

/* The whole of a small file (NUL-terminated); its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  ssize_t n;
  /* (a short read ending a line is the end: these files are read whole) */
  while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0) {
    len += (size_t)n;
    if ((size_t)n < cap - 1 - (len - (size_t)n) && buf[len - 1] == '\n') break;
  }
  close(fd);
  buf[len] = '\0';
  return (ssize_t)len;
}

/* A limit file's value: a number of bytes; "max", or v1's huge "no limit"
 * (2^63 rounded down to pages), is NO_LIMIT; NO_LIMIT too if unreadable. */
static uint64_t read_limit(const char *path) {
  char buf[64];
  if (read_small(path, buf, sizeof buf) <= 0 || buf[0] < '0' || buf[0] > '9') return NO_LIMIT;
  uint64_t v = 0;
  for (const char *s = buf; *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - 9) / 10) return NO_LIMIT;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  return v >= ((uint64_t)1 << 60) ? NO_LIMIT : v;
}

static bool append(char *dst, size_t *len, const char *s, size_t n) {
  if (*len + n + 1 > PATH_CAP) return false;
  memcpy(dst + *len, s, n);
  *len += n;
  dst[*len] = '\0';
  return true;
}

/* Field k (0-based, space-separated) of a line; its length in *n. */
static const char *field(const char *line, const char *end, int k, size_t *n) {
  const char *s = line;
  for (; k > 0; k--) {
    while (s < end && *s != ' ') s++;
    if (s == end) return NULL;
    s++;
  }
  const char *e = s;
  while (e < end && *e != ' ') e++;
  *n = (size_t)(e - s);
  return s;
}

/* Does the comma-separated list [s, s+n) hold word? */
static bool has_word(const char *s, size_t n, const char *word) {
  size_t w = strlen(word);
  for (const char *e = s + n; s < e;) {
    const char *c = memchr(s, ',', (size_t)(e - s));
    size_t k = (size_t)((c != NULL ? c : e) - s);
    if (k == w && memcmp(s, word, w) == 0) return true;
    s += k + 1;
  }
  return false;
}

typedef struct {
  bool want, found;
  size_t mnt_len, root_len;
  char mnt[PATH_CAP], root[PATH_CAP];
} mount_t;

/* The mount points and roots of the hierarchies wanted (m[1]: v2,
 * "cgroup2"; m[0]: v1's "cgroup" with the memory controller) from
 * mountinfo, read a block at a time. */
static void find_mounts(mount_t m[2]) {
  int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  size_t have = 0;
  bool skipping = false;
#define ALL_FOUND ((!m[0].want || m[0].found) && (!m[1].want || m[1].found))
  for (;;) {
    ssize_t n = read(fd, buf + have, sizeof buf - have);
    if (n <= 0) break;
    have += (size_t)n;
    char *line = buf, *nl;
    while (!ALL_FOUND && (nl = memchr(line, '\n', (size_t)(buf + have - line))) != NULL) {
      if (!skipping) {
        /* id parent maj:min root mountpoint options [optional...] - fstype source superopts */
        const char *sep = NULL;
        for (char *s = line; s + 3 <= nl; s++)
          if (s[0] == ' ' && s[1] == '-' && s[2] == ' ') {
            sep = s + 3;
            break;
          }
        size_t tn = 0, on = 0, rn = 0, mn = 0;
        const char *type = sep ? field(sep, nl, 0, &tn) : NULL;
        const char *opts = sep ? field(sep, nl, 2, &on) : NULL;
        const char *r = field(line, nl, 3, &rn), *mp = field(line, nl, 4, &mn);
        int k = -1;
        if (type != NULL && tn == 7 && memcmp(type, "cgroup2", 7) == 0) k = 1;
        if (type != NULL && tn == 6 && memcmp(type, "cgroup", 6) == 0 && opts != NULL && has_word(opts, on, "memory"))
          k = 0;
        if (k >= 0 && m[k].want && !m[k].found && r != NULL && mp != NULL) {
          m[k].mnt_len = m[k].root_len = 0;
          m[k].found = append(m[k].mnt, &m[k].mnt_len, mp, mn) && append(m[k].root, &m[k].root_len, r, rn);
        }
      }
      skipping = false;
      line = nl + 1;
    }
    if (ALL_FOUND) break;
    have = (size_t)(buf + have - line);
    if (have == sizeof buf) { /* a line longer than the buffer: not one of ours */
      have = 0;
      skipping = true;
    } else {
      memmove(buf, line, have);
    }
  }
  close(fd);
#undef ALL_FOUND
}

/* The limits of the hierarchy's files `soft` and `hard` along the path of
 * the process's cgroup (the least of each over the cgroup and its
 * ancestors up to the mount's root). */
static void walk(const char *mnt, size_t mnt_len, const char *root, size_t root_len, const char *cg, size_t cg_len,
                 const char *soft, const char *hard, uint64_t *lo, uint64_t *hi) {
  /* the cgroup's path inside the mount: cg without the mount's root */
  if (root_len > 1) {
    if (cg_len < root_len || memcmp(cg, root, root_len) != 0) return;
    cg += root_len;
    cg_len -= root_len;
  }
  if (cg_len == 1) cg_len = 0; /* "/" */
  char path[PATH_CAP];
  size_t len = 0;
  if (!append(path, &len, mnt, mnt_len) || !append(path, &len, cg, cg_len)) return;
  /* Up to, not including, the mount's root (the root cgroup has no limit),
   * unless the cgroup is the mount's root: in a cgroup namespace, that is
   * the container's cgroup. */
  size_t stop = cg_len == 0 ? mnt_len : mnt_len + 1;
  for (;;) {
    size_t base = len;
    uint64_t v;
    if (append(path, &len, "/", 1) && append(path, &len, soft, strlen(soft)) && (v = read_limit(path)) < *lo) *lo = v;
    len = base;
    if (append(path, &len, "/", 1) && append(path, &len, hard, strlen(hard)) && (v = read_limit(path)) < *hi) *hi = v;
    len = base;
    if (len <= mnt_len) break;
    while (len > mnt_len && path[len - 1] != '/') len--;
    if (len > mnt_len) len--; /* the slash */
    path[len] = '\0';
    if (len < stop) break;
  }
}

size_t hm_cgroup_limit(void) {
  char cgroup[2048];
  ssize_t n = read_small("/proc/self/cgroup", cgroup, sizeof cgroup);
  if (n <= 0) return 0;
  uint64_t soft = NO_LIMIT, hard = NO_LIMIT;
  bool v1 = false;
  mount_t m[2];
  const char *path[2] = {NULL, NULL};
  size_t plen[2] = {0, 0};
  /* lines "id:controllers:path"; v2's is "0::path" */
  for (char *line = cgroup, *nl; *line != '\0'; line = nl + 1) {
    nl = strchr(line, '\n');
    if (nl == NULL) nl = line + strlen(line);
    char *c1 = memchr(line, ':', (size_t)(nl - line));
    char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(nl - c1 - 1)) : NULL;
    if (c2 != NULL) {
      int k = c2 == c1 + 1 && c1 - line == 1 && line[0] == '0' ? 1
              : has_word(c1 + 1, (size_t)(c2 - c1 - 1), "memory") ? 0 : -1;
      if (k >= 0) {
        path[k] = c2 + 1;
        plen[k] = (size_t)(nl - path[k]);
      }
    }
    if (*nl == '\0') break;
  }
  for (int k = 0; k < 2; k++) m[k].want = path[k] != NULL, m[k].found = false;
  if (!m[0].want && !m[1].want) return 0;
  find_mounts(m);
  for (int k = 0; k < 2; k++) {
    if (!m[k].found) continue;
    uint64_t s = NO_LIMIT, h = NO_LIMIT;
    if (k == 1)
      walk(m[k].mnt, m[k].mnt_len, m[k].root, m[k].root_len, path[k], plen[k], "memory.high", "memory.max", &s, &h);
    else
      walk(m[k].mnt, m[k].mnt_len, m[k].root, m[k].root_len, path[k], plen[k], "memory.soft_limit_in_bytes",
           "memory.limit_in_bytes", &s, &h);
    if (s < soft || h < hard) v1 = k == 0;
    if (s < soft) soft = s;
    if (h < hard) hard = h;
  }
  /* memory.high (or the soft limit) where set, else 90% of memory.max */
  uint64_t hard90 = hard == NO_LIMIT ? NO_LIMIT : hard / 10 * 9;
  if (soft == NO_LIMIT && hard90 == NO_LIMIT) return 0;
  if (soft <= hard90)
    source = v1 ? "cgroup v1 memory.soft_limit_in_bytes" : "cgroup v2 memory.high";
  else
    source = v1 ? "cgroup v1 memory.limit_in_bytes x 0.9" : "cgroup v2 memory.max x 0.9";
  uint64_t lim = soft <= hard90 ? soft : hard90;
  return lim > SIZE_MAX ? SIZE_MAX : (size_t)lim;
}

const char *hm_cgroup_source(void) { return source; }
