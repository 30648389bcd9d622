/* The registry: which 2 MiB chunks of the address space are hakmem's.
 *
 * One byte per chunk of the 47-bit user address space (64 MiB of .bss). The
 * kernel commits a page of it only when a chunk in its 8 GiB range is first
 * registered, so it costs a few pages of RSS; reading an untouched page
 * reads zero (REG_NONE). Chunks are owned whole: SuperSlabs and large spans
 * are 2 MiB aligned and padded to 2 MiB, so no foreign mapping shares a
 * chunk and a lookup never reads memory that is not ours. */
#include <sys/mman.h>

#include "internal.h"

uint8_t hm_registry[REG_ENTRIES];

/* The unit map (types.h): mapped here, not by os.c, so that its reserved
 * 32 GiB count in no committed figure; start-up, before any SuperSlab.
 * Read-only, a private mapping is in no commit charge even where
 * overcommit is strict (vm.overcommit_memory=2), and every read of it is
 * safe; a page is made writable when a SuperSlab in its range is set up. */
unit_entry_t *hm_unit_map;
uintptr_t hm_unit_map_n;

#define UNIT_MAP_BYTES (UNIT_MAP_ENTRIES * sizeof(unit_entry_t))
#define UNIT_MAP_PAGES (UNIT_MAP_BYTES / HM_PAGE_SIZE)
static uint64_t unit_map_rw[UNIT_MAP_PAGES / 64]; /* the pages made writable */

void hm_unit_map_init(void) {
  void *m = mmap(NULL, UNIT_MAP_BYTES, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return; /* every free takes the registry's path */
  __atomic_store_n(&hm_unit_map, (unit_entry_t *)m, __ATOMIC_RELAXED);
  __atomic_store_n(&hm_unit_map_n, (uintptr_t)UNIT_MAP_ENTRIES, __ATOMIC_RELEASE);
}

/* The SuperSlab at ss's 32 entries (NULL: no map). */
static unit_entry_t *unit_entries(uintptr_t ss) {
  if (__atomic_load_n(&hm_unit_map_n, __ATOMIC_ACQUIRE) == 0) return NULL;
  return hm_unit_map + (ss >> SS_UNIT_SHIFT);
}

/* A SuperSlab's 32 entries lie in one page (it is 2 MiB aligned). */
static bool unit_map_writable(const unit_entry_t *m) {
  size_t pg = (size_t)((const char *)m - (const char *)hm_unit_map) / HM_PAGE_SIZE;
  uint64_t bit = (uint64_t)1 << (pg % 64);
  if (__atomic_load_n(&unit_map_rw[pg / 64], __ATOMIC_ACQUIRE) & bit) return true;
  /* two threads may both ask: mprotect is idempotent */
  if (mprotect((char *)hm_unit_map + pg * HM_PAGE_SIZE, HM_PAGE_SIZE, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_fetch_or(&unit_map_rw[pg / 64], bit, __ATOMIC_RELEASE);
  return true;
}

/* ss, set up for its kind (slab_shift): each unit names its slab. (Its
 * tag is 0: set by hm_unit_map_tag once ss has an owner.) */
void hm_unit_map_set(superslab_t *ss) {
  unit_entry_t *m = unit_entries((uintptr_t)ss);
  if (m == NULL || !unit_map_writable(m)) return; /* its frees take the registry's path */
  for (unsigned u = 0; u < SS_MAX_SLABS; u++)
    __atomic_store_n(&m[u].slab, &ss->slabs[u >> (ss->slab_shift - SS_UNIT_SHIFT)], __ATOMIC_RELAXED);
}

/* ss's owner tag in its entries, stored only where it changes (in a fork's
 * child each store copies a page), and only if they are set: else their
 * page may be read-only, and free finds no slab there anyway. */
void hm_unit_map_tag(superslab_t *ss, uintptr_t tag) {
  unit_entry_t *m = unit_entries((uintptr_t)ss);
  if (m == NULL || __atomic_load_n(&m[0].slab, __ATOMIC_RELAXED) != &ss->slabs[0]) return;
  for (unsigned u = 0; u < SS_MAX_SLABS; u++)
    if (__atomic_load_n(&m[u].owner_tag, __ATOMIC_RELAXED) != tag) __atomic_store_n(&m[u].owner_tag, tag, __ATOMIC_RELAXED);
}

/* ss has no owner (its tag is 0 already). */
void hm_unit_map_clear(uintptr_t ss) {
  unit_entry_t *m = unit_entries(ss);
  if (m == NULL) return;
  /* entries never set read NULL and are left alone (their page may be read-only) */
  for (unsigned u = 0; u < SS_MAX_SLABS; u++)
    if (__atomic_load_n(&m[u].slab, __ATOMIC_RELAXED) != NULL) __atomic_store_n(&m[u].slab, (slab_t *)NULL, __ATOMIC_RELAXED);
}
