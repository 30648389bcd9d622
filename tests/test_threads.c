/* Multi-threaded tests.
 *   test_threads prodcons   producers/consumers: cross-thread frees and
 *                           reallocs with content checks
 *   test_threads churn      20,000 short threads; leftovers freed by main;
 *                           RSS must stay bounded and not grow linearly
 *   test_threads tsd        pthread key destructors / thread-exit order:
 *                           malloc and free inside TSD destructors
 *   test_threads adopt      blocks of exited threads are freed elsewhere and
 *                           their memory reused (no unbounded growth)
 *   test_threads many       200 threads alive at once freeing each other's blocks
 *   test_threads exit_trim  an exited thread's blocks freed by main are given
 *                           back to the OS by malloc_trim(0)
 * Iteration counts scale with HAKMEM_TEST_SCALE. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "hakmem.h"

#ifdef USE_HAK_NAMES /* the ThreadSanitizer build: hakmem by its own names */
#define malloc hak_malloc
#define calloc hak_calloc
#define realloc hak_realloc
#define free hak_free
#define malloc_trim hak_malloc_trim
#define malloc_usable_size hak_malloc_usable_size
#define memalign hak_memalign
#endif
#ifdef __SANITIZE_THREAD__
#define RSS_CHECKS 0 /* ThreadSanitizer's own memory grows with the threads */
#else
#define RSS_CHECKS 1
#endif

/* ------------------------------------------------------------------ */
/* producer / consumer                                                 */
#define NPROD 4
#define NCONS 4
#define RING 1024

struct ring {
  _Alignas(64) _Atomic size_t head; /* next slot to write (producer) */
  _Alignas(64) _Atomic size_t tail; /* next slot to read (consumer) */
  _Alignas(64) void *slot[RING];
};
static struct ring rings[NPROD][NCONS];
static size_t items_per_prod;

/* Size/seed of item k on ring (i,j): recomputed by the consumer. */
static size_t item_size(unsigned i, unsigned j, size_t k) {
  uint64_t h = tc_mix64(((uint64_t)i << 56) ^ ((uint64_t)j << 48) ^ k);
  uint64_t c = h % 1000;
  if (c < 900) return 1 + (size_t)((h >> 10) % 1024);
  if (c < 990) return 1025 + (size_t)((h >> 10) % (64 * 1024));
  if (c < 998) return 65536 + (size_t)((h >> 10) % (192 * 1024));
  return 262145 + (size_t)((h >> 10) % (1u << 20));
}
static uint64_t item_seed(unsigned i, unsigned j, size_t k) {
  return ((uint64_t)i << 56) ^ ((uint64_t)j << 48) ^ (k * 2654435761u);
}
/* Big blocks are checked at head/tail only (speed). */
static void item_fill(char *p, size_t n, uint64_t seed) {
  if (n <= 8192) {
    tc_fill(p, n, seed);
  } else {
    tc_fill(p, 4096, seed);
    tc_fill(p + n - 4096, 4096, ~seed);
  }
}
static size_t item_verify(const char *p, size_t n, uint64_t seed) {
  if (n <= 8192) return tc_verify(p, n, seed);
  size_t b = tc_verify(p, 4096, seed);
  if (b != (size_t)-1) return b;
  b = tc_verify(p + n - 4096, 4096, ~seed);
  return b == (size_t)-1 ? b : b + n - 4096;
}

static void *producer(void *arg) {
  unsigned i = (unsigned)(uintptr_t)arg;
  size_t k[NCONS] = {0};
  for (size_t n = 0; n < items_per_prod; n++) {
    unsigned j = (unsigned)(tc_mix64(n * 31 + i) % NCONS);
    size_t sz = item_size(i, j, k[j]);
    char *p;
    if (k[j] % 16 == 5) {
      size_t al = (size_t)64 << (k[j] % 15); /* 64 B .. 1 MiB */
      p = memalign(al, sz);
      if (p && ((uintptr_t)p & (al - 1))) FAILF("producer %u: memalign(%zu) misaligned", i, al);
    } else {
      p = malloc(sz);
    }
    if (!p) FAILF("producer %u: malloc(%zu) failed", i, sz);
    item_fill(p, sz, item_seed(i, j, k[j]));
    /* also some thread-local churn */
    if ((n & 7) == 0) {
      void *t = malloc(sz / 2 + 1);
      if (!t) FAILF("malloc");
      memset(t, 1, sz / 2 + 1);
      free(t);
    }
    struct ring *r = &rings[i][j];
    size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    while (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING) sched_yield();
    r->slot[h % RING] = p;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    k[j]++;
  }
  return NULL;
}

