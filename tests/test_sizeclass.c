/* Size classes (src/sizeclass.c, types.h): every request of up to POOL_MAX
 * bytes gets the smallest class that holds it; the table that malloc's
 * fast path reads for DIRECT_MAX < n <= MEDIUM_MAX (hm_medium_class) agrees
 * with hm_size_class's formula; and malloc hands out a block of that
 * class's size for each such n. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "hakmem.h"
#include "internal.h"
#include "test_common.h"

int main(void) {
  for (size_t n = 1; n <= POOL_MAX; n++) {
    unsigned c = hm_size_class(n);
    CHECK(c < NUM_CLASSES && hm_class_size[c] >= n && (c == 0 || hm_class_size[c - 1] < n),
          "hm_size_class(%zu) = %u is not the smallest class that holds it", n, c);
    if (n > DIRECT_MAX && n <= MEDIUM_MAX)
      CHECK(hm_medium_class_of(n) == c, "hm_medium_class_of(%zu) = %u, class %u", n, hm_medium_class_of(n), c);
  }
  /* malloc's fast path takes the class from the table: each class's
   * first and last sizes get a block of the class's size. */
  for (unsigned c = hm_size_class(DIRECT_MAX + 1); c <= hm_size_class(MEDIUM_MAX); c++) {
    size_t sizes[2] = {hm_class_size[c - 1] + 1, hm_class_size[c]};
    for (int i = 0; i < 2; i++) {
      void *p = malloc(sizes[i]);
      CHECK(p != NULL, "malloc(%zu)", sizes[i]);
      CHECK(malloc_usable_size(p) == hm_class_size[c], "malloc(%zu): usable %zu, class size %u", sizes[i],
            malloc_usable_size(p), hm_class_size[c]);
      free(p);
    }
  }
  printf("size classes: ok\n");
  return 0;
}
