/* hak_stats_json and HAKMEM_STATS=json: the resident memory explained adds
 * up, and agrees with the resident bytes the kernel reports.
 *
 *   test_stats_json single|threads        check in-process (hak_stats_json into a tmpfile)
 *   test_stats_json single|threads print  also print the JSON and the measures (tests/stats_json_check.py)
 *   test_stats_json_plain single|threads  (built without hakmem, for LD_PRELOAD) the workload, the
 *                                         measures on stdout, then exit with the memory live
 *
 * The workload: pool blocks of every slab kind (small, medium, big), packed
 * large blocks, span-sized large blocks, about half of each freed again;
 * with threads, half of the frees are of other threads' blocks (foreign
 * caches). Every live block is written over its whole usable size, so its
 * pages are resident. The independent measure: the Rss of the process's
 * anonymous mappings in /proc/self/smaps (hakmem's mappings and the
 * registry's pages, plus a little of libc's, the stacks and TLS). */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test_common.h"
#ifndef HAKMEM_PLAIN
#include "hakmem.h"
#endif

#define THREADS 4
#define PER_THREAD 4000

static _Atomic size_t live_usable; /* usable bytes of the blocks left live */

/* One thread's share: blocks of every size range, half freed. When peer
 * is not NULL, the thread frees the blocks the peer left in its outbox. */
struct share {
  void **blocks;
  size_t n;
  uint64_t seed;
};

static size_t pick_size(tc_rng *r, size_t i) {
  switch (i % 64) {
  case 0: return i % 256 == 0 ? 300000 + tc_below(r, 600000) : 200; /* packed large */
  case 1: return i % 4096 == 1 ? (3u << 20) + tc_below(r, 1u << 20) : 96; /* spans, now and then */
  case 2: return 65536 + tc_below(r, 150000);        /* big slabs */
  case 4: case 5: return 8192 + tc_below(r, 30000);  /* medium */
  default: return 16 + tc_below(r, 2000);             /* small */
  }
}

static void fill(struct share *s) {
  tc_rng r = {s->seed};
  for (size_t i = 0; i < s->n; i++) {
    size_t n = pick_size(&r, i);
    s->blocks[i] = malloc(n);
    CHECK(s->blocks[i] != NULL, "malloc(%zu)", n);
    memset(s->blocks[i], (int)(i & 0xff) | 1, malloc_usable_size(s->blocks[i]));
  }
}

/* Free every other block (odd indices), count the usable bytes of the rest. */
static void free_half(struct share *s) {
  size_t live = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (i & 1) {
      free(s->blocks[i]);
      s->blocks[i] = NULL;
    }
  }
  for (size_t i = 0; i < s->n; i += 2) live += malloc_usable_size(s->blocks[i]);
  atomic_fetch_add(&live_usable, live);
}

static struct share shares[THREADS];
static pthread_barrier_t filled, freed, done;

static void *worker(void *arg) {
  size_t k = (size_t)(uintptr_t)arg;
  fill(&shares[k]);
  pthread_barrier_wait(&filled);
  free_half(&shares[(k + 1) % THREADS]); /* the neighbour's blocks: remote frees */
  pthread_barrier_wait(&freed);
  pthread_barrier_wait(&done); /* parked, with its heap and caches, while main measures */
  return NULL;
}

/* Rss of the anonymous mappings (no path, not the main stack), bytes. */
static size_t smaps_anon_rss(void) {
  static char buf[1 << 16];
  int fd = open("/proc/self/smaps", O_RDONLY);
  CHECK(fd >= 0, "open smaps");
  size_t total = 0, have = 0;
  int anon = 0;
  for (;;) {
    ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
    if (got <= 0 && have == 0) break;
    have += got > 0 ? (size_t)got : 0;
    buf[have] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      unsigned long a, b;
      char perms[8];
      int pos = 0;
      if (sscanf(line, "%lx-%lx %7s %*s %*s %*s%n", &a, &b, perms, &pos) == 3) {
        while (line[pos] == ' ') pos++;
        anon = line[pos] == '\0';
      } else if (strncmp(line, "Rss:", 4) == 0 && anon) {
        total += strtoul(line + 4, NULL, 10) * 1024;
      }
      line = nl + 1;
    }
    have = strlen(line);
    memmove(buf, line, have);
    if (got <= 0) break;
  }
  close(fd);
  return total;
}

