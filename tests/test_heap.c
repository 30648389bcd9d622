/* Thread heaps (src/heap.c): test_heap MODE. hakmem is linked in (malloc
 * and free are its own) and its internals are read through internal.h.
 *
 *   spare   a class whose rounds of mallocs need two 64 KiB slabs keeps the
 *           one that empties while the other serves (the class's spare):
 *           neither goes back to its SuperSlab round after round; a second
 *           emptied slab of the class is released; hak_collect releases the
 *           spare; a class of bigger slabs keeps no spare
 *   recurring  a block moved up through the sizes by realloc, round after
 *           round (redis's growing lists), while the heap takes new slabs
 *           of the same kind: the classes it passes keep their current
 *           slabs once one came back for a slab after a look released it
 *   newest  the block its owner freed last is the next malloc's (still in
 *           this core's cache), not one of the slab's older free blocks
 *   notify  a slab taken out of FULL by its owner's free keeps its notify
 *           bit; marked FULL again without setting it, it still hears of
 *           another thread's free: the block comes back to the owner
 *           (spare and notify run with no foreign cache: every owner's
 *           free reaches its slab)
 *   route   the owner's frees of a slab not current go to the class's
 *           foreign cache, still counted used in the slab; the current
 *           slab's stay on it; when the current slab runs dry the cache
 *           serves, newest first; over its budget its oldest blocks go
 *           home, and a slab they empty is released
 *   route_look  a foreign cache that does not serve, untouched between two
 *           looks, sends its blocks home
 *   route_due  the cache serving while a sample is due (the owner's frees
 *           on its local_free): over its budget, it still sends blocks
 *           home and stays within it
 *   bias    a current slab that emptied holds a bias of 1 in used while
 *           it stays current (its next emptyings take no slow path); run
 *           dry, it goes FULL without it, and its blocks freed bring it
 *           back (the spare); an empty biased current slab is released
 *           by hak_collect */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hakmem.h"
#include "internal.h"
#include "test_common.h"

static slab_t *slab_of(void *p) { return hm_slab_of(hm_ss_of(p), p); }

static bool released(const slab_t *s) {
  return s->in_use == SLAB_UNUSED && (hm_ss_of(s)->free_mask >> hm_slab_idx(s) & 1u);
}

/* ROUNDS rounds of N mallocs of `size` and their frees, in order; returns
 * how many rounds ended with one of the two slabs released. */
static int rounds_of(size_t size, int n, int rounds, slab_t **a, slab_t **b) {
  static void *v[1000];
  int lost = 0;
  *a = *b = NULL;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) {
      CHECK((v[i] = malloc(size)) != NULL, "malloc(%zu)", size);
      memset(v[i], r, size);
      slab_t *s = slab_of(v[i]);
      if (*a == NULL) *a = s;
      else if (s != *a && *b == NULL) *b = s;
      CHECK(s == *a || s == *b, "round %d: a third slab for %d blocks of %zu B", r, n, size);
    }
    for (int i = 0; i < n; i++) free(v[i]);
    lost += released(*a) || released(*b);
  }
  return lost;
}

