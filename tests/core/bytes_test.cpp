#include "core/bytes.h"

#include <gtest/gtest.h>

#include "core/sysmem.h"

namespace edgelm {
namespace {

TEST(Bytes, ParsesUnits) {
  EXPECT_EQ(parse_bytes("2GiB").value(), 2 * kGiB);
  EXPECT_EQ(parse_bytes("2048MiB").value(), 2 * kGiB);
  EXPECT_EQ(parse_bytes("2gb").value(), 2000000000u);
  EXPECT_EQ(parse_bytes("1.5G").value(), 3 * kGiB / 2);
  EXPECT_EQ(parse_bytes("512").value(), 512u);
  EXPECT_EQ(parse_bytes("64 KiB").value(), 64 * kKiB);
  EXPECT_FALSE(parse_bytes("").ok());
  EXPECT_FALSE(parse_bytes("GiB").ok());
  EXPECT_FALSE(parse_bytes("12 parsecs").ok());
  EXPECT_FALSE(parse_bytes("1.2.3G").ok());
  EXPECT_FALSE(parse_bytes("99999999999T").ok());
}

TEST(Bytes, Formats) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(224 * kMiB), "224.0 MiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.50 GiB");
}

TEST(SystemMemory, ReadsThisMachine) {
  SystemMemory m = read_system_memory();
  EXPECT_GT(m.mem_total, 0u);
  EXPECT_GT(m.mem_available, 0u);
  EXPECT_GT(current_rss_bytes(), 0u);
}

}  // namespace
}  // namespace edgelm
