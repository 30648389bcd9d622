/* libc functions that allocate internally, with hakmem linked statically:
 * the memory they return is freed with free() (and vice versa: buffers we
 * allocate are grown by libc).  The tasks run on the main thread and then
 * on 3 threads concurrently. */
#define _GNU_SOURCE
#include "test_common.h"

#include <dirent.h>
#include <glob.h>
#include <iconv.h>
#include <locale.h>
#include <malloc.h>
#include <netdb.h>
#include <pthread.h>
#include <pwd.h>
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "hakmem.h"

static char tmpdir[256];

static void t_strdup(unsigned id) {
  char buf[5001];
  for (int i = 0; i < 5000; i++) {
    size_t n = (size_t)((i * 37 + id) % 5000);
    memset(buf, 'a' + i % 26, n);
    buf[n] = 0;
    char *s = strdup(buf);
    CHECK(s && strlen(s) == n && !memcmp(s, buf, n), "strdup(%zu chars)", n);
    char *t = strndup(buf, n / 2);
    CHECK(t && strlen(t) == n / 2, "strndup");
    if (HAKMEM_SPECIFIC && n + 1 <= 256)
      CHECK(hak_malloc_usable_size(s) == ((n + 1 + 15) & ~(size_t)15),
            "strdup result (%zu bytes) has usable size %zu: libc's internal malloc is not hakmem", n + 1,
            hak_malloc_usable_size(s));
    free(s);
    free(t);
  }
}

static void t_getline(unsigned id) {
  char path[300];
  snprintf(path, sizeof path, "%s/lines%u.txt", tmpdir, id);
  FILE *f = fopen(path, "w");
  CHECK(f, "fopen(%s): %s", path, strerror(errno));
  for (int i = 0; i < 300; i++) {
    size_t len = (size_t)(i * i * 7 % 100000);
    for (size_t k = 0; k < len; k++) fputc('a' + (int)((k + (size_t)i) % 26), f);
    fputc('\n', f);
  }
  CHECK(fclose(f) == 0, "fclose");
  f = fopen(path, "r");
  CHECK(f, "fopen r");
  char *line = NULL;
  size_t cap = 0;
  ssize_t r;
  int i = 0;
  while ((r = getline(&line, &cap, f)) >= 0) {
    size_t len = (size_t)(i * i * 7 % 100000);
    CHECK((size_t)r == len + 1, "getline line %d length %zd, expected %zu", i, r, len + 1);
    for (size_t k = 0; k < len; k++)
      if (line[k] != 'a' + (int)((k + (size_t)i) % 26)) FAILF("getline line %d byte %zu wrong", i, k);
    CHECK(malloc_usable_size(line) >= cap, "getline capacity %zu > usable %zu", cap, malloc_usable_size(line));
    i++;
  }
  CHECK(i == 300, "read %d lines", i);
  free(line);
  /* getdelim with a buffer of our own that libc must realloc */
  rewind(f);
  cap = 8;
  line = malloc(cap);
  CHECK(line, "malloc");
  r = getdelim(&line, &cap, 'z', f);
  CHECK(r > 0, "getdelim");
  free(line);
  fclose(f);
  unlink(path);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}
static void t_qsort(unsigned id) {
  size_t n = 200000;
  uint64_t *v = malloc(n * sizeof *v);
  CHECK(v, "malloc");
  for (size_t i = 0; i < n; i++) v[i] = tc_mix64(i + id * n);
  qsort(v, n, sizeof *v, cmp_u64);
  for (size_t i = 0; i + 1 < n; i++) CHECK(v[i] <= v[i + 1], "qsort result not sorted at %zu", i);
  free(v);
}

static void t_fopen(unsigned id) {
  char path[300];
  for (int i = 0; i < 300; i++) {
    snprintf(path, sizeof path, "%s/f%u_%d", tmpdir, id, i % 7);
    FILE *f = fopen(path, "w+");
    CHECK(f, "fopen: %s", strerror(errno));
    if (i % 3 == 0) {
      char *vb = malloc(8192);
      CHECK(vb, "malloc");
      setvbuf(f, vb, _IOFBF, 8192);
      fprintf(f, "%d %s\n", i, path);
      fclose(f);
      free(vb);
    } else {
      fprintf(f, "%d %s %0*d\n", i, path, 3000, 0);
      rewind(f);
      int got = -1;
      CHECK(fscanf(f, "%d", &got) == 1 && got == i, "fscanf read back %d", got);
      fclose(f);
    }
  }
  for (int i = 0; i < 7; i++) {
    snprintf(path, sizeof path, "%s/f%u_%d", tmpdir, id, i);
    unlink(path);
  }
}

