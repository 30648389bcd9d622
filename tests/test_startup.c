/* Start-up and shut-down paths: allocation from .preinit_array, from
 * constructors (with priorities) and a thread started in a constructor,
 * from atexit handlers and destructors; dlopen/dlsym of libm and of a
 * module of our own that allocates in its constructor and passes memory
 * across the module boundary in both directions.
 *
 *   test_startup MODULE_PATH
 * re-runs itself as a child (so the exit path can be checked: the child's
 * last destructor prints a marker) and asserts status 0 and the marker. */
#define _GNU_SOURCE
#include "test_common.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "hakmem.h"

#define NBLK 64
static char *preinit_block;
static char *ctor101[NBLK];
static char *ctor_default[NBLK];
static char *thread_block;
static int atexit_ran;

static size_t bsz(int i) { return (size_t)(i * 61 % 2500) + 1 + (i == 7 ? 300000 : 0); }

static void preinit_fn(int argc, char **argv, char **envp) {
  (void)argc, (void)argv, (void)envp;
  preinit_block = malloc(777);
  if (!preinit_block) FAILF("malloc in .preinit_array failed");
  tc_fill(preinit_block, 777, 777);
  void *t = calloc(10, 10);
  if (!t) FAILF("calloc in .preinit_array failed");
  free(t);
}
__attribute__((section(".preinit_array"), used)) static void (*preinit_ptr)(int, char **, char **) = preinit_fn;

__attribute__((constructor(101))) static void ctor_first(void) {
  for (int i = 0; i < NBLK; i++) {
    ctor101[i] = malloc(bsz(i));
    if (!ctor101[i]) FAILF("malloc in constructor(101) failed");
    tc_fill(ctor101[i], bsz(i), 101000u + (unsigned)i);
  }
  char *p = realloc(NULL, 10);
  p = realloc(p, 100000);
  if (!p) FAILF("realloc in constructor");
  free(p);
}

static void *ctor_thread(void *arg) {
  (void)arg;
  char *p = malloc(4321);
  if (!p) FAILF("malloc in a thread started by a constructor");
  tc_fill(p, 4321, 4321);
  return p;
}

static void atexit_handler(void);
__attribute__((constructor)) static void ctor_default_fn(void) {
  for (int i = 0; i < NBLK; i++) {
    if (tc_verify(ctor101[i], bsz(i), 101000u + (unsigned)i) != (size_t)-1)
      FAILF("constructor(101) block %d corrupted by the time the default constructor ran", i);
    ctor_default[i] = (i & 1) ? calloc(1, bsz(i)) : memalign(64, bsz(i));
    if (!ctor_default[i]) FAILF("allocation in constructor failed");
    tc_fill(ctor_default[i], bsz(i), 202000u + (unsigned)i);
  }
  pthread_t t;
  if (pthread_create(&t, NULL, ctor_thread, NULL)) FAILF("pthread_create in constructor");
  void *r;
  pthread_join(t, &r);
  thread_block = r;
  if (atexit(atexit_handler)) FAILF("atexit in constructor");
}

static void check_ctor_blocks(const char *when) {
  if (tc_verify(preinit_block, 777, 777) != (size_t)-1) FAILF("preinit block corrupted (%s)", when);
  for (int i = 0; i < NBLK; i++) {
    if (tc_verify(ctor101[i], bsz(i), 101000u + (unsigned)i) != (size_t)-1)
      FAILF("constructor(101) block %d corrupted (%s)", i, when);
    if (tc_verify(ctor_default[i], bsz(i), 202000u + (unsigned)i) != (size_t)-1)
      FAILF("constructor block %d corrupted (%s)", i, when);
  }
  if (tc_verify(thread_block, 4321, 4321) != (size_t)-1) FAILF("constructor thread's block corrupted (%s)", when);
}

static void atexit_handler(void) {
  check_ctor_blocks("in atexit handler");
  for (int i = 0; i < NBLK; i += 2) {
    free(ctor_default[i]);
    ctor_default[i] = malloc(bsz(i));
    if (!ctor_default[i]) FAILF("malloc in atexit handler");
    tc_fill(ctor_default[i], bsz(i), 202000u + (unsigned)i);
  }
  atexit_ran++;
}

static _Atomic int many_ran;
static int expect_many;
static void many_handler(void) {
  /* registered 100 times: glibc allocates atexit blocks beyond the first 32 */
  void *p = malloc(100);
  if (!p) FAILF("malloc in atexit handler");
  free(p);
  many_ran++;
}