static void *consumer(void *arg) {
  unsigned j = (unsigned)(uintptr_t)arg;
  size_t k[NPROD] = {0};
  size_t expected[NPROD];
  /* how many items producer i will send to consumer j */
  for (unsigned i = 0; i < NPROD; i++) {
    expected[i] = 0;
    for (size_t n = 0; n < items_per_prod; n++)
      if (tc_mix64(n * 31 + i) % NCONS == j) expected[i]++;
  }
  size_t done = 0, total = 0;
  for (unsigned i = 0; i < NPROD; i++) total += expected[i];
  void *held[64] = {0};
  size_t held_sz[64] = {0};
  uint64_t held_seed[64] = {0};
  unsigned spins = 0;
  while (done < total) {
    int got = 0;
    for (unsigned i = 0; i < NPROD; i++) {
      struct ring *r = &rings[i][j];
      size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
      if (t == atomic_load_explicit(&r->head, memory_order_acquire)) continue;
      char *p = r->slot[t % RING];
      atomic_store_explicit(&r->tail, t + 1, memory_order_release);
      got = 1;
      size_t sz = item_size(i, j, k[i]);
      uint64_t seed = item_seed(i, j, k[i]);
      size_t bad = item_verify(p, sz, seed);
      if (bad != (size_t)-1)
        FAILF("consumer %u: item %zu from producer %u (%zu bytes at %p) corrupted at byte %zu", j, k[i], i, sz,
              (void *)p, bad);
      if (malloc_usable_size(p) < sz) FAILF("usable size of received block too small");
      uint64_t c = k[i] % 8;
      if (c == 0) {
        /* realloc a block allocated by another thread */
        size_t nsz = sz < 4096 ? sz * 3 + 7 : sz / 3 + 1;
        char *q = realloc(p, nsz);
        if (!q) FAILF("consumer realloc failed");
        size_t keep = sz < nsz ? sz : nsz;
        if (sz <= 8192 && nsz <= 8192 && (bad = tc_verify(q, keep, seed)) != (size_t)-1)
          FAILF("consumer %u: cross-thread realloc %zu -> %zu lost byte %zu", j, sz, nsz, bad);
        if (sz > 8192 && (bad = tc_verify(q, keep < 4096 ? keep : 4096, seed)) != (size_t)-1)
          FAILF("consumer %u: cross-thread realloc %zu -> %zu lost byte %zu", j, sz, nsz, bad);
        memset(q, 0x3C, nsz);
        free(q);
      } else if (c == 1) {
        /* hold it for a while, free later (interleaves with own allocs) */
        unsigned h = (unsigned)(k[i] / 8 % 64);
        if (held[h]) {
          size_t b2 = item_verify(held[h], held_sz[h], held_seed[h]);
          if (b2 != (size_t)-1) FAILF("consumer %u: held block corrupted at byte %zu", j, b2);
          free(held[h]);
        }
        held[h] = p, held_sz[h] = sz, held_seed[h] = seed;
      } else {
        free(p);
      }
      k[i]++;
      done++;
    }
    if (!got && ++spins % 16 == 0) sched_yield();
  }
  for (unsigned h = 0; h < 64; h++)
    if (held[h]) {
      size_t b2 = item_verify(held[h], held_sz[h], held_seed[h]);
      if (b2 != (size_t)-1) FAILF("consumer %u: held block corrupted at byte %zu", j, b2);
      free(held[h]);
    }
  for (unsigned i = 0; i < NPROD; i++)
    if (k[i] != expected[i]) FAILF("consumer %u got %zu items from %u, expected %zu", j, k[i], i, expected[i]);
  return NULL;
}

static _Atomic int prodcons_done;
/* malloc_trim and hak_os_stats_get concurrently with everything else */
static void *trimmer(void *arg) {
  (void)arg;
  size_t calls = 0;
  while (!atomic_load(&prodcons_done)) {
    malloc_trim(0);
    struct hak_os_stats st;
    hak_os_stats_get(&st);
    void *p = malloc(1000 + calls % 300000);
    if (!p) FAILF("malloc in trimmer");
    free(p);
    calls++;
    sched_yield();
  }
  return (void *)calls;
}

