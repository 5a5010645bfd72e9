// Counts every heap allocation (operator new) in the test binary that links
// tests/alloc_counter.cpp, to prove that a hot path allocates nothing:
//
//   const uint64_t before = test::allocations();
//   ... the code under test ...
//   EXPECT_EQ(test::allocations(), before);
//
// Only binaries that link the edgelm_alloc_counter object library replace
// operator new; the count is relaxed (a test reads it once its threads are quiet).
//
// It can also make one allocation fail, to prove that a path gives back
// what it holds when any of its allocations throws:
//
//   for (int n = 0;; ++n) {
//     test::fail_allocation(n);  // this thread's n-th allocation from now throws
//     ... the path, catching std::bad_alloc ...
//     test::fail_allocation(-1);
//   }
#pragma once

#include <cstdint>

namespace edgelm::test {

uint64_t allocations();

// This thread's n-th allocation from now (0: the next) throws
// std::bad_alloc (a nothrow new returns null), once; -1 disarms. Other
// threads' allocations are not affected.
void fail_allocation(int64_t n);

}  // namespace edgelm::test
