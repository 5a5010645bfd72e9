#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace edgelm::loadgen {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

double percentile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) return kNaN;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, 0.5);
}

Summary summarize(std::vector<double> values) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  Summary s;
  s.count = values.size();
  if (values.empty()) {
    s.mean = s.min = s.p50 = s.p90 = s.p99 = s.max = kNaN;
    return s;
  }
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.min = values.front();
  s.max = values.back();
  s.p50 = percentile_sorted(values, 0.50);
  s.p90 = percentile_sorted(values, 0.90);
  s.p99 = percentile_sorted(values, 0.99);
  return s;
}

}  // namespace edgelm::loadgen