static void t_getaddrinfo(unsigned id) {
  (void)id;
  for (int i = 0; i < 20; i++) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo("localhost", "80", &hints, &res);
    if (rc != 0) {
      /* tolerated (no resolver configuration), but the error string must work */
      const char *e = gai_strerror(rc);
      CHECK(e && *e, "gai_strerror");
      continue;
    }
    int n = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) n++;
    CHECK(n > 0, "getaddrinfo returned an empty list");
    freeaddrinfo(res);
  }
  char host[256];
  CHECK(gethostname(host, sizeof host) == 0, "gethostname");
}

static void t_asprintf(unsigned id) {
  for (int i = 0; i < 200; i++) {
    char *s = NULL;
    int width = i * 500;
    int n = asprintf(&s, "%u:%*d:%s", id, width, i, "tail");
    CHECK(n > 0 && s, "asprintf");
    CHECK((size_t)n == strlen(s), "asprintf length");
    CHECK(!strcmp(s + n - 4, "tail"), "asprintf contents");
    free(s);
  }
}

static void t_memstream(unsigned id) {
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  CHECK(f, "open_memstream");
  for (int i = 0; i < 50000; i++) fprintf(f, "%08d", i + (int)id);
  CHECK(fclose(f) == 0, "fclose(memstream)");
  CHECK(size == 400000, "open_memstream size %zu", size);
  for (int i = 0; i < 50000; i += 997) {
    char want[9];
    snprintf(want, sizeof want, "%08d", i + (int)id);
    CHECK(!memcmp(buf + i * 8, want, 8), "open_memstream contents at %d", i);
  }
  free(buf);
  char mbuf[100];
  FILE *m = fmemopen(mbuf, sizeof mbuf, "w");
  CHECK(m, "fmemopen");
  fputs("hello", m);
  fclose(m);
  CHECK(!strcmp(mbuf, "hello"), "fmemopen");
}

static void t_locale(unsigned id) {
  (void)id;
  for (int i = 0; i < 50; i++) {
    locale_t l = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
    if (!l) l = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    CHECK(l, "newlocale");
    locale_t d = duplocale(l);
    CHECK(d, "duplocale");
    locale_t old = uselocale(d);
    char b[64];
    snprintf(b, sizeof b, "%.3f", 3.25);
    CHECK(!strcmp(b, "3.250"), "snprintf under locale: %s", b);
    uselocale(old);
    freelocale(d);
    freelocale(l);
  }
}

static void t_regex(unsigned id) {
  (void)id;
  const char *pats[] = {"^([a-z]+)@([a-z]+)\\.(com|org)$", "(a|b)*c{2,5}[[:digit:]]+", "x(y(z(w)?)?)?$",
                        "[[:alpha:]_][[:alnum:]_]*"};
  for (int i = 0; i < 300; i++) {
    regex_t re;
    int rc = regcomp(&re, pats[i % 4], REG_EXTENDED);
    CHECK(rc == 0, "regcomp(%s) = %d", pats[i % 4], rc);
    regmatch_t m[5];
    const char *subj[] = {"alice@example.org", "ababcc12345", "wxyzw", "_ident9 rest"};
    rc = regexec(&re, subj[i % 4], 5, m, 0);
    CHECK(rc == 0, "regexec(%s, %s) = %d", pats[i % 4], subj[i % 4], rc);
    regfree(&re);
  }
  regex_t bad;
  CHECK(regcomp(&bad, "a(b", REG_EXTENDED) != 0, "regcomp accepted a broken pattern");
}

