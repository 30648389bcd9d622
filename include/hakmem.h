/* hakmem: a general-purpose memory allocator for Linux.
 *
 * Every function here has the semantics of its glibc namesake without the
 * prefix; the library also exports the unprefixed names (malloc, free, ...)
 * so that LD_PRELOAD=libhakmem.so or -lhakmem replaces the system allocator.
 */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>
#include <stdio.h>
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

/* Statistics (docs/USING.md, "Statistics", says exactly what each figure
 * counts). Three rows: the pool's blocks up to 1 KiB (the direct sizes),
 * its other blocks (up to 256 KiB), the large lane. The default build
 * counts on slow paths only: the pool's figures are then at slab
 * granularity. Built with -DHAKMEM_FAST_COUNTERS=ON, the fast paths also
 * count every call, per size class. */
enum { HAK_LANE_DIRECT = 0, HAK_LANE_POOL = 1, HAK_LANE_LARGE = 2, HAK_LANES = 3 };
/* Deprecated: the former names of HAK_LANE_DIRECT and HAK_LANE_POOL. */
enum { HAK_LANE_TINY = HAK_LANE_DIRECT, HAK_LANE_MID = HAK_LANE_POOL };
#define HAK_STATS_CLASSES 96
enum {
  HAK_REFILL_CARVE,   /* a slab's free list refilled: fresh blocks carved */
  HAK_REFILL_LOCAL,   /*   the owner's frees (local_free) swapped in */
  HAK_REFILL_REMOTE,  /*   other threads' frees drained */
  HAK_REFILL_LISTED,  /* the class took another slab that has free blocks */
  HAK_REFILL_SLAB,    /* the class took an unused slab of an owned SuperSlab */
  HAK_REFILL_ADOPT,   /* a SuperSlab left by an exited thread adopted */
  HAK_REFILL_NEW_SS,  /* a SuperSlab taken from the backend */
  HAK_REFILL_SOURCES
};

struct hak_lane_stats {
  size_t allocated;  /* cumulative bytes: pool rows: carved into blocks; large: blocks */
  size_t freed;      /* cumulative bytes: pool rows: given back with emptied slabs; large: blocks */
  size_t current;    /* allocated - freed */
  size_t peak;       /* highest current so far */
  size_t in_use;     /* bytes in blocks handed out now (pool rows: walked at the call) */
  size_t allocs;     /* blocks allocated: large always, pool rows with HAKMEM_FAST_COUNTERS */
  size_t frees;      /* blocks freed: likewise */
};

struct hak_class_stats {  /* with HAKMEM_FAST_COUNTERS; zero otherwise */
  size_t size;            /* block size of the class */
  size_t allocs;          /* blocks handed out */
  size_t frees_local;     /* freed by the thread owning the slab */
  size_t frees_remote;    /* freed by another thread */
};

struct hak_stats {
  int counters;                          /* 1: built with -DHAKMEM_FAST_COUNTERS=ON */
  struct hak_lane_stats lane[HAK_LANES]; /* HAK_LANE_* */
  size_t large_blocks;                   /* large blocks live now */
  size_t large_blocks_peak;
  size_t large_mapped;                   /* bytes mapped for live large blocks */
  size_t committed_bytes;                /* bytes mapped for hakmem now */
  size_t cached_bytes;                   /* mapped, unused, kept for reuse (malloc_trim returns it) */
  size_t purged_bytes;                   /* cumulative bytes given back with madvise */
  struct hak_os_stats os;
  /* with HAKMEM_FAST_COUNTERS; zero otherwise: */
  size_t refills[HAK_REFILL_SOURCES];      /* slow-path events by source */
  size_t refill_blocks[HAK_REFILL_SOURCES]; /* blocks each brought (CARVE, LOCAL, REMOTE) */
  struct hak_class_stats cls[HAK_STATS_CLASSES];
};

/* Fill *out. Safe while other threads allocate (figures are then as of
 * the moment each was read). Does not allocate; takes the backend's lock
 * for a moment (not for signal handlers). */
HAK_API void hak_stats_get(struct hak_stats *out);
/* The report HAKMEM_STATS=1 prints at exit, to f (NULL: stderr). */
HAK_API void hak_stats_print(FILE *f);
/* The same figures as one JSON object on one line, with the resident
 * memory explained (docs/USING.md, "Statistics"): written with write(2) to
 * f's descriptor after fflush(f), without allocating (NULL: stderr; a FILE
 * without a descriptor, such as fmemopen's, is written through stdio). */
HAK_API void hak_stats_json(FILE *f);

/* Every HAKMEM_* option, one line each: name, default, current value and
 * meaning, separated by tabs (what `hakmem options` shows). The options are
 * read from the environment first if no allocation has read them yet. */
HAK_API void hak_options_write(int fd);
/* Give unused memory back to the OS now, without waiting for
 * HAKMEM_PURGE_DELAY_MS. all=false: the calling thread's unused memory (its
 * empty slabs, the current ones included, and the pages of its free blocks
 * above 64 KiB but each one's first) and the shared caches (empty
 * SuperSlabs, which are unmapped, and the large lane's cached spans).
 * all=true: also every other thread's unused slabs and the memory of exited
 * threads once the frees made into it are collected; malloc_trim(0) is
 * hak_collect(true). Other threads' current slabs, spares and free blocks
 * above 64 KiB stay theirs. Returns 1
 * if memory was given back, 0 if there was none to give. */
HAK_API int hak_collect(bool all);

/* Write the heap profile sampled so far (HAKMEM_PROFILE or
 * HAKMEM_LEAK_REPORT on) to path (NULL: HAKMEM_PROFILE's; %p becomes the
 * pid): pprof's profile.proto, gzip-compressed. 0, or -1 with errno
 * (ENOTSUP: profiling is off). */
HAK_API int hak_profile_dump(const char *path);

/* Nonzero when this build checks internal invariants (make debug). */
HAK_API int hak_debug_build(void);

#ifdef __cplusplus
}
#endif
#endif /* HAKMEM_H */
