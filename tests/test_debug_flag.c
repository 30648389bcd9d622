/* hak_debug_build() reports whether this is the HAKMEM_DEBUG build; in that
 * build the invariant checks must not reject correct programs (the whole
 * suite runs there through `make debug-test`). */
#include "test_common.h"

#include "hakmem.h"

int main(void) {
  tc_test_name = "debug_flag";
  int d = hak_debug_build();
  printf("hak_debug_build() = %d, configured HAKMEM_DEBUG = %d\n", d, HAK_EXPECT_DEBUG);
  if (!HAKMEM_SPECIFIC) return 0;
  CHECK((d != 0) == (HAK_EXPECT_DEBUG != 0), "hak_debug_build() = %d but the build was configured with HAKMEM_DEBUG=%s",
        d, HAK_EXPECT_DEBUG ? "ON" : "OFF");
  /* a short mixed workload through the checked paths */
  void *v[1000];
  for (int r = 0; r < 20; r++) {
    for (int i = 0; i < 1000; i++) {
      v[i] = malloc((size_t)(i * 97 % 70000) + 1);
      CHECK(v[i], "malloc");
    }
    for (int i = 999; i >= 0; i--) free(v[i]);
  }
  return 0;
}
