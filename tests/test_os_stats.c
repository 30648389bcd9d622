/* hak_os_stats_get: counters move with OS activity, never go backwards, and
 * committed_bytes tracks mapped memory (at least the live payload; a freed
 * 64 MiB block is given back after malloc_trim). hakmem-specific. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "hakmem.h"

static struct hak_os_stats prev;
static void snap(struct hak_os_stats *s, const char *when) {
  hak_os_stats_get(s);
  CHECK(s->mmap_calls >= prev.mmap_calls && s->munmap_calls >= prev.munmap_calls &&
            s->madvise_calls >= prev.madvise_calls && s->mremap_calls >= prev.mremap_calls &&
            s->mmap_failures >= prev.mmap_failures,
        "a counter went backwards (%s)", when);
  CHECK(s->committed_bytes < ((size_t)1 << 46), "committed_bytes absurd: %zu (%s)", s->committed_bytes, when);
  prev = *s;
  printf("  %-34s mmap %zu munmap %zu madvise %zu mremap %zu fail %zu committed %zu KiB\n", when, s->mmap_calls,
         s->munmap_calls, s->madvise_calls, s->mremap_calls, s->mmap_failures, s->committed_bytes / 1024);
}

int main(void) {
  tc_test_name = "os_stats";
  if (!HAKMEM_SPECIFIC) return 77;
  struct hak_os_stats s0, s1, s2, s3, s4;
  free(malloc(10));
  snap(&s0, "start");
  /* 64 MiB from the large lane */
  char *big = malloc(64 * MiB);
  CHECK(big, "malloc(64 MiB)");
  memset(big, 1, 64 * MiB);
  snap(&s1, "64 MiB live");
  CHECK(s1.mmap_calls > s0.mmap_calls || s1.mremap_calls > s0.mremap_calls,
        "a 64 MiB allocation made no mmap call");
  CHECK(s1.committed_bytes >= s0.committed_bytes + 64 * MiB, "committed_bytes %zu KiB -> %zu KiB with 64 MiB live",
        s0.committed_bytes / 1024, s1.committed_bytes / 1024);
  free(big);
  malloc_trim(0);
  snap(&s2, "64 MiB freed + malloc_trim");
  CHECK(s2.committed_bytes + 32 * MiB <= s1.committed_bytes,
        "after freeing a 64 MiB block and malloc_trim(0), committed_bytes only fell from %zu to %zu KiB",
        s1.committed_bytes / 1024, s2.committed_bytes / 1024);
  CHECK(s2.munmap_calls > s1.munmap_calls || s2.madvise_calls > s1.madvise_calls ||
            s2.mremap_calls > s1.mremap_calls,
        "a 64 MiB block was freed and trimmed without munmap/madvise");
  /* many small and mid blocks: committed covers the live payload */
  enum { N = 100000 };
  void **v = malloc(N * sizeof *v);
  CHECK(v, "malloc");
  size_t live = 0;
  for (int i = 0; i < N; i++) {
    size_t n = (size_t)(i % 7 == 0 ? 20000 : 1 + i % 1024);
    v[i] = malloc(n);
    CHECK(v[i], "malloc");
    memset(v[i], 2, n);
    live += n;
  }
  snap(&s3, "small+mid live");
  CHECK(s3.committed_bytes >= live, "committed_bytes %zu KiB < live payload %zu KiB", s3.committed_bytes / 1024,
        live / 1024);
  for (int i = 0; i < N; i++) free(v[i]);
  free(v);
  malloc_trim(0);
  snap(&s4, "all freed + malloc_trim");
  CHECK(s4.committed_bytes <= s3.committed_bytes, "committed_bytes grew after freeing everything");
  /* growing a large block by realloc */
  char *r = malloc(1 * MiB);
  CHECK(r, "malloc");
  for (size_t n = 2 * MiB; n <= 32 * MiB; n *= 2) {
    r = realloc(r, n);
    CHECK(r, "realloc to %zu", n);
    r[n - 1] = 1;
  }
  snap(&s4, "realloc 1 -> 32 MiB");
  CHECK(s4.committed_bytes >= 32 * MiB, "committed_bytes < 32 MiB with a 32 MiB block live");
  free(r);
  printf("os_stats: ok\n");
  return 0;
}
