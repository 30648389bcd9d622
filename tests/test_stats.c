/* Statistics (src/stats.c): hak_stats_get figures move consistently with
 * known allocations, in every lane; mallinfo2/mallinfo and malloc_stats
 * answer from the same figures in glibc's layout; HAKMEM_STATS=1 prints the
 * report at exit, also with a thread still allocating. Built against the
 * default library and (test_stats_counters) against one compiled with
 * -DHAKMEM_FAST_COUNTERS, where the per-class counts must be exact. hakmem-specific. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "hakmem.h"

#define N_TINY 300
#define TINY_SIZE 64      /* a class of its own: 64-byte blocks */
#define N_MID 40
#define MID_SIZE 4000     /* class 4096 */
#define N_LARGE 3
#define LARGE_SIZE (MiB + 4096)

static void check_sane(const struct hak_stats *s, const char *when) {
  for (int i = 0; i < HAK_LANES; i++) {
    const struct hak_lane_stats *l = &s->lane[i];
    CHECK(l->allocated >= l->freed, "lane %d: freed %zu > allocated %zu (%s)", i, l->freed, l->allocated, when);
    CHECK(l->current == l->allocated - l->freed, "lane %d: current %zu != allocated - freed (%s)", i, l->current,
          when);
    CHECK(l->peak >= l->current, "lane %d: peak %zu < current %zu (%s)", i, l->peak, l->current, when);
    CHECK(l->current >= l->in_use, "lane %d: in use %zu > current %zu (%s)", i, l->in_use, l->current, when);
  }
  CHECK(s->lane[HAK_LANE_LARGE].in_use == s->lane[HAK_LANE_LARGE].current, "large in_use != current (%s)", when);
  CHECK(s->committed_bytes >= s->lane[0].in_use + s->lane[1].in_use + s->large_mapped,
        "committed %zu below what is in use (%s)", s->committed_bytes, when);
  CHECK(s->large_mapped >= s->lane[HAK_LANE_LARGE].current, "large mapped %zu < large current %zu (%s)",
        s->large_mapped, s->lane[HAK_LANE_LARGE].current, when);
  CHECK(s->large_blocks_peak >= s->large_blocks, "large blocks peak (%s)", when);
  CHECK(s->cls[0].size == 16 && s->cls[HAK_STATS_CLASSES - 1].size == 256 * 1024, "class sizes (%s)", when);
}

static unsigned class_of(size_t size, const struct hak_stats *s) {
  for (unsigned c = 0; c < HAK_STATS_CLASSES; c++)
    if (s->cls[c].size >= size) return c;
  FAILF("no class for %zu", size);
}