static void t_spare(void) {
  /* 768 B: 85 blocks to a 64 KiB slab, so 100 need two */
  slab_t *a, *b;
  int lost = rounds_of(768, 100, 200, &a, &b);
  unsigned c = a->cls;
  heap_t *h = hm_tls_heap;
  /* (checked before printf's buffer is allocated: a class that needs a
   * slab while none is unused in the SuperSlabs releases the spares) */
  CHECK(b != NULL, "100 blocks of 768 B in one slab");
  CHECK(lost == 0, "%d of 200 rounds gave a slab back to its SuperSlab", lost);
  CHECK((h->cur[c] == a && h->spare[c] == b) || (h->cur[c] == b && h->spare[c] == a),
        "the two slabs are not the current one and the spare");
  slab_t *spare = h->spare[c];
  CHECK(spare->used == 0 && spare->in_use == SLAB_ACTIVE && spare->carved > 0, "the spare: used %u, state %u",
        spare->used, spare->in_use);
  printf("spare: 768 B, 200 rounds over two slabs: %d rounds released one\n", lost);

  /* With a spare, the next slab of the class to empty is released: three
   * slabs' worth, the first two freed (the third serves). */
  static void *w[300];
  for (int i = 0; i < 300; i++) CHECK((w[i] = malloc(768)) != NULL, "malloc");
  slab_t *first = slab_of(w[0]), *last = slab_of(w[299]);
  int third = 0;
  for (int i = 0; i < 300; i++) third |= slab_of(w[i]) != first && slab_of(w[i]) != last;
  CHECK(third && first != last, "300 blocks of 768 B not in three slabs");
  for (int i = 0; i < 300; i++)
    if (slab_of(w[i]) != last) free(w[i]);
  slab_t *kept = h->spare[c];
  CHECK(kept != NULL && kept != last, "no spare after two slabs emptied");
  int n_released = 0;
  for (int i = 0; i < 300; i++) {
    slab_t *s = slab_of(w[i]);
    if (s != last && s != kept && released(s)) n_released++;
  }
  printf("spare: two slabs emptied beside the current one: one kept, the other's %d blocks released\n", n_released);
  CHECK(n_released > 0, "the second emptied slab was not released");
  for (int i = 0; i < 300; i++)
    if (slab_of(w[i]) == last) free(w[i]);

  /* hak_collect gives the spare back to its SuperSlab */
  hak_collect(false);
  CHECK(h->spare[c] == NULL, "hak_collect left the spare");
  CHECK(released(kept) || hm_reg_kind((uintptr_t)kept) != REG_SS, "hak_collect: the spare was not released");

  /* 16 KiB blocks (512 KiB slabs): no spare */
  lost = rounds_of(16384, 40, 20, &a, &b);
  CHECK(b != NULL, "40 blocks of 16 KiB in one slab");
  CHECK(h->spare[a->cls] == NULL, "a spare for a class of 512 KiB slabs");
  CHECK(lost == 20, "16 KiB: %d of 20 rounds released a slab, not every one", lost);
  printf("spare: 16 KiB blocks: no spare, a slab released every round\n");
}

static void *free_it(void *p) {
  free(p);
  return NULL;
}

static uintptr_t remote_word(const slab_t *s) { return atomic_load(hm_slab_remote(s)); }

/* malloc(size) up to `tries` times until it hands out `want`; the blocks
 * handed out meanwhile go to *kept (up to 400). Returns whether it did. */
static bool malloc_until(size_t size, void *want, int tries, void **kept, int *n_kept) {
  for (int i = 0; i < tries; i++) {
    void *p = malloc(size);
    CHECK(p != NULL, "malloc(%zu)", size);
    if (p == want) return true;
    CHECK(*n_kept < 400, "too many blocks kept");
    kept[(*n_kept)++] = p;
  }
  return false;
}

static void t_notify(void) {
  enum { N = 200 };
  static void *v[N], *kept[400];
  int n_kept = 0;
  for (int i = 0; i < N; i++) CHECK((v[i] = malloc(1024)) != NULL, "malloc");
  slab_t *s = slab_of(v[0]);
  CHECK(slab_of(v[1]) == s && slab_of(v[N - 1]) != s, "1 KiB blocks: the first two not in one slab");
  CHECK(s->in_use == SLAB_FULL && remote_word(s) == REMOTE_NOTIFY, "the first slab is not FULL (state %u, remote %#lx)",
        s->in_use, (unsigned long)remote_word(s));
  /* the owner's free lists it again, and the bit stays */
  free(v[0]);
  CHECK(s->in_use == SLAB_LISTED && remote_word(s) == REMOTE_NOTIFY, "after the owner's free: state %u, remote %#lx",
        s->in_use, (unsigned long)remote_word(s));
  /* its one free block handed out again, and one malloc more (which finds
   * the slab dry): the slab is FULL again */
  CHECK(malloc_until(1024, v[0], N, kept, &n_kept), "the freed block was not handed out again");
  CHECK(malloc_until(1024, NULL, 1, kept, &n_kept) == false && s->in_use == SLAB_FULL &&
            remote_word(s) == REMOTE_NOTIFY,
        "the slab run dry again: state %u, remote %#lx", s->in_use, (unsigned long)remote_word(s));
  /* another thread frees one of its blocks: the owner is told, and the
   * block comes back */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_it, v[1]) == 0, "pthread_create");
  pthread_join(t, NULL);
  superslab_t *ss = hm_ss_of(s);
  CHECK((atomic_load(&ss->pending) >> hm_slab_idx(s) & 1u) && atomic_load(&hm_tls_heap->pending_hint),
        "the remote free into the FULL slab did not notify the owner");
  bool back = malloc_until(1024, v[1], 2 * N, kept, &n_kept);
  printf("notify: a slab FULL again with the bit left set; another thread's free into it %s\n",
         back ? "came back" : "was lost");
  CHECK(back, "the block another thread freed into the FULL slab never came back");
  for (int i = 2; i < N; i++) free(v[i]);
  free(v[0]);
  free(v[1]);
  for (int i = 0; i < n_kept; i++) free(kept[i]);
}

