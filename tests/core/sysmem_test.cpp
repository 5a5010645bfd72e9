#include "core/sysmem.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testutil.h"

namespace edgelm {
namespace {
namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

const char* kMeminfo = "MemTotal:       16000000 kB\nMemFree: 1 kB\nMemAvailable:    8000000 kB\n";

TEST(SystemMemory, CgroupV2) {
  fs::path root = test::temp_path("v2");
  put(root / "proc/meminfo", kMeminfo);
  put(root / "proc/self/cgroup", "0::/edge.slice/edgelm.service\n");
  put(root / "sys/fs/cgroup/edge.slice/edgelm.service/memory.max", "2147483648\n");
  put(root / "sys/fs/cgroup/edge.slice/edgelm.service/memory.current", "1048576\n");
  put(root / "sys/fs/cgroup/edge.slice/edgelm.service/memory.pressure",
      "some avg10=12.50 avg60=1.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  SystemMemory m = read_system_memory(root.string());
  EXPECT_EQ(m.mem_total, 16000000ull * 1024);
  EXPECT_EQ(m.mem_available, 8000000ull * 1024);
  EXPECT_EQ(m.cgroup_version, 2);
  EXPECT_EQ(m.cgroup_limit.value(), 2147483648ull);
  EXPECT_EQ(m.cgroup_usage.value(), 1048576ull);
  EXPECT_DOUBLE_EQ(m.psi_some_avg10.value(), 12.5);
}

TEST(SystemMemory, CgroupV2Unlimited) {
  fs::path root = test::temp_path("v2max");
  put(root / "proc/meminfo", kMeminfo);
  put(root / "proc/self/cgroup", "0::/\n");
  put(root / "sys/fs/cgroup/memory.max", "max\n");
  SystemMemory m = read_system_memory(root.string());
  EXPECT_EQ(m.cgroup_version, 2);
  EXPECT_FALSE(m.cgroup_limit.has_value());
}

TEST(SystemMemory, CgroupV1NamespacedRoot) {
  fs::path root = test::temp_path("v1");
  put(root / "proc/meminfo", kMeminfo);
  put(root / "proc/self/cgroup", "5:devices:/\n4:memory:/box/abc\n0::/\n");
  // The container sees its own cgroup as the mount root.
  put(root / "sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
  put(root / "sys/fs/cgroup/memory/memory.usage_in_bytes", "4096\n");
  SystemMemory m = read_system_memory(root.string());
  EXPECT_EQ(m.cgroup_version, 1);
  EXPECT_EQ(m.cgroup_limit.value(), 1073741824ull);
  EXPECT_EQ(m.cgroup_usage.value(), 4096ull);
}

TEST(SystemMemory, CgroupV1Unlimited) {
  fs::path root = test::temp_path("v1u");
  put(root / "proc/meminfo", kMeminfo);
  put(root / "proc/self/cgroup", "4:memory:/\n");
  put(root / "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  SystemMemory m = read_system_memory(root.string());
  EXPECT_EQ(m.cgroup_version, 1);
  EXPECT_FALSE(m.cgroup_limit.has_value());
}

}  // namespace
}  // namespace edgelm
