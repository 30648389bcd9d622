/* The standard allocation symbols, exported so that LD_PRELOAD or -lhakmem
 * replaces glibc's allocator. malloc and free inline the fast paths. */
#include <stdlib.h>
#include <malloc.h>

#include "fastpath.h"
#include "usable.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT void *malloc(size_t n) { return hm_malloc(n); }
EXPORT void free(void *p) { hm_free(p); }
EXPORT void *calloc(size_t nmemb, size_t size) { return hak_calloc(nmemb, size); }
EXPORT void *realloc(void *p, size_t n) { return hak_realloc(p, n); }
EXPORT void *reallocarray(void *p, size_t nmemb, size_t size) { return hak_reallocarray(p, nmemb, size); }
EXPORT int posix_memalign(void **out, size_t align, size_t n) { return hak_posix_memalign(out, align, n); }
EXPORT void *aligned_alloc(size_t align, size_t n) { return hak_aligned_alloc(align, n); }
EXPORT void *memalign(size_t align, size_t n) { return hak_memalign(align, n); }
EXPORT void *valloc(size_t n) { return hak_valloc(n); }
EXPORT void *pvalloc(size_t n) { return hak_pvalloc(n); }
EXPORT size_t malloc_usable_size(void *p) { return hm_usable(p); }
EXPORT int malloc_trim(size_t pad) { return hak_malloc_trim(pad); }

/* glibc's statistics, answered from hakmem's figures (src/stats.c) */
EXPORT struct mallinfo2 mallinfo2(void) { return hm_mallinfo2(); }
EXPORT struct mallinfo mallinfo(void) { return hm_mallinfo(); }
EXPORT void malloc_stats(void) { hm_malloc_stats(); }
