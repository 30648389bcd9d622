/* Call stacks (stack.h): _Unwind_Backtrace, hakmem's own leading frames
 * dropped by address (the range of the object holding this code, found
 * once at start-up with dl_iterate_phdr). */

#include "stack.h"

#include <link.h>
#include <stddef.h>

static uintptr_t own_lo, own_hi;

static int find_own(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t me = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (me >= lo && me < hi) {
      /* Linked into the program itself (libhakmem.a), the range would
       * cover the program's code too: then no frame is dropped (stacks
       * start with hakmem's own). */
      if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') {
        own_lo = lo;
        own_hi = hi;
      }
      return 1;
    }
  }
  return 0;
}

int hm_stack_is_own(uintptr_t pc) { return pc >= own_lo && pc < own_hi; }

_Unwind_Reason_Code hm_stack_frame(struct _Unwind_Context *ctx, void *arg) {
  struct hm_stack_walk *w = arg;
  uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
  if (pc == 0) return _URC_END_OF_STACK;
  if (w->n == 0 && hm_stack_is_own(pc)) return _URC_NO_REASON; /* still inside hakmem */
  w->pcs[w->n++] = pc;
  return w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

void hm_stack_init(void) {
  dl_iterate_phdr(find_own, (void *)(uintptr_t)&hm_stack_init);
  uintptr_t warm[4];
  hm_stack_capture(warm, 4); /* the unwinder's first-call set-up, now */
}
