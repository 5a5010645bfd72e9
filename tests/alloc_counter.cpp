#include "alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

// GCC cannot see that these replacements pair malloc with free on purpose.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<uint64_t> g_allocs{0};
// Allocations this thread still makes before one fails; -1: none fails.
thread_local int64_t t_fail_in = -1;
bool fails_now() {
  return t_fail_in >= 0 && t_fail_in-- == 0;
}
}  // namespace

void* operator new(size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (fails_now()) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's buffer uses it): otherwise a
// sanitizer's own nothrow new would meet the free() below.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (fails_now()) return nullptr;
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace edgelm::test {

uint64_t allocations() { return g_allocs.load(std::memory_order_relaxed); }

void fail_allocation(int64_t n) {
  t_fail_in = n < 0 ? -1 : n;
}

}  // namespace edgelm::test
