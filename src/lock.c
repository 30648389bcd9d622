/* The per-thread count of hakmem locks held (src/lock.h). */
#include "lock.h"

__attribute__((visibility("hidden"))) __thread unsigned hm_tls_locks __attribute__((tls_model("initial-exec")));
