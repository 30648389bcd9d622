/* Call stacks of the program, from inside the allocator: no allocation, no
 * lock another thread may hold in malloc. _Unwind_Backtrace over the
 * .eh_frame tables (programs without frame pointers still give whole
 * stacks; libgcc finds a PC's tables with glibc's _dl_find_object, which
 * takes no lock), warmed up at start-up so that its first call's set-up
 * does not happen inside malloc. docs/DESIGN.md, "Sampling". */
#ifndef HAKMEM_STACK_H
#define HAKMEM_STACK_H

#include <stdint.h>
#include <unwind.h>

#define HM_STACK_MAX 64

/* Call once, outside any allocator lock (start-up); and in a fork child. */
__attribute__((visibility("hidden"))) void hm_stack_init(void);
/* The same without the call-site cache (hm_stack_capture_at then walks
 * every time): for a consumer that samples too rarely to need it. */
__attribute__((visibility("hidden"))) void hm_stack_warm(void);
__attribute__((visibility("hidden"))) void hm_stack_fork_child(void);
/* Is pc inside hakmem's own code? */
__attribute__((visibility("hidden"))) int hm_stack_is_own(uintptr_t pc);

struct hm_stack_walk {
  uintptr_t *pcs;
  int n, max;
};
__attribute__((visibility("hidden"))) _Unwind_Reason_Code hm_stack_frame(struct _Unwind_Context *ctx, void *arg);

/* The caller's stack, innermost first, hakmem's own frames left out: up to
 * max return addresses (the innermost: the return address of the malloc
 * call). Returns the count. Inline: each frame of ours costs an unwinding
 * step (about 1,400 instructions). */
static inline __attribute__((always_inline)) int hm_stack_capture(uintptr_t *pcs, int max) {
  struct hm_stack_walk w = {pcs, 0, max};
  _Unwind_Backtrace(hm_stack_frame, &w);
  return w.n;
}

/* The same, for a malloc whose caller's return address `ra` and stack
 * position (`cfa`: the caller's stack pointer as it made the call) are
 * known, taken from a cache when that call site was seen before: a cached
 * stack is used only if the stack still holds each of its return addresses
 * where the unwinder found them (relative to cfa), which makes it the same
 * chain of calls, frame sizes being fixed by the code (not for frames that
 * allocate on the stack: alloca, variable-length arrays). */
__attribute__((visibility("hidden"))) int hm_stack_capture_at(uintptr_t ra, uintptr_t cfa, uintptr_t *pcs, int max);

#endif
