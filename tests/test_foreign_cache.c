/* The foreign cache (src/heap.c): blocks a thread frees from another
 * thread's slabs stay with it for its own mallocs, within a per-class budget
 * (HAKMEM_FOREIGN_CACHE_KB), and go back to their owner past the budget and
 * at thread exit.
 *
 *   test_foreign_cache reuse [ROUNDS]|cap|off|newest|own
 * reuse: B frees A's blocks, then B's mallocs get exactly those blocks, and
 *        again for ROUNDS rounds (default 1; 400 rounds hand out more than
 *        2^16 blocks of the class from B's cache, past where a 16-bit count
 *        wraps); after B exits, A gets them all back.
 * cap:   (run with HAKMEM_FOREIGN_CACHE_KB=1: 16 blocks of 64 B, raised to
 *        the floor of 128 blocks) while B is still alive, A gets back all
 *        but at most 128 of the blocks B freed, and not all but 16: B keeps
 *        at least the newest half of its 128 (a batch handed between
 *        threads stays with the thread that freed it).
 * off:   (run with HAKMEM_FOREIGN_CACHE_KB=0) A gets back every block at once.
 * newest: once B's mallocs come from its cache, the block B freed last is
 *        B's next malloc, whether it is A's or B's own (A has cached one of
 *        B's blocks, so B's slab names B's cache): the newest block, still
 *        in the core's cache, is used again first.
 * own:   B trades (it freed a block of A's of another class); it frees two
 *        of its own blocks in two slabs that are not current, and once its
 *        current slab runs dry its next malloc of the class is the block
 *        it freed last, not the older one (a trading thread's own frees go
 *        on its cache of the class, whatever the slab).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 256
#define SIZE 64

static void *blocks[N];
static pthread_barrier_t freed, checked;

static void fail(const char *what) {
  fprintf(stderr, "FAIL [foreign_cache]: %s\n", what);
  exit(1);
}

static int in_set(void *p) {
  for (int i = 0; i < N; i++)
    if (blocks[i] == p) return 1;
  return 0;
}

static int rounds = 1;

static void *reuse_thread(void *arg) {
  (void)arg;
  void *mine[N];
  memcpy(mine, blocks, sizeof mine);
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < N; i++) free(mine[i]);
    for (int i = 0; i < N; i++) {
      mine[i] = malloc(SIZE);
      if (mine[i] == NULL) fail("malloc in thread B");
      if (!in_set(mine[i])) {
        fprintf(stderr, "FAIL [foreign_cache]: round %d: thread B's malloc did not reuse a block it had freed "
                        "from thread A\n", r);
        exit(1);
      }
      memset(mine[i], 0xb0, SIZE);
    }
  }
  for (int i = 0; i < N; i++) free(mine[i]);
  return NULL; /* thread exit sends the cached blocks back */
}

static void *hold_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < N; i++) free(blocks[i]);
  pthread_barrier_wait(&freed);
  pthread_barrier_wait(&checked); /* stay alive while A counts */
  return NULL;
}

static void *b_own[4];
static void *newest_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 4; i++)
    if ((b_own[i] = malloc(SIZE)) == NULL) fail("malloc in thread B");
  pthread_barrier_wait(&freed);  /* A frees b_own[3] */
  pthread_barrier_wait(&checked);
  for (int i = 0; i < N; i++) free(blocks[i]);
  /* B's slab has blocks carved; its cache serves once they are gone */
  static void *mine[4096];
  int n = 0;
  do {
    if (n == 4096) fail("thread B's mallocs never came from its cache");
    if ((mine[n++] = malloc(SIZE)) == NULL) fail("malloc in thread B");
  } while (!in_set(mine[n - 1]));
  void *a = mine[n - 1];
  free(a);
  void *again = malloc(SIZE);
  if (again != a) fail("newest: thread B freed a block of A's and its next malloc was another block");
  free(b_own[0]);
  again = malloc(SIZE);
  if (again != b_own[0]) fail("newest: thread B freed a block of its own and its next malloc was another block");
  free(again);
  free(b_own[1]);
  free(b_own[2]);
  for (int i = 0; i < n; i++) free(mine[i]);
  return NULL;
}

