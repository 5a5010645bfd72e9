#include "serve/status_ring.h"

#include <algorithm>

namespace edgelm::serve {

namespace {

uint64_t delta(uint64_t now, uint64_t before) {
  return now > before ? now - before : 0;
}

Histogram::Counts minus(const Histogram::Counts& a, const Histogram::Counts& b) {
  Histogram::Counts d{};
  for (size_t i = 0; i < d.size(); ++i) d[i] = delta(a[i], b[i]);
  return d;
}

}  // namespace

float histogram_quantile(const Histogram::Counts& c, double q) {
  uint64_t n = 0;
  for (uint64_t v : c) n += v;
  if (n == 0) return -1;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(n);
  double before = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double in = static_cast<double>(c[i]);
    if (in > 0 && before + in >= rank) {
      const double lo =
          i == 0 ? 0.0 : Histogram::kBounds[std::min(i, size_t{Histogram::kBuckets}) - 1];
      const double hi = i < Histogram::kBuckets ? Histogram::kBounds[i] : Histogram::kBounds.back();
      return static_cast<float>(lo + (hi - lo) * std::clamp((rank - before) / in, 0.0, 1.0));
    }
    before += in;
  }
  return static_cast<float>(Histogram::kBounds.back());
}

StatusRing::StatusRing(int seconds) : samples_(static_cast<size_t>(std::max(seconds, 1))) {}

uint64_t StatusRing::bytes(int seconds) {
  return static_cast<uint64_t>(std::max(seconds, 1)) * sizeof(StatusSample) + sizeof(StatusRing);
}

int StatusRing::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int>(n_);
}

void StatusRing::record(int64_t t, double dt, const StatusCounters& now) {
  std::lock_guard<std::mutex> lk(mu_);
  constexpr size_t W = kWindow + 1;
  ttft_hist_[hist_n_ % W] = now.ttft;
  tpot_hist_[hist_n_ % W] = now.tpot;
  ++hist_n_;
  if (!primed_) {
    last_ = now;
    primed_ = true;
    return;
  }
  const double per = 1.0 / std::max(dt, 1e-3);
  StatusSample s;
  s.t = t;
  s.tokens_per_s =
      static_cast<float>(static_cast<double>(delta(now.generated, last_.generated)) * per);
  s.prompt_per_s = static_cast<float>(static_cast<double>(delta(now.prompt, last_.prompt)) * per);
  s.busy = static_cast<uint16_t>(std::clamp(now.busy, 0, 65535));
  s.queued = static_cast<uint16_t>(std::clamp(now.queued, 0, 65535));
  s.admitted = static_cast<uint32_t>(delta(now.admitted, last_.admitted));
  for (size_t r = 0; r < s.refused.size(); ++r)
    s.refused[r] = static_cast<uint32_t>(delta(now.refused[r], last_.refused[r]));
  // The oldest cumulative counts still held: kWindow records ago, or the first.
  const size_t oldest = hist_n_ >= W ? hist_n_ % W : 0;
  const Histogram::Counts ttft = minus(now.ttft, ttft_hist_[oldest]);
  const Histogram::Counts tpot = minus(now.tpot, tpot_hist_[oldest]);
  constexpr std::array<double, 3> qs = {0.5, 0.9, 0.99};
  for (size_t i = 0; i < qs.size(); ++i) {
    s.ttft[i] = histogram_quantile(ttft, qs[i]);
    s.tpot[i] = histogram_quantile(tpot, qs[i]);
  }
  samples_[head_] = s;
  head_ = (head_ + 1) % samples_.size();
  n_ = std::min(n_ + 1, samples_.size());
  last_ = now;
}

}  // namespace edgelm::serve