static int run_prodcons(void) {
  items_per_prod = tc_scaled(400000);
  pthread_t pt[NPROD], ct[NCONS], tt;
  if (pthread_create(&tt, NULL, trimmer, NULL)) FAILF("pthread_create");
  for (unsigned j = 0; j < NCONS; j++)
    if (pthread_create(&ct[j], NULL, consumer, (void *)(uintptr_t)j)) FAILF("pthread_create");
  for (unsigned i = 0; i < NPROD; i++)
    if (pthread_create(&pt[i], NULL, producer, (void *)(uintptr_t)i)) FAILF("pthread_create");
  for (unsigned i = 0; i < NPROD; i++) pthread_join(pt[i], NULL);
  for (unsigned j = 0; j < NCONS; j++) pthread_join(ct[j], NULL);
  atomic_store(&prodcons_done, 1);
  void *trims;
  pthread_join(tt, &trims);
  printf("prodcons: %zu concurrent malloc_trim calls\n", (size_t)trims);
  printf("prodcons: %d producers x %zu items, %d consumers: ok (RSS %zu MiB)\n", NPROD, items_per_prod, NCONS,
         tc_rss_bytes() / MiB);
  return 0;
}

/* ------------------------------------------------------------------ */
/* thread churn                                                        */
#define KEEP 6
struct churn_arg {
  unsigned id;
  void *keep[KEEP];
  size_t keep_sz[KEEP];
};

static void *churn_thread(void *argp) {
  struct churn_arg *a = argp;
  tc_rng r = {a->id * 7919u + 1};
  void *v[40];
  size_t sz[40];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 40; i++) {
      uint64_t c = tc_below(&r, 100);
      sz[i] = c < 85 ? 1 + tc_below(&r, 1024) : c < 98 ? 1025 + tc_below(&r, 32768) : 300000;
      v[i] = malloc(sz[i]);
      if (!v[i]) FAILF("churn thread %u: malloc(%zu) failed", a->id, sz[i]);
      tc_fill(v[i], sz[i] < 256 ? sz[i] : 256, a->id * 100u + (unsigned)i);
    }
    for (int i = 0; i < 40; i++) {
      if (tc_verify(v[i], sz[i] < 256 ? sz[i] : 256, a->id * 100u + (unsigned)i) != (size_t)-1)
        FAILF("churn thread %u: own block corrupted", a->id);
      free(v[i]);
    }
  }
  for (int i = 0; i < KEEP; i++) {
    a->keep_sz[i] = 16 + tc_below(&r, i == 0 ? 20000 : 1000);
    a->keep[i] = malloc(a->keep_sz[i]);
    if (!a->keep[i]) FAILF("malloc");
    tc_fill(a->keep[i], a->keep_sz[i], ((uint64_t)a->id << 8) | (unsigned)i);
  }
  return NULL;
}

static void churn_collect(struct churn_arg *a) {
  for (int i = 0; i < KEEP; i++) {
    size_t bad = tc_verify(a->keep[i], a->keep_sz[i], ((uint64_t)a->id << 8) | (unsigned)i);
    if (bad != (size_t)-1)
      FAILF("block left by exited thread %u corrupted at byte %zu of %zu", a->id, bad, a->keep_sz[i]);
    free(a->keep[i]);
  }
}