#define OWN_M 5000 /* blocks of SIZE: several slabs */
static void *a_other; /* A's block of another class, which B frees */
static void *own_thread(void *arg) {
  (void)arg;
  free(a_other); /* B trades from now on */
  static void *mine[OWN_M];
  for (int i = 0; i < OWN_M; i++)
    if ((mine[i] = malloc(SIZE)) == NULL) fail("malloc in thread B");
  void *older = mine[0], *newer = mine[OWN_M / 3];
  if ((char *)newer - (char *)older < (64 << 10) && (char *)older - (char *)newer < (64 << 10))
    fail("own: the two blocks should lie in two slabs");
  free(older);
  free(newer);
  mine[0] = mine[OWN_M / 3] = NULL;
  /* the current slab's free blocks first (kept: a free now would be the
   * newest), then the next list */
  static void *more[4096];
  int n = 0;
  void *got = NULL;
  while (got != older && got != newer) {
    if (n == 4096) fail("own: thread B's mallocs never took its freed blocks");
    if ((got = more[n++] = malloc(SIZE)) == NULL) fail("malloc in thread B");
  }
  if (got != newer) fail("own: thread B's malloc took the older of its two freed blocks first");
  for (int i = 0; i < n; i++) free(more[i]);
  for (int i = 0; i < OWN_M; i++) free(mine[i]);
  return NULL;
}

/* A allocates N blocks again; how many are blocks B freed? */
static int count_back(void) {
  void *again[N];
  int back = 0;
  for (int i = 0; i < N; i++) {
    again[i] = malloc(SIZE);
    if (again[i] == NULL) fail("malloc in thread A");
    back += in_set(again[i]);
  }
  for (int i = 0; i < N; i++) free(again[i]);
  return back;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "reuse";
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(SIZE);
    if (blocks[i] == NULL) fail("malloc");
    memset(blocks[i], 0xa0, SIZE);
  }
  pthread_t t;
  int back, min_back, max_back = N;
  if (strcmp(mode, "newest") == 0) {
    pthread_barrier_init(&freed, NULL, 2);
    pthread_barrier_init(&checked, NULL, 2);
    if (pthread_create(&t, NULL, newest_thread, NULL) != 0) fail("pthread_create");
    pthread_barrier_wait(&freed);
    free(b_own[3]); /* A caches a block of B's slab */
    pthread_barrier_wait(&checked);
    pthread_join(t, NULL);
    printf("foreign_cache newest: OK\n");
    return 0;
  }
  if (strcmp(mode, "own") == 0) {
    if ((a_other = malloc(4 * SIZE)) == NULL) fail("malloc");
    if (pthread_create(&t, NULL, own_thread, NULL) != 0) fail("pthread_create");
    pthread_join(t, NULL);
    printf("foreign_cache own: OK\n");
    return 0;
  }
  if (strcmp(mode, "reuse") == 0) {
    if (argc > 2 && (rounds = atoi(argv[2])) < 1) fail("ROUNDS must be a positive number");
    if (pthread_create(&t, NULL, reuse_thread, NULL) != 0) fail("pthread_create");
    pthread_join(t, NULL);
    back = count_back();
    min_back = N;
  } else {
    pthread_barrier_init(&freed, NULL, 2);
    pthread_barrier_init(&checked, NULL, 2);
    if (pthread_create(&t, NULL, hold_thread, NULL) != 0) fail("pthread_create");
    pthread_barrier_wait(&freed);
    back = count_back();
    pthread_barrier_wait(&checked);
    pthread_join(t, NULL);
    min_back = strcmp(mode, "cap") == 0 ? N - 128 : N;
    max_back = strcmp(mode, "cap") == 0 ? N - 64 : N;
  }
  if (back < min_back || back > max_back) {
    fprintf(stderr, "FAIL [foreign_cache]: %s: thread A got back %d of %d blocks, expected %d to %d\n",
            mode, back, N, min_back, max_back);
    return 1;
  }
  printf("foreign_cache %s: %d of %d blocks back: OK\n", mode, back, N);
  return 0;
}
