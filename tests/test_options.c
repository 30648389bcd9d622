/* Options (src/options.def, src/options.c): a bad value prints exactly one
 * warning line and keeps the default; an empty value is ignored silently;
 * HAKMEM_VERBOSE=1 prints the effective configuration at start-up;
 * hak_options_write lists every option. Each case runs this program again
 * (execve of /proc/self/exe) with the environment under test, capturing
 * its stderr. hakmem-specific. */
#define _GNU_SOURCE
#include "test_common.h"

#include <malloc.h>
#include <sys/wait.h>

#include "hakmem.h"

/* Child: allocate (which reads the options), then report on stdout whether
 * hakmem served the block: hakmem's class for 100 bytes is 112 bytes. */
static int child(void) {
  alarm(20); /* an allocation inside start-up would spin forever */
  void *p = malloc(100);
  size_t u = malloc_usable_size(p);
  free(p);
  printf("%s\n", u == 112 ? "hakmem" : "libc");
  return 0;
}

struct run {
  char out[4096];
  char err[16384];
  int status;
};

static void read_all(int fd, char *buf, size_t cap) {
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  buf[n] = '\0';
}

/* Run the child with exactly the HAKMEM_* variables given (NULL-ended). */
static void run_child(struct run *r, const char *const *vars) {
  int out[2], err[2];
  CHECK(pipe(out) == 0 && pipe(err) == 0, "pipe");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(err[0]);
    char *env[16];
    int n = 0;
    for (; vars[n] != NULL && n < 15; n++) env[n] = (char *)vars[n];
    env[n] = NULL;
    char *argv[] = {(char *)"test_options", (char *)"child", NULL};
    execve("/proc/self/exe", argv, env);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  /* stderr stays small here; read it first, then stdout */
  read_all(err[0], r->err, sizeof r->err);
  read_all(out[0], r->out, sizeof r->out);
  close(out[0]);
  close(err[0]);
  CHECK(waitpid(pid, &r->status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "child status %#x, stderr: %s", r->status, r->err);
}

static void expect_bad(const char *var, const char *expected_err, const char *served_by) {
  const char *vars[] = {var, NULL};
  struct run r;
  run_child(&r, vars);
  CHECK(strcmp(r.err, expected_err) == 0, "%s: stderr was\n'%s'\nexpected\n'%s'", var, r.err, expected_err);
  CHECK(strcmp(r.out, served_by) == 0, "%s: the child reported '%s', expected '%s' (the default)", var, r.out,
        served_by);
  printf("  %-36s -> one warning line, default kept\n", var);
}

/* The option names, from the library's own table. */
static int option_names(char names[][64], int cap) {
  FILE *f = tmpfile();
  CHECK(f != NULL, "tmpfile");
  hak_options_write(fileno(f));
  rewind(f);
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    CHECK(n < cap, "too many options");
    int tabs = 0;
    for (char *c = line; *c; c++) tabs += *c == '\t';
    CHECK(tabs == 3, "hak_options_write line without 4 tab-separated fields: %s", line);
    char *t1 = strchr(line, '\t'), *t2 = strchr(t1 + 1, '\t'), *t3 = strchr(t2 + 1, '\t');
    CHECK(strncmp(line, "HAKMEM_", 7) == 0, "option name %s", line);
    /* nothing set in this test's environment: current == default */
    CHECK(t2 - t1 == t3 - t2 && strncmp(t1, t2, (size_t)(t2 - t1)) == 0, "default != current: %s", line);
    snprintf(names[n], 64, "%.*s", (int)(t1 - line), line);
    n++;
  }
  fclose(f);
  return n;
}

