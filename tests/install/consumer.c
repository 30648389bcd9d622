/* An out-of-tree program built against an installed hakmem (pkg-config or
 * find_package(hakmem)).  malloc(100) lands in hakmem's 112-byte class, which
 * proves that the malloc the program calls is hakmem's. */
#include <hakmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *p = malloc(100);
  if (!p) {
    fprintf(stderr, "FAIL: malloc(100) returned NULL\n");
    return 1;
  }
  memset(p, 0xab, 100);
  size_t us = hak_malloc_usable_size(p);
  if (us != 112) {
    fprintf(stderr, "FAIL: hak_malloc_usable_size(malloc(100)) = %zu, expected 112: is hakmem in use?\n", us);
    return 1;
  }
  free(p);
  void *q = hak_malloc(1000);
  if (!q) {
    fprintf(stderr, "FAIL: hak_malloc(1000) returned NULL\n");
    return 1;
  }
  hak_free(q);
  printf("OK\n");
  return 0;
}
