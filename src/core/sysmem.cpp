#include "core/sysmem.h"

#include <malloc.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

namespace edgelm {
namespace {

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A number in a cgroup file; nullopt for "max" or absurdly large "no limit" values.
std::optional<uint64_t> read_limit(const std::string& path) {
  auto s = slurp(path);
  if (!s) return std::nullopt;
  if (s->rfind("max", 0) == 0) return std::nullopt;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s->c_str(), &end, 10);
  if (end == s->c_str()) return std::nullopt;
  if (v >= (1ull << 60)) return std::nullopt;  // v1 spells "unlimited" as ~2^63
  return v;
}

uint64_t meminfo_field(const std::string& text, std::string_view key) {
  size_t p = text.find(key);
  if (p == std::string::npos) return 0;
  return std::strtoull(text.c_str() + p + key.size(), nullptr, 10) * 1024;
}

std::optional<double> psi_avg10(const std::string& path) {
  auto s = slurp(path);
  if (!s) return std::nullopt;
  size_t p = s->find("some avg10=");
  if (p == std::string::npos) return std::nullopt;
  return std::strtod(s->c_str() + p + 11, nullptr);
}

// A "key value" line of memory.stat (bytes).
std::optional<uint64_t> stat_field(const std::string& path, std::string_view key) {
  auto s = slurp(path);
  if (!s) return std::nullopt;
  std::istringstream in(*s);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return std::nullopt;
}

void fill_working_set(SystemMemory& m, const std::string& dir, std::string_view inactive_key,
                      std::string_view file_key) {
  m.cgroup_file = stat_field(dir + "/memory.stat", file_key);
  if (!m.cgroup_usage) return;
  const uint64_t inactive = stat_field(dir + "/memory.stat", inactive_key).value_or(0);
  m.cgroup_working_set = *m.cgroup_usage > inactive ? *m.cgroup_usage - inactive : 0;
}

uint64_t status_field(std::string_view key) {
  auto s = slurp("/proc/self/status");
  return s ? meminfo_field(*s, key) : 0;
}

}  // namespace

SystemMemory read_system_memory(const std::string& root) {
  SystemMemory m;
  if (auto mi = slurp(root + "/proc/meminfo")) {
    m.mem_total = meminfo_field(*mi, "MemTotal:");
    m.mem_available = meminfo_field(*mi, "MemAvailable:");
  }
  m.psi_some_avg10 = psi_avg10(root + "/proc/pressure/memory");

  // /proc/self/cgroup lines: "0::/path" (v2) or "N:memory:/path" (v1).
  std::string v1_path, v2_path;
  bool have_v2 = false;
  if (auto cg = slurp(root + "/proc/self/cgroup")) {
    std::istringstream in(*cg);
    std::string line;
    while (std::getline(in, line)) {
      size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (line.rfind("0::", 0) == 0) {
        v2_path = path;
        have_v2 = true;
      }
      if (ctrl == "memory" || ctrl.find("memory,") != std::string::npos || ctrl.find(",memory") != std::string::npos)
        v1_path = path;
    }
  }
  // The process may see its own cgroup as the root of the mount (a namespace),
  // so try the full path first, then the mount root.
  if (!v1_path.empty()) {
    for (const std::string& dir : {root + "/sys/fs/cgroup/memory" + v1_path, root + "/sys/fs/cgroup/memory"}) {
      if (slurp(dir + "/memory.limit_in_bytes")) {
        m.cgroup_version = 1;
        m.cgroup_path = dir;
        m.cgroup_limit = read_limit(dir + "/memory.limit_in_bytes");
        m.cgroup_usage = read_limit(dir + "/memory.usage_in_bytes");
        fill_working_set(m, dir, "total_inactive_file", "total_cache");
        break;
      }
    }
  }
  if (m.cgroup_version == 0 && have_v2) {
    for (const std::string& dir : {root + "/sys/fs/cgroup" + v2_path, root + "/sys/fs/cgroup"}) {
      if (slurp(dir + "/memory.max")) {
        m.cgroup_version = 2;
        m.cgroup_path = dir;
        m.cgroup_limit = read_limit(dir + "/memory.max");
        m.cgroup_usage = read_limit(dir + "/memory.current");
        fill_working_set(m, dir, "inactive_file", "file");
        if (auto p = psi_avg10(dir + "/memory.pressure")) m.psi_some_avg10 = p;
        break;
      }
    }
  }
  return m;
}

uint64_t current_rss_bytes() { return status_field("VmRSS:"); }

uint64_t peak_rss_bytes() { return status_field("VmHWM:"); }

void limit_malloc_arenas() {
#if defined(__GLIBC__)
  // glibc gives each thread that allocates under contention an arena of its
  // own and keeps what is freed there, so 36 HTTP workers parsing bodies up
  // to --max-body each held on to their high-water mark. Three rounds of
  // malformed and flooding requests (the tiny model, 2 slots) took the
  // resident size from 101 to 114, 121 and 126 MB with the default; with
  // two arenas to 109, 109 and 111 MB. The engine allocates nothing while
  // serving, and the workers' allocations are small.
  if (getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
#endif
}

}  // namespace edgelm