static void test_lanes(void) {
  static struct hak_stats s0, s1, s2;
  static void *tiny[N_TINY], *mid[N_MID], *large[N_LARGE];
  free(tc_escape(malloc(1))); /* this thread's heap exists */
  hak_stats_get(&s0);
  check_sane(&s0, "start");
  for (int i = 0; i < N_TINY; i++) memset(tiny[i] = tc_escape(malloc(TINY_SIZE)), 1, TINY_SIZE);
  for (int i = 0; i < N_MID; i++) memset(mid[i] = tc_escape(malloc(MID_SIZE)), 2, MID_SIZE);
  for (int i = 0; i < N_LARGE; i++) memset(large[i] = tc_escape(malloc(LARGE_SIZE)), 3, LARGE_SIZE);
  hak_stats_get(&s1);
  check_sane(&s1, "allocated");
  const struct hak_lane_stats *t0 = &s0.lane[HAK_LANE_TINY], *t1 = &s1.lane[HAK_LANE_TINY];
  const struct hak_lane_stats *m0 = &s0.lane[HAK_LANE_MID], *m1 = &s1.lane[HAK_LANE_MID];
  const struct hak_lane_stats *l0 = &s0.lane[HAK_LANE_LARGE], *l1 = &s1.lane[HAK_LANE_LARGE];
  /* in use: exactly the blocks' sizes (nothing else allocated meanwhile) */
  CHECK(t1->in_use == t0->in_use + N_TINY * TINY_SIZE, "tiny in use %zu -> %zu", t0->in_use, t1->in_use);
  CHECK(m1->in_use == m0->in_use + N_MID * 4096, "mid in use %zu -> %zu", m0->in_use, m1->in_use);
  CHECK(l1->in_use >= l0->in_use + N_LARGE * (size_t)LARGE_SIZE, "large in use %zu -> %zu", l0->in_use, l1->in_use);
  /* current covers them: at slab granularity it counts carved blocks, some
   * of which may have been free before (so it grows by at most as much) */
  CHECK(t1->current >= t0->in_use + N_TINY * TINY_SIZE, "tiny current %zu -> %zu", t0->current, t1->current);
  CHECK(m1->current >= m0->in_use + N_MID * 4096, "mid current %zu -> %zu", m0->current, m1->current);
  CHECK(t1->allocated - t0->allocated == t1->current - t0->current + (t1->freed - t0->freed), "tiny allocated");
  CHECK(l1->current >= l0->current + N_LARGE * (size_t)LARGE_SIZE, "large current %zu -> %zu", l0->current,
        l1->current);
  CHECK(l1->allocated - l0->allocated == l1->current - l0->current, "large allocated vs current");
  CHECK(l1->allocs == l0->allocs + N_LARGE && s1.large_blocks == s0.large_blocks + N_LARGE, "large blocks %zu -> %zu",
        s0.large_blocks, s1.large_blocks);
  CHECK(s1.large_mapped >= s0.large_mapped + N_LARGE * (size_t)LARGE_SIZE, "large mapped");
  CHECK(s1.committed_bytes >= s0.committed_bytes + N_LARGE * (size_t)LARGE_SIZE, "committed %zu -> %zu",
        s0.committed_bytes, s1.committed_bytes);
  if (s1.counters) {
    unsigned ct = class_of(TINY_SIZE, &s1), cm = class_of(MID_SIZE, &s1);
    CHECK(s1.cls[ct].allocs == s0.cls[ct].allocs + N_TINY, "class %u allocs %zu -> %zu", ct, s0.cls[ct].allocs,
          s1.cls[ct].allocs);
    CHECK(s1.cls[cm].allocs == s0.cls[cm].allocs + N_MID, "class %u allocs", cm);
    CHECK(t1->allocs >= t0->allocs + N_TINY && m1->allocs >= m0->allocs + N_MID, "lane allocs");
    CHECK(s1.refills[HAK_REFILL_CARVE] > s0.refills[HAK_REFILL_CARVE], "no carve counted for new blocks");
  }

  for (int i = 0; i < N_TINY; i++) free(tiny[i]);
  for (int i = 0; i < N_MID; i++) free(mid[i]);
  for (int i = 0; i < N_LARGE; i++) free(large[i]);
  hak_stats_get(&s2);
  check_sane(&s2, "freed");
  CHECK(s2.lane[HAK_LANE_TINY].in_use == t0->in_use, "tiny in use after free: %zu, was %zu",
        s2.lane[HAK_LANE_TINY].in_use, t0->in_use);
  CHECK(s2.lane[HAK_LANE_MID].in_use == m0->in_use, "mid in use after free");
  CHECK(s2.lane[HAK_LANE_LARGE].current == l0->current, "large current after free: %zu, was %zu",
        s2.lane[HAK_LANE_LARGE].current, l0->current);
  CHECK(s2.lane[HAK_LANE_LARGE].freed >= l0->freed + N_LARGE * (size_t)LARGE_SIZE, "large freed");
  CHECK(s2.lane[HAK_LANE_LARGE].peak >= l0->current + N_LARGE * (size_t)LARGE_SIZE, "large peak");
  CHECK(s2.large_blocks == s0.large_blocks && s2.large_blocks_peak >= s0.large_blocks + N_LARGE, "large blocks");
  CHECK(s2.lane[HAK_LANE_TINY].peak >= t0->in_use + N_TINY * TINY_SIZE, "tiny peak %zu",
        s2.lane[HAK_LANE_TINY].peak);
  if (s2.counters) {
    unsigned ct = class_of(TINY_SIZE, &s2);
    CHECK(s2.cls[ct].frees_local == s1.cls[ct].frees_local + N_TINY, "class %u local frees %zu -> %zu", ct,
          s1.cls[ct].frees_local, s2.cls[ct].frees_local);
  }
  printf("  lanes: tiny in use +%d, mid +%d, large +%d blocks, all back after free\n", N_TINY * TINY_SIZE,
         N_MID * 4096, N_LARGE);
}

