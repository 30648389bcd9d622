/* Size-class tables (generated once by the formula in types.h's
 * hm_size_class).
 *
 * Classes: 16-byte steps up to 256 B, then eight per power of two up to
 * 256 KiB, so no block wastes more than 1/9 of itself above 128 B. */
#include "internal.h"

/* Class of a request of up to 1 KiB, indexed by (n + 15) / 16. */
const uint8_t hm_direct_class[DIRECT_MAX / 16 + 1] = {
  0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
  15, 16, 16, 17, 17, 18, 18, 19, 19, 20, 20, 21, 21, 22, 22, 23,
  23, 24, 24, 24, 24, 25, 25, 25, 25, 26, 26, 26, 26, 27, 27, 27,
  27, 28, 28, 28, 28, 29, 29, 29, 29, 30, 30, 30, 30, 31, 31, 31,
  31
};

/* Class of DIRECT_MAX < n <= MEDIUM_MAX, indexed by i = (n - 1) >> 7: with
 * 2^L <= i < 2^(L+1), n lies in (2^(L+7), 2^(L+8)], whose eight classes are
 * 2^(L+4) apart: hm_size_class's formula with k = L + 7. (Entries below 8,
 * sizes up to DIRECT_MAX, are not used.) */
#define MC_LG(i) ((i) >= 256 ? 8 : (i) >= 128 ? 7 : (i) >= 64 ? 6 : (i) >= 32 ? 5 : (i) >= 16 ? 4 : 3)
#define MC(i) (16 + (MC_LG(i) - 1) * 8 + ((i) >> (MC_LG(i) - 3)) - 8)
#define MC4(i) MC(i), MC((i) + 1), MC((i) + 2), MC((i) + 3)
#define MC16(i) MC4(i), MC4((i) + 4), MC4((i) + 8), MC4((i) + 12)
#define MC64(i) MC16(i), MC16((i) + 16), MC16((i) + 32), MC16((i) + 48)
#define MC256(i) MC64(i), MC64((i) + 64), MC64((i) + 128), MC64((i) + 192)
const uint8_t hm_medium_class[MEDIUM_MAX >> HM_MEDIUM_SHIFT] = {MC256(0), MC256(256)};
_Static_assert(sizeof hm_medium_class == 512, "one entry per 128 B up to MEDIUM_MAX");
_Static_assert(MC(8) == 32 && MC(511) == 79, "the first class above DIRECT_MAX, the last medium one");

const uint32_t hm_class_size[] = {
  16, 32, 48, 64, 80, 96, 112, 128,
  144, 160, 176, 192, 208, 224, 240, 256,
  288, 320, 352, 384, 416, 448, 480, 512,
  576, 640, 704, 768, 832, 896, 960, 1024,
  1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048,
  2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096,
  4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192,
  9216, 10240, 11264, 12288, 13312, 14336, 15360, 16384,
  18432, 20480, 22528, 24576, 26624, 28672, 30720, 32768,
  36864, 40960, 45056, 49152, 53248, 57344, 61440, 65536,
  73728, 81920, 90112, 98304, 106496, 114688, 122880, 131072,
  147456, 163840, 180224, 196608, 212992, 229376, 245760, 262144,
#if HM_POOL_SHIFT >= 19
  294912, 327680, 360448, 393216, 425984, 458752, 491520, 524288,
#endif
#if HM_POOL_SHIFT >= 20
  589824, 655360, 720896, 786432, 851968, 917504, 983040, 1048576,
#endif
};
_Static_assert(sizeof hm_class_size / sizeof hm_class_size[0] == NUM_CLASSES, "one size per class");

/* Slab size per class: KIND_SMALL (64 KiB slabs) up to 8 KiB blocks,
 * KIND_MEDIUM (512 KiB) up to 64 KiB, KIND_BIG (one 2 MiB slab) above. */
const uint8_t hm_class_kind[] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
#if HM_POOL_SHIFT >= 19
  2, 2, 2, 2, 2, 2, 2, 2,
#endif
#if HM_POOL_SHIFT >= 20
  2, 2, 2, 2, 2, 2, 2, 2,
#endif
};
_Static_assert(sizeof hm_class_kind / sizeof hm_class_kind[0] == NUM_CLASSES, "one kind per class");
