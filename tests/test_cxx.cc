// C++ allocation with hakmem_static linked: operator new/delete in every form
// (plain, array, nothrow, sized, aligned incl. 64, 4096, 1 MiB), bad_alloc on
// absurd sizes, nothrow returning nullptr, new_handler, STL / iostream /
// exceptions / threads, static objects.
//   test_cxx        all of the above
//   test_cxx oom    under RLIMIT_AS: new throws bad_alloc, nothrow new
//                   returns nullptr, the heap is usable afterwards
#include "test_common.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hakmem.h"

// ---- a static object that allocates before main and frees after it
static std::map<std::string, std::vector<int>> g_static_map = [] {
  std::map<std::string, std::vector<int>> m;
  for (int i = 0; i < 500; i++) m["key" + std::to_string(i)] = std::vector<int>(static_cast<size_t>(i), i);
  return m;
}();
static const std::string g_static_str(5000, 'q');

static void check_static_objects() {
  CHECK(g_static_map.size() == 500, "static map size %zu", g_static_map.size());
  for (int i = 0; i < 500; i += 7) {
    auto it = g_static_map.find("key" + std::to_string(i));
    CHECK(it != g_static_map.end() && it->second.size() == static_cast<size_t>(i), "static map entry %d", i);
    for (int x : it->second) CHECK(x == i, "static map value");
  }
  CHECK(g_static_str.size() == 5000 && g_static_str.find_first_not_of('q') == std::string::npos, "static string");
}

static void check_align(void *p, size_t al, const char *what) {
  CHECK(p != nullptr, "%s returned null", what);
  CHECK((reinterpret_cast<uintptr_t>(p) & (al - 1)) == 0, "%s (align %zu) = %p misaligned", what, al, p);
}

struct alignas(64) A64 {
  char c[100];
};
struct alignas(4096) A4096 {
  char c[5000];
};
struct Big {
  char c[1000];
};

static void test_forms() {
  if (HAKMEM_SPECIFIC) {
    void *p = ::operator new(100);
    CHECK(hak_malloc_usable_size(p) == 112,
          "operator new(100) usable size %zu, expected 112: operator new is not hakmem's", hak_malloc_usable_size(p));
    ::operator delete(p);
  }
  for (size_t n : {size_t(0), size_t(1), size_t(16), size_t(100), size_t(1024), size_t(1025), size_t(65537),
                   size_t(262145), size_t(4) << 20}) {
    // plain, array, nothrow, sized
    void *p = ::operator new(n);
    CHECK(p, "operator new(%zu)", n);
    memset(p, 1, n);
    ::operator delete(p);
    p = ::operator new[](n);
    CHECK(p, "operator new[](%zu)", n);
    memset(p, 2, n);
    ::operator delete[](p);
    p = ::operator new(n, std::nothrow);
    CHECK(p, "operator new(%zu, nothrow)", n);
    memset(p, 3, n);
    ::operator delete(p, std::nothrow);
    p = ::operator new[](n, std::nothrow);
    CHECK(p, "operator new[](%zu, nothrow)", n);
    ::operator delete[](p, std::nothrow);
    p = ::operator new(n);
    memset(p, 4, n);
    ::operator delete(p, n);  // sized
    p = ::operator new[](n);
    ::operator delete[](p, n);  // sized array
    // aligned forms
    for (size_t al : {size_t(16), size_t(32), size_t(64), size_t(128), size_t(4096), size_t(65536), size_t(1) << 20,
                      size_t(4) << 20}) {
      std::align_val_t a{al};
      p = ::operator new(n, a);
      check_align(p, al, "operator new(n, align)");
      memset(p, 5, n);
      ::operator delete(p, a);
      p = ::operator new[](n, a);
      check_align(p, al, "operator new[](n, align)");
      ::operator delete[](p, a);
      p = ::operator new(n, a, std::nothrow);
      check_align(p, al, "operator new(n, align, nothrow)");
      ::operator delete(p, a, std::nothrow);
      p = ::operator new[](n, a, std::nothrow);
      check_align(p, al, "operator new[](n, align, nothrow)");
      ::operator delete[](p, a, std::nothrow);
      p = ::operator new(n, a);
      check_align(p, al, "operator new(n, align)");
      ::operator delete(p, n, a);  // sized aligned
      p = ::operator new[](n, a);
      ::operator delete[](p, n, a);
    }
  }
  // new-expressions
  for (int i = 0; i < 1000; i++) {
    int *x = new int(i);
    CHECK(*x == i, "new int");
    delete x;
    Big *b = new Big[3];
    memset(b, 9, sizeof(Big) * 3);
    delete[] b;
    A64 *a = new A64;
    check_align(a, 64, "new A64");
    delete a;
    A64 *aa = new A64[7];
    check_align(aa, 64, "new A64[7]");
    delete[] aa;
    if (i % 10 == 0) {
      A4096 *pg = new A4096;
      check_align(pg, 4096, "new A4096");
      memset(pg->c, 1, sizeof pg->c);
      delete pg;
      A4096 *pga = new A4096[3];
      check_align(pga, 4096, "new A4096[3]");
      delete[] pga;
      A64 *nt = new (std::nothrow) A64[5];
      check_align(nt, 64, "new (nothrow) A64[5]");
      delete[] nt;
    }
  }
  std::vector<A64> va(1000);
  check_align(va.data(), 64, "vector<A64>");
  std::vector<A4096> vp(10);
  check_align(vp.data(), 4096, "vector<A4096>");
  auto up = std::make_unique<A4096[]>(5);
  check_align(up.get(), 4096, "make_unique<A4096[]>");
}

