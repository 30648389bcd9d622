/* Out of memory under RLIMIT_AS.
 *
 * For every allocation function, a forked child lowers RLIMIT_AS to its
 * current VmSize + 64 MiB and allocates until failure.  Asserted:
 *   - the failure is NULL with errno ENOMEM (posix_memalign: returns ENOMEM),
 *   - nothing crashes, every block obtained is intact,
 *   - a failed realloc leaves the old block intact,
 *   - after freeing everything the heap is usable again: assorted sizes in
 *     every lane can be allocated and verified, and a second round of the
 *     same kind gets at least half as many blocks as the first. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "hakmem.h"

#define HEADROOM (64 * MiB)

enum kind { K_MALLOC_SMALL, K_MALLOC_MID, K_MALLOC_LARGE, K_CALLOC_SMALL, K_CALLOC_LARGE, K_POSIX_MEMALIGN,
            K_ALIGNED_ALLOC, K_MEMALIGN, K_MEMALIGN_HUGE_ALIGN, K_VALLOC, K_PVALLOC, K_MIXED, K_REALLOC_GROW,
            K_COUNT };
static const char *kind_name[] = {"malloc small (64 B)", "malloc mid (20000 B)", "malloc large (1 MiB)",
                                  "calloc small (100 B)", "calloc large (2 MiB)", "posix_memalign(64, 1000)",
                                  "aligned_alloc(4096, 5000)", "memalign(256, 300)", "memalign(1 MiB, 100)",
                                  "valloc(3000)", "pvalloc(5000)", "mixed sizes", "realloc grow"};

struct blk {
  struct blk *next;
  uint64_t tag;
  size_t size;
};

static size_t kind_size(enum kind k, uint64_t i) {
  switch (k) {
    case K_MALLOC_SMALL: return 64;
    case K_MALLOC_MID: return 20000;
    case K_MALLOC_LARGE: return 1u << 20;
    case K_CALLOC_SMALL: return 100;
    case K_CALLOC_LARGE: return 2u << 20;
    case K_POSIX_MEMALIGN: return 1000;
    case K_ALIGNED_ALLOC: return 5000;
    case K_MEMALIGN: return 300;
    case K_MEMALIGN_HUGE_ALIGN: return 100;
    case K_VALLOC: return 3000;
    case K_PVALLOC: return 5000;
    case K_MIXED: {
      uint64_t h = tc_mix64(i);
      uint64_t c = h % 100;
      return c < 70 ? 48 + (size_t)(h >> 20) % 1000 : c < 95 ? 1025 + (size_t)(h >> 20) % 200000
                                                             : 262145 + (size_t)(h >> 20) % (3u << 20);
    }
    default: return 0;
  }
}

/* Returns NULL on failure after checking the failure protocol. */
static void *kind_alloc(enum kind k, size_t n) {
  errno = 0;
  void *p = NULL;
  const char *fn = kind_name[k];
  switch (k) {
    case K_CALLOC_SMALL:
    case K_CALLOC_LARGE: p = calloc(1, n); break;
    case K_POSIX_MEMALIGN: {
      void *sentinel = (void *)(uintptr_t)0xBADC0DE0;
      p = sentinel;
      int rc = posix_memalign(&p, 64, n);
      if (rc != 0) {
        CHECK(rc == ENOMEM, "%s failed with %d, expected ENOMEM", fn, rc);
        CHECK(p == sentinel, "%s failed but changed *out", fn);
        return NULL;
      }
      CHECK(p != sentinel && p != NULL, "posix_memalign returned 0 without a block");
      CHECK(((uintptr_t)p & 63) == 0, "posix_memalign misaligned");
      return p;
    }
    case K_ALIGNED_ALLOC: p = aligned_alloc(4096, n); break;
    case K_MEMALIGN: p = memalign(256, n); break;
    case K_MEMALIGN_HUGE_ALIGN: p = memalign(1u << 20, n); break;
    case K_VALLOC: p = valloc(n); break;
    case K_PVALLOC: p = pvalloc(n); break;
    default: p = malloc(n); break;
  }
  if (!p) {
    int e = errno;
    CHECK(e == ENOMEM, "%s: NULL with errno %d (%s), expected ENOMEM", fn, e, strerror(e));
  }
  return p;
}

static void verify_blk(struct blk *b, const char *when) {
  if (tc_verify((char *)b + sizeof *b, 8, b->tag) != (size_t)-1 ||
      tc_verify((char *)b + b->size - 8, 8, ~b->tag) != (size_t)-1)
    FAILF("block %p (%zu bytes, tag %llu) corrupted %s", (void *)b, b->size, (unsigned long long)b->tag, when);
}

