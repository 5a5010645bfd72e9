// What the system says about memory: the cgroup limit and usage (v2 or v1),
// MemAvailable, pressure stall information, and this process's resident set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace edgelm {

struct SystemMemory {
  uint64_t mem_total = 0;      // /proc/meminfo MemTotal
  uint64_t mem_available = 0;  // /proc/meminfo MemAvailable
  int cgroup_version = 0;      // 0 when no memory cgroup is found
  std::string cgroup_path;     // the folder the figures come from
  std::optional<uint64_t> cgroup_limit;  // memory.max / memory.limit_in_bytes (none if unlimited)
  std::optional<uint64_t> cgroup_usage;  // memory.current / memory.usage_in_bytes
  // Usage less reclaimable file cache (memory.stat inactive_file): what the
  // kernel cannot simply drop before it would have to OOM-kill.
  std::optional<uint64_t> cgroup_working_set;
  // Page cache charged to the cgroup (memory.stat total_cache / file): clean
  // file pages, such as a mapped model's, that the kernel reclaims first.
  std::optional<uint64_t> cgroup_file;
  std::optional<double> psi_some_avg10;  // memory pressure, percent of time stalled (cgroup, else system)
};

// Reads the figures. `root` replaces "/" for tests (a fake /proc and /sys tree).
SystemMemory read_system_memory(const std::string& root = "");

// Resident set size of this process in bytes (VmRSS), 0 if unknown.
uint64_t current_rss_bytes();
// Peak resident set size (VmHWM).
uint64_t peak_rss_bytes();

// Two malloc arenas for the whole process, unless MALLOC_ARENA_MAX says
// otherwise (glibc only; a server calls it before its threads start).
void limit_malloc_arenas();

}  // namespace edgelm