static void t_recurring(void) {
  enum { STEPS = 56, ROUNDS = 200, KEEP = 60 };
  static slab_t *last[STEPS];
  static void *kept[ROUNDS * KEEP];
  int lost = 0, lost_late = 0;
  for (int r = 0; r < ROUNDS; r++) {
    char *p = NULL;
    for (int i = 0; i < STEPS; i++) {
      size_t n = 600 + (size_t)i * 135; /* 600 B .. 8 KiB */
      bool gone = last[i] != NULL && released(last[i]);
      lost += gone;
      lost_late += gone && r >= ROUNDS / 2;
      CHECK((p = realloc(p, n)) != NULL, "realloc(%zu)", n);
      memset(p + n - 64, r, 64);
      last[i] = slab_of(p);
    }
    free(p);
    /* live blocks of the same slab kind: new slabs now and then, whose
     * takes look at the emptied current slabs */
    for (int k = 0; k < KEEP; k++) CHECK((kept[r * KEEP + k] = malloc(1000)) != NULL, "malloc(1000)");
  }
  for (int i = 0; i < ROUNDS * KEEP; i++) free(kept[i]);
  printf("recurring: a chain's slab released before its class came back %d times (%d in the last %d rounds)\n",
         lost, lost_late, ROUNDS / 2);
  CHECK(lost_late == 0, "%d slabs of the chain released and taken again in the last %d rounds", lost_late,
        ROUNDS / 2);
}

static void t_newest(void) {
  enum { N = 8 };
  void *v[N];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) CHECK((v[i] = malloc(48)) != NULL, "malloc(48)");
    void *a = v[N - 2];
    free(a);
    void *c = malloc(48);
    CHECK(c == a, "round %d: malloc after free(%p) gave %p", round, a, c);
    for (int i = 0; i < N; i++) free(v[i]);
  }
}

static void t_route(void) {
#ifdef HAKMEM_SECURE
  printf("route: secure builds keep no foreign caches: skipped\n");
  exit(77);
#endif
  enum { N = 256 }; /* four 64 KiB slabs of 1 KiB blocks (the first holds 56) */
  static void *v[N], *kept[400];
  int n_kept = 0;
  for (int i = 0; i < N; i++) CHECK((v[i] = malloc(1024)) != NULL, "malloc");
  heap_t *h = hm_tls_heap;
  slab_t *s = slab_of(v[0]), *cur = slab_of(v[N - 1]);
  unsigned c = s->cls;
  slab_t *f = &h->foreign[c];
  CHECK(h->cur[c] == cur && cur != s && s->in_use == SLAB_FULL, "the first slab is not FULL, or current");
  CHECK(f->free == NULL, "the cache holds blocks before any free");
  unsigned used = s->used;
  free(v[0]);
  free(v[1]);
  CHECK(f->free == v[1] && f->free->next == v[0], "the owner's frees of a slab not current are not on the cache");
  CHECK(s->used == used && s->in_use == SLAB_FULL, "the slab let its cached blocks go: used %u -> %u, state %u",
        used, s->used, s->in_use);
  free(v[N - 1]);
  CHECK(cur->free == v[N - 1] && f->free == v[1], "the current slab's free did not stay on it");
  CHECK(malloc(1024) == v[N - 1], "the current slab's freed block not handed out first");
  CHECK(malloc_until(1024, v[1], 64, kept, &n_kept), "the cache did not serve once the current slab ran dry");
  CHECK(malloc(1024) == v[0], "the cache's blocks not handed out newest first");
  /* (the slab's blocks are all out again; kept are the current slab's) */
  for (int i = 0; i < n_kept; i++) free(kept[i]);
  /* Every block of the slabs not current, the first slab's first: past
   * the budget (128 blocks of 1 KiB) the oldest go home and empty it. */
  for (int i = 0; i < N - 1; i++)
    if (slab_of(v[i]) != cur) free(v[i]);
  unsigned cached = (unsigned)f->capacity + 1u - f->used;
  CHECK(cached <= f->capacity, "the cache holds %u blocks, over its %u", cached, (unsigned)f->capacity);
  CHECK(released(s) || h->spare[c] == s, "the first slab, every block freed, is not empty: used %u, state %u",
        s->used, s->in_use);
  printf("route: 1 KiB blocks, cache budget %u, %u cached at the end\n", (unsigned)f->capacity, cached);
}

