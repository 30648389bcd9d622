/* malloc_usable_size (src/usable.h): what it returns for live blocks of
 * every lane, and that a live block's answer takes no lock.
 *
 *   test_usable [NAME]   runs one part, or all of them:
 *   sizes    every slab class gives its class size (also for a block freed
 *            by another thread and handed out again), a span its length, a
 *            packed block its pages, an aligned block at least its request
 *   nolock   with the large lane's and the packs' locks held by this
 *            thread (hm_large_fork_prepare), another thread asks for the
 *            usable size of a slab block, a span and a packed block, and
 *            must answer within 10 s (redis asks after every malloc and
 *            before every free: the answer must not queue behind the lane)
 *   grow     realloc growing a pool block by less than a quarter moves it to
 *            a block a quarter larger (its usable size says so), at most the
 *            power of two above the request, so that a block grown in steps
 *            (redis's listpacks) moves half as often
 *
 * Misuse (freed, interior, released blocks) is in test_misuse.c. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <pthread.h>
#include <time.h>

#include "hakmem.h"
#include "internal.h"

static size_t page_up(size_t n) { return (n + 4095) & ~(size_t)4095; }
static size_t span_up(size_t n) { return (n + SS_SIZE - 1) & ~(SS_SIZE - 1); }

static void *free_it(void *p) {
  free(p);
  return NULL;
}

static void sizes(void) {
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    size_t n = hm_class_size[c];
    char *p = malloc(n);
    CHECK(p != NULL && malloc_usable_size(p) == n, "class %u (%zu B): usable %zu", c, n, malloc_usable_size(p));
    CHECK(hak_malloc_usable_size(p) == n, "hak_malloc_usable_size differs");
    free(p);
  }
  /* a block another thread freed, handed out again */
  char *p = malloc(100);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_it, p) == 0 && pthread_join(t, NULL) == 0, "thread");
  char *q = malloc(100);
  CHECK(malloc_usable_size(q) == 112, "usable of a 100-byte block: %zu", malloc_usable_size(q));
  free(q);
  static const size_t large[] = {POOL_MAX + 1, 300000, 1u << 20, (1u << 20) + 1, 5u << 20, 25u << 20};
  for (size_t i = 0; i < sizeof large / sizeof large[0]; i++) {
    size_t n = large[i];
    p = malloc(n);
    size_t u = malloc_usable_size(p), want = hm_reg_kind((uintptr_t)p) == REG_LARGE_PACK ? page_up(n) : span_up(n + HM_GUARD_SIZE) - HM_GUARD_SIZE;
    CHECK(p != NULL && u == want, "malloc(%zu): usable %zu, expected %zu", n, u, want);
    memset(p, 1, u);
    free(p);
  }
  void *a = NULL;
  CHECK(posix_memalign(&a, 1u << 16, 5000) == 0 && malloc_usable_size(a) >= 5000, "aligned block");
  free(a);
  CHECK(malloc_usable_size(NULL) == 0, "usable of NULL");
}

static void *blocks[3];
static size_t answers[3];
static void *ask(void *arg) {
  (void)arg;
  for (int i = 0; i < 3; i++) answers[i] = malloc_usable_size(blocks[i]);
  return NULL;
}

static void nolock(void) {
  blocks[0] = malloc(64);
  blocks[1] = malloc(6u << 20);
  blocks[2] = malloc(300000); /* packed (a span in secure mode) */
  hm_large_fork_prepare();    /* holds the lane's lock and the packs' */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, ask, NULL) == 0, "thread");
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  CHECK(pthread_timedjoin_np(t, NULL, &until) == 0, "malloc_usable_size of a live block waited for the large lane's locks");
  hm_large_fork_parent();
  for (int i = 0; i < 3; i++) {
    CHECK(answers[i] != 0 && answers[i] == malloc_usable_size(blocks[i]), "block %d: %zu", i, answers[i]);
    free(blocks[i]);
  }
}

static void grow(void) {
  char *p = malloc(1000);
  size_t u = malloc_usable_size(p);
  p = realloc(p, u + 1);
  CHECK(p != NULL && malloc_usable_size(p) >= u + u / 4, "realloc(%zu-byte block, %zu): usable %zu, expected >= %zu", u,
        u + 1, malloc_usable_size(p), u + u / 4);
  free(p);
  /* but not past the power of two above the request, where programs cap
   * their growth (redis's 8 KiB listpacks) */
  p = malloc(7000);
  u = malloc_usable_size(p);
  p = realloc(p, 7300);
  CHECK(p != NULL && malloc_usable_size(p) >= 7300 && malloc_usable_size(p) <= 8192,
        "realloc(%zu-byte block, 7300): usable %zu, expected 7300 to 8192", u, malloc_usable_size(p));
  free(p);
  /* a listpack of 100-byte entries grown from 256 B to 8 KiB: 31 moves to
   * the next class each time, 14 with the room */
  unsigned moves = 0;
  p = malloc(256);
  memset(p, 7, 256);
  for (size_t n = 256 + 103; n <= 8192; n += 103) {
    char *q = realloc(p, n);
    CHECK(q != NULL && (unsigned char)q[n - 104] == 7, "realloc to %zu", n);
    moves += q != p;
    memset(q + n - 103, 7, 103);
    p = q;
  }
  free(p);
  CHECK(moves <= 20, "a block grown by 103 B from 256 B to 8 KiB moved %u times", moves);
}

int main(int argc, char **argv) {
  tc_test_name = "usable";
  if (!HAKMEM_SPECIFIC) return 77;
  const char *only = argc > 1 ? argv[1] : NULL;
  if (only == NULL || strcmp(only, "sizes") == 0) sizes();
  if (only == NULL || strcmp(only, "nolock") == 0) nolock();
  if (only == NULL || strcmp(only, "grow") == 0) grow();
  printf("usable: ok\n");
  return 0;
}
