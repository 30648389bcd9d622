// C++ operator new and delete in every form, served by hakmem.
//
// Built without exceptions and without linking libstdc++, so that C programs
// can preload the library too. Throwing new reaches std::bad_alloc through
// libstdc++'s own __throw_bad_alloc, referenced weakly: a program that uses
// operator new has libstdc++ loaded, so the reference resolves.
#include <cstddef>
#include <new>

#include "hakmem.h"

extern "C" __attribute__((visibility("hidden"), noreturn)) void hm_fatal(const char *what, const void *p,
                                                                        const char *reason);

namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
void __throw_bad_alloc() __attribute__((weak, noreturn));
}  // namespace std

#define EXPORT __attribute__((visibility("default")))

namespace {

void *alloc_aligned(std::size_t n, std::size_t align) {
  void *p = nullptr;
  return hak_posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, n) == 0 ? p : nullptr;
}

// The standard loop: call the new-handler until memory comes or none is set.
void *new_slow(std::size_t n, std::size_t align, bool nothrow) {
  for (;;) {
    void *p = align != 0 ? alloc_aligned(n, align) : hak_malloc(n);
    if (p != nullptr) return p;
    std::new_handler h = std::get_new_handler ? std::get_new_handler() : nullptr;
    if (h == nullptr) break;
    h();
  }
  if (nothrow) return nullptr;
  if (std::__throw_bad_alloc) std::__throw_bad_alloc();
  hm_fatal("out of memory in operator new", nullptr, "std::bad_alloc unavailable");
}

inline void *new_impl(std::size_t n) {
  void *p = hak_malloc(n);
  return __builtin_expect(p != nullptr, 1) ? p : new_slow(n, 0, false);
}

inline void *new_aligned(std::size_t n, std::align_val_t a, bool nothrow) {
  void *p = alloc_aligned(n, static_cast<std::size_t>(a));
  return p != nullptr ? p : new_slow(n, static_cast<std::size_t>(a), nothrow);
}

}  // namespace

EXPORT void *operator new(std::size_t n) { return new_impl(n); }
EXPORT void *operator new[](std::size_t n) { return new_impl(n); }
EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept {
  void *p = hak_malloc(n);
  return p != nullptr ? p : new_slow(n, 0, true);
}
EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept {
  void *p = hak_malloc(n);
  return p != nullptr ? p : new_slow(n, 0, true);
}
EXPORT void *operator new(std::size_t n, std::align_val_t a) { return new_aligned(n, a, false); }
EXPORT void *operator new[](std::size_t n, std::align_val_t a) { return new_aligned(n, a, false); }
EXPORT void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return new_aligned(n, a, true);
}
EXPORT void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return new_aligned(n, a, true);
}

EXPORT void operator delete(void *p) noexcept { hak_free(p); }
EXPORT void operator delete[](void *p) noexcept { hak_free(p); }
EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { hak_free(p); }
EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { hak_free(p); }
EXPORT void operator delete(void *p, std::size_t) noexcept { hak_free(p); }
EXPORT void operator delete[](void *p, std::size_t) noexcept { hak_free(p); }
EXPORT void operator delete(void *p, std::align_val_t) noexcept { hak_free(p); }
EXPORT void operator delete[](void *p, std::align_val_t) noexcept { hak_free(p); }
EXPORT void operator delete(void *p, std::size_t, std::align_val_t) noexcept { hak_free(p); }
EXPORT void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { hak_free(p); }
EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { hak_free(p); }
EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { hak_free(p); }