static int run_churn(void) {
  size_t total = tc_scaled(20000), mid = total / 4;
  enum { CONC = 4, LAG = 64 };
  struct churn_arg *args = calloc(LAG, sizeof *args);
  if (!args) FAILF("calloc");
  pthread_t th[CONC];
  size_t rss_mid = 0, vm_mid = 0, committed_mid = 0;
  size_t rss_start = tc_rss_bytes();
  for (size_t base = 0; base < total; base += CONC) {
    for (unsigned t = 0; t < CONC; t++) {
      size_t id = base + t;
      struct churn_arg *a = &args[id % LAG];
      if (id >= LAG) churn_collect(a); /* free what thread id-LAG left behind */
      a->id = (unsigned)id;
      if (pthread_create(&th[t], NULL, churn_thread, a)) FAILF("pthread_create #%zu failed", id);
    }
    for (unsigned t = 0; t < CONC; t++) pthread_join(th[t], NULL);
    if (base < mid && base + CONC >= mid) {
      rss_mid = tc_rss_bytes();
      vm_mid = tc_status_bytes("VmSize");
      struct hak_os_stats st;
      hak_os_stats_get(&st);
      committed_mid = st.committed_bytes;
    }
  }
  for (size_t id = total >= LAG ? total - LAG : 0; id < total; id++) churn_collect(&args[id % LAG]);
  free(args);
  size_t rss_end = tc_rss_bytes(), vm_end = tc_status_bytes("VmSize");
  struct hak_os_stats st;
  hak_os_stats_get(&st);
  printf("churn: %zu threads; RSS start %zu KiB, after %zu threads %zu KiB, end %zu KiB; VmSize %zu -> %zu MiB;"
         " committed %zu -> %zu KiB\n",
         total, rss_start / 1024, mid, rss_mid / 1024, rss_end / 1024, vm_mid / MiB, vm_end / MiB,
         committed_mid / 1024, st.committed_bytes / 1024);
  CHECK(!RSS_CHECKS || rss_end < 256 * MiB, "RSS %zu MiB after %zu threads: memory of exited threads is not reused",
        rss_end / MiB, total);
  CHECK(!RSS_CHECKS || rss_end <= rss_mid + 16 * MiB,
        "RSS grows with the number of threads: %zu KiB after %zu threads, %zu KiB after %zu", rss_mid / 1024, mid,
        rss_end / 1024, total);
  CHECK(vm_end <= vm_mid + 256 * MiB, "address space grows with the number of threads: VmSize %zu -> %zu MiB",
        vm_mid / MiB, vm_end / MiB);
  /* Mappings come 32 MiB at a time: two more reservations over 15,000 more
   * threads is timing (where the exits fall), linear growth is far more. */
  if (HAKMEM_SPECIFIC)
    CHECK(st.committed_bytes <= committed_mid + 64 * MiB,
          "hakmem committed bytes grow with the number of threads: %zu -> %zu KiB", committed_mid / 1024,
          st.committed_bytes / 1024);
  return 0;
}

/* ------------------------------------------------------------------ */
/* TSD destructors that allocate                                       */
static pthread_key_t key;
static _Atomic long dtor_calls, dtor_frees;

struct tsd_val {
  uint64_t magic;
  int round;
  char payload[200];
};

static void tsd_dtor(void *v) {
  struct tsd_val *t = v;
  if (t->magic != 0x7473647473647473ull) FAILF("TSD value corrupted in destructor (round %d)", t->round);
  if (tc_verify(t->payload, sizeof t->payload, (uint64_t)t->round) != (size_t)-1)
    FAILF("TSD payload corrupted in destructor");
  atomic_fetch_add(&dtor_calls, 1);
  /* allocate and free during thread teardown */
  void *tmp[16];
  for (int i = 0; i < 16; i++) {
    tmp[i] = malloc((size_t)(i + 1) * 100);
    if (!tmp[i]) FAILF("malloc in TSD destructor failed");
    memset(tmp[i], i, (size_t)(i + 1) * 100);
  }
  for (int i = 0; i < 16; i++) free(tmp[i]);
  int round = t->round;
  free(t);
  atomic_fetch_add(&dtor_frees, 1);
  if (round < 2) {
    /* re-arm: the destructor runs again (PTHREAD_DESTRUCTOR_ITERATIONS) */
    struct tsd_val *n = malloc(sizeof *n);
    if (!n) FAILF("malloc in TSD destructor failed");
    n->magic = 0x7473647473647473ull;
    n->round = round + 1;
    tc_fill(n->payload, sizeof n->payload, (uint64_t)n->round);
    pthread_setspecific(key, n);
  }
}

static void *tsd_thread(void *arg) {
  (void)arg;
  struct tsd_val *t = malloc(sizeof *t);
  if (!t) FAILF("malloc");
  t->magic = 0x7473647473647473ull;
  t->round = 0;
  tc_fill(t->payload, sizeof t->payload, 0);
  pthread_setspecific(key, t);
  void *v[100];
  for (int i = 0; i < 100; i++) v[i] = malloc((size_t)(i * 13 % 900) + 1);
  for (int i = 0; i < 100; i += 2) free(v[i]);
  /* odd ones are freed by the main thread after we exit */
  void **out = malloc(50 * sizeof(void *));
  if (!out) FAILF("malloc");
  for (int i = 1, k = 0; i < 100; i += 2) out[k++] = v[i];
  return out;
}

