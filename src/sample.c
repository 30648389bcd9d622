/* Sampling countdowns (sample.h): one per consumer and thread, exponential
 * intervals so that every byte (or allocation) has the same chance of
 * being the one sampled, whatever came before it. */
#include "sample.h"

#include "internal.h"

bool hm_sample_active, hm_sample_any, hm_sample_light;
bool hm_sampler_in_bytes[HM_SAMPLERS];
hm_sample_serve_fn hm_sampler_serve[HM_SAMPLERS];
static uint64_t sampler_mean[HM_SAMPLERS];
static unsigned enabled_mask;
static double per_alloc_lambda[HM_SAMPLERS]; /* a consumer in allocations: -ln(1 - 1 / mean) */
/* Per class, set as consumers are enabled (hm_sample_class_*): the
 * inverse of the summed rate (0: every malloc), and which consumers fire,
 * as thresholds on a uniform draw: consumer 0 alone below fire_lo, 1 alone
 * below fire_hi, both above. */
static double class_inv_rate[NUM_CLASSES], class_fire_lo[NUM_CLASSES], class_fire_hi[NUM_CLASSES];
static double lambda(unsigned id, uint32_t bs);
static void class_tables(void);
/* (left: 0 until drawn; a consumer that is off stays at INT64_MAX once seen) */
__thread struct hm_sample_tls hm_sample_tls __attribute__((tls_model("initial-exec")));

void hm_sampler_enable(unsigned id, uint64_t mean, bool in_bytes, hm_sample_serve_fn serve) {
  sampler_mean[id] = mean == 0 ? 1 : mean;
  per_alloc_lambda[id] = sampler_mean[id] <= 1 ? 1e300 : -hm_log(1.0 - 1.0 / (double)sampler_mean[id]);
  hm_sampler_in_bytes[id] = in_bytes;
  hm_sampler_serve[id] = serve;
  enabled_mask |= 1u << id;
  hm_sample_any = true;
  hm_sample_light = enabled_mask == 1u << HM_SAMPLER_GUARD && mean >= HM_SAMPLE_LIGHT_MIN;
  class_tables();
  /* (atomic: a new thread's first slow malloc may read it before it sees
   * start-up done, hm_alloc_slow) */
  __atomic_store_n(&hm_sample_active, !hm_sample_light, __ATOMIC_RELAXED);
}

/* ln(x), x > 0: x = m * 2^e with m in [1, 2); ln m = 2 atanh((m-1)/(m+1)). */
double hm_log(double x) {
  union { double d; uint64_t u; } v = {.d = x};
  int e = (int)((v.u >> 52) & 0x7ff) - 1023;
  v.u = (v.u & ~((uint64_t)0x7ff << 52)) | ((uint64_t)1023 << 52);
  double m = v.d;
  if (m > 1.41421356237309505) { /* keep |s| small: m in [0.707, 1.414) */
    m *= 0.5;
    e++;
  }
  /* log m = 2 (s + s^3/3 + s^5/5 + ...), s^2 <= 0.0295: the terms to s^23
   * reach double precision (Horner's rule, the reciprocals constant) */
  double s = (m - 1) / (m + 1), z = s * s;
  double p = 1.0 / 23;
  p = 1.0 / 21 + z * p;
  p = 1.0 / 19 + z * p;
  p = 1.0 / 17 + z * p;
  p = 1.0 / 15 + z * p;
  p = 1.0 / 13 + z * p;
  p = 1.0 / 11 + z * p;
  p = 1.0 / 9 + z * p;
  p = 1.0 / 7 + z * p;
  p = 1.0 / 5 + z * p;
  p = 1.0 / 3 + z * p;
  return e * 0.69314718055994531 + 2 * (s + s * z * p);
}

/* 1 - exp(-x), x >= 0, accurate for small x too (the series). */
double hm_one_minus_exp_neg(double x) {
  if (x < 1e-3) return x - x * x / 2 + x * x * x / 6;
  if (x > 40) return 1.0;
  /* exp(-x) = exp(-x / 2^k)^(2^k), the inner by its series: y <= 1/8, the
   * terms to y^13/13! reach double precision (Horner's rule) */
  int k = 0;
  double y = x;
  while (y > 0.125) {
    y *= 0.5;
    k++;
  }
  double t = 1 - y * (1.0 / 13);
  t = 1 - y * t * (1.0 / 12);
  t = 1 - y * t * (1.0 / 11);
  t = 1 - y * t * (1.0 / 10);
  t = 1 - y * t * (1.0 / 9);
  t = 1 - y * t * (1.0 / 8);
  t = 1 - y * t * (1.0 / 7);
  t = 1 - y * t * (1.0 / 6);
  t = 1 - y * t * (1.0 / 5);
  t = 1 - y * t * (1.0 / 4);
  t = 1 - y * t * (1.0 / 3);
  t = 1 - y * t * (1.0 / 2);
  t = 1 - y * t;
  while (k-- > 0) t *= t;
  return 1 - t;
}