/* Allocate until failure; returns count and the list. */
static size_t fill_until_fail(enum kind k, struct blk **list, size_t *bytes) {
  size_t cnt = 0, total = 0;
  size_t cap = 40 * HEADROOM; /* by far more than RLIMIT_AS allows */
  for (uint64_t i = 0;; i++) {
    size_t n = kind_size(k, i);
    struct blk *b = kind_alloc(k, n);
    if (!b) break;
    if (k == K_CALLOC_SMALL || k == K_CALLOC_LARGE) {
      size_t bad = n <= 4096 ? tc_find_not(b, n, 0) : tc_find_not(b, 4096, 0);
      if (bad == (size_t)-1 && n > 4096) {
        bad = tc_find_not((char *)b + n - 4096, 4096, 0);
        if (bad != (size_t)-1) bad += n - 4096;
      }
      CHECK(bad == (size_t)-1, "calloc near OOM: byte %zu not zero", bad);
    }
    b->next = *list;
    b->tag = i * 2654435761u + k;
    b->size = n;
    tc_fill((char *)b + sizeof *b, 8, b->tag);
    tc_fill((char *)b + n - 8, 8, ~b->tag);
    *list = b;
    cnt++;
    total += n;
    CHECK(total < cap, "%s: allocated %zu MiB without failure although RLIMIT_AS allows ~%zu MiB more",
          kind_name[k], total / MiB, HEADROOM / MiB);
  }
  *bytes = total;
  return cnt;
}

static void free_list(struct blk *list) {
  while (list) {
    struct blk *n = list->next;
    verify_blk(list, "before free");
    free(list);
    list = n;
  }
}

static void heap_usable_again(const char *after) {
  /* glibc keeps fragmented arena memory after e.g. memalign(1 MiB) blocks
   * and may then refuse a 1 MiB request: large sizes are checked for hakmem
   * only, whose large lane returns memory to the OS on free. */
  static const size_t sizes[] = {1, 16, 100, 1000, 1025, 8193, 65537, 262145, 1u << 20, 4u << 20};
  const int ns = HAKMEM_SPECIFIC ? 10 : 8;
  void *v[10][8] = {{0}};
  /* 8 blocks of each size up to 256 KiB, 2 of the large ones: < 16 MiB live */
  for (int r = 0; r < 8; r++)
    for (int i = 0; i < ns; i++) {
      if (sizes[i] > 262145 && r >= 2) continue;
      v[i][r] = malloc(sizes[i]);
      CHECK(v[i][r] != NULL, "after %s and freeing everything, malloc(%zu) fails (errno %d): heap not usable again",
            after, sizes[i], errno);
      tc_fill(v[i][r], sizes[i], (uint64_t)i * 8 + (unsigned)r);
    }
  for (int r = 0; r < 8; r++)
    for (int i = 0; i < ns; i++) {
      if (!v[i][r]) continue;
      CHECK_PATTERN(v[i][r], sizes[i], (uint64_t)i * 8 + (unsigned)r, "after %s", after);
      free(v[i][r]);
    }
  void *a = aligned_alloc(4096, 10000);
  CHECK(a && ((uintptr_t)a & 4095) == 0, "aligned_alloc after %s", after);
  free(a);
  void *c = calloc(1000, 100);
  CHECK(c && tc_find_not(c, 100000, 0) == (size_t)-1, "calloc after %s", after);
  free(c);
}

static void set_limit(void) {
  size_t vm = tc_status_bytes("VmSize");
  struct rlimit rl = {vm + HEADROOM, vm + HEADROOM};
  if (setrlimit(RLIMIT_AS, &rl) != 0) FAILF("setrlimit: %s", strerror(errno));
}

static void child_kind(enum kind k) {
  static char name[96];
  snprintf(name, sizeof name, "oom %s", kind_name[k]);
  tc_test_name = name;
  struct hak_os_stats s0, s1;
  hak_os_stats_get(&s0);
  set_limit();
  struct blk *list = NULL;
  size_t bytes1 = 0, bytes2 = 0;
  size_t n1 = fill_until_fail(k, &list, &bytes1);
  CHECK(n1 > 0, "%s: not a single allocation succeeded under a %zu MiB headroom", kind_name[k], HEADROOM / MiB);
  hak_os_stats_get(&s1);
  if (HAKMEM_SPECIFIC && (k == K_MALLOC_LARGE || k == K_CALLOC_LARGE))
    CHECK(s1.mmap_failures > s0.mmap_failures, "%s: hak_os_stats mmap_failures did not count the refused mmap",
          kind_name[k]);
  /* At the limit: small requests may fail too, but only with ENOMEM. */
  for (int i = 0; i < 100; i++) {
    errno = 0;
    void *p = malloc((size_t)i * 50 + 1);
    if (p) {
      memset(p, 1, (size_t)i * 50 + 1);
      free(p);
    } else {
      CHECK(errno == ENOMEM, "malloc at the limit failed with errno %d", errno);
    }
  }
  free_list(list);
  list = NULL;
  malloc_trim(0);
  heap_usable_again(kind_name[k]);
  size_t n2 = fill_until_fail(k, &list, &bytes2);
  CHECK(n2 >= n1 / 2, "%s: first round got %zu blocks (%zu MiB), after freeing them all only %zu (%zu MiB)",
        kind_name[k], n1, bytes1 / MiB, n2, bytes2 / MiB);
  free_list(list);
  heap_usable_again(kind_name[k]);
  char msg[160];
  int len = snprintf(msg, sizeof msg, "  %-28s round 1: %7zu blocks %4zu MiB, round 2: %7zu blocks %4zu MiB\n",
                     kind_name[k], n1, bytes1 / MiB, n2, bytes2 / MiB);
  if (write(1, msg, (size_t)len) < 0) _exit(3);
  _exit(0);
}

