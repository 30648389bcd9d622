/* Call stacks of the program, from inside the allocator: no allocation, no
 * lock another thread may hold in malloc. _Unwind_Backtrace over the
 * .eh_frame tables (programs without frame pointers still give whole
 * stacks; libgcc finds a PC's tables with glibc's _dl_find_object, which
 * takes no lock), warmed up at start-up so that its first call's set-up
 * does not happen inside malloc. docs/DESIGN.md, "Sampling". */
#ifndef HAKMEM_STACK_H
#define HAKMEM_STACK_H

#include <stdint.h>

#define HM_STACK_MAX 64

/* Call once, outside any allocator lock (start-up). */
__attribute__((visibility("hidden"))) void hm_stack_init(void);
/* The caller's stack, innermost first, hakmem's own frames left out: up to
 * max return addresses (the innermost: the call into the allocator's
 * caller, i.e. the malloc call site's return address). Returns the count. */
__attribute__((visibility("hidden"))) int hm_stack_capture(uintptr_t *pcs, int max);
/* Is pc inside hakmem's own code? */
__attribute__((visibility("hidden"))) int hm_stack_is_own(uintptr_t pc);

#endif