/* Frees by another thread: counted per class with HAKMEM_STATS. */
static void *free_all(void *arg) {
  void **v = arg;
  for (int i = 0; i < N_TINY; i++) free(v[i]);
  return NULL;
}

static void test_remote(void) {
  static void *v[N_TINY];
  static struct hak_stats s0, s1;
  hak_stats_get(&s0);
  for (int i = 0; i < N_TINY; i++) v[i] = tc_escape(malloc(TINY_SIZE));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_all, v) == 0, "pthread_create");
  pthread_join(t, NULL);
  hak_stats_get(&s1);
  check_sane(&s1, "remote frees");
  if (s1.counters) {
    unsigned ct = class_of(TINY_SIZE, &s1);
    CHECK(s1.cls[ct].frees_remote == s0.cls[ct].frees_remote + N_TINY, "remote frees %zu -> %zu",
          s0.cls[ct].frees_remote, s1.cls[ct].frees_remote);
    CHECK(s1.cls[ct].frees_local == s0.cls[ct].frees_local, "remote frees counted as local");
  }
  printf("  remote frees counted%s\n", s1.counters ? " per class" : " (totals only in this build)");
}

/* A class of its own (test_remote left blocks of TINY_SIZE's class freed by
 * another thread, which count as in use until this thread collects them). */
#define MI_SIZE 80

static void test_mallinfo(void) {
  free(tc_escape(malloc(1)));
  struct mallinfo2 a = mallinfo2();
  static void *tiny[N_TINY], *large[N_LARGE];
  for (int i = 0; i < N_TINY; i++) tiny[i] = tc_escape(malloc(MI_SIZE));
  for (int i = 0; i < N_LARGE; i++) large[i] = tc_escape(malloc(LARGE_SIZE));
  struct mallinfo2 b = mallinfo2();
  CHECK(b.uordblks == a.uordblks + N_TINY * MI_SIZE, "uordblks %zu -> %zu", a.uordblks, b.uordblks);
  CHECK(b.hblks == a.hblks + N_LARGE, "hblks %zu -> %zu", a.hblks, b.hblks);
  CHECK(b.hblkhd >= a.hblkhd + N_LARGE * (size_t)LARGE_SIZE, "hblkhd %zu -> %zu", a.hblkhd, b.hblkhd);
  CHECK(b.arena >= b.uordblks && b.fordblks == b.arena - b.uordblks, "arena %zu uord %zu ford %zu", b.arena,
        b.uordblks, b.fordblks);
  struct hak_stats s;
  hak_stats_get(&s);
  CHECK(b.uordblks == s.lane[HAK_LANE_TINY].in_use + s.lane[HAK_LANE_MID].in_use, "uordblks != slab lanes in use");
  CHECK(b.keepcost == s.cached_bytes, "keepcost %zu, cached %zu", b.keepcost, s.cached_bytes);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
  CHECK((size_t)old.uordblks == b.uordblks && (size_t)old.hblks == b.hblks && (size_t)old.arena == b.arena,
        "mallinfo disagrees with mallinfo2");

  /* malloc_stats: glibc's eight lines on stderr, with the same figures */
  char path[] = "/tmp/hakmem_malloc_stats_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  struct mallinfo2 c = mallinfo2();
  malloc_stats();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char buf[2048];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  CHECK(n > 0, "malloc_stats wrote nothing to stderr");
  buf[n] = '\0';
  size_t sys0, use0, sys1, use1, regions, mbytes;
  int got = sscanf(buf,
                   "Arena 0:\nsystem bytes     = %zu\nin use bytes     = %zu\nTotal (incl. mmap):\n"
                   "system bytes     = %zu\nin use bytes     = %zu\nmax mmap regions = %zu\nmax mmap bytes   = %zu\n",
                   &sys0, &use0, &sys1, &use1, &regions, &mbytes);
  CHECK(got == 6, "malloc_stats output not in glibc's layout (%d fields):\n%s", got, buf);
  int lines = 0;
  for (char *p = buf; *p; p++) lines += *p == '\n';
  CHECK(lines == 8, "malloc_stats printed %d lines:\n%s", lines, buf);
  CHECK(strstr(buf, "system bytes     = ") != NULL && strchr(strstr(buf, "= "), '\n') - strstr(buf, "= ") == 12,
        "values not right-aligned in 10 columns:\n%s", buf);
  CHECK(use0 == c.uordblks && sys0 == c.arena, "Arena 0 figures %zu/%zu, mallinfo2 %zu/%zu", sys0, use0, c.arena,
        c.uordblks);
  CHECK(sys1 == c.arena + c.hblkhd && use1 >= use0 + N_LARGE * (size_t)LARGE_SIZE, "Total figures:\n%s", buf);
  CHECK(regions >= N_LARGE && mbytes >= N_LARGE * (size_t)LARGE_SIZE, "max mmap figures:\n%s", buf);
  for (int i = 0; i < N_TINY; i++) free(tiny[i]);
  for (int i = 0; i < N_LARGE; i++) free(large[i]);
  struct mallinfo2 d = mallinfo2();
  CHECK(d.uordblks == a.uordblks && d.hblks == a.hblks, "after free: uordblks %zu hblks %zu", d.uordblks, d.hblks);
  printf("  mallinfo2/mallinfo/malloc_stats agree with hak_stats_get\n");
}

