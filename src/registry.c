/* The registry: which 2 MiB chunks of the address space are hakmem's.
 *
 * One byte per chunk of the 47-bit user address space (64 MiB of .bss). The
 * kernel commits a page of it only when a chunk in its 8 GiB range is first
 * registered, so it costs a few pages of RSS; reading an untouched page
 * reads zero (REG_NONE). Chunks are owned whole: SuperSlabs and large spans
 * are 2 MiB aligned and padded to 2 MiB, so no foreign mapping shares a
 * chunk and a lookup never reads memory that is not ours. */
#include "internal.h"

uint8_t hm_registry[REG_ENTRIES];
