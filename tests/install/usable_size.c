/* Built WITHOUT hakmem: prints malloc_usable_size(malloc(100)), which is 112
 * only when hakmem is preloaded (glibc says 104). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  void *p = malloc(100);
  printf("%zu\n", malloc_usable_size(p));
  free(p);
  return 0;
}
