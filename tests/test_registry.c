/* The registry and the unit map (src/registry.c).
 *
 *   test_registry unit_map
 *     blocks of every slab kind (a few SuperSlabs) have unit-map entries
 *     that name their slab and carry this thread's tag, and an address
 *     that is not hakmem's reads NULL and 0; the map's 32 GiB stay
 *     read-only but for a few pages, so that it is in no commit charge (a
 *     writable private mapping is charged in full where overcommit is
 *     strict, vm.overcommit_memory=2).
 *   test_registry no_map
 *     re-runs itself under an RLIMIT_AS of 1 GiB, below the map's
 *     reservation, so that it is not mapped: slab blocks freed then are
 *     taken again (each free takes the registry's path), and a loop of a
 *     million mallocs and frees keeps its memory. */
#define _GNU_SOURCE
#include "test_common.h"

#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hakmem.h"
#include "internal.h"

/* The writable bytes of /proc/self/maps inside [lo, hi). */
static size_t writable_in(uintptr_t lo, uintptr_t hi) {
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL, "open /proc/self/maps");
  char line[512];
  size_t n = 0;
  while (fgets(line, sizeof line, f)) {
    uintptr_t a, b;
    char perm[8];
    if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) != 3) continue;
    if (a < hi && b > lo && perm[1] == 'w') n += (b < hi ? b : hi) - (a > lo ? a : lo);
  }
  fclose(f);
  return n;
}

static void unit_map(void) {
  enum { N = 64 };
  static const size_t sizes[] = {16, 100, 1000, 5000, 20000, 100000};
  void *p[sizeof sizes / sizeof sizes[0]][N];
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (int i = 0; i < N; i++) {
      p[k][i] = malloc(sizes[k]);
      CHECK(p[k][i] != NULL, "malloc(%zu)", sizes[k]);
    }
  CHECK(hm_unit_map != NULL && hm_unit_map_n == UNIT_MAP_ENTRIES, "the unit map is mapped");
  size_t set = 0;
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (int i = 0; i < N; i++) {
      uintptr_t a = (uintptr_t)p[k][i];
      if (hm_reg_is(a, REG_SS)) {
        CHECK(hm_unit_map[a >> SS_UNIT_SHIFT].slab == hm_slab_of(hm_ss_of(p[k][i]), p[k][i]),
              "a slab block of %zu B: its unit-map entry is not its slab", sizes[k]);
        CHECK(hm_unit_map[a >> SS_UNIT_SHIFT].owner_tag == hm_thread_tag(),
              "a slab block of %zu B: its unit-map entry does not carry this thread's tag", sizes[k]);
        set++;
      }
    }
  CHECK(set >= (sizeof sizes / sizeof sizes[0] - 1) * N, "slab blocks found: %zu", set);
  int local = 0;
  CHECK(hm_unit_map[(uintptr_t)&local >> SS_UNIT_SHIFT].slab == NULL, "the stack's unit names a slab");
  CHECK(hm_unit_map[(uintptr_t)&unit_map >> SS_UNIT_SHIFT].slab == NULL, "the code's unit names a slab");
  CHECK(hm_unit_map[(uintptr_t)&local >> SS_UNIT_SHIFT].owner_tag == 0, "the stack's unit has a tag");
  uintptr_t lo = (uintptr_t)hm_unit_map, hi = lo + UNIT_MAP_ENTRIES * sizeof(unit_entry_t);
  size_t w = writable_in(lo, hi);
  printf("unit map: %zu MiB reserved, %zu KiB writable, %zu slab blocks\n", (size_t)((hi - lo) >> 20), w >> 10, set);
  CHECK(w <= 64 * 4096, "%zu KiB of the unit map are writable (in the commit charge)", w >> 10);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (int i = 0; i < N; i++) free(p[k][i]);
}

/* The child of no_map, started under the limit. */
static void no_map_child(void) {
  CHECK(hm_unit_map_n == 0, "the unit map is mapped under an RLIMIT_AS of 1 GiB");
  enum { N = 1000 };
  static void *p[N];
  for (int i = 0; i < N; i++) CHECK((p[i] = malloc(100)) != NULL, "malloc(100)");
  for (int i = 0; i < N; i++) free(p[i]);
  int again = 0;
  for (int i = 0; i < N; i++) {
    void *q = malloc(100);
    CHECK(q != NULL, "malloc(100)");
    for (int j = 0; j < N; j++)
      if (q == p[j]) {
        again++;
        break;
      }
  }
  CHECK(again >= N * 9 / 10, "without the unit map %d of %d freed blocks were taken again", again, N);
  size_t rss0 = tc_status_bytes("VmRSS");
  for (int i = 0; i < 1000000; i++) {
    char *q = malloc(64 + (size_t)(i % 8) * 16);
    CHECK(q != NULL, "malloc");
    q[0] = 1;
    free(q);
  }
  size_t rss1 = tc_status_bytes("VmRSS");
  CHECK(rss1 < rss0 + 4 * MiB, "a million mallocs and frees without the unit map: RSS %zu -> %zu KiB", rss0 >> 10,
        rss1 >> 10);
  printf("registry no_map: %d of %d blocks taken again, RSS %zu -> %zu KiB\n", again, N, rss0 >> 10, rss1 >> 10);
}

int main(int argc, char **argv) {
  tc_test_name = "registry";
  if (argc > 1 && strcmp(argv[1], "no_map_child") == 0) {
    no_map_child();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "no_map") == 0) {
    struct rlimit rl = {(rlim_t)1 << 30, (rlim_t)1 << 30};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
    execl("/proc/self/exe", argv[0], "no_map_child", (char *)NULL);
    FAILF("exec: %s", strerror(errno));
  }
  if (argc > 1 && strcmp(argv[1], "unit_map") != 0) {
    fprintf(stderr, "usage: test_registry [unit_map|no_map]\n");
    return 2;
  }
  unit_map();
  printf("registry: ok\n");
  return 0;
}