static int run_tsd(void) {
  if (pthread_key_create(&key, tsd_dtor)) FAILF("pthread_key_create");
  size_t n = tc_scaled(3000);
  for (size_t i = 0; i < n; i += 2) {
    pthread_t a, b;
    if (pthread_create(&a, NULL, tsd_thread, NULL) || pthread_create(&b, NULL, tsd_thread, NULL))
      FAILF("pthread_create");
    void *ra, *rb;
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    void **lists[2] = {ra, rb};
    for (int l = 0; l < 2; l++) {
      for (int k = 0; k < 50; k++) free(lists[l][k]);
      free(lists[l]);
    }
  }
  long expect = (long)((n + 1) / 2 * 2) * 3;
  CHECK(atomic_load(&dtor_calls) == expect, "TSD destructor ran %ld times, expected %ld", atomic_load(&dtor_calls),
        expect);
  CHECK(atomic_load(&dtor_frees) == expect, "TSD destructor frees %ld, expected %ld", atomic_load(&dtor_frees),
        expect);
  printf("tsd: %zu threads, %ld destructor calls: ok\n", (n + 1) / 2 * 2, atomic_load(&dtor_calls));
  return 0;
}

/* ------------------------------------------------------------------ */
/* adoption: a thread allocates a lot and exits; another thread frees it
 * all; repeated many times, the memory must be reused. */
#define ADOPT_N 4096
struct adopt_batch {
  void *p[ADOPT_N];
  size_t sz[ADOPT_N];
  unsigned gen;
};

static void *adopt_alloc_thread(void *arg) {
  struct adopt_batch *b = arg;
  tc_rng r = {b->gen + 99};
  for (int i = 0; i < ADOPT_N; i++) {
    uint64_t c = tc_below(&r, 100);
    b->sz[i] = c < 80 ? 16 + tc_below(&r, 1008) : c < 99 ? 1025 + tc_below(&r, 16384) : 200000;
    b->p[i] = malloc(b->sz[i]);
    if (!b->p[i]) FAILF("adopt: malloc(%zu) failed in generation %u", b->sz[i], b->gen);
    memset(b->p[i], (int)(b->gen & 0xFF), b->sz[i]);
  }
  /* free a quarter ourselves, so slabs are partially used when we exit */
  for (int i = 0; i < ADOPT_N; i += 4) {
    free(b->p[i]);
    b->p[i] = NULL;
  }
  return NULL;
}

static void *adopt_free_thread(void *arg) {
  struct adopt_batch *b = arg;
  for (int i = 0; i < ADOPT_N; i++) {
    if (!b->p[i]) continue;
    size_t bad = tc_find_not(b->p[i], b->sz[i], (uint8_t)(b->gen & 0xFF));
    if (bad != (size_t)-1) FAILF("adopt: block of exited thread corrupted at byte %zu (gen %u)", bad, b->gen);
    free(b->p[i]);
  }
  return NULL;
}

static int run_adopt(void) {
  size_t gens = tc_scaled(200);
  struct adopt_batch *b = malloc(sizeof *b);
  if (!b) FAILF("malloc");
  size_t rss_q = 0;
  for (unsigned g = 0; g < gens; g++) {
    b->gen = g;
    pthread_t t;
    if (pthread_create(&t, NULL, adopt_alloc_thread, b)) FAILF("pthread_create");
    pthread_join(t, NULL);
    if (g % 2) {
      adopt_free_thread(b); /* main thread frees */
    } else {
      if (pthread_create(&t, NULL, adopt_free_thread, b)) FAILF("pthread_create");
      pthread_join(t, NULL);
    }
    if (g == gens / 4) rss_q = tc_rss_bytes();
  }
  free(b);
  size_t rss = tc_rss_bytes();
  printf("adopt: %zu generations of ~%zu MiB each; RSS after 1/4: %zu MiB, end: %zu MiB\n", gens,
         (size_t)ADOPT_N * 2500 / MiB, rss_q / MiB, rss / MiB);
  CHECK(!RSS_CHECKS || rss < 200 * MiB, "RSS %zu MiB: memory of exited threads is not reused", rss / MiB);
  CHECK(!RSS_CHECKS || rss <= rss_q + 32 * MiB, "RSS keeps growing: %zu MiB after a quarter, %zu MiB at the end", rss_q / MiB,
        rss / MiB);
  return 0;
}