static void t_route_look(void) {
#ifdef HAKMEM_SECURE
  printf("route_look: secure builds keep no foreign caches: skipped\n");
  exit(77);
#endif
  enum { N = 200 };
  static void *v[N];
  for (int i = 0; i < N; i++) CHECK((v[i] = malloc(1024)) != NULL, "malloc");
  heap_t *h = hm_tls_heap;
  slab_t *s = slab_of(v[0]);
  unsigned c = s->cls;
  slab_t *f = &h->foreign[c];
  CHECK(h->cur[c] != s && h->cur[c] != f, "the first slab (or the cache) is current");
  int n = 0;
  for (int i = 0; i < N; i++)
    if (slab_of(v[i]) == s) free(v[i]), n++;
  CHECK(f->free != NULL && s->used != 0, "the first slab's %d blocks are not in the cache", n);
  hm_heap_release_empty_cur(); /* (a look: the cache seen) */
  CHECK(f->free != NULL, "one look sent the cache home");
  hm_heap_release_empty_cur(); /* (untouched since) */
  CHECK(f->free == NULL && f->used == f->capacity + 1u, "two looks left %u blocks in the cache",
        (unsigned)f->capacity + 1u - f->used);
  CHECK(released(s) || h->spare[c] == s, "the first slab did not empty: used %u, state %u", s->used, s->in_use);
  printf("route_look: %d blocks home after two looks\n", n);
}

static void t_route_due(void) {
#ifdef HAKMEM_SECURE
  printf("route_due: secure builds keep no foreign caches: skipped\n");
  exit(77);
#endif
  enum { N = 512 }; /* eight slabs of 1 KiB blocks */
  static void *v[N], *kept[400];
  int n_kept = 0;
  for (int i = 0; i < N; i++) CHECK((v[i] = malloc(1024)) != NULL, "malloc");
  heap_t *h = hm_tls_heap;
  slab_t *cur = slab_of(v[N - 1]);
  unsigned c = cur->cls;
  slab_t *f = &h->foreign[c];
  free(v[0]);
  CHECK(malloc_until(1024, v[0], 64, kept, &n_kept) && h->cur[c] == f, "the cache did not serve");
  /* a sample due: the cache's next frees take no credit */
  h->sample_left[c] = 1;
  f->credit = 0;
  int freed = 0;
  for (int i = 0; i < N; i++)
    if (slab_of(v[i]) != slab_of(v[0]) || i == 0) free(v[i]), freed++;
  unsigned listed = 0;
  for (block_t *b = f->free; b != NULL; b = b->next) listed++;
  for (block_t *b = f->local_free; b != NULL; b = b->next) listed++;
  unsigned cached = (unsigned)f->capacity + 1u - f->used;
  CHECK(listed == cached && cached <= f->capacity, "%d frees: the cache lists %u blocks, counts %u, budget %u", freed,
        listed, cached, (unsigned)f->capacity);
  printf("route_due: %d frees, %u blocks cached (budget %u)\n", freed, cached, (unsigned)f->capacity);
  _exit(0); /* (the countdown was forced: no more mallocs of the class) */
}

