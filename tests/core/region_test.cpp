#include "core/region.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/bytes.h"

namespace edgelm {
namespace {

constexpr size_t kHuge = 2 * kMiB;

// How many of the pages of [p, p + bytes) are resident (mincore).
size_t resident_pages(const uint8_t* p, size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(p) / page * page;
  const size_t len = reinterpret_cast<uintptr_t>(p) + bytes - start;
  std::vector<unsigned char> vec((len + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(start), len, vec.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

size_t pages_of(const uint8_t* p, size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(p) / page * page;
  return (reinterpret_cast<uintptr_t>(p) + bytes - start + page - 1) / page;
}

// AnonHugePages of the mapping that contains p, in kB (from /proc/self/smaps);
// -1 when no mapping contains it.
long anon_huge_kb(const uint8_t* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  }
  return -1;
}

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

TEST(Region, ZeroBytesIsEmpty) {
  auto r = Region::map(0, "test");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data(), nullptr);
  EXPECT_EQ(r->size(), 0u);
}

TEST(Region, SmallRegionIsResidentAndZeroed) {
  const size_t bytes = 10000;
  auto r = Region::map(bytes, "test");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(resident_pages(r->data(), bytes), pages_of(r->data(), bytes));
  for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(r->data()[i], 0) << i;
}

TEST(Region, LargeRegionStartsOnA2MiBBoundaryAndIsResident) {
  const size_t bytes = 3 * kHuge + 12345;  // the tail is not a whole huge page
  auto r = Region::map(bytes, "test");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % kHuge, 0u);
  EXPECT_EQ(r->size(), bytes);
  EXPECT_EQ(resident_pages(r->data(), bytes), pages_of(r->data(), bytes));
  for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(r->data()[i], 0) << i;
  r->data()[bytes - 1] = 7;  // the last byte is ours
  EXPECT_EQ(r->data()[bytes - 1], 7);
}

TEST(Region, MovedRegionKeepsItsMemory) {
  auto r = Region::map(kHuge + 1, "test");
  ASSERT_TRUE(r.ok()) << r.message();
  uint8_t* p = r->data();
  p[0] = 42;
  Region moved = std::move(*r);
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(moved.data()[0], 42);
  EXPECT_EQ(r->data(), nullptr);
}

TEST(Region, LargeRegionGetsHugePagesWhereTheKernelGivesThem) {
  const std::string thp = first_line("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.empty() || thp.find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off on this kernel (" << thp << ")";
  auto r = Region::map(4 * kHuge, "test");
  ASSERT_TRUE(r.ok()) << r.message();
  const long kb = anon_huge_kb(r->data());
  ASSERT_GE(kb, 0) << "no mapping holds the region";
  EXPECT_GE(kb, 2048) << "THP is " << thp << " but the region got no huge page";
}

}  // namespace
}  // namespace edgelm
