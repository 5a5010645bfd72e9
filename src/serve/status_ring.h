// The last minutes of the server, one sample a second, for the status page:
// tokens/s, admitted and refused requests (by reason), and time-to-first-
// token and time-per-token percentiles. A fixed ring allocated once at start
// (status_ring_bytes, counted with the server buffers in the memory plan);
// recording overwrites the oldest second and allocates nothing.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

#include "serve/admission.h"
#include "serve/metrics.h"

namespace edgelm::serve {

// One second of the server. Percentiles are over the trailing window
// (StatusRing::kWindow seconds), in seconds; negative when nothing was
// observed in it.
struct StatusSample {
  int64_t t = 0;                                 // unix seconds at the end of the second
  float tokens_per_s = 0;                        // tokens sampled by the engine, all slots
  float prompt_per_s = 0;                        // prompt tokens prefilled
  uint16_t busy = 0;                             // slots holding a request
  uint16_t queued = 0;                           // requests waiting for a slot
  uint32_t admitted = 0;                         // requests the gate admitted in this second
  std::array<uint32_t, kReasonCount> refused{};  // refusals by Reason (index 0 unused)
  std::array<float, 3> ttft{};                   // p50, p90, p99
  std::array<float, 3> tpot{};                   // p50, p90, p99
};

// What the sampler reads each second: monotonically growing counters.
struct StatusCounters {
  uint64_t generated = 0;  // engine: tokens sampled
  uint64_t prompt = 0;     // engine: prompt tokens prefilled
  uint64_t admitted = 0;   // gate: admitted, all classes
  std::array<uint64_t, kReasonCount> refused{};
  Histogram::Counts ttft{};
  Histogram::Counts tpot{};
  int busy = 0;
  int queued = 0;
};

// The q-quantile (0..1) of the observations counted in `c` (bucket counts,
// last +Inf), interpolated linearly inside the bucket it falls in; -1 when
// `c` is empty. Observations beyond the last bound count as that bound.
float histogram_quantile(const Histogram::Counts& c, double q);

class StatusRing {
 public:
  static constexpr int kWindow = 10;  // seconds the percentiles look back
  // A ring of `seconds` samples (at least 1), allocated here and never again.
  explicit StatusRing(int seconds);

  // Bytes the ring holds (its samples and the percentile window), for the plan.
  static uint64_t bytes(int seconds);

  // Records one second: the counters now, `t` its unix time, `dt` the
  // seconds since the previous record (rates are per second of dt). The
  // first record only sets the baseline.
  void record(int64_t t, double dt, const StatusCounters& now);
  int capacity() const { return static_cast<int>(samples_.size()); }
  int size() const;
  // Calls f(sample) oldest first, under the ring's lock.
  template <typename F>
  void for_each(F&& f) const {
    std::lock_guard<std::mutex> lk(mu_);
    const size_t cap = samples_.size();
    for (size_t i = 0; i < n_; ++i) f(samples_[(head_ + cap - n_ + i) % cap]);
  }

 private:
  mutable std::mutex mu_;
  std::vector<StatusSample> samples_;  // ring, capacity fixed at construction
  size_t head_ = 0;                    // where the next sample goes
  size_t n_ = 0;                       // samples held
  bool primed_ = false;
  StatusCounters last_;
  // Histogram counts of the last kWindow + 1 records, for windowed percentiles.
  std::array<Histogram::Counts, kWindow + 1> ttft_hist_{}, tpot_hist_{};
  size_t hist_n_ = 0;
};

}  // namespace edgelm::serve
