/* Sampling decisions, shared by every consumer that wants one allocation
 * now and then: the heap profiler (HAKMEM_PROFILE, a mean in bytes) and
 * the guarded pool (a mean in allocations). docs/DESIGN.md, "Sampling".
 *
 * Interface:
 *  - hm_sampler_enable(id, mean, in_bytes, serve) at start-up: the mean,
 *    and a serve hook that allocates the sampled block itself (so that its
 *    free takes a path the consumer sees: the fast paths never look for
 *    samples).
 *  - The slab lane: one countdown per class in the heap, for all consumers
 *    (hm_sample_class_draw, hm_sample_class_fire), charged a list at a
 *    time (heap.h, heap.c).
 *  - Every other lane (big slab classes, large blocks): a per-thread
 *    countdown per consumer, charged per allocation (hm_sample_one).
 *  - Both give a mask of the consumers that fired (bit id). */
#ifndef HAKMEM_SAMPLE_H
#define HAKMEM_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { HM_SAMPLER_PROFILE = 0, HM_SAMPLER_GUARD = 1, HM_SAMPLERS = 2 };
_Static_assert(HM_SAMPLERS == 2, "hm_sample_list tests each consumer by hand");

/* Allocates the sampled block of n bytes (align 0: malloc's) for the
 * consumers in `fired`; `charged`: the bytes the countdown was charged for
 * it (the size class's block size), which weighs the sample. NULL: out of
 * memory. */
typedef void *(*hm_sample_serve_fn)(unsigned fired, size_t n, size_t align, size_t charged);

__attribute__((visibility("hidden"))) extern bool hm_sample_active;
/* Some consumer is on: the big-slab classes and the large lane charge each
 * call (hm_sample_one). */
__attribute__((visibility("hidden"))) extern bool hm_sample_any;
/* The guarded pool alone, at a mean of HM_SAMPLE_LIGHT_MIN allocations or
 * more: hm_sample_active stays off (trading threads' pushes on the list in
 * use are not charged). Else (the profiler on) it is set: trading threads
 * push on their foreign caches, which serve from a second list (heap.c,
 * fc_serve; hm_alloc_slow refills it), and hm_alloc_slow notes the caller
 * (stacks from the cache, prof.c). docs/DESIGN.md, "Sampling", "Guarded
 * pool". */
__attribute__((visibility("hidden"))) extern bool hm_sample_light;
#define HM_SAMPLE_LIGHT_MIN 1000

/* Per thread: each consumer's countdown for the lanes charged per call
 * (INT64_MAX while it is off; 0 until drawn). */
struct hm_sample_tls {
  int64_t left[HM_SAMPLERS];
  size_t req; /* the request's size, while in hm_alloc_slow with sampling exact (0: unknown) */
  /* the program's call into malloc, while in hm_alloc_slow (0: unknown):
   * its return address and stack position (hm_stack_capture_at) */
  uintptr_t caller_ra, caller_cfa;
};
__attribute__((visibility("hidden"))) extern __thread struct hm_sample_tls hm_sample_tls
    __attribute__((tls_model("initial-exec")));
__attribute__((visibility("hidden"))) extern bool hm_sampler_in_bytes[HM_SAMPLERS];
__attribute__((visibility("hidden"))) extern hm_sample_serve_fn hm_sampler_serve[HM_SAMPLERS];
__attribute__((visibility("hidden"))) uint32_t hm_sample_list_slow(uint32_t count, uint32_t size);

__attribute__((visibility("hidden"))) void hm_sampler_enable(unsigned id, uint64_t mean, bool in_bytes,
                                                             hm_sample_serve_fn serve);
/* A list of `count` blocks of `size` bytes is about to be handed out, one
 * per malloc: the 1-based position of the first malloc to sample (0:
 * none); the countdowns are charged up to, not including, that one. */
static inline __attribute__((always_inline)) uint32_t hm_sample_list(uint32_t count, uint32_t size) {
  struct hm_sample_tls *t = &hm_sample_tls;
  int64_t u0 = hm_sampler_in_bytes[0] ? (int64_t)count * size : count;
  int64_t u1 = hm_sampler_in_bytes[1] ? (int64_t)count * size : count;
  if (__builtin_expect(t->left[0] > u0 && t->left[1] > u1, 1)) {
    t->left[0] -= u0;
    t->left[1] -= u1;
    return 0;
  }
  return hm_sample_list_slow(count, size);
}
/* The malloc at the position hm_sample_list returned: charges it, redraws
 * the countdowns that expired; the mask of those. */
__attribute__((visibility("hidden"))) unsigned hm_sample_fire(size_t size);
/* One allocation of `size` bytes outside the slab lists: the mask of the
 * consumers that sample it (0 mostly). */
static inline __attribute__((always_inline)) unsigned hm_sample_one(size_t size) {
  return hm_sample_list(1, (uint32_t)(size > UINT32_MAX ? UINT32_MAX : size)) ? hm_sample_fire(size) : 0;
}
/* Serve a sampled allocation (the first serve hook among `fired`). */
static inline __attribute__((always_inline)) void *hm_sample_serve(unsigned fired, size_t n, size_t align,
                                                                   size_t charged) {
  unsigned id = (unsigned)__builtin_ctz(fired);
  return hm_sampler_serve[id](fired, n, align, charged);
}


/* The slab lane's countdowns (a heap's sample_left[class], in blocks of
 * the class, one for all consumers): a fresh one for class cls (1 + a
 * geometric draw whose rate is the sum of the consumers', tabled per class;
 * INT64_MAX while nothing samples), and, when it runs out, which consumers
 * sample that malloc (each in proportion to its own chance). Exact for
 * both kinds of consumer: a block is sampled by each with its own
 * probability, independently of what came before. */
__attribute__((visibility("hidden"))) int64_t hm_sample_class_draw(unsigned cls);
__attribute__((visibility("hidden"))) unsigned hm_sample_class_fire(unsigned cls);


/* Natural logarithm and 1 - exp(-x), without libm (the draws; the
 * weights, 1 / (1 - exp(-size / mean)), as pprof and tcmalloc use). */
__attribute__((visibility("hidden"))) double hm_log(double x);
__attribute__((visibility("hidden"))) double hm_one_minus_exp_neg(double x);

#endif
