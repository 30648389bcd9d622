/* HAKMEM_THP_MIN_MB (src/backend.c): once the SuperSlabs' reservations
 * reach that many MiB, later reservations are marked for transparent huge
 * pages (the VMA's "hg" flag in /proc/self/smaps); 0 (the default) never.
 *
 *   test_thp on    run with HAKMEM_THP_MIN_MB=32: the first reservation is
 *                  not marked, the second is
 *   test_thp off   run without the option: none of 80 MiB of SuperSlabs is
 *
 * Skipped (77) where the kernel has no transparent huge pages. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>

/* Is the VMA holding p marked MADV_HUGEPAGE? */
static int huge_flag(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  CHECK(f != NULL, "open /proc/self/smaps");
  char line[512];
  int in = 0, hg = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      hg = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(f);
  CHECK(hg >= 0, "no VMA found for %p", p);
  return hg;
}

int main(int argc, char **argv) {
  tc_test_name = "thp";
  if (!HAKMEM_SPECIFIC) return 77;
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) {
    printf("thp: the kernel has no transparent huge pages; skipped\n");
    return 77;
  }
  int on = argc > 1 && strcmp(argv[1], "on") == 0;
  enum { N = 20000, SIZE = 4096 }; /* 80 MiB of small slabs: 40 SuperSlabs, 3 reservations */
  static void *blocks[N];
  int first_hg = -1;
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(SIZE);
    CHECK(blocks[i] != NULL, "malloc");
    memset(blocks[i], 1, 64);
    if (i % 256 == 0 && first_hg < 0 && huge_flag(blocks[i])) first_hg = i;
  }
  if (on) {
    CHECK(first_hg >= 0, "80 MiB of SuperSlabs with HAKMEM_THP_MIN_MB=32: none marked for huge pages");
    CHECK(!huge_flag(blocks[0]), "the first reservation is marked for huge pages");
  } else {
    CHECK(first_hg < 0, "block %d is marked for huge pages without HAKMEM_THP_MIN_MB", first_hg);
  }
  for (int i = 0; i < N; i++) free(blocks[i]);
  printf("thp %s: ok\n", on ? "on" : "off");
  return 0;
}
