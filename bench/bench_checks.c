/* bench_checks [--ws 400,8192,40000] [--seconds S] [--slice-ms MS] [--seed N]
 *
 * What hakmem's misuse checks and secure mode cost, measured inside one
 * process (docs/SECURITY.md, "What the checks cost").
 *
 * The executable holds copies of hakmem, all from the same sources, in four
 * groups: built without the fast-path checks (HAKMEM_NO_CHECKS), the default
 * build twice, and secure mode (HAKMEM_SECURE); each group in one copy per
 * code shift (HAKMEM_AB_SHIFTS, 16 copies by default), so that its figure
 * averages over code alignments.  Each copy's symbols are local to
 * it except its hak_malloc/hak_free, renamed ab_<copy>_malloc/_free
 * (bench/CMakeLists.txt), so the copies have separate heaps, registries and
 * thread caches; the benchmark itself keeps glibc's malloc.
 *
 * Each copy runs bench_random_mixed's loop (bench/random_mixed.h) on its own
 * slot array, from the same seed, so every copy performs exactly the same
 * operations.  Time is cut into rounds; in a round each copy runs one slice
 * of the same length (~--slice-ms), in a random order, timed with the thread's
 * CPU clock.  Load from other processes changes over seconds, so within a
 * round it hits all copies alike: the comparison is per round.  For each pair
 * (X against Y) the estimate is sum(time X) / sum(time Y) - 1 over the rounds,
 * with a 95% interval from a moving-block bootstrap over rounds (blocks of
 * BLOCK rounds, for load that persists over several rounds), and the median
 * of the per-round ratios beside it.  The second default copy measured
 * against the first is the self-test: it must come out 0 within its
 * interval, or the tool is biased (order, position, address layout).
 */
#include <dlfcn.h>

#include "random_mixed.h"

#include "ab_copies.h" /* AB_COPIES: AB_COPY(name, group, shift) per copy */

#define AB_COPY(name, group, shift)          \
  extern void *ab_##name##_malloc(size_t); \
  extern void ab_##name##_free(void *);        \
  extern int ab_##name##_trim(size_t);
AB_COPIES
#undef AB_COPY

enum { AB_nochecks, AB_default, AB_self, AB_secure, NGROUPS };
static const char *const group_names[NGROUPS] = {"nochecks", "default", "self", "secure"};

typedef struct {
  const char *name;
  int group, shift;
  void *(*alloc)(size_t);
  void (*release)(void *);
  int (*trim)(size_t);
  void **slots;
  rng_t rng;
  uint64_t checksum;
  double *t; /* CPU seconds per round */
} copy;

