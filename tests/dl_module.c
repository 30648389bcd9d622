/* A module loaded with dlopen() by test_startup.  It is NOT linked against
 * hakmem: its malloc/free calls must bind to whatever allocator the process
 * uses, so memory crosses the module boundary in both directions. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

static char *ctor_block;
static size_t ctor_len;

__attribute__((constructor)) static void mod_init(void) {
  ctor_len = 5000;
  ctor_block = malloc(ctor_len);
  if (ctor_block) memset(ctor_block, 0x5D, ctor_len);
}

__attribute__((destructor)) static void mod_fini(void) { free(ctor_block); }

/* Returns 1 if the constructor's block is intact. */
int mod_check_ctor(void) {
  if (!ctor_block) return 0;
  for (size_t i = 0; i < ctor_len; i++)
    if ((unsigned char)ctor_block[i] != 0x5D) return 0;
  return 1;
}

/* Memory allocated in the module, freed by the caller. */
char *mod_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* Memory allocated by the caller, grown and freed in the module. */
int mod_realloc_free(char *p, size_t n) {
  char *q = realloc(p, n * 4);
  if (!q) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)q[i] != (unsigned char)(i * 7)) return 0;
  free(q);
  return 1;
}