/* cheap position-dependent pattern so a grown block only fills its new part */
static inline uint8_t gpat(size_t i, unsigned v) { return (uint8_t)(((i ^ (i >> 9) ^ (i >> 17)) * 167u + 13u + v)); }
static void gfill(char *p, size_t from, size_t to, unsigned v) {
  for (size_t i = from; i < to; i++) p[i] = (char)gpat(i, v);
}
static size_t gcheck_range(const char *p, size_t from, size_t to, unsigned v) {
  for (size_t i = from; i < to; i++)
    if ((uint8_t)p[i] != gpat(i, v)) return i;
  return (size_t)-1;
}
/* head, tail and one byte per 4 KiB */
static size_t gcheck_sampled(const char *p, size_t n, unsigned v) {
  size_t b = gcheck_range(p, 0, n < 4096 ? n : 4096, v);
  if (b == (size_t)-1 && n > 4096) b = gcheck_range(p, n - 4096, n, v);
  for (size_t i = 4096; b == (size_t)-1 && i < n; i += 4093)
    if ((uint8_t)p[i] != gpat(i, v)) b = i;
  return b;
}

static void child_realloc_grow(void) {
  tc_test_name = "oom realloc grow";
  set_limit();
  for (unsigned variant = 0; variant < 3; variant++) {
    /* 0: doubling from 1 KiB; 1: +256 KiB steps from 100 B; 2: +1 B steps through the small lanes, then x1.5 */
    size_t n = variant == 0 ? 1024 : variant == 1 ? 100 : 1;
    char *p = malloc(n);
    CHECK(p, "malloc");
    gfill(p, 0, n, variant);
    size_t steps = 0;
    for (;;) {
      size_t nn = variant == 0 ? n * 2 : variant == 1 ? n + 262144 : (n < 3000 ? n + 1 : n + n / 2);
      errno = 0;
      char *q = realloc(p, nn);
      if (!q) {
        CHECK(errno == ENOMEM, "realloc(%zu -> %zu) failed with errno %d, expected ENOMEM", n, nn, errno);
        size_t bad = gcheck_range(p, 0, n, variant);
        CHECK(bad == (size_t)-1, "failed realloc %zu -> %zu did not leave the old block intact (byte %zu)", n, nn,
              bad);
        CHECK(malloc_usable_size(p) >= n, "usable size after failed realloc");
        break;
      }
      size_t bad = gcheck_sampled(q, n, variant);
      CHECK(bad == (size_t)-1, "realloc %zu -> %zu lost contents at byte %zu", n, nn, bad);
      gfill(q, n, nn, variant);
      p = q;
      n = nn;
      steps++;
      CHECK(n < 40 * HEADROOM, "realloc grew to %zu MiB without failure", n / MiB);
    }
    /* shrink the survivor: must work and keep its prefix */
    char *q = realloc(p, n / 4 + 1);
    CHECK(q, "realloc shrink after failure returned NULL");
    size_t bad = gcheck_range(q, 0, n / 4 + 1, variant);
    CHECK(bad == (size_t)-1, "shrinking after a failed grow lost byte %zu", bad);
    free(q);
    heap_usable_again("realloc grow");
    char msg[120];
    int len = snprintf(msg, sizeof msg, "  realloc grow variant %u: failed at %zu MiB after %zu steps\n", variant,
                       n / MiB, steps);
    if (write(1, msg, (size_t)len) < 0) _exit(3);
  }
  _exit(0);
}

static void run_child(void (*fn)(int), int arg, const char *what) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) FAILF("fork: %s", strerror(errno));
  if (pid == 0) fn(arg);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) FAILF("waitpid");
  if (WIFSIGNALED(st)) FAILF("%s: child crashed with signal %d (%s)", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
  if (WEXITSTATUS(st) != 0) FAILF("%s: child exited with status %d (see message above)", what, WEXITSTATUS(st));
}

static void kind_entry(int k) { child_kind((enum kind)k); }
static void grow_entry(int unused) {
  (void)unused;
  child_realloc_grow();
}

int main(int argc, char **argv) {
  tc_test_name = "oom";
  /* warm the heap up so the child's VmSize includes the allocator's base */
  for (int i = 0; i < 1000; i++) free(malloc((size_t)i * 10 + 1));
  printf("oom: RLIMIT_AS headroom %zu MiB\n", HEADROOM / MiB);
  int only = argc > 1 ? atoi(argv[1]) : -1;
  for (int k = 0; k < K_REALLOC_GROW; k++)
    if (only < 0 || only == k) run_child(kind_entry, k, kind_name[k]);
  if (only < 0 || only == K_REALLOC_GROW) run_child(grow_entry, 0, "realloc grow");
  printf("oom: all kinds fail cleanly with ENOMEM and recover\n");
  return 0;
}