#define AB_COPY(name, group, shift) \
  {#name, group, shift, ab_##name##_malloc, ab_##name##_free, ab_##name##_trim, NULL, {0}, 0, NULL},
static copy linked[] = {AB_COPIES};
#undef AB_COPY
#define MAXCOPIES 64

/* The copies measured: the linked ones, or with --so the given libraries. */
static copy *copies = linked;
static int ncopies = (int)(sizeof linked / sizeof linked[0]);

/* The pairs reported: {measured, against, label}. */
static const struct {
  int x, y;
  const char *label;
} pairs[] = {
    {AB_default, AB_nochecks, "default vs nochecks"},
    {AB_secure, AB_nochecks, "secure vs nochecks"},
    {AB_secure, AB_default, "secure vs default"},
    {AB_self, AB_default, "default' vs default (self-test)"},
};

#define BLOCK 4 /* rounds per epoch (new_epoch), the bootstrap's block */
#define RESAMPLES 4000

static size_t size_min = 16, size_max = 1024;
static FILE *dump; /* --dump: every slice's time */

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Kept out of line and shared by all copies: one loop, at one address. */
static BENCH_NOINLINE void run_slice(copy *c, uint32_t ws, uint64_t ops) {
  loop_result r = random_mixed_steps(c->alloc, c->release, c->slots, ws, ops, &c->rng,
                                     size_min, size_max);
  c->checksum += r.checksum;
}

static void load_average(char *buf, size_t n) {
  FILE *f = fopen("/proc/loadavg", "r");
  buf[0] = '\0';
  if (f) {
    if (!fgets(buf, (int)n, f)) buf[0] = '\0';
    fclose(f);
  }
  /* the three averages only */
  char *p = buf;
  for (int spaces = 0; *p; p++)
    if (*p == ' ' && ++spaces == 3) break;
  *p = '\0';
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct {
  double est, lo, hi, med;
} pair_result;

/* sum(tx)/sum(ty) - 1, its bootstrap interval (epochs resampled), the
 * median of the per-round ratios. */
static pair_result compare(const double *tx, const double *ty, size_t rounds, rng_t *rng,
                           double *scratch) {
  pair_result res;
  double sx = 0, sy = 0;
  for (size_t i = 0; i < rounds; i++) {
    sx += tx[i];
    sy += ty[i];
    scratch[i] = tx[i] / ty[i];
  }
  res.est = sx / sy - 1;
  res.med = median(scratch, rounds) - 1;
  size_t epochs = rounds / BLOCK;
  for (int b = 0; b < RESAMPLES; b++) {
    double bx = 0, by = 0;
    for (size_t e = 0; e < epochs; e++) {
      size_t s = BLOCK * (size_t)rng_below(rng, (uint32_t)epochs);
      for (size_t k = 0; k < BLOCK; k++) {
        bx += tx[s + k];
        by += ty[s + k];
      }
    }
    scratch[b] = bx / by - 1;
  }
  qsort(scratch, RESAMPLES, sizeof *scratch, cmp_double);
  res.lo = scratch[(int)(0.025 * RESAMPLES)];
  res.hi = scratch[(int)(0.975 * RESAMPLES) - 1];
  return res;
}

/* Every copy runs `ops` more steps (untimed). */
static void advance_all(uint32_t ws, uint64_t ops) {
  for (int c = 0; c < ncopies; c++) run_slice(&copies[c], ws, ops);
}

/* Every BLOCK rounds, each copy's heap starts again: all blocks freed,
 * memory given back, then warmed up to the steady state (half the slots
 * full). Where a heap's memory lands (cache sets of its physical pages)
 * moves a copy's time by several percent for as long as it stays there, so
 * the copies get new memory every epoch, and the bootstrap resamples
 * epochs. The copies stay in step: the same operations for all. */
static void new_epoch(uint32_t ws) {
  for (int c = 0; c < ncopies; c++) {
    copy *cp = &copies[c];
    for (uint32_t i = 0; i < ws; i++)
      if (cp->slots[i]) {
        cp->release(cp->slots[i]);
        cp->slots[i] = NULL;
      }
    cp->trim(0);
  }
  uint64_t warm = 20 * (uint64_t)ws;
  if (warm < 1000000) warm = 1000000;
  advance_all(ws, warm);
}

static void measure(uint32_t ws, double seconds, double slice_ms, uint64_t seed) {
  for (int c = 0; c < ncopies; c++) {
    copies[c].slots = calloc(ws, sizeof(void *));
    if (!copies[c].slots) xmalloc_fail(ws * sizeof(void *));
    rng_seed(&copies[c].rng, seed, ws); /* the same stream for every copy */
  }
  /* Slice length: ~slice_ms of the first copy, the same for all. */
  uint64_t probe = 200000;
  new_epoch(ws);
  double t0 = thread_cpu();
  run_slice(&copies[0], ws, probe);
  double per_op = (thread_cpu() - t0) / (double)probe;
  for (int c = 1; c < ncopies; c++) run_slice(&copies[c], ws, probe);
  uint64_t slice = (uint64_t)(slice_ms * 1e-3 / per_op);
  if (slice < 10000) slice = 10000;

  size_t cap = (size_t)(seconds / (ncopies * slice_ms * 1e-3) * 4) + 4 * BLOCK;
  cap -= cap % BLOCK;
  for (int c = 0; c < ncopies; c++) {
    copies[c].t = malloc(cap * sizeof(double));
    if (!copies[c].t) xmalloc_fail(cap * sizeof(double));
  }
  rng_t order_rng;
  rng_seed(&order_rng, seed, 1000003);
  char load0[64], load1[64];
  load_average(load0, sizeof load0);
  size_t rounds = 0;
  double w0 = now_sec();
  /* whole epochs, at least 4 */
  while (rounds < cap && (rounds % BLOCK || now_sec() - w0 < seconds || rounds < 4 * BLOCK)) {
    if (rounds % BLOCK == 0) new_epoch(ws);
    int order[MAXCOPIES];
    for (int i = 0; i < ncopies; i++) order[i] = i;
    for (int i = ncopies - 1; i > 0; i--) { /* Fisher-Yates */
      int j = (int)rng_below(&order_rng, (uint32_t)i + 1), tmp = order[i];
      order[i] = order[j];
      order[j] = tmp;
    }
    for (int i = 0; i < ncopies; i++) {
      copy *c = &copies[order[i]];
      double a = thread_cpu();
      run_slice(c, ws, slice);
      c->t[rounds] = thread_cpu() - a;
    }
    rounds++;
  }
  double wall = now_sec() - w0;
  if (dump)
    for (size_t r = 0; r < rounds; r++)
      for (int c = 0; c < ncopies; c++)
        fprintf(dump, "%u %zu %s %s %d %.9f\n", ws, r, copies[c].name,
                group_names[copies[c].group], copies[c].shift, copies[c].t[r]);
  load_average(load1, sizeof load1);

  /* The copies did the same operations: their checksums must agree. */
  for (int c = 1; c < ncopies; c++)
    if (copies[c].checksum != copies[0].checksum) {
      fprintf(stderr, "bench_checks: copies %s and %s diverged\n", copies[0].name,
              copies[c].name);
      exit(1);
    }

  /* A group's time in a round: the sum over its copies (one per shift). */
  double *gt[NGROUPS];
  int per_group[NGROUPS] = {0};
  double cpu = 0;
  for (int g = 0; g < NGROUPS; g++) {
    gt[g] = calloc(rounds, sizeof(double));
    if (!gt[g]) xmalloc_fail(rounds * sizeof(double));
  }
  for (int c = 0; c < ncopies; c++) {
    per_group[copies[c].group]++;
    for (size_t r = 0; r < rounds; r++) {
      gt[copies[c].group][r] += copies[c].t[r];
      cpu += copies[c].t[r];
    }
  }
  size_t scratch_n = rounds > RESAMPLES ? rounds : RESAMPLES;
  double *scratch = malloc(scratch_n * sizeof(double));
  if (!scratch) xmalloc_fail(scratch_n * sizeof(double));
  /* How noisy single slices were: the quartiles of the first copy's slice
   * times against their median. */
  for (size_t r = 0; r < rounds; r++) scratch[r] = copies[0].t[r];
  double med = median(scratch, rounds);
  double q1 = scratch[rounds / 4] / med - 1, q3 = scratch[(3 * rounds) / 4] / med - 1;

  printf("\nws %u: %zu rounds (%zu epochs) of %d slices x %llu ops, %.1f s (timed CPU %.0f%% of it)\n",
         ws, rounds, rounds / BLOCK, ncopies, (unsigned long long)slice, wall, 100 * cpu / wall);
  printf("  load average %s at start, %s at end\n", load0, load1);
  printf("  %s: %.2f ns/op (median slice); its slices' quartiles %+.1f%% %+.1f%%\n",
         copies[0].name, med / (double)slice * 1e9, 100 * q1, 100 * q3);
  printf("  %-32s %8s  %-18s %8s\n", "time per op", "ratio", "interval", "median");
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    pair_result p = compare(gt[pairs[i].x], gt[pairs[i].y], rounds, &order_rng, scratch);
    printf("  %-32s %+7.2f%%  [%+6.2f, %+6.2f]  %+7.2f%%\n", pairs[i].label, 100 * p.est,
           100 * p.lo, 100 * p.hi, 100 * p.med);
  }
  /* Layout: each copy's total time against its group's mean per copy. */
  printf("  code shift:");
  for (int c = 0; c < ncopies; c++)
    if (copies[c].group == 0) printf(" %6d", copies[c].shift);
  printf("\n");
  for (int g = 0; g < NGROUPS; g++) {
    double total = 0;
    for (size_t r = 0; r < rounds; r++) total += gt[g][r];
    printf("  %-10s ", group_names[g]);
    for (int c = 0; c < ncopies; c++) {
      if (copies[c].group != g) continue;
      double sum = 0;
      for (size_t r = 0; r < rounds; r++) sum += copies[c].t[r];
      printf(" %+5.1f%%", 100 * (sum * per_group[g] / total - 1));
    }
    printf("\n");
  }
  fflush(stdout);

  free(scratch);
  for (int g = 0; g < NGROUPS; g++) free(gt[g]);
  for (int c = 0; c < ncopies; c++) {
    for (uint32_t i = 0; i < ws; i++)
      if (copies[c].slots[i]) copies[c].release(copies[c].slots[i]);
    free(copies[c].slots);
    free(copies[c].t);
    copies[c].checksum = 0;
  }
}

/* --so: a private copy of the file (dlopen loads a path only once), opened
 * with its symbols kept to itself; its hak_malloc/hak_free. */
static void load_copy(copy *c, const char *path, int group) {
  char tmp[] = "/tmp/bench_checks_XXXXXX";
  int out = mkstemp(tmp);
  FILE *in = fopen(path, "rb");
  if (out < 0 || !in) {
    fprintf(stderr, "bench_checks: cannot copy %s\n", path);
    exit(2);
  }
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0)
    if (write(out, buf, n) != (ssize_t)n) {
      fprintf(stderr, "bench_checks: cannot copy %s\n", path);
      exit(2);
    }
  fclose(in);
  close(out);
  void *h = dlopen(tmp, RTLD_NOW | RTLD_LOCAL);
  unlink(tmp);
  if (!h) {
    fprintf(stderr, "bench_checks: %s\n", dlerror());
    exit(2);
  }
  c->name = group_names[group];
  c->group = group;
  c->shift = 0;
  c->alloc = (void *(*)(size_t))dlsym(h, "hak_malloc");
  c->release = (void (*)(void *))dlsym(h, "hak_free");
  c->trim = (int (*)(size_t))dlsym(h, "hak_malloc_trim");
  if (!c->alloc || !c->release || !c->trim) {
    fprintf(stderr, "bench_checks: %s has no hak_malloc/hak_free/hak_malloc_trim\n", path);
    exit(2);
  }
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--ws 400,8192,40000] [--seconds 40] [--slice-ms 20] [--seed 42]\n"
          "          [--so NOCHECKS.so DEFAULT.so SECURE.so] [--dump FILE]\n"
          "  --ws        working sets (slots), comma-separated\n"
          "  --seconds   wall time spent per working set\n"
          "  --slice-ms  length of one copy's slice\n"
          "  --so        measure these libraries (dlopen'ed; DEFAULT.so twice, for the\n"
          "              self-test) instead of the copies linked in\n"
          "  --dump      write every slice's time to FILE (ws round copy build shift seconds)\n",
          argv0);
  exit(2);
}