static void t_bias(void) {
  enum { N = 100 }; /* 768 B: 85 blocks to a 64 KiB slab, so 100 need two */
  static void *v[N];
  heap_t *h = hm_tls_heap;
  void *keep = malloc(16); /* (keeps the SuperSlab mapped to the end) */
  void *p = malloc(768);
  CHECK(keep != NULL && p != NULL, "malloc");
  slab_t *s = slab_of(p);
  unsigned c = s->cls;
  CHECK(h->cur[c] == s && s->bias == 0, "a new current slab with bias %u", s->bias);
  free(p);
  CHECK(s->bias == 1 && s->used == 1 && hm_slab_used(s) == 0 && (h->emptied_cur[c / 64] >> (c % 64) & 1u),
        "emptied once: bias %u, used %u, emptied_cur bit %u", s->bias, s->used,
        (unsigned)(h->emptied_cur[c / 64] >> (c % 64) & 1u));
  for (int r = 0; r < 1000; r++) {
    void *q = malloc(768);
    CHECK(slab_of(q) == s && hm_slab_used(s) == 1, "round %d: another slab, or %u blocks out", r, hm_slab_used(s));
    free(q);
    CHECK(s->bias == 1 && s->used == 1, "round %d: emptied again: bias %u, used %u", r, s->bias, s->used);
  }
  /* Run dry: FULL, the bias off (FULL's used of 1 is the count's own). */
  for (int i = 0; i < N; i++) CHECK((v[i] = malloc(768)) != NULL, "malloc");
  CHECK(h->cur[c] != s && s->in_use == SLAB_FULL && s->bias == 0 && s->used == 1,
        "run dry: current %d, state %u, bias %u, used %u", h->cur[c] == s, s->in_use, s->bias, s->used);
  slab_t *t = h->cur[c];
  /* Its blocks freed (by way of the foreign cache): it empties, the spare. */
  int in_s = 0;
  for (int i = 0; i < N; i++)
    if (slab_of(v[i]) == s) free(v[i]), v[i] = NULL, in_s++;
  hm_heap_flush_foreign(h);
  CHECK(in_s == s->capacity && h->spare[c] == s && s->used == 0 && s->bias == 0,
        "%d blocks freed: spare %d, used %u, bias %u", in_s, h->spare[c] == s, s->used, s->bias);
  /* The other slab empties, biased while current; hak_collect releases it. */
  for (int i = 0; i < N; i++) free(v[i]);
  CHECK(h->cur[c] == t && t->bias == 1 && hm_slab_used(t) == 0, "the second slab: current %d, bias %u, used %u",
        h->cur[c] == t, t->bias, t->used);
  CHECK(hm_ss_of(t) == hm_ss_of(keep), "768 B and 16 B blocks in two SuperSlabs");
  hak_collect(false);
  CHECK(h->cur[c] != t && released(t) && t->used == 0 && t->bias == 0,
        "hak_collect left the empty biased current slab, or its bias (state %u, used %u, bias %u)", t->in_use, t->used,
        t->bias);
  free(keep);
  printf("bias: 1000 rounds on an emptied current slab, FULL and back, released by hak_collect\n");
}

int main(int argc, char **argv) {
  tc_test_name = "heap";
  if (!HAKMEM_SPECIFIC) return 77;
  if (argc < 2) FAILF("usage: test_heap MODE");
  free(malloc(1)); /* start-up */
  if (!strcmp(argv[1], "spare")) t_spare();
  else if (!strcmp(argv[1], "notify")) t_notify();
  else if (!strcmp(argv[1], "recurring")) t_recurring();
  else if (!strcmp(argv[1], "newest")) t_newest();
  else if (!strcmp(argv[1], "route")) t_route();
  else if (!strcmp(argv[1], "route_look")) t_route_look();
  else if (!strcmp(argv[1], "route_due")) t_route_due();
  else if (!strcmp(argv[1], "bias")) t_bias();
  else FAILF("unknown mode %s", argv[1]);
  printf("heap %s: ok\n", argv[1]);
  return 0;
}
