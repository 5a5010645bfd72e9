// Server metrics in the Prometheus text format. Fixed set, lock-free
// counters and fixed-bucket histograms: recording costs an atomic add and
// nothing grows with load.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "serve/admission.h"

namespace edgelm::serve {

class Histogram {
 public:
  static constexpr int kBuckets = 14;
  // Upper bounds in seconds, from 5 ms to 60 s.
  static constexpr std::array<double, kBuckets> kBounds = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                                           0.5,   1.0,  2.5,   5.0,  10.0,  30.0, 60.0};
  // Counts per bucket, the last for observations beyond the last bound.
  using Counts = std::array<uint64_t, kBuckets + 1>;
  void observe(double seconds);
  void render(std::string& out, const char* name, const char* help) const;
  Counts counts() const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};  // last: +Inf
  std::atomic<uint64_t> sum_us_{0};
  std::atomic<uint64_t> n_{0};
};

struct Metrics {
  // Requests by what happened: the HTTP status of a refusal or an error
  // before streaming; for an admitted request, 200 when it ended normally,
  // 500 when the engine failed, 503 when the server cancelled it (drain
  // timeout) and 499 (nginx's "client closed request") when the client left.
  static constexpr std::array<int, 9> kStatuses = {200, 400, 401, 404, 413, 429, 499, 500, 503};
  std::array<std::atomic<uint64_t>, kStatuses.size() + 1> by_status{};  // last: other
  std::array<std::atomic<uint64_t>, kReasonCount> rejections{};
  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> prompt_tokens_dropped{0};
  std::atomic<uint64_t> prompt_tokens_reused{0};  // taken from a slot's cache, not computed
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> client_disconnects{0};
  // Admitted requests by how they ended (Finish, and `disconnected` for a
  // client that left before the end).
  static constexpr std::array<const char*, 6> kEnds = {"stop", "length", "cancelled", "error", "disconnected", "preempted"};
  std::array<std::atomic<uint64_t>, kEnds.size()> ends{};
  std::atomic<uint64_t> connections_refused{0};
  Histogram ttft;
  Histogram predicted_ttft;  // the gate's prediction for each admitted request
  Histogram tpot;
  Histogram request_seconds;
  Histogram rejection_seconds;  // time to answer a refusal

  void count_status(int status);
  void count_end(std::string_view end);
  void count_rejection(Reason r) { rejections[static_cast<size_t>(r)].fetch_add(1); }
};

// Everything /metrics reports, gathered from the engine and admission.
std::string render_metrics(const Metrics& m, const Engine& e, const Admission& a, int open_connections);

}  // namespace edgelm::serve