int main(int argc, char **argv) {
  const char *ws_list = "400,8192,40000";
  double seconds = 40, slice_ms = 20;
  uint64_t seed = 42;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) usage(argv[0]);
    if (!strcmp(argv[i], "--ws"))
      ws_list = argv[++i];
    else if (!strcmp(argv[i], "--seconds"))
      seconds = parse_double(argv[++i], "--seconds");
    else if (!strcmp(argv[i], "--slice-ms"))
      slice_ms = parse_double(argv[++i], "--slice-ms");
    else if (!strcmp(argv[i], "--seed"))
      seed = parse_u64(argv[++i], "--seed");
    else if (!strcmp(argv[i], "--dump")) {
      if (!(dump = fopen(argv[++i], "w"))) {
        perror(argv[i]);
        return 2;
      }
    }
    else if (!strcmp(argv[i], "--so") && i + 3 < argc) {
      static copy loaded[NGROUPS];
      const char *nochecks = argv[++i], *dflt = argv[++i], *secure = argv[++i];
      load_copy(&loaded[0], nochecks, AB_nochecks);
      load_copy(&loaded[1], dflt, AB_default);
      load_copy(&loaded[2], dflt, AB_self);
      load_copy(&loaded[3], secure, AB_secure);
      copies = loaded;
      ncopies = NGROUPS;
    } else
      usage(argv[0]);
  }
  if (seconds <= 0 || slice_ms <= 0) usage(argv[0]);
  printf("bench_checks: bench_random_mixed's loop (sizes %zu..%zu) against %d copies of hakmem\n"
         "(%d builds x %d code shifts) in one process, slices of ~%.0f ms in a random order per round, thread CPU time.\n"
         "ratio: sum over rounds of the first's time / the second's - 1 (+ = slower);\n"
         "interval: 95%%, bootstrap over epochs (every heap renewed each %d rounds);\n"
         "median: of the per-round ratios. Code shift: each copy's total time against its build's mean.\n",
         size_min, size_max, ncopies, NGROUPS, ncopies / NGROUPS, slice_ms, BLOCK);
  char *list = strdup(ws_list);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    uint64_t ws = parse_u64(tok, "--ws");
    if (ws == 0 || ws > 0xffffffffu) usage(argv[0]);
    measure((uint32_t)ws, seconds, slice_ms, seed);
  }
  free(list);
  if (dump) fclose(dump);
  return 0;
}
