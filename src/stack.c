/* Call stacks (stack.h): _Unwind_Backtrace, hakmem's own leading frames
 * dropped by address (the range of the object holding this code, found
 * once at start-up with dl_iterate_phdr). */

#include "stack.h"

#include <link.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
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

/* ---- the cache of stacks by call site ---- */

#define SC_ENTRIES 512
typedef struct {
  uintptr_t ra; /* 0: empty */
  int n;
  int32_t slot[HM_STACK_MAX]; /* where pcs[i + 1] is stored, relative to cfa */
  uintptr_t pcs[HM_STACK_MAX];
} sc_entry_t;
static sc_entry_t *sc;
static _Atomic int sc_lock;

static bool sc_trylock(void) {
  int expected = 0;
  return atomic_compare_exchange_strong_explicit(&sc_lock, &expected, 1, memory_order_acquire, memory_order_relaxed);
}
static void sc_unlock(void) { atomic_store_explicit(&sc_lock, 0, memory_order_release); }
static size_t sc_index(uintptr_t ra) { return (size_t)((ra * 0x9e3779b97f4a7c15ULL) >> 40) & (SC_ENTRIES - 1); }

struct walk_cfa {
  uintptr_t *pcs;
  uintptr_t cfas[HM_STACK_MAX];
  int n, max;
};

static _Unwind_Reason_Code frame_cfa(struct _Unwind_Context *ctx, void *arg) {
  struct walk_cfa *w = arg;
  uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
  if (pc == 0) return _URC_END_OF_STACK;
  if (w->n == 0 && hm_stack_is_own(pc)) return _URC_NO_REASON;
  w->cfas[w->n] = (uintptr_t)_Unwind_GetCFA(ctx);
  w->pcs[w->n++] = pc;
  return w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

int hm_stack_capture_at(uintptr_t ra, uintptr_t cfa, uintptr_t *pcs, int max) {
  if (ra == 0 || cfa == 0 || sc == NULL || hm_stack_is_own(ra) || max > HM_STACK_MAX) return hm_stack_capture(pcs, max);
  sc_entry_t *e = &sc[sc_index(ra)];
  if (sc_trylock()) {
    if (e->ra == ra && e->n <= max) {
      int i = 0;
      while (i + 1 < e->n && *(const uintptr_t *)(cfa + (intptr_t)e->slot[i]) == e->pcs[i + 1]) i++;
      if (i + 1 >= e->n) {
        int n = e->n;
        memcpy(pcs, e->pcs, (size_t)n * sizeof *pcs);
        sc_unlock();
        return n;
      }
    }
    sc_unlock();
  }
  struct walk_cfa w = {.pcs = pcs, .n = 0, .max = max};
  _Unwind_Backtrace(frame_cfa, &w);
  /* Cached only when each return address is in the stack just below the
   * CFA of the frame it returns from (libgcc's context i holds the CFA of
   * frame i - 1, frame i's stack pointer), as the unwinder read it (not
   * across signal frames). */
  if (w.n == 0 || pcs[0] != ra || w.cfas[0] != cfa) return w.n;
  int32_t slot[HM_STACK_MAX];
  for (int i = 0; i + 1 < w.n; i++) {
    intptr_t off = (intptr_t)(w.cfas[i + 1] - sizeof(uintptr_t) - cfa);
    if (off < 0 || off > INT32_MAX || *(const uintptr_t *)(cfa + off) != pcs[i + 1]) return w.n;
    slot[i] = (int32_t)off;
  }
  if (sc_trylock()) {
    e->ra = ra;
    e->n = w.n;
    memcpy(e->slot, slot, sizeof slot);
    memcpy(e->pcs, pcs, (size_t)w.n * sizeof *pcs);
    sc_unlock();
  }
  return w.n;
}

/* A fork child: the cache's lock may have been held by another thread. */
void hm_stack_fork_child(void) { atomic_store_explicit(&sc_lock, 0, memory_order_relaxed); }

void hm_stack_warm(void) {
  if (own_hi != 0) return;
  dl_iterate_phdr(find_own, (void *)(uintptr_t)&hm_stack_init);
  uintptr_t warm[4];
  hm_stack_capture(warm, 4); /* the unwinder's first-call set-up, now */
}

void hm_stack_init(void) {
  if (sc == NULL) {
    void *m = mmap(NULL, SC_ENTRIES * sizeof(sc_entry_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    sc = m == MAP_FAILED ? NULL : m;
  }
  hm_stack_warm();
}