/* "rounding": blocks of two sizes the classes round up by different
 * fractions (17 and 2049 bytes), written whole and left live, for the split
 * of the blocks into requested bytes and rounding that the profiler's
 * samples give (stats_json_check.py runs it with profiling on). The true
 * figures: a size's usable bytes are its smallest malloc_usable_size (a
 * sampled block is served in whole pages: its excess is "sampled"); the
 * array of pointers is a large block of known rounding too. The sizes are
 * allocated one after the other: interleaved, the sampler now gives the
 * larger too many samples (a sample due at a cut in one class's list is
 * taken by the other class's next list first: sample.c, hm_sample_list). */
#define ROUND_SIZES 2
static const size_t round_size[ROUND_SIZES] = {17, 2049};
static const size_t round_count[ROUND_SIZES] = {100000, 8000};
static size_t live_requested, live_rounding, live_sampled;

static void rounding_workload(void) {
  size_t total = round_count[0] + round_count[1], unit[ROUND_SIZES] = {SIZE_MAX, SIZE_MAX}, used = 0;
  free(malloc(1)); /* hakmem starts (and with it the sampler) on the first call: not the array's */
  void **b = calloc(total, sizeof *b);
  CHECK(b != NULL, "calloc");
  size_t au = malloc_usable_size(b);
  memset(b, 0, au); /* (resident whole, as every block here) */
  live_requested = total * sizeof *b;
  live_rounding = au - total * sizeof *b;
  for (size_t i = 0; i < total; i++) {
    size_t s = i >= round_count[0], n = round_size[s];
    b[i] = malloc(n);
    CHECK(b[i] != NULL, "malloc(%zu)", n);
    size_t u = malloc_usable_size(b[i]);
    memset(b[i], 1, u);
    used += u;
    if (u < unit[s]) unit[s] = u;
  }
  for (size_t i = 0; i < total; i++) {
    size_t s = i >= round_count[0];
    live_requested += round_size[s];
    live_rounding += unit[s] - round_size[s];
    live_sampled += malloc_usable_size(b[i]) - unit[s];
  }
  atomic_fetch_add(&live_usable, used + au);
}

static void workload(int threads) {
  if (threads == 2) {
    rounding_workload();
    return;
  }
  if (!threads) {
    static void *blocks[THREADS * PER_THREAD];
    struct share s = {blocks, THREADS * PER_THREAD, 42};
    fill(&s);
    free_half(&s);
    return;
  }
  pthread_t t[THREADS];
  pthread_barrier_init(&filled, NULL, THREADS);
  pthread_barrier_init(&freed, NULL, THREADS + 1);
  pthread_barrier_init(&done, NULL, THREADS + 1);
  for (size_t k = 0; k < THREADS; k++) {
    shares[k].blocks = calloc(PER_THREAD, sizeof(void *));
    shares[k].n = PER_THREAD;
    shares[k].seed = 100 + k;
    CHECK(pthread_create(&t[k], NULL, worker, (void *)(uintptr_t)k) == 0, "pthread_create");
  }
  pthread_barrier_wait(&freed);
}

#ifndef HAKMEM_PLAIN
static char json[1 << 16];

/* The integer after "key": at or after from (NULL: none). */
static size_t field(const char *from, const char *key, const char **at) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(from, k);
  CHECK(p != NULL, "no %s in %s", k, from);
  if (at != NULL) *at = p;
  return strtoull(p + strlen(k), NULL, 10);
}
#endif