static int only_s(const struct dirent *d) { return d->d_name[0] == 's'; }
static void t_scandir(unsigned id) {
  char path[300];
  for (int i = 0; i < 100; i++) {
    snprintf(path, sizeof path, "%s/s%u_%03d", tmpdir, id, i);
    FILE *f = fopen(path, "w");
    CHECK(f, "create %s", path);
    fclose(f);
  }
  for (int round = 0; round < 20; round++) {
    struct dirent **list = NULL;
    int n = scandir(tmpdir, &list, only_s, alphasort);
    CHECK(n >= 100, "scandir found %d entries", n);
    int mine = 0;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "s%u_", id);
    for (int i = 0; i < n; i++) {
      if (!strncmp(list[i]->d_name, prefix, strlen(prefix))) mine++;
      if (i > 0) CHECK(strcmp(list[i - 1]->d_name, list[i]->d_name) <= 0, "alphasort order");
    }
    for (int i = 0; i < n; i++) free(list[i]); /* not inside the loop above: it reads list[i - 1] */
    free(list);
    CHECK(mine == 100, "scandir: %d of my 100 files", mine);
  }
  glob_t g;
  snprintf(path, sizeof path, "%s/s%u_0*", tmpdir, id);
  CHECK(glob(path, 0, NULL, &g) == 0 && g.gl_pathc == 100, "glob");
  globfree(&g);
  for (int i = 0; i < 100; i++) {
    snprintf(path, sizeof path, "%s/s%u_%03d", tmpdir, id, i);
    unlink(path);
  }
  char *rp = realpath(tmpdir, NULL);
  CHECK(rp, "realpath(NULL)");
  free(rp);
  char *cwd = getcwd(NULL, 0);
  CHECK(cwd, "getcwd(NULL, 0)");
  free(cwd);
}

static void t_misc(unsigned id) {
  (void)id;
  struct passwd *pw = getpwuid(0);
  CHECK(pw && !strcmp(pw->pw_name, "root"), "getpwuid(0)");
  iconv_t cd = iconv_open("UTF-16LE", "UTF-8");
  CHECK(cd != (iconv_t)-1, "iconv_open: %s", strerror(errno));
  char in[] = "h\xc3\xa9llo", out[64];
  char *ip = in, *op = out;
  size_t il = strlen(in), ol = sizeof out;
  CHECK(iconv(cd, &ip, &il, &op, &ol) != (size_t)-1, "iconv");
  CHECK(sizeof out - ol == 10, "iconv produced %zu bytes", sizeof out - ol);
  iconv_close(cd);
  /* very long numbers make strtod allocate */
  char *num = malloc(20002);
  CHECK(num, "malloc");
  num[0] = '1';
  num[1] = '.';
  memset(num + 2, '3', 19999);
  num[20001] = 0;
  double d = strtod(num, NULL);
  CHECK(d > 1.33 && d < 1.34, "strtod");
  free(num);
  FILE *dn = fopen("/dev/null", "w");
  CHECK(dn, "fopen /dev/null");
  CHECK(fprintf(dn, "%100000d|%.50000f", 1, 1.0) > 150000, "fprintf with a huge width");
  fclose(dn);
}

struct task {
  const char *name;
  void (*fn)(unsigned);
};
static const struct task tasks[] = {
    {"strdup", t_strdup},       {"getline", t_getline},   {"qsort", t_qsort},         {"fopen", t_fopen},
    {"getaddrinfo", t_getaddrinfo}, {"asprintf", t_asprintf}, {"open_memstream", t_memstream},
    {"locale", t_locale},       {"regex", t_regex},       {"scandir", t_scandir},     {"misc", t_misc},
};
#define NTASK (sizeof tasks / sizeof tasks[0])

static void *worker(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  for (int rep = 0; rep < 2; rep++)
    for (size_t i = 0; i < NTASK; i++) tasks[(i + id) % NTASK].fn(id);
  return NULL;
}

static void rm_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (d) {
    struct dirent *e;
    char p[600];
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(tmpdir);
}

int main(void) {
  tc_test_name = "libc_interop";
  const char *td = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/hakmem_libc_XXXXXX", td && *td ? td : "/tmp");
  CHECK(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
  /* setlocale is not thread-safe: main thread only */
  for (int i = 0; i < 20; i++) {
    CHECK(setlocale(LC_ALL, "C"), "setlocale C");
    if (!setlocale(LC_ALL, "C.UTF-8")) setlocale(LC_ALL, "");
    char *saved = strdup(setlocale(LC_ALL, NULL));
    CHECK(saved, "strdup");
    setlocale(LC_ALL, "C");
    setlocale(LC_ALL, saved);
    free(saved);
  }
  setlocale(LC_ALL, "C");
  for (size_t i = 0; i < NTASK; i++) {
    printf("libc_interop: %s\n", tasks[i].name);
    fflush(stdout);
    tasks[i].fn(0);
  }
  printf("libc_interop: 3 threads\n");
  fflush(stdout);
  pthread_t t[3];
  for (unsigned i = 0; i < 3; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0, "pthread_create");
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  rm_tmpdir();
  printf("libc_interop: ok\n");
  return 0;
}