int main(int argc, char **argv) {
  tc_test_name = "options";
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child();
  if (!HAKMEM_SPECIFIC) return 77;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "HAKMEM_", 7) == 0 && strncmp(*e, "HAKMEM_TEST_", 12) != 0)
      FAILF("run without HAKMEM_* options in the environment (found %s)", *e);

  /* the defaults: no output, hakmem serves */
  {
    const char *vars[] = {NULL};
    struct run r;
    run_child(&r, vars);
    CHECK(r.err[0] == '\0' && strcmp(r.out, "hakmem\n") == 0, "plain run: out '%s' err '%s'", r.out, r.err);
  }
  /* bad values: one line each, the default kept (hakmem still serves) */
  expect_bad("HAKMEM_FORCE_LIBC_ALLOC=yes",
             "hakmem: warning: ignoring HAKMEM_FORCE_LIBC_ALLOC=yes (must be 0 or 1); using the default\n",
             "hakmem\n");
  expect_bad("HAKMEM_FORCE_LIBC_ALLOC=2",
             "hakmem: warning: ignoring HAKMEM_FORCE_LIBC_ALLOC=2 (must be 0 or 1); using the default\n",
             "hakmem\n");
  expect_bad("HAKMEM_FORCE_LIBC_ALLOC=1x",
             "hakmem: warning: ignoring HAKMEM_FORCE_LIBC_ALLOC=1x (must be 0 or 1); using the default\n",
             "hakmem\n");
  expect_bad("HAKMEM_STATS=on", "hakmem: warning: ignoring HAKMEM_STATS=on (must be one of 0|1|json); using the default\n",
             "hakmem\n");
  /* an empty value is no value: silently the default */
  expect_bad("HAKMEM_FORCE_LIBC_ALLOC=", "", "hakmem\n");
  /* a good value is taken (the contrast that makes the checks above mean something) */
  expect_bad("HAKMEM_FORCE_LIBC_ALLOC=1", "", "libc\n");

  /* HAKMEM_VERBOSE=1: a header, then every option once with its value */
  char names[64][64];
  int n = option_names(names, 64);
  CHECK(n >= 3, "only %d options listed", n);
  {
    const char *vars[] = {"HAKMEM_VERBOSE=1", "HAKMEM_FORCE_LIBC_ALLOC=1", "HAKMEM_STATS=bad", NULL};
    struct run r;
    run_child(&r, vars);
    const char *warn = "hakmem: warning: ignoring HAKMEM_STATS=bad (must be one of 0|1|json); using the default\n";
    CHECK(strstr(r.err, warn) != NULL, "no warning for HAKMEM_STATS=bad in:\n%s", r.err);
    CHECK(strstr(r.err, "hakmem: configuration (statistics counters ") != NULL, "no header in:\n%s", r.err);
    CHECK(strstr(r.err, "\nhakmem:   HAKMEM_VERBOSE=1 (from the environment)\n") != NULL, "VERBOSE line:\n%s", r.err);
    CHECK(strstr(r.err, "\nhakmem:   HAKMEM_FORCE_LIBC_ALLOC=1 (from the environment)\n") != NULL,
          "FORCE_LIBC line:\n%s", r.err);
    CHECK(strstr(r.err, "\nhakmem:   HAKMEM_STATS=0\n") != NULL, "a bad value shows its default:\n%s", r.err);
    int lines = 0;
    for (char *c = r.err; *c; c++) lines += *c == '\n';
    CHECK(lines == n + 2, "%d lines for %d options (+ header + warning):\n%s", lines, n, r.err);
    for (int i = 0; i < n; i++) {
      char want[96];
      snprintf(want, sizeof want, "\nhakmem:   %s=", names[i]);
      char *at = strstr(r.err, want);
      CHECK(at != NULL && strstr(at + 1, want) == NULL, "%s not listed exactly once:\n%s", names[i], r.err);
    }
    CHECK(strcmp(r.out, "libc\n") == 0, "HAKMEM_FORCE_LIBC_ALLOC=1 not applied: %s", r.out);
    printf("  HAKMEM_VERBOSE=1                     -> %d options printed at start-up\n", n);
  }
  {
    /* a CHOICE shows its name: HAKMEM_STATS=json (0|1|json) */
    const char *vars[] = {"HAKMEM_VERBOSE=1", "HAKMEM_STATS=json", NULL};
    struct run r;
    run_child(&r, vars);
    CHECK(strstr(r.err, "\nhakmem:   HAKMEM_STATS=json (from the environment)\n") != NULL, "STATS=json line:\n%s",
          r.err);
    CHECK(strstr(r.err, "warning") == NULL, "HAKMEM_STATS=json refused:\n%s", r.err);
  }
  {
    /* an on|off choice takes 1 and 0, as the boolean it replaced did */
    const char *vars[] = {"HAKMEM_VERBOSE=1", "HAKMEM_BG_PURGE=1", NULL};
    struct run r;
    run_child(&r, vars);
    CHECK(strstr(r.err, "\nhakmem:   HAKMEM_BG_PURGE=on (from the environment)\n") != NULL, "BG_PURGE=1 line:\n%s",
          r.err);
    CHECK(strstr(r.err, "warning") == NULL, "HAKMEM_BG_PURGE=1 refused:\n%s", r.err);
    const char *vars0[] = {"HAKMEM_VERBOSE=1", "HAKMEM_BG_PURGE=0", NULL};
    run_child(&r, vars0);
    CHECK(strstr(r.err, "\nhakmem:   HAKMEM_BG_PURGE=off (from the environment)\n") != NULL, "BG_PURGE=0 line:\n%s",
          r.err);
  }
  printf("options: OK\n");
  return 0;
}
