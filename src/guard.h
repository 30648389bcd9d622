/* The guarded pool (HAKMEM_GUARD_SAMPLE): one allocation in that many is
 * served between inaccessible pages, and kept inaccessible for a while
 * after its free, so that an overflow, underflow or use-after-free of it
 * faults, and the fault handler reports it. docs/DESIGN.md, "Guarded pool".
 * Its blocks lie in chunks marked REG_GUARD in the registry: free and
 * malloc_usable_size find them there (the fast paths never do). */
#ifndef HAKMEM_GUARD_H
#define HAKMEM_GUARD_H

#include <stddef.h>

/* Start-up: registers the serve hook with the sampler when the option is
 * on (the pool and the signal handlers come with the first guarded block). */
__attribute__((visibility("hidden"))) void hm_guard_init(void);
/* A block in a REG_GUARD chunk: free it (a misuse is reported). */
__attribute__((visibility("hidden"))) void hm_guard_free(void *p);
/* Its usable size (0 after reporting a misuse; op: HM_OP_*). */
__attribute__((visibility("hidden"))) size_t hm_guard_usable(void *p, int op);
/* The pool's resident bytes, records included (explain.c; fd: pagemap or -1). */
__attribute__((visibility("hidden"))) size_t hm_guard_resident(int fd);
/* Its fork handlers (pthread_atfork), registered before src/fork.c's. */
__attribute__((visibility("hidden"))) void hm_guard_fork_init(void);

#endif