static int handler_calls;
static void my_handler() {
  handler_calls++;
  std::set_new_handler(nullptr);  // next failure throws
}

static void test_failures() {
  const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2, static_cast<size_t>(PTRDIFF_MAX) + 1, SIZE_MAX - 4096};
  for (size_t n : huge) {
    size_t m = tc_opaque(n);
    bool thrown = false;
    try {
      void *p = ::operator new(m);
      tc_escape(p);
    } catch (const std::bad_alloc &) {
      thrown = true;
    }
    CHECK(thrown, "operator new(%zu) did not throw std::bad_alloc", n);
    thrown = false;
    try {
      void *p = ::operator new[](m);
      tc_escape(p);
    } catch (const std::bad_alloc &) {
      thrown = true;
    }
    CHECK(thrown, "operator new[](%zu) did not throw std::bad_alloc", n);
    for (size_t al : {size_t(64), size_t(4096), size_t(1) << 20}) {
      thrown = false;
      try {
        void *p = ::operator new(m, std::align_val_t{al});
        tc_escape(p);
      } catch (const std::bad_alloc &) {
        thrown = true;
      }
      // libstdc++ 12's own aligned new rounds the size up to the alignment
      // without an overflow check (SIZE_MAX becomes 0 and succeeds), so sizes
      // whose rounding overflows are checked against hakmem's operator new only.
      bool rounding_overflows = n > SIZE_MAX - al;
      if (rounding_overflows && !HAKMEM_SPECIFIC) continue;
      CHECK(thrown, "operator new(%zu, align %zu) did not throw std::bad_alloc", n, al);
      CHECK(::operator new(m, std::align_val_t{al}, std::nothrow) == nullptr,
            "operator new(%zu, align %zu, nothrow) did not return nullptr", n, al);
      CHECK(::operator new[](m, std::align_val_t{al}, std::nothrow) == nullptr,
            "operator new[](%zu, align %zu, nothrow) did not return nullptr", n, al);
    }
    CHECK(::operator new(m, std::nothrow) == nullptr, "operator new(%zu, nothrow) did not return nullptr", n);
    CHECK(::operator new[](m, std::nothrow) == nullptr, "operator new[](%zu, nothrow) did not return nullptr", n);
  }
  // new-expression with a huge element count
  size_t cnt = tc_opaque(SIZE_MAX / 4);
  bool thrown = false;
  try {
    char *p = new char[cnt];
    tc_escape(p);
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECK(thrown, "new char[SIZE_MAX/4] did not throw");
  char *np = new (std::nothrow) char[cnt];
  tc_escape(np); // (else clang may elide the new-expression and assume non-null)
  CHECK(np == nullptr, "new (nothrow) char[SIZE_MAX/4] did not return nullptr");
  // new_handler is called before bad_alloc is thrown
  handler_calls = 0;
  std::set_new_handler(my_handler);
  thrown = false;
  try {
    void *p = ::operator new(tc_opaque(SIZE_MAX / 2));
    tc_escape(p);
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  std::set_new_handler(nullptr);
  CHECK(thrown, "operator new with a new_handler did not throw");
  CHECK(handler_calls == 1, "the new_handler was called %d times, expected 1", handler_calls);
  // heap still fine
  std::vector<std::string> v(1000, std::string(100, 'x'));
  CHECK(v[999][99] == 'x', "heap after failures");
}

static std::atomic<long> g_sum{0};
static void stl_worker(int id) {
  std::map<int, std::string> m;
  std::unordered_map<std::string, std::vector<double>> um;
  std::vector<std::unique_ptr<std::string>> ptrs;
  long sum = 0;
  for (int i = 0; i < 20000; i++) {
    m[i % 997] = std::string(static_cast<size_t>(i % 300), static_cast<char>('a' + id));
    um[std::to_string(i % 1500)].push_back(i * 0.5);
    ptrs.emplace_back(std::make_unique<std::string>(std::to_string(i) + std::string(static_cast<size_t>(i % 50), 'z')));
    if (ptrs.size() > 500) ptrs.erase(ptrs.begin(), ptrs.begin() + 250);
    if (i % 1000 == 0) um.clear();
    try {
      if (i % 97 == 0) throw std::runtime_error("error number " + std::to_string(i) + std::string(200, 'e'));
    } catch (const std::exception &e) {
      sum += static_cast<long>(strlen(e.what()));
    }
  }
  for (auto &kv : m) sum += static_cast<long>(kv.second.size());
  for (auto &p : ptrs) sum += static_cast<long>(p->size());
  g_sum += sum;
}

static void test_stl_threads() {
  for (int rep = 0; rep < 3; rep++) {
    g_sum = 0;
    std::vector<std::thread> th;
    for (int i = 0; i < 4; i++) th.emplace_back(stl_worker, i);
    for (auto &t : th) t.join();
    long first = g_sum;
    g_sum = 0;
    stl_worker(0);
    CHECK(first == 4 * g_sum.load(), "multi-threaded STL checksum %ld != 4 x %ld", first, g_sum.load());
  }
  // objects created in one thread, destroyed in another
  std::vector<std::string *> handoff;
  std::thread prod([&] {
    for (int i = 0; i < 20000; i++) handoff.push_back(new std::string(static_cast<size_t>(i % 700 + 1), 'h'));
  });
  prod.join();
  std::thread cons([&] {
    for (size_t i = 0; i < handoff.size(); i++) {
      CHECK(handoff[i]->size() == i % 700 + 1 && (*handoff[i])[0] == 'h', "handed-off string %zu", i);
      delete handoff[i];
    }
  });
  cons.join();
}

static void test_iostream() {
  std::ostringstream os;
  for (int i = 0; i < 100000; i++) os << i << ' ';
  std::string s = os.str();
  std::istringstream is(s);
  long total = 0;
  int x;
  while (is >> x) total += x;
  CHECK(total == 99999L * 100000L / 2, "stringstream round trip %ld", total);
  std::cout << "cxx: iostream " << s.size() << " chars, " << std::string(10, '=') << std::endl;
  std::cerr.flush();
  std::locale loc("C");
  std::ostringstream o2;
  o2.imbue(loc);
  o2 << 1234567;
  CHECK(o2.str() == "1234567", "locale stream");
}

// ---------------------------------------------------------------- oom
static int run_oom() {
  tc_test_name = "cxx oom";
  for (int kind = 0; kind < 4; kind++) {
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
      struct Node {
        Node *next;
        char pad[56];
      };
      size_t vm = tc_status_bytes("VmSize");
      struct rlimit rl = {vm + 64 * MiB, vm + 64 * MiB};
      CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit");
      for (int round = 0; round < 2; round++) {
        Node *head = nullptr;
        size_t count = 0;
        bool failed = false;
        const size_t big = 1u << 20;
        while (count < 100000000) {
          Node *n = nullptr;
          if (kind == 0) {  // small, throwing
            try {
              n = new Node;
            } catch (const std::bad_alloc &) {
              failed = true;
              break;
            }
          } else if (kind == 1) {  // small, nothrow
            n = new (std::nothrow) Node;
            if (!n) { failed = true; break; }
          } else if (kind == 2) {  // large array, throwing
            try {
              n = reinterpret_cast<Node *>(new char[big]);
            } catch (const std::bad_alloc &) {
              failed = true;
              break;
            }
          } else {  // aligned large, throwing
            try {
              n = static_cast<Node *>(::operator new(big, std::align_val_t{4096}));
            } catch (const std::bad_alloc &) {
              failed = true;
              break;
            }
            check_align(n, 4096, "aligned new near OOM");
          }
          n->next = head;
          memset(n->pad, static_cast<int>(count & 0xFF), sizeof n->pad);
          head = n;
          count++;
        }
        CHECK(failed, "kind %d: no failure after %zu allocations under RLIMIT_AS", kind, count);
        CHECK(count > 0, "kind %d: nothing could be allocated", kind);
        size_t c2 = count;
        while (head) {
          Node *nx = head->next;
          c2--;
          for (char ch : head->pad) CHECK(static_cast<unsigned char>(ch) == (c2 & 0xFF), "block corrupted near OOM");
          if (kind == 2) delete[] reinterpret_cast<char *>(head);
          else if (kind == 3) ::operator delete(head, std::align_val_t{4096});
          else delete head;
          head = nx;
        }
        // usable again
        std::vector<std::string> v;
        for (int i = 0; i < 1000; i++) v.emplace_back(static_cast<size_t>(i * 10 + 1), 'r');
        // glibc may keep fragmented arena memory; hakmem's large lane must not
        const size_t bsz = HAKMEM_SPECIFIC ? 4u << 20 : 200000;
        std::unique_ptr<char[]> b(new char[bsz]);
        memset(b.get(), 1, bsz);
        char msg[128];
        int len = snprintf(msg, sizeof msg, "  cxx oom kind %d round %d: %zu allocations before failure\n", kind, round,
                           count);
        if (write(1, msg, static_cast<size_t>(len)) < 0) _exit(3);
      }
      _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(!WIFSIGNALED(st), "cxx oom kind %d: child killed by signal %d (%s)", kind, WTERMSIG(st),
          strsignal(WTERMSIG(st)));
    CHECK(WEXITSTATUS(st) == 0, "cxx oom kind %d: child exited with %d", kind, WEXITSTATUS(st));
  }
  printf("cxx oom: ok\n");
  return 0;
}

int main(int argc, char **argv) {
  tc_test_name = "cxx";
  if (argc > 1 && std::string(argv[1]) == "oom") return run_oom();
  check_static_objects();
  test_forms();
  test_failures();
  test_stl_threads();
  test_iostream();
  check_static_objects();
  std::cout << "cxx: ok" << std::endl;
  return 0;
}
