// Counts every heap allocation (operator new) in the test binary that links
// tests/alloc_counter.cpp, to prove that a hot path allocates nothing:
//
//   const uint64_t before = test::allocations();
//   ... the code under test ...
//   EXPECT_EQ(test::allocations(), before);
//
// Only binaries that link the edgelm_alloc_counter object library replace
// operator new; the count is relaxed (a test reads it once its threads are quiet).
#pragma once

#include <cstdint>

namespace edgelm::test {

uint64_t allocations();

}  // namespace edgelm::test