/* An exponential draw of the given mean, at least 1. */
static int64_t draw(uint64_t mean) {
  if (mean == 1) return 1; /* every one: what tests ask for (HAKMEM_GUARD_SAMPLE=1) */
  double u = ((double)(hm_random_fast() >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
  double d = -hm_log(u) * (double)mean;
  if (d < 1) return 1;
  if (d > 4e18) return (int64_t)4e18;
  return (int64_t)d + 1;
}

/* A countdown at 0 was never drawn (new thread): draw it, or park it at
 * INT64_MAX if its consumer is off. */
static void ensure_drawn(void) {
  for (unsigned id = 0; id < HM_SAMPLERS; id++)
    if (hm_sample_tls.left[id] == 0)
      hm_sample_tls.left[id] = (enabled_mask & (1u << id)) ? draw(sampler_mean[id]) : INT64_MAX;
}

static inline int64_t unit(unsigned id, uint64_t size) { return hm_sampler_in_bytes[id] ? (int64_t)size : 1; }

uint32_t hm_sample_list_slow(uint32_t count, uint32_t size) {
  ensure_drawn();
  uint32_t first = 0;
  for (unsigned id = 0; id < HM_SAMPLERS; id++) {
    if (!(enabled_mask & (1u << id))) {
      hm_sample_tls.left[id] = INT64_MAX;
      continue;
    }
    int64_t u = unit(id, size);
    /* the k-th malloc brings the countdown to 0 or below: k = ceil(left / u) */
    int64_t k = (hm_sample_tls.left[id] + u - 1) / u;
    if (k < 1) k = 1;
    if (k <= (int64_t)count && (first == 0 || k < first)) first = (uint32_t)k;
  }
  uint32_t charged = first == 0 ? count : first - 1;
  for (unsigned id = 0; id < HM_SAMPLERS; id++)
    if (enabled_mask & (1u << id)) hm_sample_tls.left[id] -= (int64_t)charged * unit(id, size);
  return first;
}

unsigned hm_sample_fire(size_t size) {
  ensure_drawn();
  unsigned fired = 0;
  for (unsigned id = 0; id < HM_SAMPLERS; id++) {
    if (!(enabled_mask & (1u << id))) continue;
    hm_sample_tls.left[id] -= unit(id, size);
    if (hm_sample_tls.left[id] <= 0) {
      fired |= 1u << id;
      hm_sample_tls.left[id] = draw(sampler_mean[id]);
    }
  }
  return fired;
}


/* A consumer's rate for a block of bs bytes: each such malloc is its
 * sample with probability 1 - exp(-lambda) (bs / mean in bytes; 1 / mean
 * in allocations: lambda = -ln(1 - 1 / mean), infinite for mean 1). */
static double lambda(unsigned id, uint32_t bs) {
  return hm_sampler_in_bytes[id] ? (double)bs / (double)sampler_mean[id] : per_alloc_lambda[id];
}

static void class_tables(void) {
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    uint32_t bs = hm_class_size[c];
    double l = 0;
    for (unsigned id = 0; id < HM_SAMPLERS; id++)
      if (enabled_mask & (1u << id)) l += lambda(id, bs);
    class_inv_rate[c] = l >= 1e299 ? 0 : 1 / l;
    /* both on: which of them sampled it, given that one did */
    double p0 = hm_one_minus_exp_neg(lambda(0, bs)), l1 = lambda(1, bs), p1 = l1 >= 1e299 ? 1.0 : hm_one_minus_exp_neg(l1);
    double p = 1 - (1 - p0) * (1 - p1);
    class_fire_lo[c] = p0 * (1 - p1) / p;
    class_fire_hi[c] = (p0 * (1 - p1) + p1 * (1 - p0)) / p;
  }
}

int64_t hm_sample_class_draw(unsigned c) {
  if (enabled_mask == 0) return INT64_MAX;
  /* geometric: P(K > k) = exp(-l k), from an exponential draw of mean 1 */
  double u = ((double)(hm_random_fast() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double k = -hm_log(u) * class_inv_rate[c];
  return k > 4e18 ? (int64_t)4e18 : (int64_t)k + 1;
}

unsigned hm_sample_class_fire(unsigned c) {
  if (enabled_mask != 3u) return enabled_mask;
  double u = ((double)(hm_random_fast() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return u < class_fire_lo[c] ? 1u : u < class_fire_hi[c] ? 2u : 3u;
}