/* ------------------------------------------------------------------ */
/* many threads alive at once, each freeing its neighbour's blocks      */
#define MANY 200
static void *many_blocks[MANY][256];
static pthread_barrier_t many_bar;
static void *many_thread(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < 256; i++) {
      size_t n = (size_t)((i * 53 + id) % 1500) + 8;
      many_blocks[id][i] = malloc(n);
      if (!many_blocks[id][i]) FAILF("many: malloc failed");
      memcpy(many_blocks[id][i], &id, sizeof id);
    }
    pthread_barrier_wait(&many_bar);
    unsigned nb = (id + 1 + (unsigned)round) % MANY;
    for (int i = 0; i < 256; i++) {
      unsigned got;
      memcpy(&got, many_blocks[nb][i], sizeof got);
      if (got != nb) FAILF("many: thread %u found a block of thread %u tagged %u", id, nb, got);
      free(many_blocks[nb][i]);
    }
    pthread_barrier_wait(&many_bar);
  }
  return NULL;
}
static int run_many(void) {
  if (pthread_barrier_init(&many_bar, NULL, MANY)) FAILF("barrier");
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, 256 * 1024);
  for (int rep = 0; rep < 3; rep++) {
    pthread_t t[MANY];
    for (unsigned i = 0; i < MANY; i++)
      if (pthread_create(&t[i], &at, many_thread, (void *)(uintptr_t)i)) FAILF("pthread_create #%u", i);
    for (unsigned i = 0; i < MANY; i++) pthread_join(t[i], NULL);
  }
  printf("many: %d threads alive at once, 3 times: ok (RSS %zu MiB)\n", MANY, tc_rss_bytes() / MiB);
  return 0;
}

/* ------------------------------------------------------------------ */
/* blocks of an exited thread, freed by main: malloc_trim(0) gives the
 * memory back (glibc semantics: trim releases free memory of all arenas) */
#define XT_MID 8000
#define XT_SMALL 100000
static void *xt_blocks[XT_MID + XT_SMALL];
static size_t xt_size(int i) { return i < XT_MID ? 30000 : (size_t)(i % 1000) + 16; }
static void *xt_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < XT_MID + XT_SMALL; i++) {
    xt_blocks[i] = malloc(xt_size(i));
    if (!xt_blocks[i]) FAILF("exit_trim: malloc failed");
    memset(xt_blocks[i], (int)(i & 0x7F), xt_size(i));
  }
  return NULL;
}
static int run_exit_trim(void) {
  malloc_trim(0);
  size_t base = tc_rss_bytes();
  pthread_t t;
  if (pthread_create(&t, NULL, xt_thread, NULL)) FAILF("pthread_create");
  pthread_join(t, NULL);
  size_t live = tc_rss_bytes();
  for (int i = 0; i < XT_MID + XT_SMALL; i++) {
    if (((unsigned char *)xt_blocks[i])[xt_size(i) - 1] != (unsigned char)(i & 0x7F))
      FAILF("exit_trim: block %d corrupted", i);
    free(xt_blocks[i]);
  }
  malloc_trim(0);
  size_t after = tc_rss_bytes();
  struct hak_os_stats st;
  hak_os_stats_get(&st);
  printf("exit_trim: RSS base %zu MiB, live %zu MiB, after free by main + malloc_trim(0) %zu MiB (committed %zu MiB)\n",
         base / MiB, live / MiB, after / MiB, st.committed_bytes / MiB);
  CHECK(after <= base + 64 * MiB,
        "an exited thread's %zu MiB, freed by another thread, is still resident after malloc_trim(0): RSS %zu MiB"
        " (base %zu MiB)", (live - base) / MiB, after / MiB, base / MiB);
  return 0;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "";
  static char name[64];
  snprintf(name, sizeof name, "threads %s", which);
  tc_test_name = name;
  if (!strcmp(which, "prodcons")) return run_prodcons();
  if (!strcmp(which, "churn")) return run_churn();
  if (!strcmp(which, "tsd")) return run_tsd();
  if (!strcmp(which, "adopt")) return run_adopt();
  if (!strcmp(which, "many")) return run_many();
  if (!strcmp(which, "exit_trim")) return run_exit_trim();
  fprintf(stderr, "usage: %s prodcons|churn|tsd|adopt|many|exit_trim\n", argv[0]);
  return 2;
}