/* hak_stats_print's report, into buf. */
static void report_text(char *buf, size_t cap) {
  FILE *f = tmpfile();
  CHECK(f != NULL, "tmpfile");
  hak_stats_print(f);
  rewind(f);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static void test_print(void) {
  char buf[32768];
  report_text(buf, sizeof buf);
  static const char *const want[] = {"hakmem statistics (pid ", "\nlane ", "\ndirect (<=1 KiB) ", "\npool (<=256 KiB) ",
                                     "\nlarge ", "\ntotal ", "\nlarge blocks: ", "\nmemory: ", "\nos calls: mmap "};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    CHECK(strstr(buf, want[i]) != NULL, "hak_stats_print lacks '%s':\n%s", want[i], buf);
  struct hak_stats s;
  hak_stats_get(&s);
  if (s.counters) {
    CHECK(strstr(buf, "\nrefills: carve ") != NULL && strstr(buf, "\nclass   size") != NULL,
          "a counters build prints refills and classes:\n%s", buf);
  } else {
    CHECK(strstr(buf, "refills:") == NULL, "the default build has no refill counts to print:\n%s", buf);
  }
  printf("  hak_stats_print: every section present\n");
}

/* The report's "large spans in use" figure, in MiB. */
static size_t spans_in_use_mib(void) {
  char buf[32768];
  report_text(buf, sizeof buf);
  const char *at = strstr(buf, "large spans in use ");
  size_t mib = 0;
  CHECK(at != NULL && sscanf(at + 19, "%zu", &mib) == 1, "no resident line:\n%s", buf);
  return mib;
}

/* Pages the program only read are not resident (they map the kernel's zero
 * page, which mincore counts); pages it wrote are. */
static void test_resident(void) {
  const size_t len = 16 * MiB, page = (size_t)sysconf(_SC_PAGESIZE);
  malloc_trim(0); /* no cached span with old contents: the block is fresh memory */
  size_t before = spans_in_use_mib();
  volatile unsigned char *p = tc_escape(malloc(len));
  CHECK(p != NULL, "malloc(16 MiB)");
  unsigned sum = 0;
  for (size_t i = 0; i < len; i += page) sum += p[i];
  CHECK(sum == 0, "a fresh span reads zeros");
  size_t read_only = spans_in_use_mib();
  for (size_t i = 0; i < len; i += page) p[i] = 1;
  size_t written = spans_in_use_mib();
  free((void *)p);
  CHECK(read_only <= before + 1, "16 MiB only read count as %zu MiB resident (%zu before)", read_only - before,
        before);
  CHECK(written >= before + 15, "16 MiB written count as %zu MiB resident (%zu before)", written - before, before);
  printf("  resident: a span only read %zu MiB, written %zu MiB\n", read_only - before, written - before);
}

/* ---- the report at exit, in a child ---------------------------------- */

static void *spin(void *arg) {
  (void)arg;
  for (;;) free(tc_escape(malloc(48)));
  return NULL;
}

static void *keep[100];
static int child_report(void) {
  for (int i = 0; i < 100; i++) keep[i] = tc_escape(malloc(100));
  keep[0] = tc_escape(malloc(3 * MiB)); /* one large block live at exit */
  pthread_t t;
  pthread_create(&t, NULL, spin, NULL); /* still allocating when the report runs */
  usleep(20000);
  printf("child done\n");
  return 0;
}

static void run_report_child(const char *stats_env, char *err, size_t cap) {
  int pe[2];
  CHECK(pipe(pe) == 0, "pipe");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(pe[1], 2);
    close(pe[0]);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    char *env[] = {(char *)stats_env, NULL};
    char *argv[] = {(char *)"test_stats", (char *)"child-report", NULL};
    execve("/proc/self/exe", argv, stats_env != NULL ? env : env + 1);
    _exit(127);
  }
  close(pe[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(pe[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
  err[n] = '\0';
  close(pe[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child with %s: status %#x, stderr:\n%s", stats_env ? stats_env : "-",
        st, err);
}

static void test_report_at_exit(void) {
  static char err[65536];
  run_report_child("HAKMEM_STATS=1", err, sizeof err);
  CHECK(strncmp(err, "hakmem statistics (pid ", 23) == 0, "no report at exit:\n%s", err);
  CHECK(strstr(err, "\nlarge blocks: 1 live (peak 1)") != NULL, "the live 3 MiB block is not reported:\n%s", err);
  char *tiny = strstr(err, "\ndirect (<=1 KiB) ");
  size_t alloc_b = 0, freed_b = 0, cur_b = 0, peak_b = 0, inuse_b = 0;
  CHECK(tiny != NULL && sscanf(tiny + strlen("\ndirect (<=1 KiB) "), "%zu %zu %zu %zu %zu", &alloc_b, &freed_b, &cur_b, &peak_b, &inuse_b) == 5,
        "tiny line unreadable:\n%s", err);
  CHECK(inuse_b >= 99 * 112 && cur_b >= inuse_b && peak_b >= cur_b, "tiny figures at exit: %zu %zu %zu %zu %zu",
        alloc_b, freed_b, cur_b, peak_b, inuse_b);
  run_report_child(NULL, err, sizeof err);
  CHECK(err[0] == '\0', "a report without HAKMEM_STATS:\n%s", err);
  run_report_child("HAKMEM_STATS=0", err, sizeof err);
  CHECK(err[0] == '\0', "a report with HAKMEM_STATS=0:\n%s", err);
  printf("  HAKMEM_STATS=1: report at exit with a thread still allocating\n");
}

int main(int argc, char **argv) {
  tc_test_name = "stats";
  if (argc > 1 && strcmp(argv[1], "child-report") == 0) return child_report();
  if (!HAKMEM_SPECIFIC) return 77;
  struct hak_stats s;
  hak_stats_get(&s);
  printf("stats: %s build\n", s.counters ? "counters (-DHAKMEM_FAST_COUNTERS)" : "default");
#ifdef EXPECT_COUNTERS
  CHECK(s.counters == EXPECT_COUNTERS, "counters flag %d, expected %d", s.counters, EXPECT_COUNTERS);
#endif
  test_lanes();
  test_remote();
  test_mallinfo();
  test_print();
  test_resident();
  test_report_at_exit();
  printf("stats: OK\n");
  return 0;
}