int main(int argc, char **argv) {
  tc_test_name = "stats_json";
  int threads = argc > 1 && strcmp(argv[1], "threads") == 0 ? 1 : argc > 1 && strcmp(argv[1], "rounding") == 0 ? 2 : 0;
  workload(threads);
#ifdef HAKMEM_PLAIN
  printf("smaps_anon %zu\nlive_usable %zu\n", smaps_anon_rss(), atomic_load(&live_usable));
  if (threads == 2) printf("live_requested %zu\nlive_rounding %zu\nlive_sampled %zu\n", live_requested, live_rounding, live_sampled);
  fflush(stdout);
  return 0; /* the memory stays live: HAKMEM_STATS=json reports it at exit */
#else
  FILE *f = tmpfile();
  CHECK(f != NULL, "tmpfile");
  fputs("x", f); /* buffered: hak_stats_json flushes it before writing */
  hak_stats_json(f);
  size_t anon = smaps_anon_rss();
  rewind(f);
  size_t n = fread(json, 1, sizeof json - 1, f);
  json[n] = '\0';
  fclose(f);
  CHECK(n > 2 && json[0] == 'x' && json[1] == '{' && json[n - 1] == '\n' && strchr(json, '\n') == json + n - 1,
        "one line, one object, after the flushed text: %s", json);
  const char *r;
  field(json, "resident", &r);
  const char *b;
  size_t total = field(r, "total", NULL), blocks = field(r, "blocks", &b);
  (void)blocks;
  size_t parts = field(b, "bytes", NULL) + field(r, "free_in_slabs", NULL) +
                 field(strstr(r, "\"thread_caches\""), "bytes", NULL) + field(strstr(r, "\"unused\""), "bytes", NULL) +
                 field(r, "large_cache", NULL) + field(r, "guarded_pool", NULL) +
                 field(strstr(r, "\"metadata\""), "bytes", NULL);
  size_t handed = field(b, "bytes", NULL), live = atomic_load(&live_usable);
  printf("resident total %zu, smaps anonymous %zu (%+.2f%%); blocks %zu, live usable %zu (%+.2f%%)\n", total, anon,
         100.0 * ((double)total - (double)anon) / (double)anon, handed, live,
         100.0 * ((double)handed - (double)live) / (double)live);
  if (argc > 2 && strcmp(argv[2], "print") == 0) printf("%ssmaps_anon %zu\nlive_usable %zu\n", json + 1, anon, live);
  CHECK(parts == total, "the parts add up: %zu != %zu", parts, total);
  CHECK(total * 100 >= anon * 95 && total * 100 <= anon * 105, "total %zu within 5%% of the anonymous Rss %zu", total,
        anon);
  /* every live block is written whole, so its pages are resident: 2% (seen: 0.2%) */
  CHECK(handed * 100 >= live * 98 && handed * 100 <= live * 102, "blocks %zu within 2%% of the live usable bytes %zu",
        handed, live);
  size_t foreign = field(strstr(r, "\"thread_caches\""), "foreign", NULL);
  /* (with no other thread the cache may hold the owner's frees of slabs
   * not current: docs/DESIGN.md, "Threads") */
#ifdef HAKMEM_SECURE
  CHECK(foreign == 0, "secure: foreign caches hold %zu bytes", foreign); /* secure builds keep none */
#else
  if (threads == 1) CHECK(foreign > 0, "foreign caches hold no bytes (threads: %d)", threads);
#endif
  /* a FILE without a descriptor gets it through stdio */
  {
    static char mem[1 << 16];
    FILE *m = fmemopen(mem, sizeof mem, "w");
    CHECK(m != NULL, "fmemopen");
    hak_stats_json(m);
    fclose(m);
    CHECK(mem[0] == '{' && strstr(mem, "\"resident\":{\"total\":") != NULL && strstr(mem, "}\n") != NULL,
          "hak_stats_json into fmemopen: %.200s", mem);
  }
  /* the text report: the same breakdown, on a line of its own, adding up */
  f = tmpfile();
  CHECK(f != NULL, "tmpfile");
  hak_stats_print(f);
  rewind(f);
  n = fread(json, 1, sizeof json - 1, f);
  json[n] = '\0';
  fclose(f);
  const char *t = strstr(json, "\nresident explained: ");
  CHECK(t != NULL, "no breakdown line in the text report:\n%s", json);
  size_t v[7], ttotal = strtoull(t + 21, NULL, 10), tsum = 0;
  const char *const names[7] = {"= blocks handed out ", "+ free in slabs in use ", "+ thread caches ", "+ unused ",
                                "+ large cache ", "+ guarded pool ", "+ metadata "};
  for (int k = 0; k < 7; k++) {
    const char *p = strstr(t, names[k]);
    CHECK(p != NULL && p < strchr(t + 1, '\n'), "no '%s' in the line: %s", names[k], t);
    v[k] = strtoull(p + strlen(names[k]), NULL, 10);
    tsum += v[k];
  }
  CHECK(tsum == ttotal, "the text line's parts add up: %zu != %zu", tsum, ttotal);
  CHECK(ttotal * 100 >= anon * 95 && ttotal * 100 <= anon * 105, "text total %zu within 5%% of %zu", ttotal, anon);
  if (threads == 1) pthread_barrier_wait(&done);
  printf("ok\n");
  return 0;
#endif
}
