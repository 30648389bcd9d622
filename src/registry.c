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
 * 2 GiB count in no committed figure; start-up, before any SuperSlab. */
uint8_t *hm_unit_map;
uintptr_t hm_unit_map_n;

void hm_unit_map_init(void) {
  void *m = mmap(NULL, UNIT_MAP_ENTRIES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return; /* every free takes the registry's path */
  __atomic_store_n(&hm_unit_map, (uint8_t *)m, __ATOMIC_RELAXED);
  __atomic_store_n(&hm_unit_map_n, (uintptr_t)UNIT_MAP_ENTRIES, __ATOMIC_RELEASE);
}
