// Summary statistics for the load generator's measurements.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace edgelm::loadgen {

// The q-quantile (q in [0, 1]) of `sorted` (ascending), interpolating
// linearly between the two closest ranks: rank = q * (n - 1), the same
// definition as numpy's default and most load-test tools. NaN when empty.
double percentile_sorted(std::span<const double> sorted, double q);

// The median of a copy of `values` (NaN when empty). Costs a sort.
double median(std::vector<double> values);

struct Summary {
  size_t count = 0;
  double mean = 0, min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // NaN when count is 0
};

// Summarises `values`, skipping NaNs (a request that has no such figure).
// Sorts a copy: O(n log n).
Summary summarize(std::vector<double> values);

}  // namespace edgelm::loadgen
