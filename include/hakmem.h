/* hakmem: a general-purpose memory allocator for Linux.
 *
 * Every function here has the semantics of its glibc namesake without the
 * prefix; the library also exports the unprefixed names (malloc, free, ...)
 * so that LD_PRELOAD=libhakmem.so or -lhakmem replaces the system allocator.
 */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HAK_API __attribute__((visibility("default")))
#define HAK_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#else
#define HAK_API
#define HAK_MALLOC_ATTR
#endif

HAK_API HAK_MALLOC_ATTR void *hak_malloc(size_t size);
HAK_API void hak_free(void *ptr);
HAK_API HAK_MALLOC_ATTR void *hak_calloc(size_t nmemb, size_t size);
HAK_API void *hak_realloc(void *ptr, size_t size);
HAK_API void *hak_reallocarray(void *ptr, size_t nmemb, size_t size);
HAK_API int hak_posix_memalign(void **out, size_t alignment, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_aligned_alloc(size_t alignment, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_memalign(size_t alignment, size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_valloc(size_t size);
HAK_API HAK_MALLOC_ATTR void *hak_pvalloc(size_t size);
HAK_API size_t hak_malloc_usable_size(void *ptr);
HAK_API int hak_malloc_trim(size_t pad);

/* Operating-system activity since start-up (always counted: slow paths only). */
struct hak_os_stats {
  size_t mmap_calls;      /* mmap calls that succeeded */
  size_t munmap_calls;
  size_t madvise_calls;
  size_t mremap_calls;
  size_t mmap_failures;   /* mmap calls the OS refused */
  size_t committed_bytes; /* bytes currently mapped for hakmem */
  size_t purged_bytes;    /* of those, given back with madvise and not reused since */
};
HAK_API void hak_os_stats_get(struct hak_os_stats *out);

/* Give unused memory back to the OS now, without waiting for
 * HAKMEM_PURGE_DELAY_MS. all=false: the calling thread's unused memory (its
 * empty slabs, the current ones included) and the shared caches (empty
 * SuperSlabs, which are unmapped, and the large lane's cached spans).
 * all=true: also every other thread's unused slabs and the memory of exited
 * threads once the frees made into it are collected; malloc_trim(0) is
 * hak_collect(true). Other threads' current slabs stay theirs. Returns 1
 * if memory was given back, 0 if there was none to give. */
HAK_API int hak_collect(bool all);

/* Nonzero when this build checks internal invariants (make debug). */
HAK_API int hak_debug_build(void);

#ifdef __cplusplus
}
#endif
#endif /* HAKMEM_H */