__attribute__((destructor(101))) static void dtor_last(void) {
  /* destructors with priority 101 run last */
  check_ctor_blocks("in the last destructor");
  for (int i = 0; i < NBLK; i++) {
    free(ctor101[i]);
    free(ctor_default[i]);
  }
  free(thread_block);
  free(preinit_block);
  char *s = NULL;
  if (asprintf(&s, "startup: exit path ok (atexit %d, many %d)\n", atexit_ran, (int)many_ran) < 0) FAILF("asprintf");
  if (atexit_ran != 1 || many_ran != expect_many) FAILF("atexit handlers did not all run: %d / %d", atexit_ran, (int)many_ran);
  if (write(1, s, strlen(s)) < 0) _exit(4);
  free(s);
}

static int child(const char *modpath) {
  tc_test_name = "startup(child)";
  check_ctor_blocks("in main");
  if (HAKMEM_SPECIFIC) {
    CHECK(hak_malloc_usable_size(ctor101[0]) == ((bsz(0) + 15) & ~(size_t)15),
          "constructor(101) block not from hakmem (usable %zu)", hak_malloc_usable_size(ctor101[0]));
    CHECK(hak_malloc_usable_size(preinit_block) >= 777 && hak_malloc_usable_size(preinit_block) < 777 + 777 / 8 + 16,
          "preinit block usable size %zu", hak_malloc_usable_size(preinit_block));
  }
  expect_many = 100;
  for (int i = 0; i < 100; i++)
    if (atexit(many_handler)) FAILF("atexit #%d failed", i);

  /* libm */
  void *m = dlopen("libm.so.6", RTLD_NOW);
  CHECK(m, "dlopen(libm.so.6): %s", dlerror());
  double (*cosf_)(double) = (double (*)(double))dlsym(m, "cos");
  CHECK(cosf_ && cosf_(0.0) == 1.0, "dlsym(cos)");
  /* a failing dlopen allocates an error string */
  for (int i = 0; i < 50; i++) {
    void *bad = dlopen("/nonexistent/libnothing.so", RTLD_NOW);
    CHECK(!bad, "dlopen of a missing library succeeded");
    const char *e = dlerror();
    CHECK(e && strstr(e, "libnothing"), "dlerror: %s", e ? e : "(null)");
  }
  /* our module, loaded and unloaded several times */
  for (int round = 0; round < 20; round++) {
    void *h = dlopen(modpath, RTLD_NOW | (round & 1 ? RTLD_GLOBAL : RTLD_LOCAL));
    CHECK(h, "dlopen(%s): %s", modpath, dlerror());
    int (*check)(void) = (int (*)(void))dlsym(h, "mod_check_ctor");
    char *(*mdup)(const char *) = (char *(*)(const char *))dlsym(h, "mod_strdup");
    int (*mrf)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "mod_realloc_free");
    CHECK(check && mdup && mrf, "dlsym in module: %s", dlerror());
    CHECK(check(), "module constructor's block missing or corrupted");
    char *s = mdup("0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789");
    CHECK(s && strlen(s) == 100, "mod_strdup");
    if (HAKMEM_SPECIFIC)
      CHECK(hak_malloc_usable_size(s) == 112,
            "memory allocated inside a dlopen'ed module does not come from hakmem (usable %zu)",
            hak_malloc_usable_size(s));
    s = realloc(s, 5000);
    CHECK(s, "realloc of module memory");
    free(s);
    size_t n = 3000 + (size_t)round * 1000;
    char *p = malloc(n);
    CHECK(p, "malloc");
    for (size_t i = 0; i < n; i++) p[i] = (char)(i * 7);
    CHECK(mrf(p, n), "module could not realloc/free our block");
    CHECK(dlclose(h) == 0, "dlclose: %s", dlerror());
  }
  dlclose(m);
  printf("startup: main done\n");
  return 0;
}

int main(int argc, char **argv) {
  tc_test_name = "startup";
  if (argc > 2 && !strcmp(argv[1], "--child")) return child(argv[2]);
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODULE\n", argv[0]);
    return 2;
  }
  /* The parent ran the constructors too. */
  check_ctor_blocks("in parent main");
  int pfd[2];
  CHECK(pipe(pfd) == 0, "pipe");
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(pfd[1], 1);
    close(pfd[0]);
    close(pfd[1]);
    execl("/proc/self/exe", argv[0], "--child", argv[1], (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  char out[4096];
  size_t got = 0;
  ssize_t r;
  while (got + 1 < sizeof out && (r = read(pfd[0], out + got, sizeof out - 1 - got)) > 0) got += (size_t)r;
  out[got] = 0;
  close(pfd[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  fputs(out, stdout);
  CHECK(!WIFSIGNALED(st), "child killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  CHECK(WEXITSTATUS(st) == 0, "child exited with %d", WEXITSTATUS(st));
  CHECK(strstr(out, "startup: main done"), "child did not finish main");
  CHECK(strstr(out, "startup: exit path ok"), "child's exit path (atexit handlers, destructors) did not complete");
  printf("startup: ok\n");
  return 0;
}
