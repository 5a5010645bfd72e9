// Samples a process's resident memory from /proc/PID/status on a thread of
// its own, at a fixed interval, for the length of a load run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"

namespace edgelm::loadgen {

struct RssSample {
  double t_s = 0;     // seconds since the run's start
  uint64_t rss = 0;   // VmRSS, bytes
  uint64_t anon = 0;  // RssAnon, bytes (0 on kernels without it)
  uint64_t file = 0;  // RssFile, bytes (mapped files: the weights)
};

// VmRSS/RssAnon/RssFile of one /proc/PID/status text; nullopt without VmRSS.
std::optional<RssSample> parse_proc_status(std::string_view text);

class RssSampler {
 public:
  using Clock = std::chrono::steady_clock;

  // Checks that /proc/PID/status is readable.
  static Result<int> check_pid(int pid);

  RssSampler(int pid, Clock::time_point t0, std::chrono::milliseconds interval);
  ~RssSampler();
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;

  // Stops sampling (takes one last sample) and returns every sample.
  std::vector<RssSample> stop();
  // Seconds since t0 at which the process was found gone, or a negative value.
  double exited_at_s() const { return exited_at_s_; }

 private:
  void loop();
  bool sample();

  int pid_;
  Clock::time_point t0_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::vector<RssSample> samples_;
  std::atomic<bool> stop_{false};
  double exited_at_s_ = -1;
  std::thread thread_;
};

}  // namespace edgelm::loadgen
